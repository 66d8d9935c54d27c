"""Print the shell commands of README.md's fresh-machine section, so that CI runs them as written.

Every fenced ``bash`` block under the heading (up to the next heading of the same or a higher level) is
one command line; they print in order, one per line. ``--containing TEXT`` keeps the blocks whose command
contains TEXT (exactly one must), so CI can ask for "the install-and-test line" without counting blocks.

    python .ci/readme_commands.py                           # every command of the section
    python .ci/readme_commands.py --containing pytest       # the one that runs the tests

A README edit is therefore a CI edit: what the README tells a new user to type is what CI types.
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

HEADING = "Two commands for a fresh machine"
FENCE = re.compile(r"^(`{3,}|~{3,})\s*([\w+-]*)\s*$")
ATX = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")


def section_commands(text: str, heading: str = HEADING) -> list[str]:
    """The ``bash`` blocks under ``heading``, each joined into one command line (continuation lines, ``\\``
    at the end, are joined; comment and blank lines dropped).

    >>> md = "# t\\n## Two commands for a fresh machine\\n```bash\\npip install x \\\\\\n  y\\n```\\n"
    >>> md += "```\\nnot bash\\n```\\n```bash\\n# a comment\\npytest -q\\n```\\n## Next\\n```bash\\nno\\n```\\n"
    >>> section_commands(md)
    ['pip install x y', 'pytest -q']
    """
    lines = text.splitlines()
    level = None
    commands: list[str] = []
    fence: str | None = None
    block: list[str] | None = None
    for line in lines:
        if fence is not None:  # inside a fenced block: only its closing fence ends it
            if line.strip().startswith(fence) and set(line.strip()) == {fence[0]}:
                if block is not None:
                    commands.append(_join(block))
                fence, block = None, None
            elif block is not None:
                block.append(line)
            continue
        m = ATX.match(line)
        if m:
            if level is not None and len(m.group(1)) <= level:
                break
            if level is None and m.group(2) == heading:
                level = len(m.group(1))
            continue
        f = FENCE.match(line.strip())
        if f:
            fence = f.group(1)
            block = [] if level is not None and f.group(2) in ("bash", "sh", "shell", "console") else None
    if level is None:
        raise SystemExit(
            f"README has no heading {heading!r}: the section CI runs is gone (rename it here too)"
        )
    if not commands:
        raise SystemExit(f"README's section {heading!r} has no bash block: nothing for CI to run")
    return commands


def _join(block: list[str]) -> str:
    out: list[str] = []
    cont = False
    for raw in block:
        line = raw.strip()
        if not cont and (not line or line.startswith("#")):
            continue
        ends = line.endswith("\\")
        part = line[:-1].rstrip() if ends else line
        if cont:
            out[-1] = f"{out[-1]} {part}".strip()
        else:
            out.append(part)
        cont = ends
    if len(out) != 1:
        raise SystemExit(f"a README bash block must hold one command line, this one holds {len(out)}: {out}")
    return out[0]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("readme", nargs="?", default=str(Path(__file__).parents[1] / "README.md"))
    ap.add_argument("--heading", default=HEADING)
    ap.add_argument("--containing", help="print only the command containing this text (exactly one must)")
    args = ap.parse_args(argv)
    commands = section_commands(Path(args.readme).read_text(encoding="utf-8"), args.heading)
    if args.containing is not None:
        commands = [c for c in commands if args.containing in c]
        if len(commands) != 1:
            print(
                f"README's section {args.heading!r}: {len(commands)} commands contain {args.containing!r}, "
                "expected exactly one",
                file=sys.stderr,
            )
            return 1
    print("\n".join(commands))
    return 0


if __name__ == "__main__":
    sys.exit(main())
