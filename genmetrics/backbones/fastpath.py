"""Moved to :mod:`genmetrics.accel.fastpath`; this path keeps working."""

from genmetrics.accel.fastpath import (
    BIT_CHANGING,
    FAST_PATHS_ENV,
    LOCK_WAIT,
    MARGIN,
    STORE_NAME,
    PathChoice,
    choose_path,
    cpu_description,
    decide,
    default_timer,
    fast_path_allowed,
    fast_path_choices,
    fast_paths_mode,
    force_path,
    forget_fast_path_choices,
    matmul_gflops,
)

__all__ = [
    "BIT_CHANGING",
    "FAST_PATHS_ENV",
    "LOCK_WAIT",
    "MARGIN",
    "STORE_NAME",
    "PathChoice",
    "choose_path",
    "cpu_description",
    "decide",
    "default_timer",
    "fast_path_allowed",
    "fast_path_choices",
    "fast_paths_mode",
    "force_path",
    "forget_fast_path_choices",
    "matmul_gflops",
]
