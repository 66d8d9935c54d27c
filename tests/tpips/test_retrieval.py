"""Aspect-conditioned retrieval: faiss index per aspect, cached embeddings, adjusted and compositional
queries, contact sheet, CLI; the index build reads the images through the shared input pipeline (each file
decoded once for every aspect, embeddings identical for 0 and 2 workers and to embedding the files directly,
a bad file named)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from genmetrics.data.io.images import list_images
from genmetrics.errors import GenmetricsError, InputError, MissingDependencyError
from genmetrics.testing.pil_counts import count_pil
from genmetrics.tpips.retrieval import AspectIndex, contact_sheet

from .conftest import SIZE, write_png

pytest.importorskip("faiss", reason="TPIPS retrieval needs the [retrieval] extra (faiss)")


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    d = tmp_path_factory.mktemp("gallery")
    g = torch.Generator().manual_seed(5)
    for i in range(7):
        write_png(d / f"img{i}.png", torch.randint(0, 256, (3, SIZE, SIZE), generator=g, dtype=torch.uint8))
    return d


@pytest.fixture(scope="module")
def index(tmp_path_factory, folder, models):
    return AspectIndex.build(
        folder,
        tmp_path_factory.mktemp("idx"),
        models["late"],
        ["lighting", "color"],
        batch_size=3,
        progress=False,
    )


def test_index_contents_and_cache(index, folder, models, monkeypatch):
    m = models["late"]
    assert index.aspects == ["lighting", "color", "overall"] and len(index) == 7
    emb = index.embeddings("color")
    direct = m.embed([str(p) for p in sorted(folder.iterdir())], "color").numpy()
    assert np.allclose(emb, direct, atol=1e-5)
    # rebuilding with one more aspect reuses every cached embedding: only the new aspect is computed
    calls = []
    real = m.embed
    monkeypatch.setattr(m, "embed", lambda imgs, asp: calls.append(asp) or real(imgs, asp))
    idx2 = AspectIndex.build(
        folder, index.root, m, ["lighting", "color", "texture"], batch_size=10, progress=False
    )
    new = [a for c in calls for a in (c if isinstance(c, list) else [c])]
    assert set(new) <= {"texture", "overall"} and new.count("texture") == 7
    assert np.array_equal(idx2.embeddings("color"), emb)


def test_query_single_adjusted_compositional(index, folder, models):
    m = models["late"]
    paths = [str(p) for p in sorted(folder.iterdir())]
    hits = index.search(m, paths[2], "lighting", k=3)
    assert hits[0].path == str((folder / "img2.png").resolve()) and hits[0].score == pytest.approx(
        1.0, abs=1e-5
    )
    assert [h.rank for h in hits] == [1, 2, 3] and hits[0].score >= hits[1].score >= hits[2].score
    # adjusted score f(aspect) - 0.3 f(overall), exact over the whole index
    e_l, e_o = index.embeddings("lighting"), index.embeddings("overall")
    q_l = m.embed([paths[2]], "lighting")[0].numpy()
    q_o = m.embed([paths[2]], "overall")[0].numpy()
    want = e_l @ q_l - 0.3 * (e_o @ q_o)
    adj = index.search(m, paths[2], "lighting", k=7, adjust=0.3)
    assert [h.index for h in adj] == list(np.argsort(-want, kind="stable"))
    assert adj[0].score == pytest.approx(float(want.max()), abs=1e-5)
    # compositional: sum of per-aspect similarities of two query images
    q_c = m.embed([paths[5]], "color")[0].numpy()
    comp = index.search(m, [paths[2], paths[5]], ["lighting", "color"], k=4, exclude=[paths[2], paths[5]])
    total = e_l @ q_l + index.embeddings("color") @ q_c
    total[[2, 5]] = -np.inf
    assert [h.index for h in comp] == list(np.argsort(-total, kind="stable")[:4])
    assert comp[0].terms == pytest.approx(
        [float(e_l[comp[0].index] @ q_l), float(index.embeddings("color")[comp[0].index] @ q_c)], abs=1e-5
    )


def test_errors(index, models, folder, vlm, processor):
    from genmetrics.tpips.model import TPIPSModel

    with pytest.raises(InputError, match="not in the index"):
        index.search(models["late"], str(folder / "img0.png"), "shape")
    with pytest.raises(InputError, match="late-fusion"):
        index.search(models["early"], str(folder / "img0.png"), "color")
    other = TPIPSModel(vlm, processor, "late", image_size=SIZE, prompts=("Describe {aspect}.", "Describe."))
    with pytest.raises(InputError, match="different model"):
        index.search(other, str(folder / "img0.png"), "color")
    with pytest.raises(InputError, match="not a TPIPS index"):
        AspectIndex(folder)


def test_contact_sheet(tmp_path, index, models, folder):
    from PIL import Image

    hits = index.search(models["late"], str(folder / "img1.png"), "color", k=5)
    out = contact_sheet(
        [(str(folder / "img1.png"), "color")], hits, tmp_path / "sheet.png", thumb=48, title="color"
    )
    im = Image.open(out)
    assert im.format == "PNG" and im.width > 48 * 5 and im.height > 48


def test_cli_index_and_query(tmp_path, folder, tiny_folder):
    from genmetrics.cli.main import main

    idx = tmp_path / "idx"
    assert (
        main(
            [
                "retrieve",
                "index",
                "--images",
                str(folder),
                "--index",
                str(idx),
                "--aspect",
                "lighting",
                "--weights",
                str(tiny_folder),
                "--image-size",
                str(SIZE),
            ]
        )
        == 0
    )
    out, sheet = tmp_path / "hits.json", tmp_path / "sheet.png"
    assert (
        main(
            [
                "retrieve",
                "query",
                "--index",
                str(idx),
                "--query",
                str(folder / "img3.png"),
                "--aspect",
                "lighting",
                "-k",
                "3",
                "--adjust",
                "0.3",
                "--exclude-query",
                "--sheet",
                str(sheet),
                "--out",
                str(out),
            ]
        )
        == 0
    )
    res = json.loads(out.read_text())
    assert len(res["hits"]) == 3 and all("img3" not in h["path"] for h in res["hits"]) and sheet.is_file()
    assert (
        main(
            [
                "retrieve",
                "query",
                "--index",
                str(idx),
                "--query",
                str(folder / "img3.png"),
                "--aspect",
                "shape",
            ]
        )
        == 2
    )
    assert (
        main(
            [
                "retrieve",
                "query",
                "--index",
                str(idx),
                "--query",
                str(tmp_path / "none.png"),
                "--aspect",
                "lighting",
            ]
        )
        == 2
    )


def test_index_built_with_relative_paths_works_from_another_folder(
    tmp_path, folder, tiny_folder, monkeypatch
):
    """An index built with a relative --adapter and --images stores what it needs to reload (absolute adapter,
    weights and image paths), so a query from any other folder works."""
    import shutil

    from genmetrics.cli.main import main

    from .conftest import make_triplets

    work = tmp_path / "work"
    shutil.copytree(folder, work / "imgs")
    data = make_triplets(work / "votes", n=4)
    monkeypatch.chdir(work)
    assert (
        main(
            [
                "train",
                "tpips",
                "--data",
                str(data),
                "--out",
                "run",
                "--weights",
                str(tiny_folder),
                "--max-steps",
                "1",
                "--batch-size",
                "2",
                "--micro-batch-size",
                "2",
                "--lr",
                "1e-3",
            ]
        )
        == 0
    )
    assert (
        main(
            [
                "retrieve",
                "index",
                "--images",
                "imgs",
                "--index",
                "idx",
                "--aspect",
                "lighting",
                "--adapter",
                "run/final",
            ]
        )
        == 0
    )
    info = json.loads((work / "idx" / "manifest.json").read_text())
    assert info["model"]["adapter"] == str((work / "run" / "final").resolve())
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    out = elsewhere / "hits.json"
    assert (
        main(
            [
                "retrieve",
                "query",
                "--index",
                str(work / "idx"),
                "--query",
                str(work / "imgs" / "img3.png"),
                "--aspect",
                "lighting",
                "-k",
                "2",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    hits = json.loads(out.read_text())["hits"]
    assert len(hits) == 2 and all(Path(h["path"]).is_absolute() and Path(h["path"]).is_file() for h in hits)


def test_updating_an_index_says_what_it_drops(tmp_path, folder, models, processor):
    """Building into a folder that holds an index extends it silently, but a build that would drop images,
    aspects or (another model) every embedding warns and reports it, and leaves no orphan files."""
    import warnings

    from genmetrics.testing import tiny_qwen3vl
    from genmetrics.tpips.model import TPIPSModel

    m, root = models["late"], tmp_path / "idx"
    paths = sorted(folder.iterdir())
    first = AspectIndex.build(paths[:5], root, m, ["color"], progress=False)
    assert first.build_report["updated"] is False and first.build_report["embedded_images"] == 5
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # extending (same model, more images, one more aspect): no warning
        ext = AspectIndex.build(paths, root, m, ["color", "texture"], progress=False)
    assert ext.build_report == {
        "updated": True,
        "images": 7,
        "embedded_images": 7,
        "reused_images": 5,
        "dropped_images": 0,
        "dropped_aspects": [],
        "model_changed": False,
    }
    texture = np.array(ext.embeddings("texture"))
    with pytest.warns(UserWarning, match=r"drops 4 of its 7 images .*aspect\(s\) \['color'\]"):
        cut = AspectIndex.build(paths[:3], root, m, ["texture"], progress=False)
    r = cut.build_report
    assert (r["dropped_images"], r["dropped_aspects"], r["reused_images"], r["embedded_images"]) == (
        4,
        ["color"],
        3,
        0,
    )
    assert cut.aspects == ["texture", "overall"]
    assert not [f.name for f in root.iterdir() if "color" in f.name]  # no orphan files of the dropped aspect
    assert any("texture" in f.name for f in root.iterdir())
    assert np.array_equal(cut.embeddings("texture"), texture[:3])  # the kept images' embeddings, reused
    other = TPIPSModel(tiny_qwen3vl(seed=1), processor, "late", image_size=SIZE)
    with pytest.warns(UserWarning, match="another model"):
        again = AspectIndex.build(paths[:3], root, other, ["texture"], progress=False)
    assert again.build_report["model_changed"] and again.build_report["embedded_images"] == 3


# ------------------------------------------------------------------ input pipeline
ASPECTS = ["lighting", "color"]


def test_each_file_decoded_once_and_workers_agree(tmp_path, folder, models):
    model = models["late"]
    files = list_images(folder)
    emb = {}
    for workers in (0, 2):
        with count_pil() as c:
            idx = AspectIndex.build(
                folder,
                tmp_path / f"w{workers}",
                model,
                ASPECTS,
                batch_size=3,
                progress=False,
                workers=workers,
            )
        o_lo, o_hi, d_lo, d_hi = c.per_file(files)
        assert (d_lo, d_hi) == (1, 1), f"workers={workers}: 3 aspects, one decode per file"
        assert o_hi <= 2
        emb[workers] = {a: np.asarray(idx.embeddings(a)) for a in idx.aspects}
    with torch.no_grad():  # the same embeddings as the model gives for the files themselves, batch by batch
        direct = {
            a: np.concatenate(
                [
                    model.embed(model.load_images(files[s : s + 3]), [a] * len(files[s : s + 3])).numpy()
                    for s in (0, 3, 6)
                ]
            )
            for a in emb[0]
        }
    for a in emb[0]:
        assert np.array_equal(emb[0][a], emb[2][a])
        assert np.array_equal(emb[0][a], direct[a])


def test_cli_workers(tmp_path, folder, tiny_folder):
    from genmetrics.cli.main import main

    for workers in (0, 2):
        args = ["retrieve", "index", "--images", str(folder), "--index", str(tmp_path / f"w{workers}")]
        args += ["--aspect", "lighting", "--weights", str(tiny_folder), "--image-size", str(SIZE)]
        with count_pil() as c:
            assert main([*args, "--batch-size", "2", "--workers", str(workers), "--json"]) == 0
        assert c.per_file(list_images(folder))[1:] in [(1, 1, 1), (2, 1, 1)]
    a, b = (json.loads((tmp_path / f"w{w}" / "manifest.json").read_text()) for w in (0, 2))
    assert a["fingerprint"] == b["fingerprint"]
    assert a["aspects"] == b["aspects"] and len(a["aspects"]) == 2  # lighting + overall
    for entry in a["aspects"].values():
        name = entry["embeddings"]
        assert np.array_equal(np.load(tmp_path / "w0" / name), np.load(tmp_path / "w2" / name))


@pytest.mark.parametrize("workers", [0, 2])
def test_bad_file_named(tmp_path, folder, models, workers):
    files = list_images(folder)
    bad = tmp_path / "bad.png"
    bad.write_bytes(b"not a png")
    with pytest.raises(InputError, match="bad.png"):
        AspectIndex.build(
            [*files[:4], bad, *files[4:]],
            tmp_path / "idx",
            models["late"],
            ASPECTS,
            batch_size=3,
            progress=False,
            workers=workers,
        )


# ---------------------------------------------------------------------------------- faiss is an optional extra
# faiss is the optional ``[retrieval]`` extra: not a hard dependency, and retrieval without it fails with one
# clear error that names the extra (and the faiss-gpu alternative) before any image is embedded.
try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]


def test_faiss_is_the_retrieval_extra():
    meta = tomllib.loads((Path(__file__).parents[2] / "pyproject.toml").read_text(encoding="utf-8"))[
        "project"
    ]
    assert not any(
        d.replace(" ", "").lower().startswith(("faiss-cpu", "faiss-gpu", "faiss"))
        for d in meta["dependencies"]
    )
    assert any(d.startswith("faiss-cpu") for d in meta["optional-dependencies"]["retrieval"])


def test_missing_faiss_is_one_clear_error(monkeypatch, tmp_path):
    from genmetrics.tpips import retrieval

    monkeypatch.setitem(sys.modules, "faiss", None)  # `import faiss` now raises ImportError
    with pytest.raises(MissingDependencyError) as e:
        retrieval._import_faiss()
    msg = str(e.value)
    assert "pip install 'genmetrics[retrieval]'" in msg and "faiss-gpu" in msg
    assert isinstance(e.value, ImportError) and isinstance(
        e.value, GenmetricsError
    )  # the CLI: exit 1, one line

    class Model:  # build() refuses before it embeds anything
        variant = "late"

        def embed(self, *a, **k):
            raise AssertionError("embedded an image before checking for faiss")

    (tmp_path / "imgs").mkdir()
    from PIL import Image

    Image.new("RGB", (8, 8)).save(tmp_path / "imgs" / "a.png")
    with pytest.raises(MissingDependencyError, match="genmetrics\\[retrieval\\]"):
        retrieval.AspectIndex.build(tmp_path / "imgs", tmp_path / "idx", Model(), ["color"], progress=False)
