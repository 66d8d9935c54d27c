"""Aspect-conditioned retrieval with late-fusion TPIPS embeddings (Section 5, Figures 7, 8, 15, 16).

An index folder holds, for each aspect, the L2-normalised embeddings of every image
(``emb_<slug>.npy``, float32 ``[N,D]``, the cache) and a faiss inner-product index over them
(``faiss_<slug>.index``), plus ``manifest.json`` (image list with size/mtime, aspects, model identity).
Each image goes through the vision tower once for all aspects (the vision cache); re-indexing reuses the
embeddings of unchanged images and of aspects already indexed.

Queries:

* one image and one aspect: the faiss top-k by ``f(q, x | c)``;
* ``adjust=0.3``: rank by ``f(q, x | c) - 0.3 f(q, x | overall)`` (the paper's Figure 7 adjustment, which
  favours images similar *only* in the aspect); needs the "overall" aspect in the index;
* compositional: several ``(query image, aspect[, weight])`` terms, ranked by the weighted sum of the
  per-aspect similarities (Figure 8).

Combined scores are exact for ``Flat`` indexes (a chunked matrix product over the cached embeddings);
for approximate faiss factories the union of each term's faiss shortlist is re-scored exactly.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from PIL import Image, ImageDraw
from tqdm.auto import tqdm

from genmetrics.data.io.images import list_images, to_pil
from genmetrics.data.io.pipeline import decoded
from genmetrics.data.io.workers import check_workers
from genmetrics.data.output.atomic import atomic_output, atomic_write_json
from genmetrics.data.output.write_rule import destination
from genmetrics.errors import InputError, MissingDependencyError
from genmetrics.tpips.common import check_aspects, is_overall

__all__ = ["AspectIndex", "Hit", "build_index", "contact_sheet", "model_fingerprint"]

INDEX_FORMAT = "genmetrics.tpips.index/1"
MANIFEST = "manifest.json"
OVERALL = "overall"
_CHUNK_ROWS = 65536


def _import_faiss() -> Any:
    """faiss (the ``[retrieval]`` extra: faiss-cpu, or a faiss-gpu build the user installed), or a clear error."""
    try:
        import faiss
    except ImportError as e:
        raise MissingDependencyError(
            f"TPIPS retrieval needs faiss, which is not installed ({e}); install the extra with "
            "`pip install 'genmetrics[retrieval]'` (faiss-cpu), or a GPU build of faiss (faiss-gpu, e.g. "
            "`conda install -c pytorch faiss-gpu`)"
        ) from None
    return faiss


def _slug(aspect: str) -> str:
    s = re.sub(r"[^a-z0-9]+", "-", aspect.strip().lower()).strip("-")[:40] or "aspect"
    return f"{s}-{hashlib.sha1(aspect.encode()).hexdigest()[:8]}"


def _stat(p: Path) -> list[Any]:
    st = p.stat()
    return [int(st.st_size), int(st.st_mtime_ns)]


def _probe_image() -> torch.Tensor:
    y, x = torch.meshgrid(torch.linspace(0, 1, 64), torch.linspace(0, 1, 64), indexing="ij")
    return torch.stack([x, y, (x * y) ** 0.5])


def model_fingerprint(model: Any) -> list[float]:
    """The first 16 values of the model's embedding of a fixed synthetic image ("overall"): identifies the
    model's behaviour (weights, adapter, prompt, image size) without hashing billions of parameters.

    >>> from genmetrics.testing import tiny_tpips
    >>> a, b = tiny_tpips(seed=0), tiny_tpips(seed=1)
    >>> len(model_fingerprint(a)), model_fingerprint(a) == model_fingerprint(a), model_fingerprint(a) == model_fingerprint(b)
    (16, True, False)
    """
    return [round(float(v), 4) for v in model.embed([_probe_image()], [OVERALL])[0, :16].tolist()]


def _check_model(model: Any) -> None:
    if getattr(model, "variant", None) != "late":
        raise InputError(
            f"retrieval needs embeddings: use a late-fusion TPIPS model (got variant="
            f"{getattr(model, 'variant', None)!r})"
        )


@dataclass
class Hit:
    """One search result: ``rank`` (1 = best), the image's ``index`` and ``path`` in the index, the combined
    ``score`` and the per-term similarities ``terms`` (one per query image / aspect).

    >>> Hit(rank=1, index=2, path="a.png", score=0.9, terms=[0.9]).to_dict()
    {'rank': 1, 'index': 2, 'path': 'a.png', 'score': 0.9, 'terms': [0.9]}
    """

    rank: int
    index: int
    path: str
    score: float
    terms: list[float] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        """The hit as a JSON-ready dict: rank, index, path, score and the per-term scores."""
        return {
            "rank": self.rank,
            "index": self.index,
            "path": self.path,
            "score": self.score,
            "terms": self.terms,
        }


class AspectIndex:
    """A folder of per-aspect embeddings and faiss indexes (see the module docstring).

    Index four images for "color" (and "overall") with the tiny late-fusion model, reopen the folder and
    query with one of the images: it finds itself first, with similarity 1:

    >>> import tempfile
    >>> from genmetrics.testing import random_images, tiny_tpips, write_images
    >>> model = tiny_tpips("late")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_images(Path(d) / "images", random_images(4, 64))
    ...     _ = AspectIndex.build(Path(d) / "images", Path(d) / "index", model, ["color"], progress=False)
    ...     index = AspectIndex(Path(d) / "index")
    ...     hits = index.search(model, paths[2], "color", k=2)
    >>> len(index), index.aspects, [(h.rank, h.index, round(h.score, 4)) for h in hits][0]
    (4, ['color', 'overall'], (1, 2, 1.0))
    """

    def __init__(self, root: str | os.PathLike):
        self.root = Path(root)
        mf = self.root / MANIFEST
        if not mf.is_file():
            raise InputError(
                f"{str(self.root)!r} is not a TPIPS index (no {MANIFEST}); build one with "
                "`genmetrics retrieve index` or AspectIndex.build"
            )
        self.manifest = json.loads(mf.read_text())
        if self.manifest.get("format") != INDEX_FORMAT:
            raise InputError(f"{mf}: unknown index format {self.manifest.get('format')!r}")
        self.paths = [str(p) for p in self.manifest["images"]]
        self._emb: dict[str, np.ndarray] = {}
        self._faiss: dict[str, Any] = {}
        self.build_report: dict[str, Any] | None = (
            None  # set by build(): what it reused, embedded and dropped
        )

    # -- building ----------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        images: Any,
        root: str | os.PathLike,
        model: Any,
        aspects: Sequence[str],
        *,
        overall: bool = True,
        batch_size: int = 32,
        factory: str = "Flat",
        recursive: bool = False,
        progress: bool = True,
        model_info: dict[str, Any] | None = None,
        workers: int | None = None,
    ) -> AspectIndex:
        """Index ``images`` (a folder or a list of image paths) for every aspect (plus "overall"). Each image
        to embed is decoded once, by the shared input pipeline in ``workers`` processes (``None``: one per
        available core but one; 0: in this process), while the model embeds the previous batch."""
        _check_model(model)
        workers = check_workers(workers)
        if isinstance(images, (str, os.PathLike)):
            files = list_images(images, recursive=recursive)
        else:
            files = [Path(p) for p in images]
            for p in files:
                if not p.is_file():
                    raise InputError(f"image file {str(p)!r} does not exist")
        files = [p.resolve() for p in files]  # the index works from any folder
        if not files:
            raise InputError("no images to index")
        asp = (
            list(dict.fromkeys(check_aspects(list(aspects), len(aspects), name="aspects"))) if aspects else []
        )
        if overall and OVERALL not in asp:
            asp.append(OVERALL)
        if not asp:
            raise InputError("aspects: give at least one aspect (or keep overall=True)")
        _import_faiss()  # before any image is embedded
        root = Path(root)
        root.mkdir(parents=True, exist_ok=True)
        probe = model.embed([_probe_image()], [OVERALL])[0]
        fp = [round(float(v), 4) for v in probe[:16].tolist()]
        paths = [str(p.resolve()) for p in files]
        stats = [_stat(p) for p in files]
        old = None
        if (root / MANIFEST).is_file():
            try:
                old = cls(root)
            except InputError:
                old = None
        reuse: dict[str, np.ndarray] = {}
        rows_old: dict[int, int] = {}
        same_model = old is not None and _same_model(old.manifest.get("fingerprint"), fp)
        if old is not None and same_model:
            where = {(p, tuple(s)): i for i, (p, s) in enumerate(zip(old.paths, old.manifest["stats"]))}
            rows_old = {
                i: where[(p, tuple(s))]
                for i, (p, s) in enumerate(zip(paths, stats))
                if (p, tuple(s)) in where
            }
            for a in asp:
                if a in old.manifest["aspects"]:
                    reuse[a] = old.embeddings(a)
        n, dim = len(paths), int(probe.shape[0])
        todo_rows = {a: [i for i in range(n) if not (a in reuse and i in rows_old)] for a in asp}
        report = _update_report(
            root,
            old,
            paths,
            asp,
            rows_old,
            same_model=same_model,
            embedded=len(set().union(*todo_rows.values())),
        )
        todo_sets = {a: set(v) for a, v in todo_rows.items()}
        out = {
            a: np.lib.format.open_memmap(
                destination(root / f".emb_{_slug(a)}.npy.tmp", root=root),
                mode="w+",
                dtype=np.float32,
                shape=(n, dim),
            )
            for a in asp
        }
        for a in asp:
            if a in reuse and rows_old:
                src = reuse[a]
                for i, j in rows_old.items():
                    out[a][i] = src[j]
        need = sorted(set().union(*todo_rows.values()))
        env = os.environ.get("GENMETRICS_PROGRESS", "")
        disable = not progress or env == "0" or (not _isatty() and env != "1")
        saved_cache = model.vision_cache.max_items
        model.vision_cache.max_items = max(saved_cache, batch_size)
        stream = decoded(
            [paths[i] for i in need], [model.input_transform], batch_size=batch_size, workers=workers
        )
        try:
            for s, batch in zip(
                tqdm(range(0, len(need), batch_size), desc="index", unit="batch", disable=disable), stream
            ):
                rows = need[s : s + batch_size]
                decoded_rows = []
                for _, o in batch:
                    if isinstance(o, Exception):  # a file that cannot be decoded stops the build, naming it
                        raise o
                    decoded_rows.append(o[0])
                imgs = model.load_images(decoded_rows)
                for a in asp:
                    sel = [k for k, i in enumerate(rows) if i in todo_sets[a]]
                    if not sel:
                        continue
                    z = model.embed([imgs[k] for k in sel], [a] * len(sel)).cpu().numpy().astype(np.float32)
                    out[a][[rows[k] for k in sel]] = z
        finally:
            stream.close()
            model.vision_cache.max_items = saved_cache
        entries = {}
        for a in asp:
            out[a].flush()
            del out[a]
            os.replace(
                root / f".emb_{_slug(a)}.npy.tmp", destination(root / f"emb_{_slug(a)}.npy", root=root)
            )
            emb = np.load(root / f"emb_{_slug(a)}.npy", mmap_mode="r")
            _write_faiss(emb, factory, root / f"faiss_{_slug(a)}.index")
            entries[a] = {"embeddings": f"emb_{_slug(a)}.npy", "faiss": f"faiss_{_slug(a)}.index"}
        manifest = {
            "format": INDEX_FORMAT,
            "images": paths,
            "stats": stats,
            "aspects": entries,
            "dim": dim,
            "factory": factory,
            "fingerprint": fp,
            "model": model_info or {},
        }
        atomic_write_json(root / MANIFEST, manifest)
        for a in report["dropped_aspects"]:  # the new manifest no longer names them: no orphan files left
            for f in (root / f"emb_{_slug(a)}.npy", root / f"faiss_{_slug(a)}.index"):
                if _slug(a) not in {_slug(b) for b in asp}:
                    f.unlink(missing_ok=True)
        idx = cls(root)
        idx.build_report = report
        return idx

    # -- access ------------------------------------------------------------------------------------
    @property
    def aspects(self) -> list[str]:
        """The aspects the index was built for, in build order."""
        return list(self.manifest["aspects"])

    def __len__(self) -> int:
        return len(self.paths)

    def entry(self, aspect: str) -> dict[str, str]:
        """The manifest entry (file names) of an indexed aspect; an aspect not in the index is an
        ``InputError`` that names the indexed ones and how to add it."""
        e = self.manifest["aspects"].get(aspect)
        if e is None:
            raise InputError(
                f"aspect {aspect!r} is not in the index {str(self.root)!r} (indexed: "
                f"{', '.join(self.aspects)}); add it with `genmetrics retrieve index --aspect ...`"
            )
        return e

    def embeddings(self, aspect: str) -> np.ndarray:
        """``[N,D]`` float32 embeddings of ``aspect`` (memory-mapped)."""
        if aspect not in self._emb:
            self._emb[aspect] = np.load(self.root / self.entry(aspect)["embeddings"], mmap_mode="r")
        return self._emb[aspect]

    def faiss_index(self, aspect: str) -> Any:
        """The faiss index of ``aspect``, read from its file on first use and kept."""
        if aspect not in self._faiss:
            faiss = _import_faiss()

            self._faiss[aspect] = faiss.read_index(str(self.root / self.entry(aspect)["faiss"]))
        return self._faiss[aspect]

    def check_model(self, model: Any) -> None:
        """Raise :class:`~genmetrics.errors.InputError` unless ``model`` (weights, adapter, prompt, image size)
        is the one the index was built with."""
        _check_model(model)
        if not _same_model(self.manifest.get("fingerprint"), model_fingerprint(model)):
            raise InputError(
                f"the index {str(self.root)!r} was built with a different model (weights, adapter, prompt "
                "or image size); query it with the same model, or rebuild the index"
            )

    # -- search ------------------------------------------------------------------------------------
    def search(
        self,
        model: Any,
        queries: Any,
        aspects: Any = None,
        *,
        k: int = 10,
        adjust: float | None = None,
        weights: Sequence[float] | None = None,
        exclude: Sequence[str] = (),
        check: bool = True,
    ) -> list[Hit]:
        """Top-``k`` images for one query (``queries`` an image, ``aspects`` a string) or a compositional
        query (lists of images and aspects of equal length, optional ``weights``).

        ``adjust``: subtract ``adjust * f(q, x | overall)`` per term (0.3 in the paper). ``exclude``: paths
        never returned (e.g. the query images themselves).
        """
        if check:
            self.check_model(model)
        if isinstance(queries, (list, tuple)) and not isinstance(queries, torch.Tensor):
            q_imgs = list(queries)
        else:
            q_imgs = [queries]
        if aspects is None:
            raise InputError(
                "aspects: give the aspect of each query image (e.g. 'lighting'; 'overall' for overall)"
            )
        asp = check_aspects(aspects, len(q_imgs))
        if not q_imgs:
            raise InputError("queries: give at least one query image")
        w = [1.0] * len(q_imgs) if weights is None else [float(x) for x in weights]
        if len(w) != len(q_imgs):
            raise InputError(f"weights: got {len(w)} weights for {len(q_imgs)} query terms")
        if k < 1:
            raise InputError(f"k must be >= 1, got {k}")
        bad = [("adjust", adjust)] if adjust is not None else []
        bad = [
            (n, v)
            for n, v in bad + [(f"weights[{i}]", x) for i, x in enumerate(w)]
            if not np.isfinite(float(v))
        ]
        if bad:  # a NaN would reach the ranking (every score NaN, the order arbitrary)
            raise InputError(
                f"{bad[0][0]}: expected a finite number, got {bad[0][1]!r}"
                + (" (0.3 in the paper)" if bad[0][0] == "adjust" else "")
            )
        for a in asp:
            self.entry(a)
        if adjust:
            self.entry(OVERALL)
        imgs = model.load_images(q_imgs, name="queries")
        qa = model.embed(imgs, asp).cpu().numpy().astype(np.float32)
        # linear combination: sum_t w_t E_{a_t} q_t  -  adjust * E_overall (sum_t w_t q_overall_t)
        combo: dict[str, np.ndarray] = {}
        for t, a in enumerate(asp):
            combo[a] = combo.get(a, 0) + w[t] * qa[t]
        if adjust:
            adj_terms = [t for t, a in enumerate(asp) if not is_overall(a)]
            if adj_terms:
                qo = model.embed([imgs[t] for t in adj_terms], [OVERALL] * len(adj_terms)).cpu().numpy()
                combo[OVERALL] = combo.get(OVERALL, 0) - float(adjust) * sum(
                    w[t] * qo[j] for j, t in enumerate(adj_terms)
                )
        excl = {str(Path(p).resolve()) for p in exclude}
        excl_idx = {i for i, p in enumerate(self.paths) if p in excl}
        n_total = len(self.paths)
        kk = min(k, n_total - len(excl_idx))
        if kk <= 0:
            return []
        if len(combo) == 1 and len(asp) == 1 and not excl_idx:
            a, q = next(iter(combo.items()))
            dist, ids = self.faiss_index(a).search(np.ascontiguousarray(q[None], dtype=np.float32), kk)
            cand, scores = ids[0].tolist(), dist[0].tolist()
            cand = [c for c in cand if c >= 0]
        else:
            if self.manifest.get("factory", "Flat") == "Flat":
                scores_all = self._exact(combo)
                if excl_idx:
                    scores_all[list(excl_idx)] = -np.inf
                top = np.argpartition(-scores_all, kk - 1)[:kk]
                top = top[np.argsort(-scores_all[top], kind="stable")]
                cand, scores = top.tolist(), scores_all[top].tolist()
            else:
                cand, scores = self._shortlist(combo, kk, excl_idx)
        hits = []
        for r, (i, s) in enumerate(zip(cand, scores)):
            terms = [float(np.dot(self.embeddings(a)[i], qa[t])) for t, a in enumerate(asp)]
            hits.append(Hit(rank=r + 1, index=int(i), path=self.paths[i], score=float(s), terms=terms))
        return hits

    def _exact(self, combo: dict[str, np.ndarray]) -> np.ndarray:
        n = len(self.paths)
        out = np.zeros(n, dtype=np.float64)
        for a, q in combo.items():
            emb = self.embeddings(a)
            q32 = np.asarray(q, dtype=np.float32)
            for s in range(0, n, _CHUNK_ROWS):
                out[s : s + _CHUNK_ROWS] += np.asarray(emb[s : s + _CHUNK_ROWS]) @ q32
        return out

    def _shortlist(
        self, combo: dict[str, np.ndarray], k: int, excl: set[int]
    ) -> tuple[list[int], list[float]]:
        depth = min(len(self.paths), max(100 * k, 1000))
        cand: set[int] = set()
        for a, q in combo.items():
            _, ids = self.faiss_index(a).search(np.ascontiguousarray(np.asarray(q, np.float32)[None]), depth)
            cand |= {int(i) for i in ids[0] if i >= 0}
        cand -= excl
        idx = np.array(sorted(cand), dtype=np.int64)
        sc = np.zeros(len(idx))
        for a, q in combo.items():
            sc += np.asarray(self.embeddings(a)[idx]) @ np.asarray(q, np.float32)
        order = np.argsort(-sc, kind="stable")[:k]
        return idx[order].tolist(), sc[order].tolist()


def _isatty() -> bool:
    return sys.stderr.isatty()


def _same_model(a: Any, b: Any, tol: float = 2e-2) -> bool:
    if not a or not b or len(a) != len(b):
        return False
    return max(abs(x - y) for x, y in zip(a, b)) <= tol


def _write_faiss(emb: np.ndarray, factory: str, path: Path) -> None:
    faiss = _import_faiss()

    d = int(emb.shape[1])
    try:
        index = faiss.index_factory(d, factory, faiss.METRIC_INNER_PRODUCT)
    except RuntimeError as e:
        raise InputError(
            f"faiss factory {factory!r} is not understood ({str(e).splitlines()[0][:120]}); use e.g. "
            "'Flat', 'HNSW32' or 'IVF1024,Flat'"
        ) from None
    if not index.is_trained:
        sample = np.asarray(emb[: min(len(emb), 100_000)], dtype=np.float32)
        index.train(sample)
    for s in range(0, len(emb), _CHUNK_ROWS):
        index.add(np.ascontiguousarray(emb[s : s + _CHUNK_ROWS], dtype=np.float32))
    with atomic_output(path) as tmp:  # the write rule (genmetrics/data/output/)
        faiss.write_index(index, str(tmp))


def _update_report(
    root: Path,
    old: AspectIndex | None,
    paths: list[str],
    aspects: list[str],
    rows_old: dict[int, int],
    *,
    same_model: bool,
    embedded: int,
) -> dict[str, Any]:
    """What a build does to the index already in ``root`` (``old``), with a warning when it removes anything:
    images of the old index that the new image list lacks, aspects not asked for again, or every embedding
    because the model changed. Extending an index (same model, a superset of images and aspects) says nothing."""
    report: dict[str, Any] = {
        "updated": old is not None,
        "images": len(paths),
        "embedded_images": embedded,
        "reused_images": len(rows_old),
        "dropped_images": 0,
        "dropped_aspects": [],
        "model_changed": False,
    }
    if old is None:
        return report
    report["dropped_images"] = len(set(old.paths) - set(paths))
    report["dropped_aspects"] = [a for a in old.aspects if a not in aspects]
    report["model_changed"] = not same_model
    lost = []
    if not same_model:
        lost.append(
            f"the embeddings of all {len(old.paths)} images (it was built with another model; every "
            "image is embedded again with this one)"
        )
    if report["dropped_images"]:
        lost.append(f"{report['dropped_images']} of its {len(old.paths)} images (not in the new image list)")
    if report["dropped_aspects"]:
        lost.append(f"the aspect(s) {report['dropped_aspects']} (not asked for again)")
    if lost:
        warnings.warn(
            f"index {str(root)!r} already exists; updating it drops "
            + "; ".join(lost)
            + ". Index into a new folder to keep the old index, or give the same images and aspects "
            "again to extend it.",
            UserWarning,
            stacklevel=3,
        )
    return report


def build_index(
    images: Any, root: str | os.PathLike, model: Any, aspects: Sequence[str], **kwargs: Any
) -> AspectIndex:
    """Shorthand for :meth:`AspectIndex.build`.

    >>> import tempfile
    >>> from genmetrics.testing import random_images, tiny_tpips, write_images
    >>> model = tiny_tpips("late")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_images(Path(d) / "images", random_images(3, 64))
    ...     index = build_index(paths, Path(d) / "index", model, ["pose of the cat"], overall=False, progress=False)
    ...     len(index), index.aspects, index.embeddings("pose of the cat").shape
    (3, ['pose of the cat'], (3, 64))
    """
    return AspectIndex.build(images, root, model, aspects, **kwargs)


def contact_sheet(
    queries: Sequence[tuple[Any, str]],
    hits: Sequence[Hit],
    out_path: str | os.PathLike,
    *,
    thumb: int = 160,
    columns: int | None = None,
    title: str | None = None,
) -> Path:
    """A PNG with the query image(s) (labelled with their aspect) on the left and the ranked results
    (rank and score under each) on the right.

    >>> import tempfile
    >>> from PIL import Image
    >>> from genmetrics.testing import random_images, write_images
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_images(d, random_images(3, 32))
    ...     hits = [Hit(rank=i + 1, index=i, path=str(p), score=1.0 - i / 10) for i, p in enumerate(paths[1:])]
    ...     sheet = contact_sheet([(paths[0], "color")], hits, Path(d) / "sheet.png", thumb=64)
    ...     Image.open(sheet).size  # query column + 2 result columns of 64 px thumbnails
    (232, 108)
    """
    out = Path(out_path)
    if out.suffix.lower() != ".png":
        raise InputError(f"sheet {str(out)!r}: the contact sheet is a PNG; name it *.png")
    shown = [p for p, _ in queries] + [h.path for h in hits]
    if any(isinstance(p, (str, os.PathLike)) and os.path.realpath(p) == os.path.realpath(out) for p in shown):
        raise InputError(
            f"sheet {str(out)!r} is one of the images it shows (a query or a result); it is never "
            "overwritten: write the sheet elsewhere"
        )
    cols = columns or min(max(1, len(hits)), 5)
    rows = max(1, -(-len(hits) // cols))
    pad, label_h = 8, 28
    cell_w, cell_h = thumb + pad, thumb + label_h + pad
    top = 24 if title else 0
    left_rows = max(rows, len(queries))
    W = pad + cell_w * (1 + cols) + pad
    H = top + pad + cell_h * max(left_rows, 1)
    sheet = Image.new("RGB", (W, H), (255, 255, 255))
    draw = ImageDraw.Draw(sheet)
    if title:
        draw.text((pad, 6), title[:200], fill=(0, 0, 0))

    def place(img: Any, x: int, y: int, text: str, color: tuple[int, int, int]) -> None:
        im = to_pil(img).convert("RGB")
        im.thumbnail((thumb, thumb))
        sheet.paste(im, (x + (thumb - im.width) // 2, y + (thumb - im.height) // 2))
        draw.rectangle([x - 1, y - 1, x + thumb, y + thumb], outline=color)
        draw.text((x, y + thumb + 3), text[: 2 * thumb // 6], fill=(0, 0, 0))

    for i, (img, aspect) in enumerate(queries):
        place(img, pad, top + pad + i * cell_h, f"query: {aspect}", (200, 30, 30))
    for j, h in enumerate(hits):
        r, c = divmod(j, cols)
        place(
            h.path,
            pad + cell_w * (1 + c),
            top + pad + r * cell_h,
            f"#{h.rank}  {h.score:.3f}",
            (120, 120, 120),
        )
    with atomic_output(out) as tmp:  # the write rule (genmetrics/data/output/)
        sheet.save(tmp, format="PNG")
    return out
