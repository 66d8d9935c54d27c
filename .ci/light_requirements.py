"""Print the project's declared dependencies (with their environment markers) that the light entry points
need: listing metrics and loading a leaderboard config import none of torch, transformers or open_clip.

Used by .ci/run for the Python 3.10 smoke check: pip evaluates the markers, so a dependency declared for
older Pythons only (tomli) is installed exactly as a user's ``pip install`` would, and one that is missing
from pyproject.toml makes the check fail."""

import re
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

LIGHT = {"click", "pyyaml", "tqdm", "tomli"}

deps = tomllib.loads((Path(__file__).resolve().parents[1] / "pyproject.toml").read_text())["project"][
    "dependencies"
]
for dep in deps:
    name = re.match(r"[A-Za-z0-9_.-]+", dep).group(0).lower().replace("_", "-")
    if name in LIGHT:
        print(dep)
