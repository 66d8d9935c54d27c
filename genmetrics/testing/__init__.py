"""Tiny random backbones and offline processors for tests and for users' plugins. Nothing downloads.

* :func:`tiny_clip` — an open_clip ``CLIP`` with a small ViT tower and text tower, plus the real
  open_clip BPE tokenizer (its vocabulary ships inside open_clip) at a short context length;
* :func:`tiny_dino` — a transformers ``Dinov2Model`` with a tiny config;
* :func:`tiny_qwen3vl`, :func:`tiny_qwen35` and their processors (see ``genmetrics.testing.tiny_vlm``);
* :func:`tiny_tpips` — a TPIPS model (late, mid or early fusion) on the tiny Qwen3-VL;
* :func:`random_images` — reproducible random uint8 images.

Every builder takes a ``seed`` so the same call gives the same weights.
"""

from __future__ import annotations

import io
import json
import os
import socket
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from open_clip.model import CLIP
from open_clip.tokenizer import SimpleTokenizer
from PIL import Image
from transformers import Dinov2Config, Dinov2Model

from genmetrics.data.output.atomic import atomic_output, atomic_write_text
from genmetrics.testing.tiny_vlm import (  # the VLM builders live in a module of their own; re-exported here
    tiny_qwen3vl,
    tiny_qwen3vl_config,
    tiny_qwen3vl_for_generation,
    tiny_qwen3vl_processor,
    tiny_qwen35,
    tiny_qwen35_config,
    tiny_qwen35_for_generation,
    tiny_qwen35_processor,
    tiny_tokenizer,
)
from genmetrics.tpips import TPIPSModel

__all__ = [
    "ASPECTS8",
    "random_images",
    "spawn_gloo",
    "tiny_backbones",
    "tiny_clip",
    "tiny_clip_resnet",
    "tiny_vlm_inputs",
    "toy_leaderboard",
    "toy_mib_pairs",
    "write_images",
    "tiny_dino",
    "tiny_qwen3vl",
    "tiny_qwen3vl_config",
    "tiny_qwen3vl_for_generation",
    "tiny_qwen3vl_processor",
    "tiny_qwen35",
    "tiny_qwen35_config",
    "tiny_qwen35_for_generation",
    "tiny_qwen35_processor",
    "tiny_tokenizer",
    "tiny_tpips",
]


#: eight aspect texts of one pair, as a TPIPS batch scores them (tests and benchmarks of the vision cache)
ASPECTS8 = (
    "lighting",
    "color",
    "pose of the cat",
    "texture",
    "background",
    "overall",
    "camera angle",
    "style",
)


def tiny_clip(
    seed: int = 0,
    *,
    image_size: int = 32,
    patch_size: int = 8,
    width: int = 64,
    layers: int = 3,
    embed_dim: int = 32,
    context_length: int = 16,
    quick_gelu: bool = True,
) -> tuple[Any, Any]:
    """``(model, tokenizer)``: a random open_clip ViT CLIP (grid ``image_size/patch_size``) and tokenizer.

    >>> model, tokenizer = tiny_clip()
    >>> tuple(model.encode_image(random_images(2).float() / 255).shape), tuple(tokenizer(["a cat"]).shape)
    ((2, 32), (1, 16))
    """
    torch.manual_seed(seed)
    model = CLIP(
        embed_dim=embed_dim,
        vision_cfg=dict(
            image_size=image_size,
            patch_size=patch_size,
            width=width,
            layers=layers,
            head_width=16,
            mlp_ratio=2.0,
        ),
        text_cfg=dict(context_length=context_length, vocab_size=49408, width=32, heads=4, layers=2),
        quick_gelu=quick_gelu,
    )
    # A logit scale like OpenAI CLIP's (exp -> 100) so temperatures behave as with real weights.
    with torch.no_grad():
        model.logit_scale.fill_(float(torch.log(torch.tensor(100.0))))
    model.eval()
    return model, SimpleTokenizer(context_length=context_length)


def tiny_clip_resnet(seed: int = 0) -> tuple[Any, Any]:
    """A tiny open_clip CLIP with a ModifiedResNet image tower (for "not a ViT" error tests).

    >>> type(tiny_clip_resnet()[0].visual).__name__
    'ModifiedResNet'
    """
    torch.manual_seed(seed)
    model = CLIP(
        embed_dim=32,
        vision_cfg=dict(image_size=32, layers=(1, 1, 1, 1), width=8, head_width=8),
        text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=1),
    )
    return model.eval(), SimpleTokenizer(context_length=16)


def tiny_dino(seed: int = 0, *, image_size: int = 32, patch_size: int = 8) -> Any:
    """A random transformers ``Dinov2Model`` (hidden 32, 2 layers).

    >>> tuple(tiny_dino()(pixel_values=torch.zeros(1, 3, 32, 32)).pooler_output.shape)
    (1, 32)
    """
    torch.manual_seed(seed)
    cfg = Dinov2Config(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        image_size=image_size,
        patch_size=patch_size,
    )
    return Dinov2Model(cfg).eval()


def random_images(n: int, size: int = 32, seed: int = 0, *, height: int | None = None) -> torch.Tensor:
    """``n`` reproducible random uint8 images ``[n,3,H,W]``.

    >>> x = random_images(2, 16, seed=1)
    >>> x.dtype, tuple(x.shape), bool((x == random_images(2, 16, seed=1)).all())
    (torch.uint8, (2, 3, 16, 16), True)
    """
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, 256, (n, 3, height or size, size), generator=g, dtype=torch.uint8)


def toy_leaderboard(root: str | Path, *, n: int = 3, size: int = 32, seed: int = 0) -> dict[str, Any]:
    """Write a tiny leaderboard under ``root`` and return its config (a mapping; paths relative to ``root``).

    ``root/refs/`` holds ``n`` random PNG references; generator ``copy`` (``root/copy/``) repeats them
    exactly and generator ``noisy`` (``root/noisy/``) adds seeded uniform noise of +-64 grey levels, so
    every fair metric ranks ``copy`` first. The config scores ``psnr`` with 100 bootstrap resamples; pass
    it with ``base_dir=root`` (``load_config``, ``run_leaderboard``).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     cfg = toy_leaderboard(d)
    ...     sorted(p.name for p in Path(d).iterdir()), [g["name"] for g in cfg["generators"]]
    (['copy', 'noisy', 'refs'], ['noisy', 'copy'])
    """
    root = Path(root)
    refs = random_images(n, size, seed=seed)
    noise = torch.randint(-64, 65, refs.shape, generator=torch.Generator().manual_seed(seed + 1))
    noisy = (refs.int() + noise).clamp(0, 255).to(torch.uint8)
    for folder, images in (("refs", refs), ("copy", refs), ("noisy", noisy)):
        write_images(root / folder, images)
    return {
        "data": {"references": "refs"},
        "run": {"n_boot": 100, "seed": 0},
        "generators": [{"name": "noisy", "images": "noisy"}, {"name": "copy", "images": "copy"}],
        "metrics": [{"name": "psnr"}],
    }


def write_images(folder: str | Path, images: torch.Tensor) -> list[Path]:
    """Save uint8 images ``[N,3,H,W]`` as ``folder/000.png, 001.png, ...`` (the folder is created);
    returns the paths in order.

    >>> import tempfile
    >>> from genmetrics.data.io.images import load_image, pil_to_tensor
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_images(Path(d) / "imgs", random_images(2, 16))
    ...     [p.name for p in paths], torch.equal(pil_to_tensor(load_image(paths[1])), random_images(2, 16)[1] / 255)
    (['000.png', '001.png'], True)
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    paths = [folder / f"{i:03d}.png" for i in range(len(images))]
    for img, path in zip(images, paths):
        with atomic_output(path) as tmp:  # the write rule (genmetrics/data/output/)
            Image.fromarray(img.permute(1, 2, 0).numpy()).save(tmp)
    return paths


def toy_mib_pairs(folder: str | Path, n: int = 4, *, seed: int = 0) -> Path:
    """Write ``n`` MIB-style preference pairs (``genmetrics.data.jsonl.load_mib_pairs`` format) with
    64 px random PNGs under ``folder`` and return the JSONL path. Each pair has 2 references shared by
    all pairs, candidates from generators ``gen_a`` / ``gen_b``, a preference (alternating 0, 1) and
    diagnostic labels (the preferred candidate passes every dimension).

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     pairs = load_mib_pairs(toy_mib_pairs(d, 2))
    >>> [(p.generators, p.preference, len(p.references)) for p in pairs]
    [(('gen_a', 'gen_b'), 0, 2), (('gen_a', 'gen_b'), 1, 2)]
    """
    folder = Path(folder)
    refs = write_images(folder / "references", random_images(2, 64, seed=seed))
    cands = write_images(folder / "candidates", random_images(2 * n, 64, seed=seed + 1))
    lines = []
    for i in range(n):
        pref = i % 2
        diag = [[0.0, 0.0, 0.0], [0.0, 0.0, 0.0]]
        diag[pref] = [1.0, 1.0, 1.0]
        lines.append(
            json.dumps(
                {
                    "id": f"pair{i}",
                    "prompt": f"subject {i} and a friend playing together",
                    "references": [str(p) for p in refs],
                    "candidates": [str(cands[2 * i]), str(cands[2 * i + 1])],
                    "generators": ["gen_a", "gen_b"],
                    "preference": pref,
                    "diagnostics": diag,
                }
            )
        )
    return atomic_write_text(folder / "pairs.jsonl", "\n".join(lines) + "\n")


def tiny_vlm_inputs(text: str = "a cat", *, size: int = 64, seed: int = 3) -> dict[str, Any]:
    """The tiny Qwen3-VL with one chat turn (an image, then ``text``) ready for its forward:
    ``{"model", "processor", "image" (float [3,size,size] in [0,1]), "batch" (the processor's output),
    "image_tokens" (bool mask of the image placeholder tokens in ``batch["input_ids"]``)}``.

    >>> t = tiny_vlm_inputs()
    >>> tuple(t["image"].shape), int(t["image_tokens"].sum())  # 64 px: 4 merged image tokens
    ((3, 64, 64), 4)
    >>> tuple(t["model"](**t["batch"]).last_hidden_state.shape) == (*t["batch"]["input_ids"].shape, 64)
    True
    """
    model, processor = tiny_qwen3vl(), tiny_qwen3vl_processor(size)
    image = random_images(1, size, seed=seed)[0]
    turn = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": text}]}]
    batch = processor(
        text=[processor.apply_chat_template(turn, tokenize=False)],
        images=[Image.fromarray(image.permute(1, 2, 0).numpy())],
        return_tensors="pt",
    )
    return {
        "model": model,
        "processor": processor,
        "image": image.float() / 255,
        "batch": batch,
        "image_tokens": batch["input_ids"] == model.config.image_token_id,
    }


def tiny_tpips(variant: str = "late", *, image_size: int = 64, seed: int = 0) -> Any:
    """A :class:`~genmetrics.tpips.TPIPSModel` (``variant``: late, mid or early fusion) on the tiny random
    Qwen3-VL and its offline processor, at ``image_size`` px.

    >>> late, mid = tiny_tpips(), tiny_tpips("mid")
    >>> late.variant, mid.variant, mid.image_size, tuple(late.embed(random_images(2, 64), "color").shape)
    ('late', 'mid', 64, (2, 64))
    """
    return TPIPSModel(tiny_qwen3vl(seed=seed), tiny_qwen3vl_processor(), variant, image_size=image_size)


# ------------------------------------------------------------------------------ backbone provider
def tiny_backbones(kind: str, weights: str, **options: Any) -> Any:
    """A backbone provider (:mod:`genmetrics.backbones.provider`) that answers every default-weights load
    with a tiny random model (seed 0; scores are meaningless, nothing downloads):

    * ``open_clip`` -> ``(tiny_clip(), tokenizer)``; ``dino`` -> ``tiny_dino()``;
    * ``vlm`` -> ``(model, processor)``: Qwen3.5 when ``vlm_kind`` is ``"qwen3_5"`` or ``weights`` names a
      Qwen3.5 checkpoint (``Qwen/Qwen3.5-4B``), else Qwen3-VL; ``for_generation=True`` gives the
      ``*ForConditionalGeneration`` model; the kinds ``qwen3vl`` and ``qwen35`` give that family directly.
      Other kinds: ``None`` (load as usual).

    Use it in-process, ``with use_provider(tiny_backbones): ...``, or for a CLI run,
    ``GENMETRICS_BACKBONE_PROVIDER=genmetrics.testing:tiny_backbones``.

    >>> from genmetrics.backbones.provider import use_provider
    >>> import genmetrics as gm
    >>> with use_provider(tiny_backbones):
    ...     clip_i = gm.create_metric("clip_i")
    ...     value = clip_i(reference=random_images(2, seed=1), candidates=random_images(2, seed=2))
    >>> bool(-1.0 <= float(value) <= 1.0)
    True
    """
    if kind in ("qwen3vl", "qwen35", "qwen3_5"):  # a loader that names the VLM family as its kind
        kind, options = "vlm", {**options, "vlm_kind": kind}
    if kind == "open_clip":
        return tiny_clip()
    if kind == "dino":
        return tiny_dino()
    if kind == "vlm":
        vlm_kind = options.get("vlm_kind")
        qwen35 = vlm_kind in ("qwen3_5", "qwen35") or (
            vlm_kind is None and any(k in str(weights).lower() for k in ("qwen3.5", "qwen3_5", "qwen35"))
        )
        gen = bool(options.get("for_generation", False))
        if qwen35:
            model = (tiny_qwen35_for_generation if gen else tiny_qwen35)(0)
            return model, tiny_qwen35_processor()
        model = (tiny_qwen3vl_for_generation if gen else tiny_qwen3vl)(0)
        return model, tiny_qwen3vl_processor()
    return None


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _gloo_worker(rank: int, world_size: int, port: int, fn: Any, args: tuple, queue: Any) -> None:
    os.environ.update(
        MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world_size)
    )
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world_size)
    try:
        result = fn(rank, world_size, *args)
        buf = io.BytesIO()  # by value: shared-memory tensors would die with this process
        torch.save(result, buf)
        dist.barrier()
        queue.put((rank, buf.getvalue()))
        dist.barrier()
    finally:
        dist.destroy_process_group()


def spawn_gloo(fn: Any, world_size: int = 2, args: tuple = ()) -> list[Any]:
    """Run ``fn(rank, world_size, *args)`` in ``world_size`` processes joined by a gloo process group on
    127.0.0.1 and return the per-rank results (``fn`` must be importable: a module-level function).
    For example ``spawn_gloo(my_module.worker, 2)`` in a test (not run here: it starts processes)."""
    ctx = mp.get_context("spawn")
    queue = ctx.SimpleQueue()
    port = _free_port()
    procs = mp.start_processes(
        _gloo_worker,
        args=(world_size, port, fn, args, queue),
        nprocs=world_size,
        join=False,
        start_method="spawn",
    )
    assert procs is not None  # join=False returns the context
    results: dict[int, bytes] = {}
    done = False
    while not done:  # read while joining: a result larger than the pipe's buffer blocks its sender until read
        while not queue.empty():
            rank, data = queue.get()
            results[rank] = data
        done = procs.join(timeout=0.05)  # raises when a process failed
    while not queue.empty():
        rank, data = queue.get()
        results[rank] = data
    return [torch.load(io.BytesIO(results[r]), weights_only=True) for r in range(world_size)]
