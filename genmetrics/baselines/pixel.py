"""Weight-free pixel metrics: PSNR, SSIM, MS-SSIM (math in :mod:`genmetrics.functional.pixel`).

Images are compared at their own size: a candidate whose size differs from its reference is an error
unless ``resize="to_first"`` (the candidate is resized to its reference with bicubic antialiasing).
``data_range`` describes float *inputs*; scores are computed on [0,1] images.

Precision (option ``precision``): ``"auto"`` (default) computes in float32, or in float64 when the
images arrive as float64 tensors; ``"float32"`` / ``"float64"`` force one. Means over pixels are
accumulated in float64 either way; float32 is within 1e-6 (SSIM, MS-SSIM) and 1e-5 dB (PSNR) of float64
on the benchmark workload (benchmarks/peers.py).

A batch of tensors of one shape and dtype is validated once (dtype, shape, finiteness and range with one
reduction); only when that check fails are the images looked at one by one, so the error names the
first bad image exactly as for a single image.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from genmetrics.accel.pixel_native import native_psnr_path, squared_error_sums_by
from genmetrics.accel.views import batch_view
from genmetrics.core.metric import SampleMetric
from genmetrics.core.options import choice, integer, number
from genmetrics.data.io.images import ResizePolicy, as_image_list, check_same_size, load_image, to_tensor
from genmetrics.data.io.pipeline import rgb_uint8
from genmetrics.errors import InputError
from genmetrics.functional import pixel as P

_RANGE_TOL = 1e-3  # as genmetrics.data.io.images: relative tolerance on the declared float range
PRECISIONS = ("auto", "float32", "float64")
#: SSIM / MS-SSIM work on at most this many input elements per call: their windowed statistics keep about
#: ten maps of the input's size alive, so a 32-image batch of 256 px held ~10x its inputs;
#: 2**19 elements (2 MiB of float32 per input) bounds that transient at ~20 MiB whatever the batch size
WINDOWED_CHUNK_ELEMENTS = 1 << 19


def in_chunks(fn: Any, preds: torch.Tensor, target: torch.Tensor, *, max_elements: int) -> torch.Tensor:
    """``fn(preds, target)`` (per-image scores) over row chunks of at most ``max_elements`` input elements
    (at least one image per chunk), concatenated: the same scores as one call, with the transient memory of
    a chunk.

    >>> x, y = torch.rand(5, 3, 8, 8), torch.rand(5, 3, 8, 8)
    >>> per_image = lambda a, b: (a - b).pow(2).flatten(1).mean(1)
    >>> torch.equal(in_chunks(per_image, x, y, max_elements=2 * 3 * 8 * 8), per_image(x, y))
    True
    """
    per_row = max(1, preds[0].numel()) if len(preds) else 1
    rows = max(1, max_elements // per_row)
    if len(preds) <= rows:
        return fn(preds, target)
    return torch.cat([fn(preds[i : i + rows], target[i : i + rows]) for i in range(0, len(preds), rows)])


class TensorRows(Sequence):
    """The images of a batch tensor ``[B,3,H,W]`` as a sequence, without making ``B`` views up front: an
    index gives one image ``[3,H,W]``, a slice gives the rows of that slice (a view, no copy). The metrics'
    batching slices it like a list; :func:`raw_batch` takes the tensor back as it is.

    >>> rows = TensorRows(torch.zeros(5, 3, 4, 4))
    >>> len(rows), tuple(rows[1].shape), len(rows[1:4]), rows[1:4].tensor.data_ptr() == rows.tensor[1:4].data_ptr()
    (5, (3, 4, 4), 3, True)
    """

    __slots__ = ("tensor",)

    def __init__(self, tensor: torch.Tensor) -> None:
        self.tensor = tensor

    def __len__(self) -> int:
        return int(self.tensor.shape[0])

    def __getitem__(self, i: Any) -> Any:
        if isinstance(i, slice):
            return TensorRows(self.tensor[i])
        return self.tensor[i]

    def __iter__(self) -> Iterator[torch.Tensor]:
        return iter(self.tensor.unbind(0))


def raw_batch(items: list[Any]) -> tuple[torch.Tensor, bool, bool] | None:
    """``(batch, copied, tracked)``: tensors of one shape/dtype/device as one ``[B,3,H,W]`` tensor, values not
    looked at (the caller's own batch tensor when ``items`` are its rows, else a stacked copy: ``copied``;
    ``tracked`` when autograd follows the images); None when the items need the one-by-one path.

    >>> x = torch.zeros(2, 3, 4, 4)
    >>> batch, copied, tracked = raw_batch(list(x))
    >>> batch.data_ptr() == x.data_ptr(), copied, tracked  # rows of one tensor: no copy
    (True, False, False)
    """
    if isinstance(items, TensorRows):  # a batch tensor's rows: the tensor itself
        x = items.tensor
        if x.ndim != 4 or x.shape[1] != 3 or 0 in x.shape[2:] or x.device.type == "meta":
            return None
        if not (x.dtype == torch.uint8 or x.is_floating_point()):
            return None
        from genmetrics.data.io.images import MAX_PIXELS

        if int(x.shape[2]) * int(x.shape[3]) > MAX_PIXELS:
            return None
        tracked = torch.is_grad_enabled() and x.requires_grad
        return (x if tracked else x.detach()), False, tracked
    if not items or not all(isinstance(x, torch.Tensor) for x in items):
        return None
    first = items[0]
    if (
        first.ndim != 3
        or first.shape[0] != 3
        or first.shape[1] == 0
        or first.shape[2] == 0
        or first.device.type == "meta"
        or not (first.dtype == torch.uint8 or first.is_floating_point())
    ):
        return None
    from genmetrics.data.io.images import MAX_PIXELS

    if int(first.shape[1]) * int(first.shape[2]) > MAX_PIXELS:
        return None
    view = batch_view(items)  # consecutive rows of one tensor: one shape, dtype and device by construction
    copied = view is None
    shape, dtype, device = first.shape, first.dtype, first.device
    if copied and any(t.shape != shape or t.dtype != dtype or t.device != device for t in items):
        return None
    # gradients flow to float images that require them (a differentiable metric's forward / score)
    tracked = torch.is_grad_enabled() and any(t.requires_grad for t in items)
    if view is None:
        view = torch.stack(items if tracked else [t.detach() for t in items])
    return view, copied, tracked


def stack_images(items: list[Any], *, data_range: float, dtype: torch.dtype | None) -> torch.Tensor | None:
    """Tensors of one shape/dtype/device -> one validated ``[B,3,H,W]`` batch in [0,1] (``dtype``, or
    float32 / the input's float64 when None); None when the items need the one-by-one path (other
    inputs, mixed shapes, or a batch that fails validation, so the per-image check names the culprit).

    >>> items = list(torch.full((2, 3, 4, 4), 255, dtype=torch.uint8))
    >>> batch = stack_images(items, data_range=1.0, dtype=None)
    >>> tuple(batch.shape), batch.dtype, float(batch.max())
    ((2, 3, 4, 4), torch.float32, 1.0)
    >>> stack_images([torch.zeros(3, 4, 4), torch.zeros(3, 5, 5)], data_range=1.0, dtype=None) is None  # mixed sizes
    True
    """
    raw = raw_batch(items)
    if raw is None:
        return None
    x, copied, tracked = raw
    first = items[0]
    if first.dtype == torch.uint8:
        return x.to(dtype or torch.float32).div_(255.0)  # .to made a new tensor
    target = dtype or (torch.float64 if first.dtype == torch.float64 else torch.float32)
    lo, hi = (float(v) for v in torch.aminmax(x.detach()))
    tol = _RANGE_TOL * data_range
    if not (math.isfinite(lo) and math.isfinite(hi)) or lo < -tol or hi > data_range + tol:
        return None
    y = x.to(target)
    # in place only on our own copy (never the caller's images) and never on a tensor autograd tracks
    copied = (copied or y.data_ptr() != x.data_ptr()) and not tracked
    if data_range != 1.0:
        y = y.div_(data_range) if copied else y / data_range
        copied = True
    if lo < 0.0 or hi > data_range:
        y = y.clamp_(0.0, 1.0) if copied else y.clamp(0.0, 1.0)
    return y


def _decode(x: Any) -> Any:
    """A file path as the ``uint8 [3,H,W]`` tensor the input pipeline decodes it to; anything else as it is."""
    if not isinstance(x, (str, os.PathLike)):
        return x
    return load_image(x, convert=lambda im: rgb_uint8(im, str(x)))  # type: ignore[arg-type,return-value]


class _PairedPixelMetric(SampleMetric):
    #: forward() / score() keep the autograd graph of float tensor images of one size (a training loss, as
    #: torchmetrics' classes); images given as files, PIL or mixed sizes are read without gradients
    is_differentiable = True

    def __init__(
        self,
        *,
        resize: str = "none",
        data_range: float = 1.0,
        precision: str = "auto",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        if resize not in ("none", "to_first"):
            raise InputError(f"resize: expected 'none' or 'to_first' for pixel metrics, got {resize!r}")
        if not (isinstance(data_range, (int, float)) and data_range > 0):
            raise InputError(f"data_range: expected a positive number (1.0 or 255.0), got {data_range!r}")
        self.resize = ResizePolicy(resize)
        self.data_range = number("data_range", data_range, lo=0.0, lo_open=True, owner=self.name or None)
        self.precision = choice("precision", precision, PRECISIONS, owner=self.name)

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, Any]:
        if reference is None:
            raise InputError(f"{self.name}: reference images are required (one per candidate)")
        if candidates is None:
            raise InputError(f"{self.name}: candidates are required")
        if condition is not None:
            raise InputError(
                f"{self.name}: takes no condition (text); remove it or use clip_t for image-text scores"
            )
        if _one_size(reference, candidates) and reference.shape[0] == candidates.shape[0]:
            # batch tensors: their rows as sequences (no per-image views, no per-image checks)
            return {"reference": TensorRows(reference), "candidates": TensorRows(candidates)}
        refs, cands = as_image_list(reference, name="reference"), as_image_list(candidates, name="candidates")
        if self.resize.name == "none" and not _one_size(reference, candidates):
            # from the headers: a huge mismatched file is refused before decoding
            check_same_size(
                refs,
                cands,
                fix="resize the images or pass resize='to_first' to resize candidates to their reference",
            )
        # files decode to uint8, as the input pipeline gives them: one score for a path and its decoded image
        return {"reference": [_decode(x) for x in refs], "candidates": [_decode(x) for x in cands]}

    def _compute_dtype(self) -> torch.dtype | None:
        return None if self.precision == "auto" else getattr(torch, self.precision)

    def _one(self, x: Any, name: str) -> torch.Tensor:
        t = to_tensor(x, data_range=self.data_range, name=name)
        dtype = self._compute_dtype() or (
            torch.float64 if isinstance(x, torch.Tensor) and x.dtype == torch.float64 else torch.float32
        )
        return t.to(dtype)

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        dtype = self._compute_dtype()
        refs = stack_images(batch["reference"], data_range=self.data_range, dtype=dtype)
        cands = stack_images(batch["candidates"], data_range=self.data_range, dtype=dtype)
        if refs is not None and cands is not None and refs.shape == cands.shape:
            if refs.dtype != cands.dtype:
                refs, cands = refs.double(), cands.double()
            return self._fn(cands, refs)
        n = len(batch["reference"])
        rl = (
            list(refs.unbind(0))
            if refs is not None
            else [self._one(x, f"reference[{i}]") for i, x in enumerate(batch["reference"])]
        )
        cl = (
            list(cands.unbind(0))
            if cands is not None
            else [self._one(x, f"candidates[{i}]") for i, x in enumerate(batch["candidates"])]
        )
        for i in range(n):
            r, c = rl[i], cl[i]
            if r.shape != c.shape:
                if self.resize.name == "none":
                    raise InputError(
                        f"candidates[{i}]: size {tuple(c.shape[1:])} differs from its reference {tuple(r.shape[1:])}; "
                        f"resize the images or pass resize='to_first' to resize candidates to their reference"
                    )
                cl[i] = self.resize.apply_one(c, (int(r.shape[1]), int(r.shape[2])))
        # Group equal sizes so each group is one batched call; order is restored afterwards.
        out = torch.empty(n, dtype=torch.float64)
        groups: dict[tuple, list[int]] = {}
        for i, r in enumerate(rl):
            groups.setdefault(tuple(r.shape), []).append(i)
        for idx in groups.values():
            gr = torch.stack([rl[i] for i in idx])
            gc = torch.stack([cl[i] for i in idx])
            if gr.dtype != gc.dtype:
                gr, gc = gr.double(), gc.double()
            out[idx] = self._fn(gc, gr).reshape(-1).to(out.device)
        return out

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class PSNR(_PairedPixelMetric):
    """PSNR in dB per image, ``10 log10(1 / MSE)`` on [0,1] images; identical images give ``max_db``.

    ``reduction="mean"`` (default): ``compute()`` is the mean of the per-image PSNRs. ``reduction="pooled"``:
    ``10 log10(1 / mean_i MSE_i)``, the PSNR of the pooled MSE that torchmetrics' ``PeakSignalNoiseRatio()``
    reports (equal to it when the images share one size; see docs/torchmetrics.md).

    >>> ref = torch.full((2, 3, 16, 16), 0.5)
    >>> psnr = PSNR()
    >>> psnr.update(reference=ref, candidates=ref + 0.1)  # MSE 0.01: 20 dB
    >>> psnr.update(reference=ref, candidates=ref)  # identical: max_db
    >>> [round(v, 3) for v in psnr.per_sample()["scores"].tolist()], round(float(psnr.compute()), 3)
    ([20.0, 20.0, 100.0, 100.0], 60.0)
    >>> round(float(PSNR(reduction="pooled").score(torch.cat([ref, ref]), torch.cat([ref + 0.1, ref]))), 3)
    23.01
    """

    def __init__(self, *, max_db: float = 100.0, reduction: str = "mean", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_db = number("max_db", max_db, lo=0.0, lo_open=True, owner="psnr")
        if reduction not in ("mean", "pooled"):
            raise InputError(
                f"psnr: option reduction: expected 'mean' (mean of per-image PSNR) or 'pooled' (PSNR of "
                f"the pooled MSE, torchmetrics' default), got {reduction!r}"
            )
        self.reduction = reduction

    def _reduce(self, scores: torch.Tensor) -> torch.Tensor:
        if self.reduction == "mean":
            return scores.mean(0)
        mse = torch.pow(10.0, -scores / 10.0).mean(0)  # each image's MSE back from its PSNR (float64)
        return (-10.0 * torch.log10(mse)).clamp(max=self.max_db)

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        sse, _ = squared_error_sums_by(preds, target, native=native_psnr_path(preds, target))
        n = preds[0].numel() if preds.shape[0] else 1
        return P.psnr_from_sse(sse, n).clamp(max=self.max_db)

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """Per-sample PSNR in dB of one prepared batch (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        fused = self._one_pass(batch)
        return super().score_batch(batch) if fused is None else fused

    def _one_pass(self, batch: dict[str, list[Any]]) -> torch.Tensor | None:
        """Tensor batches of one shape and dtype: the squared errors in one pass over memory
        (:func:`~genmetrics.functional.pixel.squared_error_sums`) on the raw values. Float batches in the
        compute dtype get the range check in the same pass, PSNR scaled by ``data_range``; None (the general
        path decides: it clamps values within the tolerance, names a bad image, converts dtypes) unless every
        value is already in ``[0, data_range]``. uint8 batches (always valid; ``data_range`` does not apply:
        255 is white) need no range check; their integer differences are exact in float32, so this path is
        taken unless ``precision="float64"`` asks for the general one."""
        refs, cands = raw_batch(batch["reference"]), raw_batch(batch["candidates"])
        if refs is None or cands is None:
            return None
        r, c = refs[0], cands[0]
        if r.shape != c.shape or r.dtype != c.dtype or refs[2] or cands[2]:
            return None
        n = r[0].numel()
        if r.dtype == torch.uint8:
            if self._compute_dtype() not in (None, torch.float32):
                return None
            sse, _ = squared_error_sums_by(c, r, native=native_psnr_path(c, r))
            return P.psnr_from_sse(sse, n, data_range=255.0).clamp(max=self.max_db)
        want = self._compute_dtype() or (torch.float64 if r.dtype == torch.float64 else torch.float32)
        if r.dtype != want:
            return None
        sse, rng = squared_error_sums_by(c, r, with_range=True, native=native_psnr_path(c, r))
        assert rng is not None  # with_range=True
        lo, hi = (float(v) for v in rng)
        if not (0.0 <= lo and hi <= self.data_range):  # also False for NaN
            return None
        return P.psnr_from_sse(sse, n, data_range=self.data_range).clamp(max=self.max_db)


class SSIM(_PairedPixelMetric):
    """SSIM per image (Gaussian kernel 11, sigma 1.5, K1 0.01, K2 0.03).

    >>> x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    >>> ssim = SSIM()
    >>> round(float(ssim.score(x, x)), 6), bool(ssim.score(x, 1 - x) < 0)  # identical; inverted
    (1.0, True)
    """

    def __init__(self, *, kernel_size: int = 11, sigma: float = 1.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_size = integer("kernel_size", kernel_size, lo=3, owner="ssim")
        self.sigma = number("sigma", sigma, lo=0.0, lo_open=True, owner="ssim")
        _odd(self.kernel_size, "ssim")

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        side = min(preds.shape[-2:])
        if side < self.kernel_size:
            fit = side if side % 2 else side - 1  # the largest odd window that fits
            fix = (
                f"pass kernel_size={fit} (--option kernel_size={fit} on the command line) or use larger images"
                if fit >= 3
                else "use larger images (the smallest window is 3 px)"
            )
            raise InputError(
                f"ssim: images of {tuple(preds.shape[-2:])} are smaller than the {self.kernel_size}px window; {fix}"
            )
        return in_chunks(
            lambda p, t: P.ssim(p, t, kernel_size=self.kernel_size, sigma=self.sigma),
            preds,
            target,
            max_elements=WINDOWED_CHUNK_ELEMENTS,
        )


class MSSSIM(_PairedPixelMetric):
    """MS-SSIM per image with the standard 5 scale weights; each side must exceed (kernel-1)*2^(scales-1).

    ``sigma=None`` (default): 1.5 for the standard 11 px window, else ``(kernel_size - 1) / 7``, the sigma
    whose 3.5-sigma Gaussian window has ``kernel_size`` taps (how torchmetrics pairs the two).

    Small images need a smaller window or fewer scales (here each side must exceed ``6 * 2**2 = 24``):

    >>> x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    >>> m = MSSSIM(kernel_size=7, betas=(0.3, 0.4, 0.3))
    >>> round(float(m.score(x, x)), 6), bool(m.score(x, x.flip(-1)) < 0.5)
    (1.0, True)
    >>> MSSSIM().score(x, x)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ms_ssim: images of (32, 32) are too small for 5 scales with an 11px window ...
    """

    def __init__(
        self,
        *,
        kernel_size: int = 11,
        betas: tuple[float, ...] = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333),
        sigma: float | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        self.kernel_size = integer("kernel_size", kernel_size, lo=3, owner="ms_ssim")
        _odd(self.kernel_size, "ms_ssim")
        self.sigma = None if sigma is None else number("sigma", sigma, lo=0.0, lo_open=True, owner="ms_ssim")
        if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or not len(betas):
            quoted = "; a list in quotes is text: write it unquoted, --option betas=[0.5,0.5]"
            raise InputError(
                f"ms_ssim: option betas: expected a non-empty list of scale weights, got {betas!r}"
                + (quoted if isinstance(betas, str) and betas.strip()[:1] in "[(" and betas.strip() else "")
            )
        self.betas = tuple(number(f"betas[{i}]", b, lo=0.0, owner="ms_ssim") for i, b in enumerate(betas))

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        need = (self.kernel_size - 1) * 2 ** (len(self.betas) - 1)
        if min(preds.shape[-2:]) <= need:
            raise InputError(
                f"ms_ssim: images of {tuple(preds.shape[-2:])} are too small for {len(self.betas)} scales with an "
                f"{self.kernel_size}px window (each side must exceed {need}); use larger images, fewer betas "
                "(e.g. betas=(0.0448, 0.2856, 0.3001)) or a smaller kernel_size"
            )
        return in_chunks(
            lambda p, t: P.ms_ssim(p, t, kernel_size=self.kernel_size, sigma=self._sigma(), betas=self.betas),
            preds,
            target,
            max_elements=WINDOWED_CHUNK_ELEMENTS,
        )

    def _sigma(self) -> float:
        if self.sigma is not None:
            return self.sigma
        return 1.5 if self.kernel_size == 11 else (self.kernel_size - 1) / 7.0


def _one_size(reference: Any, candidates: Any) -> bool:
    """Both are batch tensors ``[B,C,H,W]`` of one height and width: every pair has one size, so the
    per-image size check (which reads each image's shape) has nothing to find."""
    return (
        isinstance(reference, torch.Tensor)
        and isinstance(candidates, torch.Tensor)
        and reference.ndim == candidates.ndim == 4
        and reference.shape[-2:] == candidates.shape[-2:]
    )


def _odd(kernel_size: int, owner: str) -> None:
    if kernel_size % 2 == 0:
        raise InputError(
            f"{owner}: option kernel_size: expected an odd window size (e.g. 7 or 11), got {kernel_size}"
        )
