"""On-disk feature cache: one safetensors file per (model identity, image content hash).

The key is the sha256 of the image's bytes (file bytes for paths, raw pixel bytes plus shape for
tensors and PIL images) and a model identity string (weights name, preprocessing, options). Changing
the image bytes or the model changes the key, so stale entries are never read.

The caller chooses the folder (the leaderboard's default is ``GENMETRICS_HOME/features``); this module
imports nothing of genmetrics' backbones, so the data layer stays below them.
"""

from __future__ import annotations

import hashlib
import io
import os
import warnings
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from PIL import Image
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from genmetrics.data.output.atomic import atomic_output
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


def entry_problem(tensors: Mapping[str, torch.Tensor], expect: Mapping[str, tuple[int, ...]]) -> str | None:
    """Why a cache entry is not exactly ``expect`` (names -> shapes) of finite floating-point tensors, or None.

    >>> entry_problem({"e": torch.ones(4)}, {"e": (4,)}) is None
    True
    >>> entry_problem({"e": torch.ones(3)}, {"e": (4,)}), entry_problem({"e": torch.ones(4), "x": torch.ones(1)}, {"e": (4,)})
    ("tensor 'e' has shape (3,), expected (4,)", "extra tensor(s) ['x']")
    """
    missing = sorted(set(expect) - set(tensors))
    extra = sorted(set(tensors) - set(expect))
    if missing:
        return f"missing tensor(s) {missing}"
    if extra:
        return f"extra tensor(s) {extra}"
    for name, shape in expect.items():
        t = tensors[name]
        if tuple(t.shape) != tuple(shape):
            return f"tensor {name!r} has shape {tuple(t.shape)}, expected {tuple(shape)}"
        if not t.is_floating_point():
            return f"tensor {name!r} is {t.dtype}, expected floating point"
        if not bool(torch.isfinite(t).all()):
            return f"tensor {name!r} holds NaN/inf"
    return None


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

    ``expect`` (name -> shape) makes :meth:`get` serve only entries that hold exactly those tensors, with
    those shapes, floating point and finite; anything else (a poisoned or stale file) is a miss, counted in
    ``rejected`` with one warning per cache naming the file, so the caller recomputes and overwrites it.
    """

    def __init__(self, model_id: str, root: str | os.PathLike):
        self.model_id = model_id
        self.model_key = hashlib.sha256(model_id.encode()).hexdigest()[:16]
        self.root = Path(root)
        self.dir = self.root / self.model_key
        self.hits = 0
        self.misses = 0
        self.rejected = 0
        self.read_only = False  # set when a write fails (read-only folder): the cache is then only read

    def _path(self, key: str) -> Path:
        return self.dir / key[:2] / f"{key}.safetensors"

    def get(
        self,
        image: Any,
        *,
        key: str | None = None,
        expect: Mapping[str, tuple[int, ...]] | None = None,
        check: Callable[[dict[str, torch.Tensor]], str | None] | None = None,
    ) -> dict[str, torch.Tensor] | None:
        """The cached tensors of ``image`` (or of ``key``), or None: not cached, unreadable (a torn file from
        a killed run) or, with ``expect``, not exactly the expected finite tensors (see the class); ``check``
        may refuse an entry for a further reason (it returns the reason, or None to accept).

        >>> import tempfile, warnings
        >>> with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(record=True):
        ...     cache = FeatureCache("m", root=d)
        ...     cache.put(b"img", {"embedding": torch.ones(3)})  # a 3-d entry where the model gives 4-d
        ...     served = cache.get(b"img", expect={"embedding": (4,)})
        >>> served, cache.rejected
        (None, 1)
        """
        p = self._path(key or content_hash(image))
        if not p.exists():
            self.misses += 1
            return None
        try:
            out = load_file(str(p))
        except (SafetensorError, OSError, ValueError):  # a torn file from a killed run: recompute
            self.misses += 1
            return None
        why = None if expect is None else entry_problem(out, expect)
        if why is None and check is not None:
            why = check(out)
        if why is not None:
            self.reject(p, why)
            return None
        self.hits += 1
        return out

    def reject(self, path: str | os.PathLike, why: str) -> None:
        """Count an entry the caller will not use (it is recomputed and overwritten), warning once per cache.

        >>> import warnings
        >>> cache = FeatureCache("m", root="/nonexistent")
        >>> with warnings.catch_warnings(record=True) as w:
        ...     warnings.simplefilter("always")
        ...     cache.reject("a.safetensors", "tensor 'x' holds NaN"); cache.reject("b.safetensors", "same")
        >>> cache.rejected, len(w)
        (2, 1)
        """
        self.rejected += 1
        self.misses += 1
        if self.rejected == 1:
            warnings.warn(
                f"feature cache: entry {str(path)!r} refused ({why}); it is recomputed and overwritten. Entries "
                f"written by another model or version, or altered, do this; delete {str(self.dir)!r} to start "
                "afresh",
                stacklevel=3,
            )

    def put(self, image: Any, tensors: dict[str, torch.Tensor], *, key: str | None = None) -> None:
        """Store ``tensors`` (safetensors, atomically) under ``key`` or the image's content hash; a cache that
        cannot be written warns once and is turned off, never failing the run."""
        if self.read_only:
            return
        p = self._path(key or content_hash(image))
        try:
            with atomic_output(p, root=self.root) as tmp:  # the write rule (genmetrics/data/output/)
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
