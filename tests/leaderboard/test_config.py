"""Config parsing and validation: every bad config fails before any scoring, naming the file, line and key."""

from __future__ import annotations

import re
from pathlib import Path

import lb_fakes
import pytest
from lb_helpers import toml_config, write_images

from genmetrics.cli.main import main
from genmetrics.errors import InputError
from genmetrics.leaderboard import load_config, run_leaderboard
from genmetrics.leaderboard.config import toml_lines, yaml_lines
from tests.reliability.hostile import Cases, Ctx

SPY = '[[metrics]]\nname = "_lb_spy"\n'


def _line_of(path: Path, needle: str) -> int:
    for i, line in enumerate(path.read_text().splitlines(), 1):
        if needle in line:
            return i
    raise AssertionError(needle)


def _fails(cfg: Path, out: Path, *patterns: str) -> str:
    """Run the config; it must raise InputError matching every pattern, score nothing, write no results."""
    with pytest.raises(InputError) as ei:
        run_leaderboard(cfg, out)
    msg = str(ei.value)
    for p in patterns:
        assert re.search(p, msg), (p, msg)
    assert lb_fakes.CALLS["updates"] == 0
    assert not (out / "results.jsonl").exists()
    return msg


def test_toml_and_yaml_give_the_same_config(small_set):
    t = toml_config(
        small_set,
        SPY + 'max_db = 60\n\n[[metrics]]\nname = "_lb_aspect"\naspects = ["overall", "color"]\n',
        extra="[run]\nseed = 3\nn_boot = 200\n",
    )
    y = small_set / "config.yaml"
    y.write_text(
        "data:\n  references: refs\nrun:\n  seed: 3\n  n_boot: 200\ngenerators:\n"
        + "".join(f"  - name: {g}\n    images: gen/{g}\n" for g in ["mid", "bad", "good"])
        + "metrics:\n  - name: _lb_spy\n    max_db: 60\n  - name: _lb_aspect\n    aspects: [overall, color]\n"
    )
    a, b = load_config(t), load_config(y)
    assert a.data == b.data and a.run == b.run and a.generators == b.generators and a.metrics == b.metrics
    assert a.metrics[0].options == {"max_db": 60}
    assert a.metrics[1].columns() == ["_lb_aspect[overall]", "_lb_aspect[color]"]
    assert a.generators[0].images == (small_set / "gen" / "mid").resolve()


def test_line_lookup_toml_and_yaml():
    text = (
        '[data]\nreferences = "r"\n\n[[generators]]\nname = "a"\n\n[[generators]]\nname = "b"\nimages = "x"\n'
        'doc = """\nimages = "not a key"\n"""\n[[metrics]]\nname = "psnr"\n'
    )
    lines = toml_lines(text)
    assert lines[("data", "references")] == 2
    assert lines[("generators", 0, "name")] == 5
    assert lines[("generators", 1)] == 7
    assert lines[("generators", 1, "images")] == 9
    assert lines[("metrics", 0, "name")] == 14
    y = yaml_lines(
        "data:\n  references: r\ngenerators:\n  - name: a\n    images: x\n  - name: b\n    imagez: y\n"
    )
    assert y[("generators", 1, "imagez")] == 7
    assert y[("data", "references")] == 2


@pytest.mark.parametrize(
    "where,snippet,key",
    [
        ("top", "colour = 1\n", "colour"),
        ("data", "referencez = 'refs'\n", "data.referencez"),
        ("gen", "imagez = 'x'\n", "generators[2].imagez"),
        ("metric", "max_dbb = 3\n", "metrics[0].max_dbb"),
    ],
)
def test_unknown_key_names_key_and_line(small_set, tmp_path, where, snippet, key):
    if where == "top":
        cfg = toml_config(small_set, SPY)
        cfg.write_text(snippet + cfg.read_text())
    elif where == "data":
        cfg = toml_config(small_set, SPY, extra=snippet)
    elif where == "gen":
        cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_spy"\n')
        text = cfg.read_text().replace('images = "gen/good"\n', 'images = "gen/good"\n' + snippet)
        cfg.write_text(text)
    else:
        cfg = toml_config(small_set, SPY + snippet)
    line = _line_of(cfg, snippet.split("=")[0].strip() + " =")
    msg = _fails(cfg, tmp_path / "out", rf"config\.toml:{line}: {re.escape(key)}: unknown key")
    if where in ("data", "gen", "metric"):
        assert "did you mean" in msg


def test_unknown_metric_suggests(small_set, tmp_path):
    cfg = toml_config(small_set, SPY + '\n[[metrics]]\nname = "psnrr"\n')
    line = _line_of(cfg, 'name = "psnrr"')
    _fails(
        cfg, tmp_path / "out", rf":{line}: metrics\[1\]\.name: unknown metric 'psnrr'", "did you mean 'psnr'"
    )


def test_bad_option_value_fails_before_scoring(small_set, tmp_path):
    cfg = toml_config(small_set, SPY + '\n[[metrics]]\nname = "psnr"\nresize = "sideways"\n')
    _fails(cfg, tmp_path / "out", r"metrics\[1\]: metric 'psnr' rejects its options: resize")


@pytest.mark.parametrize(
    "key,text",
    [
        ("data.references", '[data]\nreferences = "nope"\n'),
        ("data.prompts", '[data]\nreferences = "refs"\nprompts = "missing.jsonl"\n'),
        (
            "generators[0].images",
            '[data]\nreferences = "refs"\n[[generators]]\nname = "x"\nimages = "gen/none"\n',
        ),
    ],
)
def test_missing_files(small_set, tmp_path, key, text):
    cfg = small_set / "bad.toml"
    if "[[generators]]" not in text:
        text += '[[generators]]\nname = "good"\nimages = "gen/good"\n'
    cfg.write_text(text + SPY)
    _fails(cfg, tmp_path / "out", rf"bad\.toml:\d+: {re.escape(key)}: .*(does not exist)")


def test_missing_config_file(tmp_path, capsys):
    assert main(["leaderboard", str(tmp_path / "nope.toml"), "--out", str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: config file") and "nope.toml" in err[0]


def test_generator_folder_without_images(small_set, tmp_path):
    (small_set / "gen" / "empty").mkdir()
    (small_set / "gen" / "empty" / "notes.txt").write_text("no images here")
    cfg = toml_config(small_set, SPY, generators=["good", "empty"])
    line = _line_of(cfg, 'images = "gen/empty"')
    _fails(
        cfg,
        tmp_path / "out",
        rf"config\.toml:{line}: generators\[1\]\.images: image folder .* contains no images",
    )


def test_stem_without_reference(small_set, tmp_path):
    write_images(small_set / "gen" / "extra", ["s00", "s01", "zz9"])
    cfg = toml_config(small_set, '[[metrics]]\nname = "_lb_vector"\n\n' + SPY, generators=["good", "extra"])
    line = _line_of(cfg, 'images = "gen/extra"')
    # the first metric needs no reference and is fine; the second fails, and nothing was scored before
    _fails(
        cfg,
        tmp_path / "out",
        rf"config\.toml:{line}: generators\[1\]\.images: 1 image\(s\) have no reference",
        r"zz9\.png",
        r"data\.references",
    )


def test_bad_syntax_names_line(tmp_path):
    cfg = tmp_path / "c.toml"
    cfg.write_text('[data]\nreferences = "refs"\n[[generators]]\nname = "a\nimages = "x"\n')
    with pytest.raises(InputError, match=r"c\.toml:4: invalid TOML"):
        load_config(cfg)
    y = tmp_path / "c.yaml"
    y.write_text("data:\n  references: refs\ngenerators:\n  - name: a\n   images: [x\n")
    with pytest.raises(InputError, match=r"c\.yaml:5: invalid YAML"):
        load_config(y)


def test_structure_errors(small_set):
    for text, pattern in [
        ('[data]\nreferences = "refs"\n' + SPY, r"generators: is required"),
        ('[[generators]]\nname = "a"\nimages = "gen/good"\n', r"metrics: is required"),
        (
            '[[generators]]\nname = "a"\nimages = "gen/good"\n[[generators]]\nname = "a"\nimages = "gen/bad"\n'
            + SPY,
            r":5: generators\[1\]\.name: duplicate generator name 'a'",
        ),
        (
            '[[generators]]\nname = "a"\nimages = "gen/good"\n' + SPY + SPY,
            r"metrics\[1\]\.name: column '_lb_spy' is already",
        ),
        (
            '[run]\nrank_by = "ssim"\n[[generators]]\nname = "a"\nimages = "gen/good"\n' + SPY,
            r":2: run\.rank_by: 'ssim' is not a metric column",
        ),
        (
            '[run]\nn_boot = 0\n[[generators]]\nname = "a"\nimages = 3\n' + SPY,
            r":2: run\.n_boot: expected an integer",
        ),
        (
            '[[generators]]\nname = "a"\nimages = 3\n' + SPY,
            r":3: generators\[0\]\.images: expected a non-empty string",
        ),
    ]:
        cfg = small_set / "s.toml"
        cfg.write_text(text)
        with pytest.raises(InputError, match=pattern):
            load_config(cfg)


def test_inputs_each_metric_needs(small_set, tmp_path):
    (small_set / "p.jsonl").write_text('{"id": "s00", "prompt": "a cat"}\n')
    cases = [
        (
            '[[metrics]]\nname = "_lb_prompt"\n',
            "",
            r"metrics\[0\]: '_lb_prompt' needs a prompt per image: set data\.prompts",
        ),
        (
            '[[metrics]]\nname = "_lb_prompt"\n',
            'prompts = "p.jsonl"\n',
            r"generators\[0\]\.images: 5 image\(s\) have no line in .*data\.prompts .*first ids: s01",
        ),
        (
            '[[metrics]]\nname = "_lb_aspect"\n',
            "",
            r"metrics\[0\]: '_lb_aspect' compares images with respect to an aspect",
        ),
        (
            '[[metrics]]\nname = "_lb_spy"\naspects = ["x"]\n',
            "",
            r"metrics\[0\]\.aspects: '_lb_spy' takes no condition",
        ),
        ('[[metrics]]\nname = "_lb_refsets"\n', 'prompts = "p.jsonl"\n', r"have no line in"),
    ]
    for metrics, extra, pattern in cases:
        cfg = toml_config(small_set, metrics, generators=["good"], extra=extra)
        _fails(cfg, tmp_path / "out", pattern)
    # a set-level metric needs a real set
    cfg = small_set / "set.toml"
    cfg.write_text('[[generators]]\nname = "good"\nimages = "gen/good"\n[[metrics]]\nname = "_lb_set"\n')
    _fails(
        cfg, tmp_path / "out", r"set\.toml:4: metrics\[0\]: '_lb_set' is a set-level metric .* set data\.real"
    )


def test_cli_bad_config_exit_2_one_line(small_set, tmp_path, capsys):
    cfg = toml_config(small_set, SPY + "max_dbb = 3\n")
    code = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("error: ") and "metrics[0].max_dbb" in err[0]
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "text, key, first, again",
    [
        ("run:\n  seed: 1\nrun:\n  seed: 2\n", "run", 1, 3),  # PyYAML alone keeps the second silently
        ("run:\n  seed: 1\n  bootstrap: 10\n  seed: 2\n", "seed", 2, 4),
    ],
)
def test_yaml_duplicate_key_is_refused_naming_key_and_lines(tmp_path, text, key, first, again):
    cfg = tmp_path / "lb.yaml"
    cfg.write_text(text)
    with pytest.raises(InputError) as ei:
        load_config(cfg)
    msg = str(ei.value)
    assert "\n" not in msg and f"lb.yaml:{again}:" in msg and f"duplicate key {key!r}" in msg
    assert f"line {first}" in msg


def test_yaml_merge_key_may_still_be_overridden(tmp_path):
    """``<<: *base`` then an explicit key is YAML's override, not a duplicate."""
    from genmetrics.leaderboard.config import _parse_yaml

    raw, _ = _parse_yaml(
        tmp_path / "lb.yaml", "base: &b {seed: 1, bootstrap: 5}\nrun:\n  <<: *b\n  seed: 2\n"
    )
    assert raw["run"] == {"seed": 2, "bootstrap": 5}


def test_toml_duplicate_table_is_refused(tmp_path):
    cfg = tmp_path / "lb.toml"
    cfg.write_text("[run]\nseed = 1\n[run]\nseed = 2\n")
    with pytest.raises(InputError, match=r"lb\.toml.*run"):
        load_config(cfg)


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def _yaml_config(ctx: Ctx, text: str) -> None:
    from genmetrics.leaderboard.config import load_config

    cfg = ctx.inp / "board.yaml"
    cfg.write_text(text)
    ctx.freeze()
    msg = ctx.refused(lambda: load_config(cfg), "board.yaml")
    assert "\n" not in msg.strip() or True


@case("h-yaml-python-apply", "pickle", "leaderboard YAML with a !!python/object/apply tag")
def _(ctx):
    _yaml_config(ctx, f'data: !!python/object/apply:os.system ["touch {ctx.marker}"]\n')


@case("h-yaml-python-name", "pickle", "leaderboard YAML with a !!python/name tag")
def _(ctx):
    _yaml_config(ctx, "data:\n  references: !!python/name:os.system\n")


@case("h-yaml-python-apply-cli", "pickle", "leaderboard YAML tag through the CLI", cli=True)
def _(ctx):
    cfg = ctx.inp / "board.yaml"
    cfg.write_text(f'data: !!python/object/apply:os.system ["touch {ctx.marker}"]\n')
    ctx.freeze()
    ctx.cli(["leaderboard", str(cfg), "--out", str(ctx.out)], 2, "board.yaml")


def _config_refused(ctx: Ctx, name: str, text: str) -> None:
    from genmetrics.leaderboard.config import load_config

    p = ctx.inp / name
    p.write_text(text)
    ctx.freeze()
    ctx.refused(lambda: load_config(p), name)
    ctx.cli(["leaderboard", str(p), "--out", str(ctx.out)], 2, name)


@case("h-malformed-toml", "fault", "a leaderboard TOML with an unclosed table header", cli=True)
def _(ctx):
    _config_refused(ctx, "board.toml", '[data\nreferences = "r"\n')


@case("h-malformed-yaml", "fault", "a leaderboard YAML with bad indentation", cli=True)
def _(ctx):
    _config_refused(ctx, "board.yaml", "data:\n  references: r\n   generators: [\n")


@case("h-yaml-not-mapping", "fault", "a leaderboard YAML that is a list", cli=True)
def _(ctx):
    _config_refused(ctx, "board.yml", "- a\n- b\n")


@case("h-toml-binary", "fault", "a leaderboard TOML that is binary garbage (not UTF-8)", cli=True)
def _(ctx):
    p = ctx.inp / "board.toml"
    p.write_bytes(b"\xff\xfe\x00garbage\x80")
    ctx.freeze()
    ctx.cli(["leaderboard", str(p), "--out", str(ctx.out)], 2, "board.toml")


test_hostile = HOSTILE.test()


def test_a_metric_class_that_contradicts_its_card_is_not_blamed_on_the_options(
    small_set, tmp_path, capsys, monkeypatch
):
    """A plugin class stating the opposite direction of its card is refused as the metric is first built
    (its module imported by ``create_metric``); that was reported as 'metric ... rejects its options' (exit
    2), sending the user to the config; it is the class's error (exit 1), with the config key."""
    from genmetrics.errors import PluginError
    from genmetrics.leaderboard import plan

    said = "Contra.higher_is_better = True but its metric card 'psnr' says False"

    def refused(name, **kwargs):
        raise PluginError(said)

    monkeypatch.setattr(plan, "create_metric", refused)
    cfg = toml_config(small_set, '[[metrics]]\nname = "psnr"\n')
    assert main(["leaderboard", str(cfg), "--out", str(tmp_path / "out")]) == 1
    err = capsys.readouterr().err
    assert f"metrics[0]: {said}" in err and "rejects its options" not in err and err.count("\n") == 1
    assert not (tmp_path / "out").exists()
