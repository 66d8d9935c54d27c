"""Weights that cannot be had are reported before open_clip or transformers' model code is imported (seconds,
not the import), and only then: a cache that may hold them, a hub that answers, a provider, a misspelt option
or a spelling the check does not judge leave the decision to the loader."""

# ruff: noqa: F811 - `dead_hub` is a fixture imported from the offline-hub tests, named again as an argument

from __future__ import annotations

import json
import os
import socket
import textwrap
from pathlib import Path

import pytest

from genmetrics.backbones import hub
from genmetrics.backbones.precheck import (
    check_metric,
    check_metric_weights,
    check_weights_available,
    hub_folder_missing,
    weights_kind,
)
from genmetrics.backbones.provider import use_provider
from genmetrics.cli.main import main
from genmetrics.cli.weights import metric_weights
from genmetrics.core.registry import alias_of, get_card, list_metrics
from genmetrics.errors import WeightsUnavailableError
from tests.cli.test_offline_hub import _closed_port, _score_args, dead_hub  # noqa: F401 - a fixture
from tests.helpers import run_python

ROOT = Path(__file__).resolve().parents[2]
WEIGHTS_METRICS = [n for n in list_metrics() if alias_of(n) is None and metric_weights(n)]
#: metrics whose weights the check judges: built from a name, no heads or adapter folder naming its own base
JUDGED = [n for n in WEIGHTS_METRICS if get_card(n).family != "mie"]
#: what a command that cannot have its weights never imports (torch: its import was most of the 3 CPU s left)
HEAVY = (
    "torch",
    "open_clip",
    "transformers.models",
    "peft",
    "matplotlib",
    "pandas",
    "accelerate",
    "PIL",
    "scipy",
)


@pytest.fixture(autouse=True)
def empty_home(monkeypatch, tmp_path):
    """Empty caches: GENMETRICS_HOME and the Hugging Face cache in the test's folder."""
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))
    return tmp_path / "home"


def offline_env(tmp_path: Path) -> dict[str, str]:
    """The environment of a fresh interpreter with empty caches in ``tmp_path`` and the hub at a closed local
    port (no GENMETRICS_, HF_ or TRANSFORMERS_ setting of this process)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("GENMETRICS_", "HF_", "TRANSFORMERS_")) and k != "PYTHONPATH"
    }
    env.update(
        GENMETRICS_HOME=str(tmp_path / "home"),
        HF_HOME=str(tmp_path / "hf"),
        HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
        PYTHONPATH=str(ROOT),
    )
    return env


def _nothing_heavy(code: str, env: dict[str, str]) -> dict:
    """Run ``code`` in a fresh interpreter; it prints one JSON object whose ``imported`` lists the heavy
    modules it imported, which must be none. Returns the rest of the object."""
    got = json.loads(run_python(code, env=env, cwd=ROOT, timeout=600).strip().splitlines()[-1])
    assert got.pop("imported") == []
    return got


def _main_each(commands: dict[str, list[str]]) -> str:
    """Code for a fresh interpreter: ``main(argv)`` of each command, its exit status and standard error in
    ``out[name]``, then the heavy modules imported in ``out["imported"]`` (the caller's code goes on and
    prints ``out`` as JSON)."""
    return textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from genmetrics.cli.main import main
        out = {{}}
        for name, argv in {commands!r}.items():
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = main(argv)
            out[name] = [rc, err.getvalue()]
        out["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or m.startswith({HEAVY!r}))
        """
    )


def _commands_and_said(code: str, env: dict[str, str]) -> tuple[dict, dict]:
    """Run :func:`_main_each` code followed by ``code``, which fills ``said`` (the checks' or loaders' words
    per command): ``(out without "imported", said)``; nothing heavy was imported by the commands."""
    got = _nothing_heavy(code + '\nout["said"] = said\nprint(json.dumps(out))\n', env)
    return got, got.pop("said")


def test_every_judged_metric_fails_without_importing_a_model_library(tmp_path):
    """One fresh interpreter scores each judged metric, then runs compare, a leaderboard and `weights download`,
    against an unreachable hub with empty caches: each exits 1 with one line naming its weights (the
    check's own words), and neither torch nor a model library was imported (what made a failing command
    take 6-9 s, then 3 CPU s of torch's import)."""
    env = offline_env(tmp_path)
    data = ROOT / "examples" / "quickstart" / "data"
    (tmp_path / "board.toml").write_text(
        f'[data]\nreferences = "{data / "refs"}"\n[[generators]]\nname = "blur"\nimages = "{data / "gen" / "blur"}"\n'
        '[[metrics]]\nname = "dino"\n[[metrics]]\nname = "clip_i"\n',
        encoding="utf-8",
    )
    code = textwrap.dedent(
        f"""
        import contextlib, io, json, sys
        from genmetrics.cli.main import main
        from tests.backbones.test_precheck import _score_args
        out = {{}}
        for name in {JUDGED!r}:
            err = io.StringIO()
            with contextlib.redirect_stderr(err):
                rc = main(_score_args(name))
            out[name] = [rc, err.getvalue()]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["compare", "--real", {str(data / "refs")!r}, "--generated", {str(data / "gen" / "blur")!r},
                       "--attributes", "celeba-20", "--out", {str(tmp_path / "cmp")!r}])
        out["compare"] = [rc, err.getvalue()]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["leaderboard", {str(tmp_path / "board.toml")!r}, "--out", {str(tmp_path / "board")!r}])
        out["leaderboard"] = [rc, err.getvalue()]
        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            rc = main(["weights", "download", "clipscore", "dino"])
        out["weights download"] = [rc, err.getvalue()]
        out["imported"] = sorted(m for m in sys.modules if m.split(".")[0] in {HEAVY!r} or m.startswith({HEAVY!r}))
        # the line each printed, as the check itself words it (computed now: still nothing heavy imported)
        from genmetrics.backbones.precheck import check_weights_available
        from genmetrics.errors import WeightsUnavailableError
        out["said"] = {{}}
        for w in ("ViT-B-32-quickgelu/openai", "facebook/dinov2-base", "Qwen/Qwen3-VL-Embedding-2B"):
            try:
                check_weights_available(w)
            except WeightsUnavailableError as e:
                out["said"][w] = str(e)
        print(json.dumps(out))
        """
    )
    got = _nothing_heavy(code, env)
    said = got.pop("said")
    rc, err = got.pop("compare")
    assert rc == 1 and err == f"error: {said['ViT-B-32-quickgelu/openai']}\n", err
    assert not (tmp_path / "cmp").exists()  # nothing locked or written
    rc, err = got.pop("leaderboard")
    assert rc == 1 and err.startswith(f"error: {tmp_path / 'board.toml'}:6: metrics[0]: "), err
    assert err.endswith(f": {said['facebook/dinov2-base']}\n") and err.count("\n") == 1, err
    rc, err = got.pop("weights download")
    assert rc == 1 and err.startswith("error: cannot download ViT-B-32-quickgelu/openai: the hub "), err
    assert "cannot be reached" in err and err.count("\n") == 1, err
    for name, (rc, err) in got.items():
        (weights,) = metric_weights(name)
        assert rc == 1 and err == f"error: {said[weights]}\n", (name, err)  # one line, the check's words
        assert "cannot be reached" in err


def test_trained_weights_that_cannot_be_had_fail_without_importing_torch(tmp_path):
    """MIE without heads, MIE heads and a TPIPS adapter given as a hub id no cache holds or a folder that does
    not exist, and a leaderboard scoring MIE without heads, against an unreachable hub with empty caches:
    each exits 1 with one line, the pre-check's words (equal to the loader's: tests/mie/test_hints.py,
    tests/tpips/test_hints.py), and torch was never imported (it took 8-15 s: torch, transformers, peft)."""
    env = offline_env(tmp_path)
    data = ROOT / "examples" / "quickstart" / "data"
    mie = _score_args("mie")
    at = mie.index("--heads")
    del mie[at : at + 2]  # without `--heads someorg/mie-heads`
    tpips = _score_args("tpips")
    (tmp_path / "board.toml").write_text(
        f'[data]\nreferences = "{data / "refs"}"\n[[generators]]\nname = "blur"\nimages = "{data / "gen" / "blur"}"\n'
        '[[metrics]]\nname = "psnr"\n[[metrics]]\nname = "mie"\n',
        encoding="utf-8",
    )
    commands = {
        "mie": mie,
        "mie org/missing": [*mie, "--heads", "org/missing"],
        "mie ./no/such": [*mie, "--heads", "./no/such"],
        "tpips org/missing": [*tpips, "--adapter", "org/missing"],
        "tpips ./no/such": [*tpips, "--adapter", "./no/such"],
        "leaderboard": ["leaderboard", str(tmp_path / "board.toml"), "--out", str(tmp_path / "board")],
    }
    code = _main_each(commands) + textwrap.dedent(
        """
        from genmetrics.errors import WeightsUnavailableError
        from genmetrics.mie.hints import precheck as mie
        from genmetrics.tpips.hints import precheck as tpips
        said = {}
        for name, check, options in [
            ("mie", mie, {}), ("mie org/missing", mie, {"heads": "org/missing"}),
            ("mie ./no/such", mie, {"heads": "./no/such"}), ("tpips org/missing", tpips, {"adapter": "org/missing"}),
            ("tpips ./no/such", tpips, {"adapter": "./no/such"}),
        ]:
            try:
                check(options)
            except WeightsUnavailableError as e:
                said[name] = str(e)
        """
    )
    got, said = _commands_and_said(code, env)
    assert sorted(said) == sorted(k for k in commands if k != "leaderboard")  # each check raised
    rc, err = got.pop("leaderboard")
    assert rc == 1 and err.startswith(f"error: {tmp_path / 'board.toml'}:") and ": metrics[1]: " in err, err
    assert err.endswith(f": {said['mie']}\n") and err.count("\n") == 1, err
    assert not (tmp_path / "board").exists()
    for name, (rc, err) in got.items():
        assert rc == 1 and err == f"error: {said[name]}\n", (name, err)
    assert (
        "cannot be reached" in said["mie org/missing"] and "`genmetrics train mie" in said["mie org/missing"]
    )


@pytest.mark.parametrize("name", JUDGED)
def test_the_check_names_what_the_loader_names(name, dead_hub, capsys):
    (weights,) = metric_weights(name)
    with pytest.raises(WeightsUnavailableError) as info:
        check_weights_available(weights)
    msg = str(info.value)
    assert f"weights {weights!r} are not available" in msg and dead_hub in msg
    assert f"`genmetrics weights download {weights}`" in msg and "GENMETRICS_HOME" in msg


def test_offline_mode_decides_without_asking_the_hub(monkeypatch, dead_hub):
    monkeypatch.setenv("GENMETRICS_OFFLINE", "1")
    monkeypatch.setattr(hub, "unreachable", lambda *a, **k: pytest.fail("the hub was asked while offline"))
    with pytest.raises(WeightsUnavailableError, match="offline mode"):
        check_weights_available("facebook/dinov2-base")


def test_a_cache_that_may_hold_them_leaves_it_to_the_loader(dead_hub, empty_home, tmp_path):
    (empty_home / "open_clip" / "x").mkdir(parents=True)
    with pytest.raises(WeightsUnavailableError):  # folders without a file hold no weights
        check_weights_available("ViT-B-32-quickgelu/openai")
    (empty_home / "open_clip" / "x" / "open_clip_model.safetensors").write_bytes(b"")
    check_weights_available("ViT-B-32-quickgelu/openai")
    with pytest.raises(WeightsUnavailableError):
        check_weights_available("facebook/dinov2-base")
    cached = tmp_path / "hf-cache" / "models--facebook--dinov2-base"
    (cached / ".no_exist" / "abc").mkdir(parents=True)  # what a lookup that found nothing leaves
    (cached / "snapshots" / "abc").mkdir(parents=True)
    with pytest.raises(WeightsUnavailableError):  # no snapshot with config.json: no model (7 s to say so)
        check_weights_available("facebook/dinov2-base")
    (cached / "snapshots" / "abc" / "config.json").write_text("{}")
    check_weights_available("facebook/dinov2-base")  # the Hugging Face cache is looked in too
    with pytest.raises(WeightsUnavailableError):
        check_weights_available("facebook/dinov2-large")


def test_a_hub_that_answers_leaves_it_to_the_loader(monkeypatch, dead_hub):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(1)
    monkeypatch.setattr("huggingface_hub.constants.ENDPOINT", f"http://127.0.0.1:{server.getsockname()[1]}")
    hub.forget()
    try:
        check_weights_available("facebook/dinov2-base")
        assert hub_folder_missing("org/mie-heads") is None  # a trained folder's hub id too
    finally:
        server.close()
        hub.forget()


def test_a_provider_or_a_local_spelling_leaves_it_to_the_loader(dead_hub, tmp_path):
    with use_provider(lambda kind, weights, **o: None):
        check_weights_available("facebook/dinov2-base")
    for spelling in ("ViT-B-32:/ckpt/w.safetensors", "./runs/a", str(tmp_path), "~/w", "a/b/c"):
        assert weights_kind(spelling) is None
        check_weights_available(spelling)


@pytest.mark.parametrize(
    "options",
    [("dino", {"wieghts": "x"}), ("dino", {"backbone": object()}), ("tpips", {"adapter": "org/adapter"})],
    ids=["misspelt", "built", "adapter"],
)
def test_options_the_check_cannot_judge_leave_it_to_create_metric(options, dead_hub):
    name, options = options
    card = get_card(name)
    check_metric_weights(card.default_weights, card.factory, options)


def test_a_misspelt_option_offline_is_reported_as_the_option(dead_hub, capsys):
    rc = main([*_score_args("dino"), "--option", "wieghts=x"])
    err = capsys.readouterr().err
    assert rc == 2 and "wieghts" in err and "not available" not in err


@pytest.mark.parametrize(
    "extra, fragment",
    [
        (["--condition", " "], "--condition[0]: the text is empty"),
        (["--condition", "a photo", "--candidates", "/no/such/folder"], "does not exist"),
        (["--condition", "a photo", "--workers", "-1"], "--workers"),
        (["--condition", "a photo", "--option", "wieghts=x"], "wieghts"),
        ([], "--condition is required"),
    ],
    ids=["empty-condition", "missing-folder", "bad-workers", "misspelt-option", "no-condition"],
)
def test_flags_and_folders_are_named_before_the_weights(extra, fragment, dead_hub, capsys):
    """`score clipscore` offline: what the command refused before the check moved ahead of torch's import
    it still names first (exit 2), not the missing weights (exit 1)."""
    rc = main(
        [
            "score",
            "clipscore",
            "--candidates",
            str(ROOT / "examples" / "quickstart" / "data" / "gen" / "blur"),
            *extra,
        ]
    )
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and "not available" not in err, err


def test_mie_without_heads_names_the_training_path_not_the_backbone(dead_hub, capsys):
    """No MIE heads are published: offline, `score mie` without --heads says how to train them (what it says
    with network) instead of asking for the backbone's weights, which alone score nothing."""
    data = ROOT / "examples" / "quickstart" / "data"
    refs = sorted((data / "refs").iterdir())[:2]
    argv = ["score", "mie", "-c", str(data / "gen" / "blur"), "--condition", "a photo"]
    rc = main([*argv, *(f"--reference={r}" for r in refs)])
    line = capsys.readouterr().err.strip()
    assert rc == 1 and line.startswith("error: the mie metric needs trained heads"), line
    assert "`genmetrics train mie" in line and "Qwen/Qwen3.5-4B" not in line and "\n" not in line


def test_a_cache_folder_that_cannot_be_listed_leaves_it_to_the_loader(dead_hub, empty_home, monkeypatch):
    """An ``open_clip`` folder without read permission (``chmod 311``: its files can still be opened by the
    path the loader builds) was walked as empty (``os.walk`` skips what it cannot list) and the weights were
    refused; a folder that does not exist is still empty."""
    with pytest.raises(WeightsUnavailableError):
        check_weights_available("ViT-B-32-quickgelu/openai")  # no open_clip folder at all
    folder = empty_home / "open_clip"
    (folder / "sub").mkdir(parents=True)
    real = os.scandir

    def unlistable(path="."):
        if Path(path) == folder / "sub":
            raise PermissionError(13, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", unlistable)
    check_weights_available("ViT-B-32-quickgelu/openai")  # returns: the loader decides


def test_a_stray_lock_file_is_no_cached_weights(dead_hub, empty_home):
    """A ``.lock`` left by an interrupted download made the check hand over to the loader (seconds of
    open_clip import for the same error); any other file still does."""
    folder = empty_home / "open_clip" / ".locks" / "models--x"
    folder.mkdir(parents=True)
    (empty_home / "open_clip" / "w.lock").touch()
    (folder / "abc.lock").touch()
    with pytest.raises(WeightsUnavailableError, match="ViT-B-32-quickgelu/openai"):
        check_weights_available("ViT-B-32-quickgelu/openai")
    (folder.parent / "partial.incomplete").touch()
    check_weights_available("ViT-B-32-quickgelu/openai")  # the loader decides


@pytest.mark.parametrize(
    "precheck", ["nowhere.at_all:check", "genmetrics.mie.hints:no_such_function", "json"]
)
def test_a_card_whose_precheck_cannot_load_is_one_plugin_error(precheck):
    """A plugin card naming a precheck that does not import was an ImportError traceback from `score`."""
    import dataclasses

    from genmetrics.errors import PluginError

    card = dataclasses.replace(get_card("psnr"), precheck=precheck)
    with pytest.raises(
        PluginError, match=f"metric 'psnr': its card's precheck '{precheck}' cannot be loaded"
    ):
        check_metric(card, {})


def test_local_weights_that_cannot_load_fail_without_importing_torch(tmp_path):
    """``--weights`` (a transformers metric), ``--heads`` and ``--adapter`` given as a local path that is a
    file, a folder without the file the loader reads first, or nothing at all: each exits 1 with the loader's
    own words, and torch was never imported (it took 6-7 s: the check left local spellings to the loader).
    An open_clip metric's ``MODEL:PATH`` whose file does not exist, or a path without its architecture, too.
    Red without the local-path checks of ``check_metric_weights``, ``mie.hints.local_heads`` and
    ``missing_folder(marker=)``."""
    env = offline_env(tmp_path)
    afile = tmp_path / "model.safetensors"
    afile.write_bytes(b"")
    bare = tmp_path / "bare"
    bare.mkdir()
    missing = str(tmp_path / "no" / "such")
    loaders = {
        "dino": "genmetrics.backbones.hf:load_auto_model",
        "mie": "genmetrics.mie.checkpoint:resolve_heads",
        "tpips": "genmetrics.tpips.adapter:adapter_folder",
    }
    flags = {"dino": "--weights", "mie": "--heads", "tpips": "--adapter"}
    commands = {}
    for name, flag in flags.items():
        args = _score_args(name)
        if flag in args:
            at = args.index(flag)
            del args[at : at + 2]
        for label, value in (("file", str(afile)), ("bare", str(bare)), ("missing", missing)):
            commands[f"{name} {label}"] = ([*args, flag, value], loaders[name], value)
    clip = "genmetrics.backbones.openclip:load_open_clip"  # an open_clip metric: MODEL:PATH
    for label, value in (("missing", f"ViT-B-32:{missing}.safetensors"), ("no architecture", missing)):
        commands[f"clip_t {label}"] = ([*_score_args("clip_t"), "--weights", value], clip, value)
    code = _main_each({k: argv for k, (argv, _, _) in commands.items()}) + textwrap.dedent(
        f"""
        import importlib
        said = {{}}
        for key, (_, loader, value) in {commands!r}.items():  # the loaders' words, torch imported now
            module, _, fn = loader.partition(":")
            try:
                getattr(importlib.import_module(module), fn)(value)
            except Exception as e:
                said[key] = [type(e).__name__, str(e)]
        """
    )
    got, said = _commands_and_said(code, env)
    assert sorted(said) == sorted(commands)  # each loader refused it
    for key, (rc, err) in got.items():
        kind, words = said[key]  # weights not available: 1; a spelling the loader cannot read: 2
        assert rc == (2 if kind == "InputError" else 1) and err == f"error: {words}\n", (key, err)
