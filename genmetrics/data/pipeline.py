"""The public path of :mod:`genmetrics.data.io.pipeline` (kept: the documented names, re-exported)."""

from genmetrics.data.io.pipeline import (
    DEFAULT_PREFETCH,
    PATHS,
    DecodedCache,
    ImageTransform,
    decoded,
    decoded_chunks,
    ignore_interrupts,
    rgb_uint8,
    transform_of,
)

__all__ = [
    "DEFAULT_PREFETCH",
    "DecodedCache",
    "ImageTransform",
    "PATHS",
    "decoded",
    "decoded_chunks",
    "ignore_interrupts",
    "rgb_uint8",
    "transform_of",
]
