"""evaluate-human reads image files through the shared input pipeline: each file opened at most twice and
decoded once for every row and control, results identical for 0 and 2 workers, a bad file named."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from genmetrics.cli.main import main
from genmetrics.testing.pil_counts import count_pil

from .conftest import SIZE, make_triplets, make_two_afc


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    root = tmp_path_factory.mktemp("evalpipe")
    return make_triplets(root, n=5, sources=None), make_two_afc(root, n=6)


def _files(jsonl: Path) -> list[Path]:
    out = []
    for line in jsonl.read_text().splitlines():
        r = json.loads(line)
        out += [jsonl.parent / p for p in r.get("images", [r.get("reference"), *r.get("candidates", [])])]
    return out


def _run(data, tiny_folder, out: Path, workers: int) -> dict:
    ooo, afc = data
    args = ["evaluate-human", "tpips", "--data", str(ooo), "--data", str(afc), "--weights", str(tiny_folder)]
    args += ["--image-size", str(SIZE), "--baseline", "embedding", "--baseline", "metric:ssim", "--controls"]
    args += ["--batch-size", "2", "--out", str(out), "--workers", str(workers)]
    assert main(args) == 0
    return json.loads((out / "results.json").read_text())


def test_each_file_decoded_once_and_workers_agree(tmp_path, data, tiny_folder):
    files = _files(data[0]) + _files(data[1])
    results = {}
    for workers in (0, 2):
        with count_pil() as c:
            results[workers] = _run(data, tiny_folder, tmp_path / f"w{workers}", workers)
        o_lo, o_hi, d_lo, d_hi = c.per_file(files)
        assert (d_lo, d_hi) == (1, 1), (
            f"workers={workers}: 3 rows x (records + controls), one decode per file"
        )
        assert o_hi <= 2
    assert results[0]["models"] == results[2]["models"]  # predictions, agreement and controls, to the bit


def test_bad_file_is_named(tmp_path, data, tiny_folder, capsys):
    ooo = Path(data[0])
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    recs = [json.loads(line) for line in ooo.read_text().splitlines()]
    recs[1]["images"][2] = str(bad)
    for r in recs:
        r["images"] = [p if Path(p).is_absolute() else str(ooo.parent / p) for p in r["images"]]
    broken = tmp_path / "broken.jsonl"
    broken.write_text("".join(json.dumps(r) + "\n" for r in recs))
    for workers in (0, 2):
        args = ["evaluate-human", "tpips", "--data", str(broken), "--weights", str(tiny_folder)]
        args += [
            "--image-size",
            str(SIZE),
            "--no-model",
            "--baseline",
            "metric:ssim",
            "--workers",
            str(workers),
        ]
        assert main(args) == 2
        assert str(bad) in capsys.readouterr().err
