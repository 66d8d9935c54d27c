"""genmetrics train mie / evaluate-human mie / rank-generators, end to end on the tiny backbone."""

import json

import pytest
from _data import eval_argv, train_argv

from genmetrics.cli.main import main
from tests.reliability.hostile import Cases


def test_train_evaluate_rank(tmp_path, pairs_file, capsys, provider):
    run = tmp_path / "run"
    rc = main(
        train_argv(
            pairs_file, run, "--tuning", "lora_layer", "--subset", "2", "--val-fraction", "0", "--lr", "1e-3"
        )
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    res = json.loads(out.out.strip().splitlines()[-1])
    ckpt = res["checkpoint"]
    assert (
        res["steps"] == 1
        and (run / "final" / "mie_weights.safetensors").is_file()
        and ckpt == str(run / "final")
    )
    run = ckpt

    ev = tmp_path / "eval"
    rc = main(eval_argv(str(pairs_file), str(run), str(ev), "--n-boot", "20", "--json"))
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert 0.0 <= json.loads(out.out)["accuracy"]["mie"] <= 1.0
    report = json.loads((ev / "report.json").read_text())
    assert report["seen_generators"] == ["gen_a", "gen_b"]  # read from the checkpoint's training.json
    assert (ev / "report.md").is_file() and (ev / "accuracy.png").is_file()

    rk = tmp_path / "rank"
    rc = main(
        [
            "rank-generators",
            "--scores",
            str(ev / "scores.jsonl"),
            "--metric",
            "mie",
            "--n-boot",
            "20",
            "--out",
            str(rk),
        ]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert "Generator ranking by mie" in out.out and (rk / "ranking.png").is_file()
    ranking = json.loads((rk / "ranking.json").read_text())
    assert set(ranking["generators"]) == {"gen_a", "gen_b"}
    rc = main(
        ["rank-generators", "--scores", str(ev / "scores.jsonl"), "--human", "--n-boot", "20", "--json"]
    )
    out = capsys.readouterr()
    assert rc == 0, out.err
    assert json.loads(out.out)["by"] == "human"


@pytest.mark.parametrize(
    "args, needle",
    [
        (["train", "mie", "--data", "{missing}", "--out", "{tmp}/x"], "does not exist"),
        (["train", "mie", "--data", "{pairs}", "--out", "{tmp}/x", "--tuning", "full"], "Invalid value"),
        (["train", "mie", "--data", "{pairs}", "--out", "{tmp}/x", "--batch-pairs", "0"], "batch_pairs"),
        (["train", "mie", "--data", "{pairs}", "--out", "{tmp}/x", "--stop-after", "3"], "No such option"),
        (["evaluate-human", "mie", "--data", "{pairs}"], "nothing to evaluate"),
        (["evaluate-human", "mie", "--data", "{pairs}", "--metrics", "psnrr"], "unknown metric"),
        (["evaluate-human", "mie", "--data", "{pairs}", "--heads", "{tmp}/none"], "genmetrics train mie"),
        (["rank-generators"], "either --scores"),
        (["rank-generators", "--scores", "{pairs}", "--metric", "mie"], "no scores for metric"),
    ],
)
def test_bad_input_exit_codes(tmp_path, pairs_file, capsys, args, needle):
    argv = [a.format(missing=tmp_path / "missing.jsonl", tmp=tmp_path, pairs=pairs_file) for a in args]
    rc = main(argv)
    err = capsys.readouterr().err.strip().splitlines()
    assert rc in (1, 2) and err and err[-1].startswith("error:") and needle in err[-1], err
    if needle != "genmetrics train mie":
        assert rc == 2


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-nboot-zero-cli",
    "silent",
    "rank-generators --n-boot 0 refused with the range",
    cli=True,
)
def _(ctx):
    p = ctx.inp / "scores.jsonl"
    p.write_text('{"generators":["a","b"],"scores":{"mie":[1.0,0.5]}}\n' * 3)
    ctx.freeze()
    ctx.cli(["rank-generators", "--scores", str(p), "--human", "--n-boot", "0"], 2, "100000")


test_hostile = HOSTILE.test()
