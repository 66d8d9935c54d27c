"""The optional native kernel of psnr (genmetrics/accel/_native.c); everything else is in pyproject.toml.

``optional=True``: on a machine without a C compiler the build skips the kernel and genmetrics takes its
torch path (docs/performance.md, "psnr: the native kernel")."""

import sys

from setuptools import Extension, setup

if sys.platform == "win32":
    ARGS = ["/O2", "/fp:precise"]
else:  # no fused multiply-add: the same sums on every CPU (ARM compilers fuse by default)
    ARGS = ["-O3", "-ffp-contract=off", "-fno-math-errno"]

setup(
    ext_modules=[
        Extension(
            "genmetrics.accel._native",
            ["genmetrics/accel/_native.c"],
            extra_compile_args=ARGS,
            optional=True,
        )
    ]
)
