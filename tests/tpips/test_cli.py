"""genmetrics.tpips.cli: ``genmetrics evaluate-human tpips`` end to end, and its table is the family's
evaluation of the flags (the command module builds no scorer)."""

from __future__ import annotations

import json

from genmetrics.tpips.evaluate import evaluate_human, load_human_data, to_markdown

from .conftest import SIZE


def test_cli_evaluate(tmp_path, files, tiny_folder):
    from genmetrics.cli.main import main

    ooo, afc = files
    out = tmp_path / "report"
    rc = main(
        [
            "evaluate-human",
            "tpips",
            "--data",
            str(ooo),
            "--data",
            str(afc),
            "--weights",
            str(tiny_folder),
            "--image-size",
            str(SIZE),
            "--baseline",
            "embedding",
            "--baseline",
            "triplet",
            "--baseline",
            "metric:ssim",
            "--generative-weights",
            str(tiny_folder),
            "--out",
            str(out),
            "--limit",
            "4",
        ]
    )
    assert rc == 0
    res = json.loads((out / "results.json").read_text())
    assert [m["family"] for m in res["models"]] == [
        "Qwen3-VL-Emb (zero-shot)",
        "Qwen3-VL-Emb",
        "Qwen3-VL (triplet prompt)",
        "ssim",
    ]
    assert res["datasets"][0]["n"] == 4
    table = (out / "table.md").read_text()
    assert "| Human | consensus |" in table and "Total" in table
    assert (out / "per_sample.jsonl").read_text().count("\n") == 4 * (4 + 4)
    assert main(["evaluate-human", "tpips", "--data", str(ooo), "--baseline", "lpips-ish"]) == 2
    assert main(["evaluate-human", "tpips", "--data", str(tmp_path / "missing.jsonl")]) == 2


def test_cli_table_is_the_family_evaluation_of_the_flags(tmp_path, files, capsys):
    """``evaluate-human tpips`` only parses flags: its table is ``to_markdown(evaluate_human(datasets,
    build_scorers(...)))`` computed here through the tpips family, and the CLI module builds no scorer."""
    import genmetrics.tpips.cli as tpips_cli
    from genmetrics.cli.main import main
    from genmetrics.tpips.evaluate import build_scorers

    assert not hasattr(tpips_cli, "build_scorers")
    ooo, afc = files
    rc = main(
        ["evaluate-human", "tpips", "--data", str(ooo), "--data", str(afc), "--no-model"]
        + ["--baseline", "metric:psnr", "--baseline", "metric:ssim", "--batch-size", "3"]
    )
    assert rc == 0
    shown = capsys.readouterr().out
    scorers = build_scorers(
        adapter=None,
        variant=None,
        weights=None,
        baselines=["metric:psnr", "metric:ssim"],
        generative_weights="unused",
        include_model=False,
        batch_size=3,
    )
    datasets = [load_human_data(ooo), load_human_data(afc)]
    assert shown == to_markdown(evaluate_human(datasets, scorers))
