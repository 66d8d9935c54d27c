"""``genmetrics compare`` with the tiny test backbone (GENMETRICS_BACKBONE_PROVIDER=genmetrics.testing:tiny_backbones) and its input errors."""

from __future__ import annotations

import json

import pytest
import torch
from PIL import Image

from genmetrics.cli.main import main


@pytest.fixture
def folders(tmp_path):
    g = torch.Generator().manual_seed(0)
    for d in ("real", "gen"):
        (tmp_path / d).mkdir()
    for i in range(5):
        real = torch.randint(0, 256, (40, 48, 3), generator=g, dtype=torch.uint8)
        gen = (torch.randint(0, 256, (36, 36, 3), generator=g) // 2).to(torch.uint8)
        Image.fromarray(real.numpy()).save(tmp_path / "real" / f"r{i}.png")
        Image.fromarray(gen.numpy()).save(tmp_path / "gen" / f"g{i}.jpg")
    return tmp_path


def run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_compare_writes_summary_report_and_plots(folders, capsys, monkeypatch):
    monkeypatch.setenv("GENMETRICS_BACKBONE_PROVIDER", "genmetrics.testing:tiny_backbones")
    attrs = folders / "attrs.txt"
    attrs.write_text("smiling\nwearing hat\na red car\nbangs\n")
    out = folders / "out"
    rc, stdout, err = run(
        [
            "compare",
            "--real",
            str(folders / "real"),
            "--generated",
            str(folders / "gen"),
            "--attributes",
            str(attrs),
            "--out",
            str(out),
            "--n-boot",
            "20",
            "--top",
            "3",
            "--batch-size",
            "2",
            "--json",
        ],
        capsys,
    )
    assert rc == 0, err
    summary = json.loads((out / "summary.json").read_text())
    assert json.loads(stdout)["sad"]["mean"] == pytest.approx(summary["sad"]["mean"])
    assert summary["n_real"] == 5 and summary["n_generated"] == 5
    sads = [r["sad"] for r in summary["sad"]["per_attribute"]]
    assert sads == sorted(sads, reverse=True) and len(sads) == 4
    assert summary["sad"]["mean"] == pytest.approx(sum(sads) / 4)
    lo, hi = summary["sad"]["ci95"]
    assert lo <= hi
    assert len(summary["pad"]["top_pairs"]) == 3 and summary["pad"]["ci95"] is not None
    assert summary["rsad"]["grid"] == [4, 4] and len(summary["rsad"]["ranking"]) == 4
    for f in (
        "report.md",
        "manifest.json",
        "sad_bar.png",
        "pad_bar.png",
        "rsad_heatmaps.png",
        "rsad_overlay.png",
        "attribute_maps.png",
    ):
        assert (out / f).stat().st_size > 0, f
    assert "mean SaD" in (out / "report.md").read_text()

    # the numbers equal the streaming metric on the same files
    import genmetrics as gm
    from genmetrics.testing import tiny_clip

    model, tok = tiny_clip()
    m = gm.create_metric("sad", backbone=model, tokenizer=tok, attributes=str(attrs))
    value = m.compute(sorted((folders / "real").iterdir()), sorted((folders / "gen").iterdir()))
    assert float(value["mean"]) == pytest.approx(summary["sad"]["mean"], rel=1e-5)


@pytest.mark.parametrize(
    "case, needle",
    [
        ("missing_real", "does not exist"),
        ("empty_gen", "contains no images"),
        ("bad_set", "unknown attribute set"),
        ("dup_file", "duplicate attribute"),
        ("one_image", "at least 2 images"),
    ],
)
def test_compare_input_errors_before_weights(folders, capsys, monkeypatch, case, needle):
    # no test backbone and weights that cannot exist: any error must come from input validation
    monkeypatch.delenv("GENMETRICS_BACKBONE_PROVIDER", raising=False)
    real, gen, attrs = folders / "real", folders / "gen", "celeba-20"
    if case == "missing_real":
        real = folders / "nope"
    elif case == "empty_gen":
        gen = folders / "empty"
        gen.mkdir()
    elif case == "bad_set":
        attrs = "celebb-20"
    elif case == "dup_file":
        attrs = str(folders / "dup.txt")
        (folders / "dup.txt").write_text("hat\nsmiling\nhat\n")
    elif case == "one_image":
        gen = folders / "single"
        gen.mkdir()
        Image.new("RGB", (8, 8)).save(gen / "a.png")
    rc, _, err = run(
        [
            "compare",
            "--real",
            str(real),
            "--generated",
            str(gen),
            "--attributes",
            attrs,
            "--out",
            str(folders / "o"),
            "--weights",
            "ViT-B-32/no-such-tag",
        ],
        capsys,
    )
    assert rc == 2
    assert err.startswith("error:") and needle in err and len(err.strip().splitlines()) == 1


@pytest.mark.parametrize("direction, batch", [("gen||real", 2), ("real||gen", 3)])
def test_compare_numbers_are_the_registered_metrics_on_the_same_images(
    folders, capsys, monkeypatch, direction, batch
):
    """summary.json's SaD, PaD (values, intervals, estimates) and R-SaD are what ``sad``, ``pad`` and ``rsad``
    give when they score the same files themselves (``update`` on the images, tiny backbone, same batches)."""
    import genmetrics as gm
    from genmetrics.testing import tiny_clip

    monkeypatch.setenv("GENMETRICS_BACKBONE_PROVIDER", "genmetrics.testing:tiny_backbones")
    attrs = ["smiling", "wearing hat", "a red car"]
    out = folders / "out"
    argv = ["compare", "--real", str(folders / "real"), "--generated", str(folders / "gen")]
    argv += ["--attributes", ",".join(attrs), "--out", str(out), "--kl-direction", direction]
    argv += ["--n-boot", "40", "--seed", "5", "--batch-size", str(batch)]
    rc, _, err = run(argv, capsys)
    assert rc == 0, err
    summary = json.loads((out / "summary.json").read_text())

    model, tok = tiny_clip()
    real, gen = sorted((folders / "real").iterdir()), sorted((folders / "gen").iterdir())
    opts = dict(attributes=attrs, backbone=model, tokenizer=tok, batch_size=batch)
    sad = gm.create_metric("sad", kl_direction=direction, keep_scores=True, **opts)
    pad = gm.create_metric("pad", kl_direction=direction, keep_scores=True, **opts)
    rsad = gm.create_metric("rsad", **opts)
    for m in (sad, pad, rsad):
        m.update(reference=real, candidates=gen)

    # float64 statistics of float32 scores: the same images in the same batches give the same bits
    s = sad.compute()
    got = {r["attribute"]: r["sad"] for r in summary["sad"]["per_attribute"]}
    assert got == {a: float(v) for a, v in zip(attrs, s["per_attribute"])}
    assert summary["sad"]["mean"] == float(s["mean"])
    boot = sad.bootstrap(n_boot=40, seed=5)
    assert summary["sad"]["ci95"] == boot["ci"] and summary["sad"]["estimate"] == boot["estimate"]

    p = pad.compute()
    by_pair = {tuple(pr): float(v) for pr, v in zip(pad.pairs, p["per_pair"])}
    assert summary["pad"]["mean"] == float(p["mean"])
    assert {tuple(r["pair"]): r["pad"] for r in summary["pad"]["top_pairs"]} == by_pair
    pboot = pad.bootstrap(n_boot=40, seed=5)
    assert summary["pad"]["ci95"] == pboot["ci"] and summary["pad"]["estimate"] == pboot["estimate"]

    r = rsad.compute()
    ranking = {row["attribute"]: row["mean_abs_rsad"] for row in summary["rsad"]["ranking"]}
    assert ranking == {a: float(v) for a, v in zip(attrs, r["per_attribute"])}
    assert summary["rsad"]["mean"] == float(r["mean"])


def test_compare_refuses_a_local_checkpoint_that_cannot_load_before_torch(tmp_path):
    """``compare --weights MODEL:PATH`` whose file does not exist, or a PATH without its architecture: exit 1
    (2) with the loader's words, no torch imported and no output folder (it took 6-7 s, torch and open_clip
    imported first). Red when compare checks hub weights only."""
    import textwrap

    from tests.backbones.test_precheck import _commands_and_said, _main_each, offline_env

    data = tmp_path / "imgs"
    data.mkdir()
    for i in range(2):
        Image.new("RGB", (8, 8), (40 * i, 0, 0)).save(data / f"{i}.png")
    missing = str(tmp_path / "no" / "such")
    spellings = {"missing": f"ViT-B-32:{missing}.safetensors", "no architecture": missing}
    commands = {
        k: ["compare", "--real", str(data), "--generated", str(data), "--attributes", "celeba-20", "--out",
            str(tmp_path / "out"), "--weights", v]
        for k, v in spellings.items()
    }  # fmt: skip
    code = _main_each(commands) + textwrap.dedent(
        f"""
        from genmetrics.backbones.openclip import load_open_clip
        said = {{}}
        for key, value in {spellings!r}.items():  # the loader's words, torch imported now
            try:
                load_open_clip(value)
            except Exception as e:
                said[key] = [type(e).__name__, str(e)]
        """
    )
    got, said = _commands_and_said(code, offline_env(tmp_path))
    for key, (rc, err) in got.items():
        kind, words = said[key]
        assert rc == (2 if kind == "InputError" else 1) and err == f"error: {words}\n", (key, err)
    assert not (tmp_path / "out").exists()
