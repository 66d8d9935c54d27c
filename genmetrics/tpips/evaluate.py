"""Human-agreement evaluation of TPIPS and baselines (Section 5, Table 3, Table 4).

Datasets (all become :class:`~genmetrics.data.jsonl.OddOneOutRecord` or ``TwoAFCRecord`` lists):

* odd-one-out JSONL ``{"id", "images": [p1,p2,p3], "aspect", "votes": [n1,n2,n3], "source"?}``;
* 2AFC JSONL ``{"id", "reference", "candidates": [p0,p1], "aspect", "votes": [n0,n1], "source"?}``;
* a BAPPS 2AFC folder (``.../2afc/<split>/<category>/{ref,p0,p1,judge}``; ``judge/*.npy`` holds the
  fraction of raters who chose ``p1``), aspect "overall", source = category;
* a NIGHTS folder (``data.csv`` with ``ref_path,left_path,right_path,left_vote,right_vote,votes,split``),
  aspect "overall"; by default the test split and rows with ``votes >= 6`` (as DreamSim evaluates).

Scorers (one row each in the table):

* :class:`SimilarityScorer` — any pairwise similarity ``f(images_a, images_b, aspects) -> [B]``: TPIPS
  (late/mid/early, trained or zero-shot), the zero-shot Qwen3-VL-Embedding cosine baseline (App. C.3
  prompt), the pairwise 0-10 digit score (:class:`~genmetrics.tpips.model.PairwiseScoreModel`).
  Odd-one-out prediction ``s_bar_k = f(x_i, x_j)`` (the pair that leaves ``k`` out); 2AFC prediction
  ``[f(ref, c0), f(ref, c1)]``.
* :class:`TripletScorer` — :class:`~genmetrics.tpips.model.TPIPSTripletModel` (6-order odd-one-out
  probabilities; reference-in-the-centre 2AFC probabilities).
* :class:`MetricScorer` — any registered genmetrics metric (aspect-agnostic, e.g. ``dino``, ``clip_i``,
  ``ssim``), through the registry.

Statistics: :mod:`genmetrics.functional.agreement` (agreement ``y[argmax pred]``, human consensus
``sum y^2``, standard errors over records), overall and per ``source``.

Controls (``evaluate_human(..., controls=True)``, ``--controls``): the same records scored again with the
aspect replaced (by "overall", and by another record's aspect) and, for 2AFC, with another record's reference
(:func:`control_sets`); the agreement against the *original* votes, next to the real one. A metric that uses
the aspect loses agreement under the aspect controls; one that compares with the reference falls to chance
(50%) under the reference control; a reading that does not move says the metric ignores that input.
"""

from __future__ import annotations

import csv
import math
import os
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genmetrics.core.registry import create_metric, metric_info
from genmetrics.data.io.pipeline import PATHS, DecodedCache, decoded_chunks, transform_of
from genmetrics.data.jsonl import OddOneOutRecord, TwoAFCRecord, iter_jsonl, load_odd_one_out, load_two_afc
from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
from genmetrics.data.output.manifest import manifest
from genmetrics.data.output.rows import dumps_line
from genmetrics.data.text.escape import md_text
from genmetrics.errors import InputError
from genmetrics.functional.agreement import human_consensus_per_sample, mean_stderr, per_sample_agreement
from genmetrics.tpips.common import is_overall

__all__ = [
    "CONTROLS",
    "ControlSet",
    "Dataset",
    "MetricScorer",
    "SimilarityScorer",
    "TripletScorer",
    "control_sets",
    "evaluate_human",
    "load_bapps",
    "load_human_data",
    "load_nights",
    "to_markdown",
    "write_report",
]

SOURCE_NAMES = {
    "editing": "Editing",
    "edit": "Editing",
    "image_editing": "Editing",
    "img_edit": "Editing",
    "compositing": "Composite",
    "composite": "Composite",
    "image_compositing": "Composite",
    "img_composite": "Composite",
    "nvs": "NVS",
    "novel_view_synthesis": "NVS",
    "im-to-3d": "Im-to-3D",
    "im_to_3d": "Im-to-3D",
    "image-to-3d": "Im-to-3D",
    "image_to_3d": "Im-to-3D",
    "single-image-3d": "Im-to-3D",
    "single_image_3d": "Im-to-3D",
    "im2_3d": "Im-to-3D",
}
SOURCE_ORDER = ["Editing", "Composite", "NVS", "Im-to-3D"]


def source_label(source: str | None) -> str:
    if source is None:
        return "all"
    return SOURCE_NAMES.get(source.strip().lower().replace(" ", "_"), source)


@dataclass
class Dataset:
    """A named list of records of one kind (``"odd_one_out"`` or ``"two_afc"``).

    >>> from genmetrics.tpips.synthetic import aspect_triplets
    >>> records = [r for pair in aspect_triplets(2, size=32) for r in pair]  # a colour and a position record each
    >>> ds = Dataset("synthetic", "odd_one_out", records)
    >>> len(ds.records), sorted({r.aspect for r in ds.records})
    (4, ['color', 'position'])
    """

    name: str
    kind: str
    records: list[Any]
    path: str = ""

    @property
    def n(self) -> int:
        """Number of records."""
        return len(self.records)

    def votes(self) -> torch.Tensor:
        """The human votes, ``[N, 2]`` (2AFC) or ``[N, 3]`` (odd one out), float64."""
        return torch.tensor([r.votes for r in self.records], dtype=torch.float64)

    def sources(self) -> list[str]:
        """Each record's source label (its image collection), in record order."""
        return [source_label(r.source) for r in self.records]


# --------------------------------------------------------------------------------------------- loaders
def load_bapps(root: str | os.PathLike, *, split: str | None = None) -> list[TwoAFCRecord]:
    """BAPPS 2AFC (Zhang et al. 2018): every folder holding ``ref``, ``p0``, ``p1`` and ``judge`` below
    ``root`` (optionally only under a ``split`` folder, e.g. ``"val"``). ``votes = [1 - j, j]`` with ``j``
    the fraction of raters preferring ``p1``; aspect "overall"; source = the category folder name.

    >>> import tempfile
    >>> import numpy as np
    >>> from genmetrics.testing import random_images, write_images
    >>> with tempfile.TemporaryDirectory() as d:
    ...     cat = Path(d) / "val" / "cnn"
    ...     for i, part in enumerate(("ref", "p0", "p1")):
    ...         _ = write_images(cat / part, random_images(1, 16, seed=i))
    ...     (cat / "judge").mkdir()
    ...     np.save(cat / "judge" / "000.npy", np.array([0.25]))  # a quarter of raters preferred p1
    ...     records = load_bapps(d, split="val")
    >>> len(records), records[0].votes, records[0].source, records[0].aspect
    (1, (0.75, 0.25), 'cnn', 'overall')
    """
    base = Path(root)
    if not base.is_dir():
        raise InputError(f"BAPPS folder {str(base)!r} does not exist")
    dirs = sorted({p.parent for p in base.rglob("judge") if p.is_dir()})
    dirs = [d for d in dirs if all((d / s).is_dir() for s in ("ref", "p0", "p1"))]
    if split is not None:
        dirs = [d for d in dirs if split in d.relative_to(base).parts or base.name == split]
    if not dirs:
        raise InputError(
            f"{str(base)!r} holds no BAPPS 2AFC folders (a folder with ref/, p0/, p1/ and judge/)"
        )
    out: list[TwoAFCRecord] = []
    for d in dirs:
        for j in sorted((d / "judge").glob("*.npy")):
            stem = j.stem
            paths = {}
            for s in ("ref", "p0", "p1"):
                hits = sorted((d / s).glob(stem + ".*"))
                if not hits:
                    raise InputError(f"BAPPS: {d / s} has no image for judge file {j.name}")
                paths[s] = hits[0]
            val = float(np.asarray(np.load(j, allow_pickle=False), dtype=np.float64).reshape(-1)[0])
            if not 0.0 <= val <= 1.0:
                raise InputError(f"BAPPS: {j} holds {val}, expected a fraction in [0, 1]")
            votes = (1.0 - val, val)
            out.append(
                TwoAFCRecord(
                    id=f"{d.relative_to(base).as_posix()}/{stem}",
                    reference=paths["ref"],
                    candidates=(paths["p0"], paths["p1"]),
                    aspect="overall",
                    votes=votes,
                    source=d.name,
                )
            )
    if not out:
        raise InputError(f"{str(base)!r}: BAPPS folders found but no judge/*.npy files")
    return out


def load_nights(
    root: str | os.PathLike, *, split: str | None = "test", min_votes: int = 6
) -> list[TwoAFCRecord]:
    """NIGHTS (Fu et al. 2023, DreamSim): ``root/data.csv``; ``split`` in train/val/test/test_imagenet/
    test_no_imagenet or None for all; rows with fewer than ``min_votes`` (unanimous) votes dropped.
    ``votes = [left_vote, right_vote]``; aspect "overall"; source "imagenet"/"non-imagenet" when given.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "data.csv").write_text(
    ...         "id,ref_path,left_path,right_path,left_vote,right_vote,votes,split,is_imagenet\\n"
    ...         "1,r1.png,a1.png,b1.png,6,0,6,test,True\\n"
    ...         "2,r2.png,a2.png,b2.png,3,2,5,test,False\\n")  # 5 votes: not unanimous enough, dropped
    ...     records = load_nights(d)
    >>> [(r.id, r.votes, r.source, r.reference.name) for r in records]
    [('1', (6.0, 0.0), 'imagenet', 'r1.png')]
    """
    base = Path(root)
    csv_path = base / "data.csv" if base.is_dir() else base
    if not csv_path.is_file():
        raise InputError(f"NIGHTS: {str(csv_path)!r} does not exist (expected the folder holding data.csv)")
    base = csv_path.parent
    out: list[TwoAFCRecord] = []
    with open(csv_path, newline="", encoding="utf-8") as f:
        reader = csv.DictReader(f)
        need = {"ref_path", "left_path", "right_path"}
        missing = need - set(reader.fieldnames or [])
        if missing:
            raise InputError(f"NIGHTS: {csv_path} lacks columns {sorted(missing)}")
        for n, row in enumerate(reader, 2):
            if min_votes and "votes" in row and row["votes"] not in ("", None):
                if float(row["votes"]) < min_votes:
                    continue
            sp = (row.get("split") or "").strip()
            imagenet = str(row.get("is_imagenet", "")).strip().lower() in ("true", "1", "yes")
            if split is not None:
                want = {"test_imagenet": ("test", True), "test_no_imagenet": ("test", False)}.get(split)
                if want is not None:
                    if sp != want[0] or imagenet != want[1]:
                        continue
                elif sp != split:
                    continue
            try:
                lv, rv = float(row.get("left_vote") or 0), float(row.get("right_vote") or 0)
            except ValueError:
                raise InputError(f"{csv_path}:{n}: left_vote/right_vote should be numbers") from None
            if lv + rv <= 0:
                continue
            out.append(
                TwoAFCRecord(
                    id=str(row.get("id") or n),
                    reference=base / row["ref_path"],
                    candidates=(base / row["left_path"], base / row["right_path"]),
                    aspect="overall",
                    votes=(lv, rv),
                    source=("imagenet" if imagenet else "non-imagenet") if "is_imagenet" in row else None,
                )
            )
    if not out:
        raise InputError(f"NIGHTS: no rows left in {csv_path} for split={split!r} and min_votes={min_votes}")
    return out


def _detect_jsonl(path: Path) -> str:
    for _, obj in iter_jsonl(path):
        if "images" in obj:
            return "odd_one_out"
        if "reference" in obj and "candidates" in obj:
            return "two_afc"
        raise InputError(
            f"{path}: cannot tell the format from the first record (keys {sorted(obj)}); expected "
            "odd-one-out {'images', 'aspect', 'votes'} or 2AFC {'reference', 'candidates', 'aspect', "
            "'votes'}"
        )
    raise InputError(f"{path}: no records")


def load_human_data(
    path: str | os.PathLike, *, kind: str = "auto", split: str | None = None, name: str | None = None
) -> Dataset:
    """Load an evaluation set: ``kind`` in ``auto``, ``odd-one-out``, ``2afc``, ``bapps``, ``nights``.

    >>> import json, tempfile
    >>> from genmetrics.testing import random_images, write_images
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = [str(p) for p in write_images(d, random_images(3, 16))]
    ...     row = {"id": "t1", "images": paths, "aspect": "color", "votes": [0, 1, 4]}
    ...     _ = (Path(d) / "triplets.jsonl").write_text(json.dumps(row) + "\\n")
    ...     ds = load_human_data(Path(d) / "triplets.jsonl")  # the format is detected
    >>> ds.name, ds.kind, ds.records[0].votes
    ('Odd-One-Out', 'odd_one_out', (0.0, 1.0, 4.0))
    """
    p = Path(path)
    k = kind.lower().replace("_", "-")
    if k == "auto":
        if p.is_dir():
            k = "nights" if (p / "data.csv").is_file() else "bapps"
        elif p.suffix.lower() == ".csv":
            k = "nights"
        else:
            if not p.exists():
                raise InputError(f"data file {str(p)!r} does not exist; check the path")
            k = "odd-one-out" if _detect_jsonl(p) == "odd_one_out" else "2afc"
    if k == "odd-one-out":
        recs: list[Any] = load_odd_one_out(p)
        kd = "odd_one_out"
    elif k == "2afc":
        recs, kd = load_two_afc(p), "two_afc"
    elif k == "bapps":
        recs, kd = load_bapps(p, split=split), "two_afc"
    elif k == "nights":
        recs, kd = load_nights(p, split=split or "test"), "two_afc"
    else:
        raise InputError(f"format {kind!r}: expected auto, odd-one-out, 2afc, bapps or nights")
    label = name or (
        "Odd-One-Out" if kd == "odd_one_out" else {"bapps": "BAPPS", "nights": "NIGHTS"}.get(k, "2AFC")
    )
    return Dataset(name=label, kind=kd, records=recs, path=str(p))


def check_images_exist(ds: Dataset) -> None:
    for r in ds.records:
        paths = list(r.images) if ds.kind == "odd_one_out" else [r.reference, *r.candidates]
        for q in paths:
            if not Path(q).is_file():
                why = "is a folder, not an image file" if Path(q).is_dir() else "does not exist"
                raise InputError(f"{ds.path}: record {r.id!r}: image file {str(q)!r} {why}")


# --------------------------------------------------------------------------------------------- scorers
@dataclass
class Scorer:
    """A row of the table: predictions for odd-one-out (``[N,3]``) and 2AFC (``[N,2]``) records."""

    name: str
    type: str = ""
    family: str = ""
    size: str = "–"
    batch_size: int = 16

    def odd_one_out(self, records: Sequence[OddOneOutRecord]) -> torch.Tensor:
        """``[N,3]`` predictions for odd-one-out ``records``: per record, a higher value for the image more
        likely to be the odd one (its argmax is the row's choice). Subclasses implement it."""
        raise NotImplementedError

    def two_afc(self, records: Sequence[TwoAFCRecord]) -> torch.Tensor:
        """``[N,2]`` predictions for 2AFC ``records``: per record, a higher value for the candidate more
        similar to the reference. Subclasses implement it."""
        raise NotImplementedError

    def supports(self, kind: str) -> bool:
        """Whether this row scores records of ``kind`` (``"odd_one_out"`` or ``"two_afc"``); a row that does not
        has no result for datasets of that kind. All kinds unless a subclass says otherwise."""
        return True

    def input_transform(self) -> Any:
        """What the input pipeline's workers do per image file for this row: the metric's or model's own
        ``input_transform``; :data:`PATHS` (the row is given the file paths and reads the files itself) for a
        plain similarity function."""
        metric = getattr(self, "_metric", None)
        if metric is not None:
            return transform_of(metric)
        for owner in (getattr(self, "model", None), _owner(self)):
            if getattr(owner, "input_transform", None) is not None:
                return transform_of(owner)
        return PATHS


def _owner(sc: Scorer) -> Any:
    """The object a similarity function is a bound method of (the model behind a row), if any."""
    return getattr(getattr(sc, "fn", None), "__self__", None)


@dataclass
class SimilarityScorer(Scorer):
    """Rows from a pairwise similarity ``fn(images_a, images_b, aspects) -> [B]`` (higher = more similar).

    The odd-one-out prediction for image ``k`` is the similarity of the other two; a triplet ``(x, x, y)``:

    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> from genmetrics.testing import random_images
    >>> x, y = random_images(2, 32, seed=1)
    >>> record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    >>> neg_l1 = SimilarityScorer("neg-l1", fn=lambda a, b, aspects: -torch.stack(
    ...     [(p.float() - q.float()).abs().mean() for p, q in zip(a, b)]))
    >>> int(neg_l1.odd_one_out([record]).argmax())
    2
    """

    fn: Callable[[list[Any], list[Any], list[str]], torch.Tensor] | None = None
    odd_one_out_ok: bool = True

    def _f(self, a: list[Any], b: list[Any], asp: list[str]) -> torch.Tensor:
        assert self.fn is not None
        with torch.no_grad():
            return torch.as_tensor(self.fn(a, b, asp)).double().cpu().reshape(-1)

    def odd_one_out(self, records: Sequence[OddOneOutRecord]) -> torch.Tensor:
        """``[N, 3]`` predictions for odd-one-out ``records``: column ``k`` is the similarity of the two other
        images (higher: ``k`` more likely the odd one)."""
        outs = []
        for i in range(0, len(records), self.batch_size):
            rs = records[i : i + self.batch_size]
            x1, x2, x3 = ([r.images[k] for r in rs] for k in range(3))
            asp = [r.aspect for r in rs]
            n = len(rs)
            s = self._f(x2 + x1 + x1, x3 + x3 + x2, asp * 3)  # one call: the model dedups each image
            outs.append(torch.stack([s[:n], s[n : 2 * n], s[2 * n :]], 1))
        return torch.cat(outs)

    def two_afc(self, records: Sequence[TwoAFCRecord]) -> torch.Tensor:
        """``[N, 2]`` similarities of each record's reference to its two candidates."""
        outs = []
        for i in range(0, len(records), self.batch_size):
            rs = records[i : i + self.batch_size]
            n = len(rs)
            ref = [r.reference for r in rs]
            s = self._f(
                ref + ref,
                [r.candidates[0] for r in rs] + [r.candidates[1] for r in rs],
                [r.aspect for r in rs] * 2,
            )
            outs.append(torch.stack([s[:n], s[n:]], 1))
        return torch.cat(outs)

    def supports(self, kind: str) -> bool:
        """Whether this scorer answers records of ``kind`` (``"two_afc"`` or ``"odd_one_out"``)."""
        return kind != "odd_one_out" or self.odd_one_out_ok


@dataclass
class TripletScorer(Scorer):
    """Rows from a :class:`~genmetrics.tpips.model.TPIPSTripletModel`.

    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> from genmetrics.testing import random_images
    >>> x, y = random_images(2, 32, seed=1)
    >>> record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    >>> from genmetrics.testing import tiny_qwen3vl_for_generation, tiny_qwen3vl_processor
    >>> from genmetrics.tpips import TPIPSTripletModel
    >>> model = TPIPSTripletModel(tiny_qwen3vl_for_generation(), tiny_qwen3vl_processor(), image_size=64)
    >>> p = TripletScorer("triplet", model=model).odd_one_out([record])
    >>> tuple(p.shape), round(float(p.sum()), 6)
    ((1, 3), 1.0)
    """

    model: Any = None
    two_afc_ok: bool = True

    def odd_one_out(self, records: Sequence[OddOneOutRecord]) -> torch.Tensor:
        """``[N, 3]`` float64 probabilities that each image of a record is the odd one out, from the model's
        triplet head."""
        outs = []
        for i in range(0, len(records), self.batch_size):
            rs = records[i : i + self.batch_size]
            outs.append(
                self.model.odd_one_out(*([r.images[k] for r in rs] for k in range(3)), [r.aspect for r in rs])
                .double()
                .cpu()
            )
        return torch.cat(outs)

    def two_afc(self, records: Sequence[TwoAFCRecord]) -> torch.Tensor:
        """``[N, 2]`` float64 predictions of which candidate is closer to the reference, from the model's triplet
        head."""
        outs = []
        for i in range(0, len(records), self.batch_size):
            rs = records[i : i + self.batch_size]
            outs.append(
                self.model.two_afc(
                    [r.reference for r in rs],
                    [r.candidates[0] for r in rs],
                    [r.candidates[1] for r in rs],
                    [r.aspect for r in rs],
                )
                .double()
                .cpu()
            )
        return torch.cat(outs)

    def supports(self, kind: str) -> bool:
        """Whether this scorer answers records of ``kind`` (``"two_afc"`` or ``"odd_one_out"``)."""
        return kind != "two_afc" or self.two_afc_ok


@dataclass
class MetricScorer(SimilarityScorer):
    """Rows from a registered genmetrics metric (aspect-agnostic; reached through the registry).

    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> from genmetrics.testing import random_images
    >>> x, y = random_images(2, 32, seed=1)
    >>> record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    >>> MetricScorer("psnr", metric_name="psnr").odd_one_out([record])[0].tolist()[2]  # x vs x: max_db
    100.0
    """

    metric_name: str = ""
    options: dict[str, Any] = field(default_factory=dict)
    _metric: Any = None

    def __post_init__(self) -> None:
        info = metric_info(self.metric_name)
        sign = -1.0 if info.get("higher_is_better") is False else 1.0
        self._metric = create_metric(self.metric_name, **self.options)

        def fn(a: list[Any], b: list[Any], asp: list[str]) -> torch.Tensor:
            m = self._metric
            m.reset()
            m.update(reference=a, candidates=b)
            s = m.per_sample()["scores"]
            return sign * s.reshape(s.shape[0], -1)[:, 0]

        self.fn = fn


# --------------------------------------------------------------------------------------------- controls
#: control name -> what it changes (the table's label)
CONTROLS = {
    "aspect_overall": "aspect -> overall",
    "aspect_swapped": "aspect of another record",
    "reference_swapped": "reference of another record",
}


@dataclass
class ControlSet:
    """One control of a dataset: the same records with one input replaced. ``source[i]`` is the record whose
    aspect or reference record ``i`` now carries (``i`` itself where nothing could be changed: every other
    record has the same value; ``-1`` for the fixed aspect "overall"); ``changed`` counts the records that
    differ from the original.

    >>> from genmetrics.data.jsonl import TwoAFCRecord
    >>> recs = [TwoAFCRecord(id=str(i), reference=f"r{i}.png", candidates=("a.png", "b.png"), aspect="color",
    ...                      votes=(1.0, 0.0)) for i in range(3)]
    >>> swapped = {c.name: c for c in control_sets(Dataset("toy", "two_afc", recs))}["reference_swapped"]
    >>> [r.reference for r in swapped.dataset.records], swapped.source, swapped.changed
    (['r1.png', 'r2.png', 'r0.png'], [1, 2, 0], 3)
    """

    name: str
    dataset: Dataset
    source: list[int]

    @property
    def changed(self) -> int:
        """Number of records whose aspect or reference differs from the original dataset's."""
        return sum(1 for i, j in enumerate(self.source) if i != j)


def _identity(x: Any) -> Any:
    """What makes two inputs "the same" for a control: a path by its text, an in-memory image by object."""
    return str(x) if isinstance(x, (str, os.PathLike)) else id(x)


def _another(values: list[Any], i: int) -> int:
    """The next record (cyclically) whose value differs from record ``i``'s; ``i`` when there is none."""
    n = len(values)
    for step in range(1, n):
        j = (i + step) % n
        if values[j] != values[i]:
            return j
    return i


def control_sets(ds: Dataset) -> list[ControlSet]:
    """The controls of a dataset: ``aspect_overall`` (every aspect "overall"), ``aspect_swapped`` (each record
    takes the aspect of the next record with a different one), and for 2AFC ``reference_swapped`` (each record
    takes the reference of the next record with a different one). Votes stay the original ones.

    >>> from genmetrics.tpips.synthetic import aspect_triplets
    >>> records = [r for pair in aspect_triplets(2, size=32) for r in pair]  # color, position, color, position
    >>> [(c.name, [r.aspect for r in c.dataset.records]) for c in control_sets(Dataset("s", "odd_one_out", records))]
    [('aspect_overall', ['overall', 'overall', 'overall', 'overall']), ('aspect_swapped', ['position', 'color', 'position', 'color'])]
    """
    recs = list(ds.records)
    overall = [i if is_overall(r.aspect) else -1 for i, r in enumerate(recs)]
    out = [
        ControlSet(
            "aspect_overall", replace(ds, records=[replace(r, aspect="overall") for r in recs]), overall
        )
    ]
    aspects = [r.aspect for r in recs]
    src = [_another(aspects, i) for i in range(len(recs))]
    out.append(
        ControlSet(
            "aspect_swapped",
            replace(ds, records=[replace(r, aspect=aspects[j]) for r, j in zip(recs, src)]),
            src,
        )
    )
    if ds.kind == "two_afc":
        refs = [_identity(r.reference) for r in recs]
        src = [_another(refs, i) for i in range(len(recs))]
        out.append(
            ControlSet(
                "reference_swapped",
                replace(ds, records=[replace(r, reference=recs[j].reference) for r, j in zip(recs, src)]),
                src,
            )
        )
    return out


# --------------------------------------------------------------------------------------------- statistics
def _stats(agree: torch.Tensor) -> dict[str, Any]:
    mean, se = mean_stderr(agree)
    return {"mean": mean, "stderr": se, "n": int(agree.numel())}


def _breakdown(values: torch.Tensor, sources: list[str]) -> dict[str, Any]:
    out = {"overall": _stats(values)}
    uniq = sorted(set(sources), key=lambda s: (SOURCE_ORDER.index(s) if s in SOURCE_ORDER else 99, s))
    if len(uniq) > 1 or (uniq and uniq[0] != "all"):
        idx = {s: [i for i, x in enumerate(sources) if x == s] for s in uniq}
        out["per_source"] = {s: _stats(values[ix]) for s, ix in idx.items()}
    return out


def _predict(sc: Scorer, ds: Dataset) -> torch.Tensor:
    pred = sc.odd_one_out(ds.records) if ds.kind == "odd_one_out" else sc.two_afc(ds.records)
    if pred.shape != (ds.n, 3 if ds.kind == "odd_one_out" else 2):
        raise RuntimeError(
            f"scorer {sc.name!r} returned predictions of shape {tuple(pred.shape)} for {ds.n} {ds.kind} records"
        )
    return pred


def _record_files(r: Any) -> list[Any]:
    images = list(r.images) if isinstance(r, OddOneOutRecord) else [r.reference, *r.candidates]
    return [x for x in images if isinstance(x, (str, os.PathLike))]


def _with_images(r: Any, cache: DecodedCache, k: int) -> Any:
    """``r`` with each image file replaced by output ``k`` of its decoding (a bad file raises its own error)."""

    def get(x: Any) -> Any:
        return cache.get(x, k) if isinstance(x, (str, os.PathLike)) else x

    if isinstance(r, OddOneOutRecord):
        return replace(r, images=tuple(get(x) for x in r.images))
    return replace(r, reference=get(r.reference), candidates=tuple(get(x) for x in r.candidates))


def _predict_all(
    scorers: Sequence[Scorer], sets: Sequence[Dataset], workers: int | None
) -> list[list[torch.Tensor]]:
    """Predictions of every scorer on every dataset in ``sets`` (a dataset and its controls: the same records
    with one input swapped), each image file decoded once by the input pipeline: the records go in chunks
    (a multiple of every scorer's batch size, so each scorer batches them as it would the whole dataset);
    a chunk's files are decoded in worker processes while the previous chunk is scored."""
    n = sets[0].n
    per_row = [sc.input_transform() for sc in scorers]
    transforms = list(dict.fromkeys(t for t in per_row if t != PATHS))
    step = math.lcm(*(max(1, sc.batch_size) for sc in scorers))
    step *= max(1, 64 // step)
    spans = [slice(i, min(n, i + step)) for i in range(0, n, step)]
    chunks = [[f for d in sets for r in d.records[s] for f in _record_files(r)] for s in spans]
    parts: list[list[list[torch.Tensor]]] = [[[] for _ in sets] for _ in scorers]
    for s, cache in zip(spans, decoded_chunks(chunks, transforms, workers=workers)):
        for i, sc in enumerate(scorers):
            for j, d in enumerate(sets):
                recs = d.records[s]
                if per_row[i] != PATHS:
                    k = transforms.index(per_row[i])
                    recs = [_with_images(r, cache, k) for r in recs]
                parts[i][j].append(_predict(sc, replace(d, records=recs)))
    return [[torch.cat(p) for p in row] for row in parts]


def evaluate_human(
    datasets: Sequence[Dataset],
    scorers: Sequence[Scorer],
    *,
    progress: bool = True,
    per_sample: bool = True,
    controls: bool = False,
    workers: int | None = None,
) -> dict[str, Any]:
    """Agreement of every scorer with the human votes of every dataset (+ human consensus).

    Returns a JSON-able dict ``{"datasets": [...], "models": [...]}``; see :func:`to_markdown`. With
    ``controls=True`` each model row also holds ``"controls"``: ``{control: {dataset: agreement breakdown +
    "changed"}}`` for the :func:`control_sets` of each dataset, scored by the same scorer and read against
    the original votes.

    Image files are decoded once each (for every row and control) by the input pipeline, in ``workers``
    processes (``None``: one per available core but one; 0: in this process).

    A scorer that calls every pair equally similar picks at random among ties: chance, 1/3. The synthetic
    votes are unanimous, so the human consensus is 1:

    >>> from genmetrics.tpips.synthetic import aspect_triplets
    >>> records = [r for pair in aspect_triplets(4, size=32) for r in pair]
    >>> flat = SimilarityScorer("constant", fn=lambda a, b, aspects: torch.zeros(len(a)))
    >>> res = evaluate_human([Dataset("synthetic", "odd_one_out", records)], [flat], progress=False)
    >>> res["datasets"][0]["human_consensus"]["overall"]["mean"], round(res["models"][0]["results"]["synthetic"]["overall"]["mean"], 4)
    (1.0, 0.3333)
    >>> print(to_markdown(res).splitlines()[3])
    | – | constant | – | 33.3 ± 0.0 |
    """
    res: dict[str, Any] = {"datasets": [], "models": []}
    for ds in datasets:
        cons = human_consensus_per_sample(ds.votes())
        res["datasets"].append(
            {
                "name": ds.name,
                "kind": ds.kind,
                "path": ds.path,
                "n": ds.n,
                "human_consensus": _breakdown(cons, ds.sources()),
            }
        )
    preds: dict[int, dict[int, list[torch.Tensor]]] = {}
    for ds in datasets:
        rows = [sc for sc in scorers if sc.supports(ds.kind)]
        sets = [ds, *(cs.dataset for cs in control_sets(ds))] if controls else [ds]
        preds[id(ds)] = dict(zip(map(id, rows), _predict_all(rows, sets, workers))) if rows and ds.n else {}
    for sc in scorers:
        row: dict[str, Any] = {
            "name": sc.name,
            "type": sc.type,
            "family": sc.family,
            "size": sc.size,
            "results": {},
        }
        if per_sample:
            row["per_sample"] = {}
        for ds in datasets:
            if not sc.supports(ds.kind):
                continue
            pred, *control_preds = preds[id(ds)][id(sc)]
            agree = per_sample_agreement(pred, ds.votes())
            if controls:
                for cs, cpred in zip(control_sets(ds), control_preds):
                    control = per_sample_agreement(cpred, ds.votes())
                    reading = {**_breakdown(control, ds.sources()), "changed": cs.changed}
                    row.setdefault("controls", {}).setdefault(cs.name, {})[ds.name] = reading
            row["results"][ds.name] = _breakdown(agree, ds.sources())
            if per_sample:
                row["per_sample"][ds.name] = [
                    {
                        "id": r.id,
                        "source": r.source,
                        "aspect": r.aspect,
                        "pred": [float(x) for x in p],
                        "agreement": float(a),
                    }
                    for r, p, a in zip(ds.records, pred, agree)
                ]
        res["models"].append(row)
    return res


# --------------------------------------------------------------------------------------------- reports
def _fmt(stat: dict[str, Any] | None) -> str:
    if not stat:
        return "–"
    m, se = 100.0 * stat["mean"], 100.0 * stat["stderr"]
    return f"{m:.1f} ± {se:.1f}" if math.isfinite(se) else f"{m:.1f}"


def _columns(res: dict[str, Any]) -> list[tuple[str, str, str | None]]:
    """``(header, dataset name, source or None for overall)`` in the paper's Table 3 order."""
    cols: list[tuple[str, str, str | None]] = []
    n2afc = sum(1 for d in res["datasets"] if d["kind"] == "two_afc")
    for d in res["datasets"]:
        per = d["human_consensus"].get("per_source")
        if per and len(per) > 1:
            for s in per:
                cols.append(
                    (
                        s
                        if len(res["datasets"]) == 1 or d["kind"] == "two_afc" and n2afc == 1
                        else f"{d['name']}: {s}",
                        d["name"],
                        s,
                    )
                )
            total = "Total" if d["kind"] == "two_afc" and n2afc == 1 else f"{d['name']} total"
            cols.append((total, d["name"], None))
        else:
            cols.append((d["name"], d["name"], None))
    return cols


def to_markdown(res: dict[str, Any]) -> str:
    """The results as a Markdown table laid out like the paper's Table 3 (agreement in %, ± standard
    error): one row per model, a human-consensus row, one column per dataset / per 2AFC source + Total.

    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> from genmetrics.testing import random_images
    >>> x, y = random_images(2, 32, seed=1)
    >>> record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    >>> psnr = MetricScorer("psnr", metric_name="psnr")
    >>> print(to_markdown(evaluate_human([Dataset("toy", "odd_one_out", [record])], [psnr], progress=False)))
    | Type | Family | Size | toy |
    |---|---|---|---|
    | Human | consensus | – | 100.0 |
    | – | psnr | – | 100.0 |
    <BLANKLINE>
    Agreement with humans in % (± standard error over records); toy: 1 records.
    <BLANKLINE>
    """
    cols = _columns(res)
    head = "| Type | Family | Size | " + " | ".join(md_text(c[0]) for c in cols) + " |"
    sep = "|" + "---|" * (3 + len(cols))
    lines = [head, sep]

    def cell(block: dict[str, Any] | None, src: str | None) -> str:
        if not block:
            return "–"
        if src is None:
            return _fmt(block["overall"])
        return _fmt(block.get("per_source", {}).get(src))

    ds_by = {d["name"]: d for d in res["datasets"]}
    lines.append(
        "| Human | consensus | – | "
        + " | ".join(cell(ds_by[c[1]]["human_consensus"], c[2]) for c in cols)
        + " |"
    )
    for m in res["models"]:
        cells = [cell(m["results"].get(c[1]), c[2]) for c in cols]
        lines.append(
            f"| {md_text(m['type'] or '–')} | {md_text(m['family'] or m['name'])} | {md_text(m['size'] or '–')} | "
            + " | ".join(cells)
            + " |"
        )
        for name, per_dataset in (m.get("controls") or {}).items():
            # a control that changed no record would read the real agreement, as if the input were ignored
            applied = {k: v for k, v in per_dataset.items() if v.get("changed") != 0}
            cells = [cell(applied.get(c[1]), c[2]) for c in cols]
            lines.append(
                f"| control | {md_text(m['family'] or m['name'])}: {CONTROLS[name]} | – | "
                + " | ".join(cells)
                + " |"
            )
    n = ", ".join(f"{md_text(d['name'])}: {d['n']} records" for d in res["datasets"])
    lines.append("")
    lines.append(f"Agreement with humans in % (± standard error over records); {n}.")
    if any(m.get("controls") for m in res["models"]):
        lines.append(
            "Controls: the same records scored with the aspect replaced (by 'overall', by another record's) and, "
            "for 2AFC, with another record's reference, read against the original votes. A metric that uses "
            "the aspect loses agreement under the aspect controls; one that compares with the reference falls "
            "to chance (50%) under the reference control; '–': the control does not apply or changed no record "
            "(every record has the same aspect or reference, or there is one record)."
        )
    return "\n".join(lines) + "\n"


def write_report(res: dict[str, Any], out_dir: str | os.PathLike, **manifest_extra: Any) -> dict[str, Path]:
    """``OUT/results.json`` (without per-sample rows), ``OUT/per_sample.jsonl``, ``OUT/table.md``,
    ``OUT/manifest.json``; all written atomically.

    >>> import tempfile
    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> from genmetrics.testing import random_images
    >>> x, y = random_images(2, 32, seed=1)
    >>> record = OddOneOutRecord(id="t", images=(x, x, y), aspect="overall", votes=(0.0, 0.0, 1.0))
    >>> res = evaluate_human([Dataset("toy", "odd_one_out", [record])], [MetricScorer("psnr", metric_name="psnr")],
    ...                      progress=False)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     paths = write_report(res, d)
    ...     sorted(p.name for p in Path(d).iterdir()) == sorted(Path(p).name for p in paths.values())
    True
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    slim = {
        "datasets": res["datasets"],
        "models": [{k: v for k, v in m.items() if k != "per_sample"} for m in res["models"]],
    }
    paths = {
        "json": atomic_write_json(out / "results.json", slim),
        "markdown": atomic_write_text(out / "table.md", to_markdown(res)),
    }
    rows = []
    for m in res["models"]:
        for ds_name, items in (m.get("per_sample") or {}).items():
            for it in items:
                rows.append(dumps_line({"model": m["name"], "dataset": ds_name, **it}))
    paths["per_sample"] = atomic_write_text(out / "per_sample.jsonl", "".join(r + "\n" for r in rows))
    paths["manifest"] = atomic_write_json(
        out / "manifest.json", manifest(task="evaluate-human tpips", **manifest_extra)
    )
    return paths


def size_of(weights: str | None) -> str:
    m = re.search(r"(\d+(?:\.\d+)?)\s*[Bb]\b", weights or "")
    return f"{m.group(1)}B" if m else "–"


def build_scorers(
    *,
    adapter: str | None,
    variant: str | None,
    weights: str | None,
    baselines: tuple[str, ...] | list[str],
    generative_weights: str,
    include_model: bool = True,
    label: str | None = None,
    image_size: int | None = None,
    batch_size: int = 16,
) -> list[Any]:
    """The scorers (table rows) of ``evaluate-human``: the TPIPS model (unless ``include_model=False``), then
    each of ``baselines`` in order: ``embedding`` (zero-shot late fusion of ``weights``), ``pairwise`` /
    ``triplet`` (the generative VLM ``generative_weights`` prompted for a 0-10 score / the odd one out) and
    ``metric:NAME`` (a registered metric). ``label`` names the model's row.

    >>> [(s.name, s.type) for s in build_scorers(adapter=None, variant=None, weights=None,
    ...     baselines=["metric:psnr"], generative_weights="unused", include_model=False)]
    [('metric:psnr', 'Classic')]
    """
    from genmetrics.backbones.hf import load_vlm
    from genmetrics.tpips.adapter import adapter_base_weights
    from genmetrics.tpips.baselines import PairwiseScoreModel
    from genmetrics.tpips.common import DEFAULT_WEIGHTS, PROMPTS
    from genmetrics.tpips.loading import load_tpips
    from genmetrics.tpips.triplet import TPIPSTripletModel

    scorers: list[Any] = []
    if include_model:
        model = load_tpips(adapter, weights=weights, variant=variant, image_size=image_size)
        v = getattr(model, "variant", "late")
        typ = "Triplet" if v == "triplet" else f"{v.capitalize()} Fusion"
        fam = label or ("Ours" if adapter else "Qwen3-VL-Emb (zero-shot)")
        size = size_of(weights or adapter_base_weights(adapter) or DEFAULT_WEIGHTS)
        if v == "triplet":
            scorers.append(
                TripletScorer(
                    name=fam,
                    type=typ,
                    family=fam,
                    size=size,
                    batch_size=batch_size,
                    model=model,
                    two_afc_ok=not adapter,
                )
            )
        else:
            scorers.append(
                SimilarityScorer(
                    name=fam, type=typ, family=fam, size=size, batch_size=batch_size, fn=model.similarity
                )
            )
    gen_model = None
    for b in baselines:
        if b == "embedding":
            m = load_tpips(
                None,
                weights=weights or DEFAULT_WEIGHTS,
                variant="late",
                image_size=image_size,
                prompts=PROMPTS["embedding_baseline"],
            )
            w = weights or DEFAULT_WEIGHTS
            scorers.append(
                SimilarityScorer(
                    name=f"embedding:{w}",
                    type="Late Fusion",
                    family="Qwen3-VL-Emb",
                    size=size_of(w),
                    batch_size=batch_size,
                    fn=m.similarity,
                )
            )
        elif b in ("pairwise", "triplet"):
            if gen_model is None:
                gen_model = load_vlm(generative_weights, for_generation=True)
            bb, proc = gen_model
            if b == "pairwise":
                pm = PairwiseScoreModel(bb, proc, image_size=image_size)
                scorers.append(
                    SimilarityScorer(
                        name=f"pairwise:{generative_weights}",
                        type="Early Fusion",
                        family="Qwen3-VL (0-10 score)",
                        size=size_of(generative_weights),
                        batch_size=batch_size,
                        fn=pm.score,
                    )
                )
            else:
                tm = TPIPSTripletModel(bb, proc, image_size=image_size)
                scorers.append(
                    TripletScorer(
                        name=f"triplet:{generative_weights}",
                        type="Triplet",
                        family="Qwen3-VL (triplet prompt)",
                        size=size_of(generative_weights),
                        batch_size=batch_size,
                        model=tm,
                    )
                )
        else:
            name = b.split(":", 1)[1]
            scorers.append(
                MetricScorer(name=b, type="Classic", family=name, batch_size=batch_size, metric_name=name)
            )
    return scorers
