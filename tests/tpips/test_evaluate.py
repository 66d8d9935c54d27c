"""Human-agreement harness: statistics equal an explicit computation, Table-3 layout, loaders (JSONL,
BAPPS, NIGHTS), zero-shot baselines in the same harness (the command line: test_cli.py)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.testing import random_images, write_images
from genmetrics.tpips.evaluate import (
    SimilarityScorer,
    check_images_exist,
    evaluate_human,
    load_bapps,
    load_human_data,
    load_nights,
    to_markdown,
)

from .conftest import SIZE, write_png


def _value(path) -> float:
    return float(int(Path(path).stem.split("_")[0][1:]) * 10 + int(Path(path).stem.split("_")[1]))


def _fake(a, b, asp):
    return torch.tensor([-abs(_value(x) - _value(y)) - 0.01 * _value(y) for x, y in zip(a, b)])


def test_statistics_equal_explicit_computation(files):
    ooo, afc = (load_human_data(f) for f in files)
    assert (ooo.kind, afc.kind) == ("odd_one_out", "two_afc")
    sc = SimilarityScorer(name="fake", type="Test", family="fake", fn=_fake, batch_size=4)
    res = evaluate_human([ooo, afc], [sc])
    # explicit odd-one-out agreement
    agree = []
    for r in ooo.records:
        x = r.images
        s = [
            float(_fake([x[1]], [x[2]], None)),
            float(_fake([x[0]], [x[2]], None)),
            float(_fake([x[0]], [x[1]], None)),
        ]
        y = [v / sum(r.votes) for v in r.votes]
        agree.append(y[int(np.argmax(s))])
    got = res["models"][0]["results"]["Odd-One-Out"]["overall"]
    assert got["mean"] == pytest.approx(np.mean(agree))
    assert got["stderr"] == pytest.approx(np.std(agree, ddof=1) / np.sqrt(len(agree)))
    # explicit 2AFC agreement, overall and per source
    per: dict[str, list[float]] = {}
    for r in afc.records:
        s = [float(_fake([r.reference], [c], None)) for c in r.candidates]
        y = [v / sum(r.votes) for v in r.votes]
        per.setdefault(r.source, []).append(y[int(np.argmax(s))])
    got2 = res["models"][0]["results"]["2AFC"]
    allv = [v for vs in per.values() for v in vs]
    assert got2["overall"]["mean"] == pytest.approx(np.mean(allv))
    assert got2["per_source"]["NVS"]["mean"] == pytest.approx(np.mean(per["nvs"]))
    assert got2["per_source"]["Im-to-3D"]["n"] == len(per["im-to-3d"])
    # human consensus
    cons = [sum((v / sum(r.votes)) ** 2 for v in r.votes) for r in afc.records]
    assert res["datasets"][1]["human_consensus"]["overall"]["mean"] == pytest.approx(np.mean(cons))
    rows = res["models"][0]["per_sample"]["2AFC"]
    assert len(rows) == afc.n and {"id", "source", "aspect", "pred", "agreement"} <= rows[0].keys()


def test_markdown_like_table3(files):
    ooo, afc = (load_human_data(f) for f in files)
    res = evaluate_human(
        [ooo, afc], [SimilarityScorer(name="fake", type="Late Fusion", family="Ours", size="8B", fn=_fake)]
    )
    md = to_markdown(res).splitlines()
    assert md[0] == "| Type | Family | Size | Odd-One-Out | Editing | Composite | NVS | Im-to-3D | Total |"
    assert md[2].startswith("| Human | consensus | – | ")
    assert md[3].startswith("| Late Fusion | Ours | 8B | ")
    assert all("±" in c for c in md[3].split("|")[4:-1])


def test_bapps_and_nights_loaders(tmp_path):
    g = torch.Generator().manual_seed(0)
    img = lambda: torch.randint(0, 256, (3, 16, 16), generator=g, dtype=torch.uint8)  # noqa: E731
    for cat in ("traditional", "cnn"):
        d = tmp_path / "bapps" / "2afc" / "val" / cat
        for i in range(2):
            for s in ("ref", "p0", "p1"):
                write_png(d / s / f"{i:06d}.png", img())
            (d / "judge").mkdir(parents=True, exist_ok=True)
            np.save(d / "judge" / f"{i:06d}.npy", np.array([0.25 * (i + 1)]))
    recs = load_bapps(tmp_path / "bapps", split="val")
    assert len(recs) == 4 and {r.source for r in recs} == {"traditional", "cnn"}
    assert recs[0].aspect == "overall" and recs[0].votes == (0.75, 0.25)
    assert load_human_data(tmp_path / "bapps").kind == "two_afc"
    nd = tmp_path / "nights"
    rows = ["id,left_vote,right_vote,votes,ref_path,left_path,right_path,split,is_imagenet"]
    for i in range(4):
        for s in ("ref", "l", "r"):
            write_png(nd / "imgs" / f"{i}_{s}.png", img())
        rows.append(
            f"{i},{i % 2},{1 - i % 2},{6 if i < 3 else 4},imgs/{i}_ref.png,imgs/{i}_l.png,imgs/{i}_r.png,"
            f"{'test' if i else 'train'},{'True' if i == 1 else 'False'}"
        )
    (nd / "data.csv").write_text("\n".join(rows) + "\n")
    recs = load_nights(nd)  # test split, votes >= 6: rows 1 and 2
    assert [r.id for r in recs] == ["1", "2"] and recs[0].votes == (1.0, 0.0)
    assert recs[0].source == "imagenet"
    assert load_human_data(nd).name == "NIGHTS"
    with pytest.raises(InputError, match="no rows"):
        load_nights(nd, split="val")
    with pytest.raises(InputError, match="BAPPS"):
        load_bapps(tmp_path / "nights")


def test_zero_shot_baselines_in_harness(files, vlm, processor):
    from genmetrics.testing import tiny_qwen3vl_for_generation
    from genmetrics.tpips.evaluate import TripletScorer
    from genmetrics.tpips.model import PROMPTS, PairwiseScoreModel, TPIPSModel, TPIPSTripletModel

    ooo, afc = (load_human_data(f) for f in files)
    gen = tiny_qwen3vl_for_generation()
    emb = TPIPSModel(vlm, processor, "late", image_size=SIZE, prompts=PROMPTS["embedding_baseline"])
    scorers = [
        SimilarityScorer(name="emb", fn=emb.similarity),
        SimilarityScorer(name="pairwise", fn=PairwiseScoreModel(gen, processor, image_size=SIZE).score),
        TripletScorer(name="triplet", model=TPIPSTripletModel(gen, processor, image_size=SIZE)),
    ]
    res = evaluate_human([ooo, afc], scorers, per_sample=False)
    for m in res["models"]:
        for ds in ("Odd-One-Out", "2AFC"):
            assert 0.0 <= m["results"][ds]["overall"]["mean"] <= 1.0


# -------------------------------------------------------------------------------------- records naming folders
# A human-judgement record whose image path names a folder is told so (it read "does not exist", sending the
# user to look for a missing file that is there); a missing file still reads "does not exist".
@pytest.mark.parametrize("which", ["folder", "missing"])
def test_a_reference_that_is_not_a_file_is_named_for_what_it_is(tmp_path, which):
    a, b = write_images(tmp_path / "img", random_images(2, 32, seed=4))
    reference = tmp_path / "img" if which == "folder" else tmp_path / "gone.png"
    row = {"id": "p0", "reference": str(reference), "candidates": [str(a), str(b)], "aspect": "color"}
    (tmp_path / "d.jsonl").write_text(json.dumps({**row, "votes": [1, 2]}) + "\n")
    ds = load_human_data(tmp_path / "d.jsonl", kind="2afc")
    with pytest.raises(InputError) as e:
        check_images_exist(ds)
    said = "is a folder, not an image file" if which == "folder" else "does not exist"
    assert str(e.value).endswith(f"image file {str(reference)!r} {said}")
