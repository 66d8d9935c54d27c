"""A control that changed no record (every record has the same reference, or the same aspect, or there is
one record) is shown as "–" in the table, not as a reading: the reading of an unchanged control equals the
real agreement, which the docs tell the reader to take as "the metric ignores that input" -- wrong for psnr,
which compares each candidate with its reference. results.json keeps the reading with ``"changed": 0``."""

from __future__ import annotations

from genmetrics.data.jsonl import TwoAFCRecord
from genmetrics.testing import random_images
from genmetrics.tpips.evaluate import CONTROLS, Dataset, MetricScorer, evaluate_human, to_markdown


def _rows(res):
    return {
        line.split(" | ")[1]: line.split(" | ")[3:] for line in to_markdown(res).splitlines() if " | " in line
    }


def test_an_unchanged_control_reads_dash(tmp_path):
    imgs = random_images(4, 32, seed=2)
    ref = imgs[0]  # one reference object for every record: the reference control can change nothing
    records = [
        TwoAFCRecord(f"p{i}", ref, (imgs[1 + i % 2], imgs[3]), a, (float(i % 2), 1.0))
        for i, a in enumerate(["color", "overall", "color", "lighting"])
    ]
    res = evaluate_human(
        [Dataset("toy", "two_afc", records)],
        [MetricScorer("psnr", metric_name="psnr")],
        progress=False,
        controls=True,
    )
    controls = res["models"][0]["controls"]
    assert controls["reference_swapped"]["toy"]["changed"] == 0  # the JSON keeps what was measured
    assert (
        controls["aspect_swapped"]["toy"]["changed"] == 4
        and controls["aspect_overall"]["toy"]["changed"] == 3
    )
    rows = _rows(res)
    assert rows[f"psnr: {CONTROLS['reference_swapped']}"] == ["– |"]
    for name in ("aspect_swapped", "aspect_overall"):  # controls that changed records keep their reading
        assert rows[f"psnr: {CONTROLS[name]}"] == rows["psnr"] != ["– |"]
    assert "changed no record" in to_markdown(res)


def test_one_record_changes_nothing(tmp_path):
    imgs = random_images(3, 32, seed=3)
    records = [TwoAFCRecord("p0", imgs[0], (imgs[1], imgs[2]), "color", (2.0, 1.0))]
    res = evaluate_human(
        [Dataset("toy", "two_afc", records)],
        [MetricScorer("psnr", metric_name="psnr")],
        progress=False,
        controls=True,
    )
    rows = _rows(res)
    assert rows[f"psnr: {CONTROLS['aspect_overall']}"] != ["– |"]  # "color" -> "overall" is a change
    for name in ("aspect_swapped", "reference_swapped"):  # no other record to take from
        assert rows[f"psnr: {CONTROLS[name]}"] == ["– |"]
