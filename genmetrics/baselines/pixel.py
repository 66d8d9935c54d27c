"""Weight-free pixel metrics on torchmetrics' functional code: PSNR, SSIM, MS-SSIM.

Images are compared at their own size: a candidate whose size differs from its reference is an error
unless ``resize="to_first"`` (the candidate is resized to its reference with bicubic antialiasing).
Scores are computed in float64 on [0,1] images (``data_range`` describes float *inputs*).
"""

from __future__ import annotations

from typing import Any

import torch
from torchmetrics.functional.image import (
    multiscale_structural_similarity_index_measure,
    peak_signal_noise_ratio,
    structural_similarity_index_measure,
)

from genmetrics.data.images import ResizePolicy, as_image_list, to_tensor
from genmetrics.errors import InputError
from genmetrics.metric import SampleMetric
from genmetrics.options import integer, number


class _PairedPixelMetric(SampleMetric):
    higher_is_better = True
    paired = True  # preds= are the candidates, target= the references

    def __init__(self, *, resize: str = "none", data_range: float = 1.0, batch_size: int = 32, **kwargs: Any) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        if resize not in ("none", "to_first"):
            raise InputError(f"resize: expected 'none' or 'to_first' for pixel metrics, got {resize!r}")
        if not (isinstance(data_range, (int, float)) and data_range > 0):
            raise InputError(f"data_range: expected a positive number (1.0 or 255.0), got {data_range!r}")
        self.resize = ResizePolicy(resize)
        self.data_range = float(data_range)

    def _prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        if reference is None:
            raise InputError(f"{self.name}: reference images are required (one per candidate)")
        if candidates is None:
            raise InputError(f"{self.name}: candidates are required")
        if condition is not None:
            raise InputError(f"{self.name}: takes no condition (text); remove it or use clip_t for image-text scores")
        return {"reference": as_image_list(reference, name="reference"),
                "candidates": as_image_list(candidates, name="candidates")}

    def _pair(self, ref: Any, cand: Any, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        r = to_tensor(ref, data_range=self.data_range, name=f"reference[{i}]")
        c = to_tensor(cand, data_range=self.data_range, name=f"candidates[{i}]")
        if r.shape != c.shape:
            if self.resize.name == "none":
                raise InputError(
                    f"candidates[{i}]: size {tuple(c.shape[1:])} differs from its reference {tuple(r.shape[1:])}; "
                    f"resize the images or pass resize='to_first' to resize candidates to their reference"
                )
            c = self.resize.apply_one(c, (int(r.shape[1]), int(r.shape[2])))
        return r.double(), c.double()

    def _score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        pairs = [self._pair(r, c, i) for i, (r, c) in enumerate(zip(batch["reference"], batch["candidates"]))]
        # Group equal sizes so each group is one batched call; order is restored afterwards.
        out = torch.empty(len(pairs), dtype=torch.float64)
        groups: dict[tuple, list[int]] = {}
        for i, (r, _) in enumerate(pairs):
            groups.setdefault(tuple(r.shape), []).append(i)
        for idx in groups.values():
            refs = torch.stack([pairs[i][0] for i in idx])
            cands = torch.stack([pairs[i][1] for i in idx])
            out[idx] = self._fn(cands, refs).reshape(-1).double()
        return out

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        raise NotImplementedError


class PSNR(_PairedPixelMetric):
    """PSNR in dB per image, ``10 log10(1 / MSE)`` on [0,1] images; identical images give ``max_db``.

    ``reduction="mean"`` (default): ``compute()`` is the mean of the per-image PSNRs. ``reduction="pooled"``:
    ``10 log10(1 / mean_i MSE_i)``, the PSNR of the pooled MSE that torchmetrics' ``PeakSignalNoiseRatio()``
    reports (equal to it when the images share one size; see docs/torchmetrics.md)."""

    name = "psnr"

    def __init__(self, *, max_db: float = 100.0, reduction: str = "mean", **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.max_db = number("max_db", max_db, lo=0.0, lo_open=True, owner="psnr")
        if reduction not in ("mean", "pooled"):
            raise InputError(f"psnr: option reduction: expected 'mean' (mean of per-image PSNR) or 'pooled' (PSNR of "
                             f"the pooled MSE, torchmetrics' default), got {reduction!r}")
        self.reduction = reduction

    def _reduce(self, scores: torch.Tensor) -> torch.Tensor:
        if self.reduction == "mean":
            return scores.mean(0)
        mse = torch.pow(10.0, -scores / 10.0).mean(0)  # each image's MSE back from its PSNR (float64)
        return (-10.0 * torch.log10(mse)).clamp(max=self.max_db)

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        v = peak_signal_noise_ratio(preds, target, data_range=1.0, reduction="none", dim=(1, 2, 3))
        return v.clamp(max=self.max_db)


class SSIM(_PairedPixelMetric):
    """SSIM per image (Gaussian kernel 11, sigma 1.5, K1 0.01, K2 0.03)."""

    name = "ssim"

    def __init__(self, *, kernel_size: int = 11, sigma: float = 1.5, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_size = integer("kernel_size", kernel_size, lo=3, owner="ssim")
        self.sigma = number("sigma", sigma, lo=0.0, lo_open=True, owner="ssim")

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        if min(preds.shape[-2:]) < self.kernel_size:
            raise InputError(f"ssim: images of {tuple(preds.shape[-2:])} are smaller than the {self.kernel_size}px window; "
                             "pass kernel_size=... smaller or use larger images")
        if self.kernel_size % 2 == 0:
            raise InputError(f"ssim: option kernel_size: expected an odd window size (e.g. 7 or 11), got {self.kernel_size}")
        if self.kernel_size == _gauss_size(self.sigma):  # torchmetrics sizes its Gaussian window from sigma
            return structural_similarity_index_measure(preds, target, data_range=1.0, reduction="none", sigma=self.sigma)
        return _ssim_window(preds, target, self.kernel_size, self.sigma)


class MSSSIM(_PairedPixelMetric):
    """MS-SSIM per image with the standard 5 scale weights; each side must exceed (kernel-1)*2^(scales-1)."""

    name = "ms_ssim"

    def __init__(self, *, kernel_size: int = 11, betas: tuple[float, ...] = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333),
                 **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.kernel_size = integer("kernel_size", kernel_size, lo=3, owner="ms_ssim")
        if isinstance(betas, (str, bytes)) or not hasattr(betas, "__len__") or not len(betas):
            raise InputError(f"ms_ssim: option betas: expected a non-empty list of scale weights, got {betas!r}")
        self.betas = tuple(number(f"betas[{i}]", b, lo=0.0, owner="ms_ssim") for i, b in enumerate(betas))

    def _fn(self, preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        need = (self.kernel_size - 1) * 2 ** (len(self.betas) - 1)
        if min(preds.shape[-2:]) <= need:
            raise InputError(
                f"ms_ssim: images of {tuple(preds.shape[-2:])} are too small for {len(self.betas)} scales with an "
                f"{self.kernel_size}px window (each side must exceed {need}); use larger images, fewer betas "
                "(e.g. betas=(0.0448, 0.2856, 0.3001)) or a smaller kernel_size"
            )
        if self.kernel_size % 2 == 0:
            raise InputError(f"ms_ssim: option kernel_size: expected an odd window size (e.g. 7 or 11), got {self.kernel_size}")
        # torchmetrics sizes the Gaussian window from sigma (kernel_size alone has no effect): the standard
        # sigma 1.5 for the standard 11 px window, else the sigma whose window is kernel_size (sigma = half / 3.5)
        sigma = 1.5 if self.kernel_size == 11 else (self.kernel_size - 1) / 7.0
        return multiscale_structural_similarity_index_measure(
            preds, target, data_range=1.0, reduction="none", sigma=sigma, betas=self.betas, normalize="relu")


def _gauss_size(sigma: float) -> int:
    """The Gaussian window torchmetrics uses for ``sigma`` (it ignores ``kernel_size`` for Gaussian windows)."""
    return int(3.5 * sigma + 0.5) * 2 + 1


def _ssim_window(preds: torch.Tensor, target: torch.Tensor, k: int, sigma: float) -> torch.Tensor:
    """SSIM per image with a ``k`` x ``k`` Gaussian window of ``sigma`` (K1 0.01, K2 0.03, data range 1),
    computed as torchmetrics does (reflect padding, variances clamped at 0, mean over the whole image)."""
    import torch.nn.functional as F

    c = preds.shape[1]
    x = torch.arange(k, dtype=preds.dtype, device=preds.device) - (k - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    w = (g[:, None] * g[None, :]).expand(c, 1, k, k)
    p = (k - 1) // 2
    stack = torch.cat([preds, target, preds * preds, target * target, preds * target])
    out = F.conv2d(F.pad(stack, (p, p, p, p), mode="reflect"), w, groups=c)
    mu_p, mu_t, pp, tt, pt = out.split(preds.shape[0])
    c1, c2 = 0.01**2, 0.03**2
    s_p, s_t, s_pt = (pp - mu_p**2).clamp(min=0.0), (tt - mu_t**2).clamp(min=0.0), pt - mu_p * mu_t
    ssim = ((2 * mu_p * mu_t + c1) * (2 * s_pt + c2)) / ((mu_p**2 + mu_t**2 + c1) * (s_p + s_t + c2))
    return ssim.reshape(preds.shape[0], -1).mean(-1)
