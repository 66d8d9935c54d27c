"""Fast paths: other kernels for steps the reference code also computes, kept in one place.

* :mod:`~genmetrics.accel.fastpath`: which path runs (``GENMETRICS_FAST_PATHS``, :func:`force_path`), the
  per-machine timing and its record in ``GENMETRICS_HOME/fast_paths.json``;
* :mod:`~genmetrics.accel.pixel_native`: psnr's native one-pass kernel (``_native.c``);
* :mod:`~genmetrics.accel.clip_blocks`, :mod:`~genmetrics.accel.clip_packed`: open_clip blocks with SDPA and
  a fused QuickGELU, and their products on packed oneDNN weights;
* :mod:`~genmetrics.accel._torch_internals`: every private torch API genmetrics calls;
* :mod:`~genmetrics.accel.views`: a batch tensor found again behind its rows (no copy).

The rule: a score never depends on a timing. A fast path chosen automatically gives the reference path's
bits on the inputs it takes; one that may change the last bits runs only when asked for
(docs/performance.md, "Fast paths"). Modules here import torch, open_clip and genmetrics' functional, data,
errors and options, never a metric family, backbones or baselines.
"""
