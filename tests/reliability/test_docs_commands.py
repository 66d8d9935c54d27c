"""Every command of a runnable docs block runs as written, on the quick-start data.

Convention (docs/contributing.md): a fenced block whose info string contains ``runnable`` (```` ```console
runnable ````) holds commands, one per ``$ `` line (``\\`` continues a line; leading ``VAR=value`` words set
environment variables), each followed by its expected output. An output line must appear in what the
command printed (stdout and stderr); ``...`` in it matches any text; a line ``[exit N]`` checks the exit code
(otherwise it is 0, or 2 when an expected line starts with ``error:``). Commands run in-process through the
CLI's ``main`` in a temporary copy of ``examples/`` (so relative paths work and outputs land there), with the
tiny-backbone provider installed for commands that need model weights.
"""

from __future__ import annotations

import re
import shlex
import shutil
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from genmetrics.cli.main import main

REPO = Path(__file__).resolve().parents[2]
DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
FENCE = re.compile(r"^```(?P<info>[^\n`]*)\n(?P<body>.*?)^```\s*$", re.S | re.M)


@dataclass
class DocCommand:
    source: str
    line: int
    env: dict[str, str]
    argv: list[str]
    expected: list[str] = field(default_factory=list)
    exit_code: int | None = None

    def __str__(self) -> str:
        return f"{self.source}:{self.line}"


def runnable_commands(path: Path) -> list[DocCommand]:
    text = path.read_text(encoding="utf-8")
    out: list[DocCommand] = []
    for m in FENCE.finditer(text):
        if "runnable" not in m["info"].split():
            continue
        first = text[: m.start("body")].count("\n") + 1
        lines = m["body"].splitlines()
        i = 0
        while i < len(lines):
            line = lines[i]
            if not line.startswith("$ "):
                if out and out[-1].source == path.name:
                    exp = line.strip()
                    mm = re.fullmatch(r"\[exit (\d+)\]", exp)
                    if mm:
                        out[-1].exit_code = int(mm[1])
                    elif exp:
                        out[-1].expected.append(exp)
                i += 1
                continue
            cmd, start = line[2:], i
            while cmd.endswith("\\"):
                i += 1
                cmd = cmd[:-1] + " " + lines[i].strip()
            words = shlex.split(cmd)
            env = {}
            while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
                k, _, v = words.pop(0).partition("=")
                env[k] = v
            assert words and words[0] == "genmetrics", (
                f"{path.name}:{first + start}: a runnable command must call genmetrics"
            )
            out.append(DocCommand(path.name, first + start, env, words[1:]))
            i += 1
    return out


COMMANDS = [c for p in DOCS for c in runnable_commands(p)]


def test_docs_have_runnable_commands():
    names = {c.source for c in COMMANDS}
    assert {"cli.md", "leaderboard.md", "errors.md", "raclip.md", "tpips.md", "mie.md"} <= names, names


def _matches(expected: str, output: str) -> bool:
    """``expected`` (whitespace runs compared as one space, ``...`` = any text) on one printed line."""
    pattern = ".*?".join(re.escape(" ".join(part.split())) for part in expected.split("..."))
    return any(re.search(pattern, " ".join(ln.split())) for ln in output.splitlines())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    shutil.copytree(REPO / "examples", root / "examples")
    return root


@pytest.mark.slow
@pytest.mark.parametrize("cmd", COMMANDS, ids=str)
def test_doc_command_runs_as_written(cmd, workdir, monkeypatch, capsys):
    monkeypatch.chdir(workdir)
    monkeypatch.setenv("GENMETRICS_PROGRESS", "0")
    monkeypatch.setenv("GENMETRICS_BACKBONE_PROVIDER", "genmetrics.testing:tiny_backbones")
    for k, v in cmd.env.items():
        monkeypatch.setenv(k, v)
    rc = main(cmd.argv)
    captured = capsys.readouterr()
    output = captured.out + captured.err
    want = (
        cmd.exit_code
        if cmd.exit_code is not None
        else (2 if any(e.startswith("error:") for e in cmd.expected) else 0)
    )
    assert rc == want, f"{cmd}: exit {rc}, documented {want}\n{output}"
    assert "Traceback" not in output
    for exp in cmd.expected:
        assert _matches(exp, output), (
            f"{cmd}: documented output line not printed: {exp!r}\n--- printed:\n{output}"
        )


def test_parser_reads_continuations_env_and_exit_codes(tmp_path):
    doc = tmp_path / "x.md"
    doc.write_text(
        "```console runnable\n$ A_B=1 genmetrics score psnr \\\n    --candidates c\nerror: ...\n[exit 2]\n```\n"
        "```console\n$ genmetrics list\n```\n"
    )
    (c,) = runnable_commands(doc)
    assert (c.env, c.argv, c.expected, c.exit_code, c.line) == (
        {"A_B": "1"},
        ["score", "psnr", "--candidates", "c"],
        ["error: ..."],
        2,
        2,
    )
    assert _matches("psnr: 42.0... (n=12)", "psnr: 42.025925864743144  (n=12)")
    assert not _matches("psnr: 41.0... (n=12)", "psnr: 42.025925864743144  (n=12)")


@pytest.mark.parametrize("exc", [KeyboardInterrupt, __import__("click").exceptions.Abort])
def test_ctrl_c_prints_the_documented_message(exc, monkeypatch, capsys):
    """docs/cli.md and docs/errors.md: Ctrl-C exits 130 with this one line (click turns it into Abort)."""
    from genmetrics.cli import main as main_module

    def interrupted(*a, **k):
        raise exc()

    monkeypatch.setattr(main_module.cli, "main", interrupted)
    assert main([]) == 130
    line = "error: interrupted; finished results were kept"
    assert capsys.readouterr().err.strip() == line
    assert (
        line in (REPO / "docs" / "cli.md").read_text() and line in (REPO / "docs" / "errors.md").read_text()
    )
