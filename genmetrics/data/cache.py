"""On-disk feature cache: one safetensors file per (model identity, image content hash).

The key is the sha256 of the image's bytes (file bytes for paths, raw pixel bytes plus shape for
tensors and PIL images) and a model identity string (weights name, preprocessing, options). Changing
the image bytes or the model changes the key, so stale entries are never read.
"""

from __future__ import annotations

import hashlib
import io
import os
from pathlib import Path
from typing import Any

import torch
from PIL import Image

from genmetrics.backbones.weights import genmetrics_home
from genmetrics.data.results import atomic_output
from genmetrics.errors import InputError


def content_hash(x: Any) -> str:
    """sha256 of an image's content (file bytes, or pixels + shape + dtype).

    >>> a = torch.zeros(3, 4, 4)
    >>> content_hash(a) == content_hash(a.clone()), content_hash(a) == content_hash(a.double())  # dtype counts
    (True, False)
    """
    h = hashlib.sha256()
    if isinstance(x, (str, os.PathLike)):
        with open(x, "rb") as f:
            for block in iter(lambda: f.read(1 << 20), b""):
                h.update(block)
    elif isinstance(x, Image.Image):
        h.update(f"{x.mode}{x.size}".encode())
        h.update(x.tobytes())
    elif isinstance(x, torch.Tensor):
        t = x.detach().cpu().contiguous()
        h.update(f"{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif isinstance(x, bytes):
        h.update(x)
    else:
        buf = io.BytesIO(repr(x).encode())
        h.update(buf.getvalue())
    return h.hexdigest()


class FeatureCache:
    """``get(image) -> dict[str, Tensor] | None`` and ``put(image, tensors)`` under ``root/model_key``.

    >>> import tempfile
    >>> image = torch.rand(3, 8, 8, generator=torch.Generator().manual_seed(0))
    >>> with tempfile.TemporaryDirectory() as d:
    ...     cache = FeatureCache("ViT-B-32/openai", root=d)
    ...     first = cache.get(image)  # a miss
    ...     cache.put(image, {"emb": torch.ones(4)})
    ...     again = FeatureCache("ViT-B-32/openai", root=d).get(image.clone())  # same content, new process
    ...     other = FeatureCache("ViT-L-14/openai", root=d).get(image)  # another model: its own folder
    >>> first, again["emb"].tolist(), other
    (None, [1.0, 1.0, 1.0, 1.0], None)
    """

    def __init__(self, model_id: str, root: str | os.PathLike | None = None):
        self.model_id = model_id
        self.model_key = hashlib.sha256(model_id.encode()).hexdigest()[:16]
        self.root = Path(root) if root is not None else genmetrics_home() / "features"
        self.dir = self.root / self.model_key
        self.hits = 0
        self.misses = 0
        self.read_only = False  # set when a write fails (read-only folder): the cache is then only read

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.safetensors"

    def get(self, image: Any, *, key: str | None = None) -> dict[str, torch.Tensor] | None:
        from safetensors import SafetensorError
        from safetensors.torch import load_file

        p = self._path(key or content_hash(image))
        if not p.exists():
            self.misses += 1
            return None
        try:
            out = load_file(str(p))
        except (SafetensorError, OSError, ValueError):  # a torn file from a killed run: recompute
            self.misses += 1
            return None
        self.hits += 1
        return out

    def put(self, image: Any, tensors: dict[str, torch.Tensor], *, key: str | None = None) -> None:
        from safetensors.torch import save_file

        if self.read_only:
            return
        p = self._path(key or content_hash(image))
        try:
            with atomic_output(p, root=self.root) as tmp:  # the write rule (genmetrics/data/results.py)
                save_file(
                    {k: v.detach().cpu().contiguous() for k, v in tensors.items()},
                    str(tmp),
                    metadata={"model_id": self.model_id},
                )
        except (OSError, InputError) as e:
            # a read-only GENMETRICS_HOME (or a link planted in the cache) must not block a run: no caching
            import warnings

            self.read_only = True
            warnings.warn(
                f"the feature cache {str(self.root)!r} is not writable ({type(e).__name__}: {e}); "
                "scoring continues without caching. Turn the cache off (cache_dir=None; run.cache = false "
                "in a leaderboard config) or set GENMETRICS_HOME to a writable folder",
                stacklevel=2,
            )

    def __len__(self) -> int:
        return sum(1 for _ in self.dir.rglob("*.safetensors")) if self.dir.exists() else 0
