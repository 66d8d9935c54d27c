"""Every command and code example in docs/ is checked, so a renamed flag or API breaks a test.

* ```` ```console runnable ```` blocks are run by ``test_docs_commands.py`` (on the quick-start data, the
  tiny backbones installed through ``GENMETRICS_BACKBONE_PROVIDER=genmetrics.testing:tiny_backbones``).
* Every other ``genmetrics ...`` command line in a docs page (synopses, training runs that need real
  weights and data, ``accelerate launch ... -m genmetrics ...``, inline code) is parsed against the CLI
  itself: the command exists, every ``--flag`` is one of its options, and a value of a choice option is a
  valid choice. A fenced block of such commands must say why it is not run: ``synopsis``,
  ``needs-weights`` (real weights, a GPU or data that is not shipped) or ``needs-data`` (see ``MARKS``).
* Every ```` ```python ```` block runs as written, the blocks of a page in order in one namespace (like a
  notebook), in a temporary folder that holds the files the page names (``ref.png``, ``runs/mie/best``,
  ``config.toml``, ...), with the tiny random backbones installed as the provider (so default weights come
  from it), and with the page's *placeholders* bound to small stand-ins: the names the prose leaves to the
  reader (``real_loader``, ``images``, ``backbone``, ...), listed per page in ``GIVEN`` below. The only
  rewrite is ``"cuda"`` -> ``"cpu"`` (no GPU here). README.md's blocks run in ``tests/test_readme.py``.
* ```` ```python signatures ```` blocks list functions as ``name(args) -> shape``: each name must exist
  in the module the page names and each keyword it shows must be a parameter of it.
"""

from __future__ import annotations

import inspect
import re
import shlex
import shutil
from dataclasses import dataclass
from pathlib import Path

import click
import pytest

from .test_docs_commands import DOCS, FENCE, REPO


@dataclass
class Block:
    source: str
    line: int
    info: list[str]
    body: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}"


def blocks(path: Path) -> list[Block]:
    text = path.read_text(encoding="utf-8")
    return [
        Block(path.name, text[: m.start()].count("\n") + 1, m["info"].split(), m["body"])
        for m in FENCE.finditer(text)
    ]


ALL = [b for p in DOCS for b in blocks(p)]


# --------------------------------------------------------------------------------------- command lines
@dataclass
class Command:
    where: str
    words: list[str]
    synopsis: bool  # [optional] parts, placeholders, "...": check the flags only

    def __str__(self) -> str:
        return f"{self.where} genmetrics {' '.join(self.words[:2])}"


def command_lines(block: Block) -> list[Command]:
    """The ``genmetrics`` invocations in a block (``$ `` prompts, ``\\`` continuations, env words, trailing
    ``#`` comments and ``accelerate launch ... -m genmetrics`` handled)."""
    out: list[Command] = []
    lines = block.body.splitlines()
    i = 0
    while i < len(lines):
        start, line = i, lines[i]
        while line.rstrip().endswith("\\") and i + 1 < len(lines):
            i += 1
            line = line.rstrip()[:-1] + " " + lines[i].strip()
        i += 1
        line = line.strip()
        if line.startswith("$ "):
            line = line[2:]
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            continue
        while words and re.fullmatch(r"[A-Z_][A-Z0-9_]*=.*", words[0]):
            words.pop(0)
        if words[:2] == ["accelerate", "launch"] and "-m" in words:
            words = words[words.index("-m") + 1 :]
        elif words[:2] == ["python", "-m"]:
            words = words[2:]
        if not words or words[0] != "genmetrics":
            continue
        synopsis = any(
            w.startswith("[") or w.endswith("]") or w == "..." or "|" in w.replace("||", "") for w in words
        )
        out.append(Command(f"{block}+{start}", words[1:], synopsis))
    return out


def inline_commands(path: Path) -> list[Command]:
    """``genmetrics ...`` in inline code spans of the prose (outside fenced blocks)."""
    text = FENCE.sub(lambda m: "\n" * m[0].count("\n"), path.read_text(encoding="utf-8"))
    out = []
    for m in re.finditer(r"`([^`\n]*\bgenmetrics [a-z][^`\n]*)`", text):
        line = text[: m.start()].count("\n") + 1
        out += command_lines(Block(path.name, line, [], m[1] + "\n"))
    return out


COMMANDS = [c for b in ALL if "runnable" not in b.info for c in command_lines(b)] + [
    c for p in DOCS for c in inline_commands(p)
]


def _resolve(words: list[str]) -> tuple[click.Command, list[str], list[str]]:
    from genmetrics.cli.main import cli

    cmd: click.Command = cli
    path: list[str] = []
    rest = list(words)
    while isinstance(cmd, click.Group) and rest and not rest[0].startswith("-") and rest[0] != "...":
        subs = [cmd.get_command(click.Context(cmd), name) for name in rest[0].split("|")]  # tpips|mie: each
        assert None not in subs, f"genmetrics {' '.join(path + rest[:1])}: no such command"
        path.append(rest.pop(0))
        cmd = subs[0]
    return cmd, path, rest


#: what a fenced block holding ``genmetrics`` commands must say about itself (README.md, whose blocks
#: ``tests/test_readme.py`` reads by their plain ``bash`` fence, is exempt; its commands are still checked)
MARKS = {
    "runnable": "run as written by test_docs_commands.py",
    "synopsis": "usage lines with placeholders",
    "needs-weights": "needs real weights, a GPU or data that is not shipped",
    "needs-data": "runs on the tiny backbone but on data that is not shipped",
}


def test_every_command_block_is_marked():
    """A block of commands either runs in a test or says why not, so a new one cannot slip by unmarked."""
    unmarked = [
        f"{b} (info {' '.join(b.info)!r})"
        for b in ALL
        if b.source != "README.md" and command_lines(b) and not set(b.info) & set(MARKS)
    ]
    assert not unmarked, f"mark these blocks with one of {sorted(MARKS)}: {unmarked}"


def test_docs_show_commands_outside_runnable_blocks():
    pages = {c.where.split(":")[0] for c in COMMANDS}
    assert {"tpips.md", "mie.md", "raclip.md", "leaderboard.md"} <= pages, pages


@pytest.mark.parametrize("command", COMMANDS, ids=str)
def test_doc_command_flags_exist(command):
    cmd, path, rest = _resolve(command.words)
    assert not isinstance(cmd, click.Group) or rest in (["--help"], ["..."]), (
        f"{command.where}: 'genmetrics {' '.join(path)}' needs a subcommand"
    )
    opts: dict[str, click.Option] = {}
    for p in cmd.params:
        if isinstance(p, click.Option):
            for o in (*p.opts, *p.secondary_opts):
                opts[o] = p
    it = iter(w.strip("[]") for w in rest)
    for w in it:
        if not w.startswith("-") or re.fullmatch(r"-\d.*", w) or w in ("-", "--help"):
            continue
        name, eq, value = w.partition("=")
        assert name in opts, (
            f"{command.where}: 'genmetrics {' '.join(path)}' has no option {name!r} "
            f"(it has {sorted(o for o in opts if o.startswith('--'))})"
        )
        p = opts[name]
        if p.is_flag or p.count:
            continue
        if not eq:
            value = next(it, "")
        placeholder = value.isupper() or "..." in value or "|" in value.replace("||", "") or not value
        if isinstance(p.type, click.Choice) and not placeholder:
            assert value in p.type.choices, (
                f"{command.where}: {name} {value!r} is not one of {list(p.type.choices)}"
            )


def test_flag_check_catches_a_renamed_flag():
    (c,) = command_lines(Block("x.md", 1, [], "genmetrics train mie --data d.jsonl --stop-after 3\n"))
    with pytest.raises(AssertionError, match="no option '--stop-after'"):
        test_doc_command_flags_exist(c)
    (c,) = command_lines(Block("x.md", 1, [], "genmetrics compare --real r --kl-direction sideways\n"))
    with pytest.raises(AssertionError, match="not one of"):
        test_doc_command_flags_exist(c)
    (c,) = command_lines(
        Block("x.md", 1, [], "accelerate launch -m genmetrics train tpips \\\n  --variant late\n")
    )
    assert c.words == ["train", "tpips", "--variant", "late"]


# ----------------------------------------------------------------------------------------- python blocks
PY = {}
for _b in ALL:
    if _b.source != "README.md" and _b.info[:1] == ["python"]:
        PY.setdefault(_b.source, []).append(_b)


def _images(folder: Path, names: list[str], seed: int = 0, size: int = 40) -> None:
    from PIL import Image

    from genmetrics.testing import random_images

    for k, name in enumerate(names):
        p = folder / name
        p.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(random_images(1, size, seed=seed + k)[0].permute(1, 2, 0).numpy()).save(p)


def _given_raclip(root: Path, monkeypatch) -> dict:
    import open_clip

    from genmetrics.testing import random_images, tiny_clip

    model, tok = tiny_clip()
    monkeypatch.setattr(
        open_clip, "create_model_and_transforms", lambda name, pretrained=None, **k: (model, None, None)
    )
    monkeypatch.setattr(open_clip, "get_tokenizer", lambda name, **k: tok)
    _images(root, [f"ffhq/{i}.png" for i in range(4)], seed=10)
    _images(root, [f"stylegan2/{i}.png" for i in range(4)], seed=20)
    return {
        "real_loader": [random_images(3, 32, seed=1), random_images(2, 32, seed=2)],
        "generated_loader": [random_images(3, 32, seed=3), random_images(2, 32, seed=4)],
        "real_images": random_images(4, 32, seed=5),
        "generated_images": random_images(4, 32, seed=6),
        "images": random_images(2, 32, seed=7),
    }


def _given_tpips(root: Path, monkeypatch) -> dict:
    from genmetrics.testing import random_images, tiny_backbones
    from genmetrics.tpips import TPIPSModel

    backbone, processor = tiny_backbones("vlm", "Qwen/Qwen3-VL-Embedding-2B")
    for folder in ("runs/tpips/final", "runs/late/final"):
        TPIPSModel(backbone, processor, variant="late").save_pretrained(
            root / folder, base_weights="Qwen/Qwen3-VL-Embedding-2B"
        )
    _images(root, ["ref.png", "gen.png", "a.png", "b.png", "c.png", "q.jpg", "a.jpg", "b.jpg"], size=32)
    _images(root, [f"photos/{i}.png" for i in range(4)], seed=30, size=32)
    x = [random_images(2, 32, seed=s) for s in range(3)]
    return {
        "backbone": backbone,
        "processor": processor,
        "images_a": x[0],
        "images_b": x[1],
        "images": x[2],
        "x1": x[0],
        "x2": x[1],
        "x3": x[2],
        "aspects": ["lighting", "pose"],
    }


def _given_mie(root: Path, monkeypatch) -> dict:
    from genmetrics.mie import MIEModel
    from genmetrics.testing import tiny_backbones

    backbone, processor = tiny_backbones("vlm", "Qwen/Qwen3.5-0.8B")
    MIEModel(backbone, processor, backbone_name="Qwen/Qwen3.5-0.8B").save_pretrained(root / "runs/mie/best")
    _images(
        root,
        [
            "refs/alice.png",
            "refs/dog.png",
            "refs/bob.png",
            "refs/cat.png",
            "refs/chair.png",
            "gen/model-a/001.png",
            "gen/model-a/002.png",
        ],
        size=32,
    )
    return {
        "references": [["refs/alice.png", "refs/dog.png"]],
        "prompts": ["Alice walks the dog"],
        "candidates": ["gen/model-a/001.png"],
        "cands_a": ["gen/model-a/001.png"],
        "cands_b": ["gen/model-a/002.png"],
    }


def _given_leaderboard(root: Path, monkeypatch) -> dict:
    shutil.copytree(REPO / "examples" / "quickstart" / "data", root / "data")
    # the page's metric_kwargs example runs from the repository's root with base_dir="examples/quickstart"
    shutil.copytree(REPO / "examples" / "quickstart" / "data", root / "examples" / "quickstart" / "data")
    (root / "config.toml").write_text(
        '[data]\nreferences = "data/refs"\nprompts = "data/prompts.jsonl"\n\n[run]\nn_boot = 50\n\n'
        '[[generators]]\nname = "blur"\nimages = "data/gen/blur"\n\n[[generators]]\nname = "heavy-jpeg"\n'
        'images = "data/gen/heavy-jpeg"\n\n[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "clip_t"\n',
        encoding="utf-8",
    )
    return {}


def _given_baselines(root: Path, monkeypatch) -> dict:
    from genmetrics.testing import random_images, tiny_clip

    return {
        "images": random_images(2, 32, seed=1),
        "prompts": ["a red car", "a cat on a mat"],
        "my_open_clip_model": tiny_clip()[0],
    }


def _given_torchmetrics(root: Path, monkeypatch) -> dict:
    import lightning as L

    import genmetrics as gm

    return {"L": L, "gm": gm}


def _given_contributing(root: Path, monkeypatch) -> dict:
    from genmetrics.core import registry

    monkeypatch.setattr(registry, "_CARDS", dict(registry._CARDS))  # the page registers an example card
    monkeypatch.setattr(registry, "_ALIASES", dict(registry._ALIASES))
    return {}


#: per page: the files it names (written into the working folder) and its placeholders
GIVEN = {
    "raclip.md": _given_raclip,
    "tpips.md": _given_tpips,
    "mie.md": _given_mie,
    "leaderboard.md": _given_leaderboard,
    "baselines.md": _given_baselines,
    "torchmetrics.md": _given_torchmetrics,
    "contributing.md": _given_contributing,
    "plugins.md": _given_contributing,  # registers the example plugin's card: a copy of the registry
    "real_size.md": lambda root, monkeypatch: {},
    "performance.md": lambda root, monkeypatch: {},  # create_metric(..., precision="bf16"): nothing to give  # builds from the typed configs: nothing to give
}


def test_every_page_with_python_blocks_has_its_givens():
    assert set(PY) == set(GIVEN), "a page with Python examples needs an entry in GIVEN (and its files)"


def _check_signatures(block: Block) -> None:
    import genmetrics.functional as F

    for raw in block.body.splitlines():
        m = re.match(r"\s*(\w+)\((.*?)\)", raw)
        if not m:
            continue
        fn = getattr(F, m[1], None)
        assert callable(fn), f"{block}: genmetrics.functional has no {m[1]}"
        params = inspect.signature(fn).parameters
        for kw in re.findall(r"(\w+)=", m[2]):
            assert kw in params, f"{block}: {m[1]}() has no parameter {kw!r} (it has {list(params)})"


@pytest.mark.slow
@pytest.mark.parametrize("page", sorted(PY))
def test_doc_python_blocks_run(page, tmp_path, monkeypatch, capsys):
    import torch

    from genmetrics.backbones.provider import use_provider
    from genmetrics.testing import tiny_backbones

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("GENMETRICS_PROGRESS", "0")
    namespace = {"__name__": f"__docs_{page}__", **GIVEN[page](tmp_path, monkeypatch)}
    with use_provider(tiny_backbones):
        for block in PY[page]:
            if "signatures" in block.info:
                _check_signatures(block)
                continue
            code = block.body.replace('"cuda"', '"cpu"')
            exec(compile("\n" * block.line + code, f"docs/{page}", "exec"), namespace)
    if page == "torchmetrics.md":  # the class the page defines is a working LightningModule
        assert float(namespace["Model"]().psnr(torch.zeros(1, 3, 8, 8), torch.zeros(1, 3, 8, 8) + 0.1)) > 0


def test_signature_check_catches_a_renamed_keyword():
    with pytest.raises(AssertionError, match="no parameter 'directio'"):
        _check_signatures(
            Block("x.md", 1, ["python", "signatures"], "sad(real, gen, *, directio=1) -> [C]\n")
        )


# ----------------------------------------------------------------------------------------- named files
def named_paths() -> list[tuple[str, str]]:
    """Repository paths the docs name in code spans (``genmetrics/...``, ``tests/...::test_name``, ...)."""
    out = []
    for p in DOCS:
        text = p.read_text(encoding="utf-8")
        for m in re.finditer(r"`((?:genmetrics|tests|benchmarks|examples|docs)/[^`\s]*)`", text):
            if "<" not in m[1]:  # a template such as genmetrics/<family>/cli.py
                out.append((f"{p.name}:{text[: m.start()].count(chr(10)) + 1}", m[1]))
    return out


def test_paths_named_in_the_docs_exist():
    missing = []
    for where, path in named_paths():
        file, _, test = path.partition("::")
        target = REPO / file.rstrip("/")
        if not target.exists() or (test and f"def {test}(" not in target.read_text(encoding="utf-8")):
            missing.append(f"{where}: {path}")
    assert len(named_paths()) > 30 and not missing, missing


# ------------------------------------------------------------------------------------ benchmark commands
def benchmark_commands() -> list[tuple[str, str, list[str]]]:
    """``python benchmarks/X.py --flag ...`` in the docs (blocks and inline code): (where, script, flags)."""
    out = []
    for p in DOCS:
        for i, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1):
            for m in re.finditer(
                r"python (benchmarks/\w+\.py)((?: +--?[\w-]+(?: +[^\s`#-][^\s`#]*)?)*)", line
            ):
                out.append((f"{p.name}:{i}", m[1], re.findall(r"(?<!\S)(--?[a-z][\w-]*)", m[2])))
    return out


def test_benchmark_commands_in_the_docs_name_scripts_and_flags_that_exist():
    """A benchmark named in the docs exists and takes each flag shown (its argparse source names it)."""
    cmds = benchmark_commands()
    bad = []
    for where, script, flags in cmds:
        src = REPO / script
        if not src.is_file():
            bad.append(f"{where}: {script} does not exist")
            continue
        text = src.read_text(encoding="utf-8")
        bad += [
            f"{where}: {script} has no option {f}"
            for f in flags
            if f"'{f}'" not in text and f'"{f}"' not in text
        ]
    assert len(cmds) >= 8 and not bad, bad
