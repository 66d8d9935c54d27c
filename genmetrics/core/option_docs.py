"""What each metric option means and which values it takes: the one table ``genmetrics info`` shows and the
metric classes' docstrings end with (their ``Options`` section, added when the class is defined).

An entry is ``(allowed values, description)``; :data:`OPTIONS` holds the meaning an option has for every
metric that takes it, :data:`PER_METRIC` what one metric means by it. No import of torch here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["OPTIONS", "PER_METRIC", "describe_options", "option_doc", "options_section"]

_IMAGES = "images per forward pass (or per chunk of the pixel computation); any value gives the same scores"
OPTIONS: dict[str, tuple[str, str]] = {
    "batch_size": ("an integer >= 1", _IMAGES),
    "device": ("None (CUDA when available), 'cpu', 'cuda', 'cuda:N', 'mps'", "where the metric computes"),
    "data_range": ("a number > 0 (1.0 or 255.0)", "the value range of float image tensors given to update()"),
    "precision": ("'fp32', 'bf16'", "the backbone's compute precision"),
    "weights": (
        "None (the default weights), an open_clip MODEL/TAG, a hub id ORG/NAME or a local path",
        "weights loaded instead of the default (command line: --weights)",
    ),
    "backbone": ("None or a built model", "a model you built (Python only); replaces the weights"),
    "tokenizer": ("None or the backbone's tokenizer", "the tokenizer of backbone= (Python only)"),
    "processor": ("None or the backbone's processor", "the processor of backbone= (Python only)"),
    "attributes": (
        "a shipped set name (`celeba20`, `coco80`, ...), a text file (one per line) or a list",
        "the attributes scored (command line: --attributes)",
    ),
    "cache_dir": (
        "None, False or a folder",
        "where image embeddings are cached (None: under GENMETRICS_HOME)",
    ),
    "resize": (
        "'none', 'to_first'",
        "pixel metrics: sizes must match ('none') or candidates are resized to the reference",
    ),
    "kernel_size": ("an odd integer >= 1", "the Gaussian window's side, in pixels"),
    "sigma": ("a number > 0", "the Gaussian window's standard deviation, in pixels"),
    "dual_prompt": ("True, False", "RA-CLIPScore with the 'without' prompt (Eq. 3); False is the ablation"),
    "local_tokens": ("True, False", "use the patch tokens (Eq. 8-9); False is the ablation"),
    "global_token": ("True, False", "use the [CLS] token; False is the ablation"),
    "temperature": (
        "None (the model's logit scale) or a number > 0",
        "the aggregation softmax's scale (Eq. 9)",
    ),
    "positive_template": ("text with one {}", "the prompt 'with' the attribute (Eq. 3)"),
    "negative_template": ("text with one {}", "the prompt 'without' the attribute (Eq. 3)"),
    "score": ("'raclip', 'clipscore', 'hcs'", "the per-image attribute score the divergence is fitted to"),
    "divergence": ("'gaussian', 'kde'", "closed-form KL of Gaussians (streaming) or the 2024 code's KDE"),
    "kl_direction": ("'gen||real', 'real||gen'", "which KL (Eq. 12-13); 'real||gen' as the HCS code"),
    "eps": ("a number >= 0", "variance floor of the fitted Gaussians"),
    "kde_points": ("an integer >= 2", "grid points of the KDE divergence"),
    "kde_range": ("(low, high) with low < high", "grid range of the KDE divergence"),
    "keep_scores": ("True, False", "keep every per-image score (memory grows with the images)"),
    "compat": ("None, 'hcs2024'", "reproduce the 2024 HCS code's choices"),
    "text_center": (
        "'prompts', 'bare'",
        "HCS text centre: the attribute vectors (Eq. 2) or the bare strings",
    ),
    "image_center": ("None or an embedding", "HCS image centre (default: the real set's mean)"),
    "prompt_template": ("text with one {}", "how a condition text becomes the prompt"),
    "text_dtype": ("'float64', 'float32'", "the precision of the text-embedding cosine"),
    "heads": ("a checkpoint folder, a `genmetrics train mie` --out folder or a hub id", "trained MIE heads"),
    "model": ("None or an MIEModel", "a ready MIE model (Python only)"),
    "dtype": ("None, 'bf16', 'fp16', 'fp32'", "the backbone's dtype (None: bf16 on CUDA, fp32 on CPU)"),
    "token_budget": ("an integer >= 1", "the most tokens in one batch"),
    "vision_cache_size": ("an integer >= 0", "images whose vision-tower output is kept for reuse"),
    "image_size": (
        "'checkpoint', an integer, None",
        "the images' longer side before the processor (None: unresized)",
    ),
    "adapter": ("None, a folder written by `genmetrics train tpips` or a hub id", "a trained TPIPS adapter"),
    "aspect": ("None or text", "the aspect compared (None: 'overall')"),
    "variant": ("'late', 'mid', 'early'", "the TPIPS fusion (late: cached embeddings)"),
    "image_modes": ("None, 'official', 'genmetrics'", "how alpha and 16-bit images are converted"),
}
PER_METRIC: dict[tuple[str, str], tuple[str, str]] = {
    ("psnr", "max_db"): ("a number > 0", "the PSNR of identical images (the cap), in dB"),
    ("psnr", "reduction"): ("'mean', 'pooled'", "mean of per-image PSNRs, or the PSNR of the pooled MSE"),
    ("psnr", "precision"): ("'auto', 'float32', 'float64'", "the pixel computation's precision"),
    ("ssim", "precision"): ("'auto', 'float32', 'float64'", "the pixel computation's precision"),
    ("ms_ssim", "precision"): ("'auto', 'float32', 'float64'", "the pixel computation's precision"),
    ("ms_ssim", "betas"): (
        "a non-empty list of numbers >= 0",
        "the weight of each scale (one scale per entry)",
    ),
    ("ms_ssim", "sigma"): (
        "None (1.5) or a number > 0",
        "the Gaussian window's standard deviation, in pixels",
    ),
    ("tpips", "resize"): (
        "None or a resize policy",
        "how pairs are brought to one grid (None: the official one)",
    ),
}


def option_doc(metric: str, option: str) -> tuple[str, str] | None:
    """``(allowed values, description)`` of ``option`` of ``metric``, or ``None`` when not documented.

    >>> option_doc("psnr", "max_db")[0], option_doc("ssim", "batch_size")[0]
    ('a number > 0', 'an integer >= 1')
    """
    return PER_METRIC.get((metric, option)) or OPTIONS.get(option)


def describe_options(metric: str, defaults: dict[str, Any]) -> dict[str, dict[str, Any]]:
    """Each option of ``defaults`` (name -> default, as :func:`genmetrics.core.registry.metric_options` gives) with
    its default, allowed values and description.

    >>> describe_options("psnr", {"max_db": "100.0"})["max_db"]["allowed"]
    'a number > 0'
    """
    out = {}
    for name, default in defaults.items():
        allowed, what = option_doc(metric, name) or ("", "")
        out[name] = {"default": default, "allowed": allowed, "description": what}
    return out


def options_section(metric: str, defaults: dict[str, Any]) -> str:
    """The ``Options`` section of a metric class's docstring.

    >>> print(options_section("psnr", {"max_db": "100.0"}))
    Options (``genmetrics info psnr``):
    <BLANKLINE>
    * ``max_db`` (default ``100.0``; a number > 0): the PSNR of identical images (the cap), in dB
    """
    lines = [f"Options (``genmetrics info {metric}``):", ""]
    for name, d in describe_options(metric, defaults).items():
        allowed = f"; {d['allowed']}" if d["allowed"] else ""
        lines.append(f"* ``{name}`` (default ``{d['default']}``{allowed}): {d['description']}".rstrip(": "))
    return "\n".join(lines)
