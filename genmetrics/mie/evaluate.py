"""Evaluation against human judgments on MIB pairs (MIB-Gold style JSONL, DESIGN section 6).

For every scorer — the MIE model and any registered metric (``psnr``, ``ssim``, ``ms_ssim``, ``clip_i``,
``clip_t``, ``dino``, ...; reached only through ``genmetrics.create_metric``) — both candidates of each
pair are scored and compared with the human preference, as in the paper's Figure 1:

* pairwise accuracy overall, on seen generators (both generators of the pair were in training) and on
  unseen generators (neither was), with bootstrap confidence intervals (scipy's resamples, studentized);
  a score tie counts as half right;
* per-dimension F1 and macro-F1 of the diagnostic logits against the human labels, as the authors'
  analysis script computes them (labels of exactly 0.5 -- annotators split -- dropped; prediction
  ``sigmoid >= 0.5``), each beside its balanced accuracy and the F1 of the constant "always passes"
  answer, where the scorer has diagnostics and the pair has labels;
* breakdowns of the accuracy by subject count, human/object ratio and relation type (from each pair's
  ``bucket``: ``subjects`` (default: the number of references), ``ratio``, ``relation``).

How other metrics see a pair: a metric tagged ``reference-sets`` (like ``mie``) gets the reference list;
a metric with a ``reference`` input scores the candidate against every reference and the mean is used;
a metric with a ``condition`` input gets the prompt. Set-level metrics are skipped. A metric that fails
is reported with its error and the others go on.

Outputs (``write_report``): ``report.json``, ``report.md``, ``accuracy.png`` (bar chart with CIs) and
``scores.jsonl`` (per pair: generators, human preference and every scorer's two scores; the input of
``genmetrics rank-generators``).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure
from PIL import Image
from torchmetrics.functional.classification import binary_f1_score, binary_recall

from genmetrics.core.registry import create_metric, metric_info
from genmetrics.data.io.batching import chunk_slices
from genmetrics.data.io.pipeline import DecodedCache, decoded_chunks
from genmetrics.data.output.atomic import atomic_output, atomic_write_json, atomic_write_text
from genmetrics.data.text.escape import md_text
from genmetrics.errors import InputError
from genmetrics.functional.bootstrap import bootstrap_ci
from genmetrics.functional.ranking import pairwise_correct
from genmetrics.mie.common import DIMENSIONS

log = logging.getLogger(__name__)

BREAKDOWNS = {
    "subjects": ("subjects", "subject_count", "n_subjects", "level"),
    "ratio": ("ratio", "human_object_ratio", "composition"),
    "relation": ("relation", "relation_type", "interaction"),
}


def bucket_value(record: Any, what: str) -> str:
    """The record's bucket value for a breakdown (``subjects`` falls back to the reference count).

    >>> from pathlib import Path
    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> r = MIBPairRecord("p", "a cat and a dog", (Path("cat.png"), Path("dog.png")), (Path("a.png"), Path("b.png")),
    ...                   ("g1", "g2"), 0, bucket={"relation": "physical"})
    >>> bucket_value(r, "relation"), bucket_value(r, "subjects")
    ('physical', '2')
    """
    b = record.bucket or {}
    for key in BREAKDOWNS[what]:
        if key in b and b[key] is not None:
            return str(b[key])
    return str(len(record.references)) if what == "subjects" else "unknown"


def _image(x: Any) -> Any:
    """A file path as text (what the models and metrics read), an image already decoded as it is."""
    return str(x) if isinstance(x, (str, os.PathLike)) else x


def _decoded(record: Any, cache: DecodedCache) -> Any:
    """``record`` with its reference and candidate files replaced by their decoded images (a file that could
    not be decoded raises its own error, naming it)."""

    return replace(
        record,
        references=tuple(_get(p, cache) for p in record.references),
        candidates=tuple(_get(p, cache) for p in record.candidates),
    )


def _is_file(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike))


def _get(x: Any, cache: DecodedCache) -> Any:
    """A file's decoded image (its own error when it could not be decoded); anything else as it is."""
    return cache.get(x) if _is_file(x) else x


def _blank(records: Sequence[Any]) -> list[list[Any]]:
    """:func:`blank_references` of pairs whose references are decoded already (their sizes read from them)."""

    def size(x: Any) -> tuple[int, int]:
        return x.size if isinstance(x, Image.Image) else (int(x.shape[-1]), int(x.shape[-2]))

    return [[Image.new("RGB", size(x), BLANK_GREY) for x in r.references] for r in records]


def score_pairs_mie(
    model: Any,
    records: Sequence[Any],
    *,
    batch_pairs: int = 16,
    progress: Callable | None = None,
    references: Sequence[Sequence[Any]] | None = None,
    workers: int | None = None,
) -> dict[str, np.ndarray]:
    """Scores and diagnostics of both candidates of every pair with an :class:`MIEModel`. ``references``
    (one list of images per pair) replaces the pairs' own references (the controls of :func:`evaluate_human`).
    Image files are decoded once each by the shared input pipeline in ``workers`` processes (``None``: one per
    available core but one; 0: in this process), overlapped with the model.

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor, toy_mib_pairs
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     s = score_pairs_mie(model, load_mib_pairs(toy_mib_pairs(d, 2)))
    >>> {k: v.shape for k, v in s.items()}
    {'a': (2,), 'b': (2,), 'diag_a': (2, 3), 'diag_b': (2, 3)}
    """
    refs = [list(r.references) for r in records] if references is None else [list(x) for x in references]
    if len(refs) != len(records):
        raise InputError(f"references: {len(refs)} reference lists for {len(records)} pairs")
    sa, sb, da, db = [], [], [], []
    chunks = chunk_slices(len(records), batch_pairs)
    # image files (none when the pairs hold decoded images) decoded once each by the shared input pipeline,
    # a batch ahead of the model
    files = [
        [p for i in range(len(records))[sl] for p in (*refs[i], *records[i].candidates) if _is_file(p)]
        for sl in chunks
    ]
    caches = decoded_chunks(files, workers=workers)
    for sl, cache in zip(
        progress(chunks, desc="mie", total=len(chunks), unit="batch") if progress else chunks, caches
    ):
        rs = [_decoded(r, cache) for r in records[sl]]
        a, b = model.score_pairs(
            [[_get(x, cache) for x in xs] for xs in refs[sl]],
            [r.prompt for r in rs],
            [_image(r.candidates[0]) for r in rs],
            [_image(r.candidates[1]) for r in rs],
        )
        sa.append(a.score.double().cpu())
        sb.append(b.score.double().cpu())
        da.append(a.diagnostics.double().cpu())
        db.append(b.diagnostics.double().cpu())
    return {
        "a": torch.cat(sa).numpy(),
        "b": torch.cat(sb).numpy(),
        "diag_a": torch.cat(da).numpy(),
        "diag_b": torch.cat(db).numpy(),
    }


# ---------------------------------------------------------------------- controls
#: the controls of ``evaluate_human(controls=True)`` / ``--controls``, with the scorer name they report under
CONTROLS = {"swapped_references": "mie (swapped references)", "blank_references": "mie (blank references)"}
BLANK_GREY = (128, 128, 128)


def swap_donors(records: Sequence[Any], seed: int = 0, keys: Sequence[Any] | None = None) -> list[int]:
    """For each pair, another pair whose references it borrows in the swapped-references control: never
    itself, and a pair with other reference images whenever one exists (pairs are visited in a seeded random
    order; each takes the next pair in that order whose references differ). References are compared by their
    files' bytes (:func:`reference_key`): a copy or a symlink of the same image is the same reference.

    >>> from pathlib import Path
    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> recs = [MIBPairRecord(f"p{i}", "x", (Path(f"r{i % 3}.png"),), (Path("a.png"), Path("b.png")), ("g", "h"), 0)
    ...         for i in range(6)]
    >>> donors = swap_donors(recs)
    >>> all(d != i and recs[d].references != recs[i].references for i, d in enumerate(donors))
    True
    """
    n = len(records)
    if n < 2:
        raise InputError("the swapped-references control needs at least 2 pairs")
    keys = reference_keys(records) if keys is None else keys
    order = [int(i) for i in np.random.default_rng(seed).permutation(n)]
    donors = [0] * n
    for k, i in enumerate(order):
        others = [order[(k + step) % n] for step in range(1, n)]
        differ = [j for j in others if keys[j] != keys[i]]
        donors[i] = (differ or others)[0]
    return donors


def reference_keys(records: Sequence[Any]) -> list[tuple[str, ...]]:
    """Per pair, what its references ARE: the SHA-256 of each reference file's bytes, in order (a file that
    cannot be read: its resolved path). Two pairs whose references are copies or symlinks of the same images
    get the same key, so swapping between them is no control.

    >>> import tempfile, shutil
    >>> from pathlib import Path
    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "r.png").write_bytes(b"image")
    ...     _ = shutil.copy(Path(d) / "r.png", Path(d) / "copy.png")
    ...     recs = [MIBPairRecord(f"p{i}", "x", (Path(d) / name,), (Path("a"), Path("b")), ("g", "h"), 0)
    ...             for i, name in enumerate(["r.png", "copy.png"])]
    ...     a, b = reference_keys(recs)
    >>> a == b
    True
    """
    cache: dict[str, str] = {}

    def key(p: Any) -> str:
        name = str(p)
        if name not in cache:
            try:
                cache[name] = hashlib.sha256(Path(name).read_bytes()).hexdigest()
            except OSError:
                cache[name] = str(Path(name).resolve())
        return cache[name]

    return [tuple(key(p) for p in r.references) for r in records]


def blank_references(records: Sequence[Any]) -> list[list[Any]]:
    """For each pair, uniform grey images in place of its references: as many, each of its reference's size
    (read from the file header), so the sequence has the same length and only the content is gone.

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     recs = load_mib_pairs(toy_mib_pairs(d, 2))
    ...     blank = blank_references(recs)
    >>> [len(b) for b in blank] == [len(r.references) for r in recs], blank[0][0].getextrema()
    (True, ((128, 128), (128, 128), (128, 128)))
    """
    out = []
    for r in records:
        sizes = []
        for p in r.references:
            with Image.open(p) as im:
                sizes.append(im.size)
        out.append([Image.new("RGB", size, BLANK_GREY) for size in sizes])
    return out


def score_pairs_metric(
    name: str,
    records: Sequence[Any],
    options: dict[str, Any] | None = None,
    *,
    batch_pairs: int = 16,
    progress: Callable | None = None,
) -> dict[str, np.ndarray]:
    """Scores of both candidates of every pair with the registered metric ``name`` (see module doc).

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     s = score_pairs_metric("psnr", load_mib_pairs(toy_mib_pairs(d, 3)))
    >>> sorted(s), s["a"].shape
    (['a', 'b'], (3,))
    """
    info = metric_info(name)
    if info.get("level", "sample") != "sample":
        raise InputError(
            f"metric {name!r} is set-level ({info.get('level')}); it gives no score per candidate"
        )
    roles = set(info.get("inputs") or {})
    ref_sets = "reference-sets" in (info.get("tags") or [])
    metric = create_metric(name, **(options or {}))
    sign = -1.0 if info.get("higher_is_better") is False else 1.0
    out = {}
    for side, col in (("a", 0), ("b", 1)):
        vals: list[float] = []
        chunks = chunk_slices(len(records), batch_pairs)
        for sl in (
            progress(chunks, desc=f"{name} ({side})", total=len(chunks), unit="batch") if progress else chunks
        ):
            rs = records[sl]
            cands = [_image(r.candidates[col]) for r in rs]
            prompts = [r.prompt for r in rs] if "condition" in roles else None
            if ref_sets:
                vals += _metric_scores(
                    metric, [[_image(p) for p in r.references] for r in rs], cands, prompts
                )
            elif "reference" in roles:
                # every (candidate, reference) combination, then the mean per candidate
                owner = [i for i, r in enumerate(rs) for _ in r.references]
                refs = [_image(p) for r in rs for p in r.references]
                flat = _metric_scores(
                    metric, refs, [cands[i] for i in owner], [prompts[i] for i in owner] if prompts else None
                )
                sums = np.zeros(len(rs))
                counts = np.zeros(len(rs))
                np.add.at(sums, owner, flat)
                np.add.at(counts, owner, 1)
                vals += list(sums / counts)
            else:
                vals += _metric_scores(metric, None, cands, prompts)
        out[side] = sign * np.asarray(vals, dtype=np.float64)
    return out


def _metric_scores(metric: Any, reference: Any, candidates: list[Any], condition: Any) -> list[float]:
    """Per-sample scores of one batch (update + per_sample on a reset state)."""
    metric.reset()
    metric.update(reference, candidates, condition)
    ps = metric.per_sample()
    s = ps["scores"]
    if s.ndim != 1:
        s = s.reshape(s.shape[0], -1)[:, 0]
    out = s.double().cpu().tolist()
    metric.reset()
    return out


def _ci(values: np.ndarray, n_boot: int, alpha: float, seed: int) -> dict[str, float]:
    if values.size == 0:
        return {"value": float("nan"), "low": float("nan"), "high": float("nan"), "n": 0}
    est, lo, hi = bootstrap_ci(values, n_boot=n_boot, alpha=alpha, seed=seed)
    return {"value": est, "low": lo, "high": hi, "n": int(values.size)}


def diagnostic_agreement(pred_logits: np.ndarray, labels: np.ndarray) -> dict[str, dict[str, float]]:
    """Per-dimension agreement of diagnostic logits [N,3] with human labels [N,3], as the authors' analysis
    script computes it: a label of exactly 0.5 (annotators split) is dropped from that dimension; a
    label > 0.5 means "passes"; a prediction passes when ``sigmoid(logit) >= 0.5``. Beside each F1:
    balanced accuracy (mean of the recalls of both classes) and ``f1_always_passes``, the F1 of the
    constant answer "passes", so an F1 lifted by the majority class is visible.

    >>> logits = np.array([[2.0, -1.0, 0.3], [-2.0, 1.0, 0.1]])
    >>> labels = np.array([[1.0, 0.0, 0.5], [0.0, 1.0, 1.0]])  # interaction of pair 0: a split vote, dropped
    >>> agree = diagnostic_agreement(logits, labels)
    >>> agree["existence"]["f1"], agree["interaction"]["n"], agree["interaction"]["dropped_ties"]
    (1.0, 1, 1)
    """
    out: dict[str, dict[str, float]] = {}
    for c, d in enumerate(DIMENSIONS):
        keep = labels[:, c] != 0.5
        y = torch.from_numpy(labels[keep, c] > 0.5).long()
        p = torch.from_numpy(pred_logits[keep, c] >= 0.0).long()
        if y.numel() == 0:
            out[d] = {
                "f1": float("nan"),
                "balanced_accuracy": float("nan"),
                "f1_always_passes": float("nan"),
                "n": 0,
                "dropped_ties": int((~keep).sum()),
            }
            continue
        bal = 0.5 * (float(binary_recall(p, y)) + float(binary_recall(1 - p, 1 - y)))
        out[d] = {
            "f1": float(binary_f1_score(p, y)),
            "balanced_accuracy": bal,
            "f1_always_passes": float(binary_f1_score(torch.ones_like(y), y)),
            "n": int(y.numel()),
            "positive_rate": float(y.float().mean()),
            "dropped_ties": int((~keep).sum()),
        }
    return out


def _f1_block(pred: np.ndarray, labels: np.ndarray, n_boot: int, alpha: float, seed: int) -> dict[str, Any]:
    per = diagnostic_agreement(pred, labels)
    res: dict[str, Any] = {"n": int(pred.shape[0]), "dimensions": per}
    for d in DIMENSIONS:
        res[f"f1_{d}"] = per[d]["f1"]
        res[f"balanced_accuracy_{d}"] = per[d]["balanced_accuracy"]
        res[f"f1_always_passes_{d}"] = per[d]["f1_always_passes"]
    res["macro_balanced_accuracy"] = float(np.mean([per[d]["balanced_accuracy"] for d in DIMENSIONS]))
    res["macro_f1_always_passes"] = float(np.mean([per[d]["f1_always_passes"] for d in DIMENSIONS]))
    idx = np.arange(pred.shape[0], dtype=np.float64)

    def stat(ix: np.ndarray) -> float:
        ii = ix.astype(np.int64)
        agg = diagnostic_agreement(pred[ii], labels[ii])
        return float(np.mean([agg[d]["f1"] for d in DIMENSIONS]))

    est, lo, hi = bootstrap_ci(idx, n_boot=n_boot, alpha=alpha, seed=seed, stat=stat)
    res["macro_f1"] = {
        "value": float(np.mean([per[d]["f1"] for d in DIMENSIONS])),
        "low": lo,
        "high": hi,
        "n": int(pred.shape[0]),
    }
    del est
    return res


def evaluate_scores(
    records: Sequence[Any],
    scores: dict[str, dict[str, np.ndarray]],
    *,
    seen_generators: Sequence[str] | None = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
) -> dict[str, Any]:
    """The report for already computed scores: ``scores[name] = {"a": [N], "b": [N], "diag_a"?: [N,3],
    "diag_b"?: [N,3]}`` (or ``{"error": msg}``) for ``records`` (MIB pairs).

    Scores that always favour the preferred candidate are 100% accurate, their negatives 0%:

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_mib_pairs(toy_mib_pairs(d, 4))
    >>> prefers_b = np.array([r.preference for r in records], dtype=float)
    >>> oracle = {"a": 1 - prefers_b, "b": prefers_b}
    >>> report = evaluate_scores(records, {"oracle": oracle, "anti": {"a": prefers_b, "b": 1 - prefers_b}}, n_boot=50)
    >>> report["metrics"]["oracle"]["accuracy"]["overall"]["value"], report["metrics"]["anti"]["accuracy"]["overall"]["value"]
    (1.0, 0.0)
    """
    n = len(records)
    prefers_a = np.array([1.0 - r.preference for r in records])
    seen = set(seen_generators or [])
    gen_sets = [set(r.generators) for r in records]
    masks = {"overall": np.ones(n, bool)}
    if seen:
        masks["seen"] = np.array([g <= seen for g in gen_sets])
        masks["unseen"] = np.array([not (g & seen) for g in gen_sets])
        mixed = ~(masks["seen"] | masks["unseen"])
        if mixed.any():
            masks["mixed"] = mixed
    groups = {what: [bucket_value(r, what) for r in records] for what in BREAKDOWNS}
    has_diag = np.array([r.diagnostics is not None for r in records])
    labels = {
        side: np.array(
            [r.diagnostics[i] if r.diagnostics else (0.0, 0.0, 0.0) for r in records], dtype=np.float64
        )
        for i, side in enumerate(("a", "b"))
    }

    report: dict[str, Any] = {
        "n_pairs": n,
        "seen_generators": sorted(seen),
        "alpha": alpha,
        "n_boot": n_boot,
        "subsets": {k: int(v.sum()) for k, v in masks.items()},
        "metrics": {},
    }
    for name, sc in scores.items():
        if "error" in sc:
            report["metrics"][name] = {"error": sc["error"]}
            continue
        correct = pairwise_correct(
            torch.from_numpy(sc["a"]), torch.from_numpy(sc["b"]), torch.from_numpy(prefers_a)
        ).numpy()
        m: dict[str, Any] = {"accuracy": {k: _ci(correct[v], n_boot, alpha, seed) for k, v in masks.items()}}
        m["breakdown"] = {}
        for what, vals in groups.items():
            keys = sorted(set(vals), key=lambda x: (not x.isdigit(), int(x) if x.isdigit() else 0, x))
            m["breakdown"][what] = {
                k: _ci(correct[np.array([v == k for v in vals])], n_boot, alpha, seed) for k in keys
            }
        if "diag_a" in sc and has_diag.any():
            pred = np.concatenate([sc["diag_a"][has_diag], sc["diag_b"][has_diag]])
            lab = np.concatenate([labels["a"][has_diag], labels["b"][has_diag]])
            m["diagnostics"] = {"overall": _f1_block(pred, lab, n_boot, alpha, seed)}
            for k, v in masks.items():
                sel = v & has_diag
                if k != "overall" and sel.any():
                    m["diagnostics"][k] = _f1_block(
                        np.concatenate([sc["diag_a"][sel], sc["diag_b"][sel]]),
                        np.concatenate([labels["a"][sel], labels["b"][sel]]),
                        n_boot,
                        alpha,
                        seed,
                    )
        report["metrics"][name] = m
    return report


def evaluate_human(
    records: Sequence[Any],
    *,
    model: Any = None,
    metrics: Sequence[str] | dict[str, dict[str, Any]] = (),
    seen_generators: Sequence[str] | None = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    batch_pairs: int = 16,
    progress: Callable | None = None,
    controls: bool = False,
    workers: int | None = None,
) -> tuple[dict[str, Any], dict[str, dict[str, np.ndarray]]]:
    """Score ``records`` with ``model`` (an :class:`MIEModel`, reported as ``"mie"``) and with the
    registered ``metrics`` (names, or ``{name: create_metric options}``), then build the report.
    Returns ``(report, scores)``.

    ``controls=True`` (needs ``model``) also scores the same pairs with each pair's references swapped for
    another pair's (:func:`swap_donors`) and with blank references (:func:`blank_references`), reported as
    the scorers in :data:`CONTROLS` and summarised in ``report["controls"]``: an evaluator that uses its
    references falls toward chance (0.5) on both.

    Every image file is decoded once for all scorers and controls, by the shared input pipeline in ``workers``
    processes (``None``: one per available core but one; 0: in this process).

    Pairwise accuracy of an (untrained) MIE model and of psnr against the pairs' human preferences:

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.mie import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor, toy_mib_pairs
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_mib_pairs(toy_mib_pairs(d, 4))
    ...     report, scores = evaluate_human(records, model=model, metrics=["psnr"], n_boot=100)
    >>> report["n_pairs"], sorted(report["metrics"]), scores["mie"]["a"].shape
    (4, ['mie', 'psnr'], (4,))
    """
    scores: dict[str, dict[str, Any]] = {}  # arrays, or {"error": message} for a failed metric
    control_info: dict[str, Any] = {}
    if controls and model is None:
        raise InputError("controls: the reference controls score an MIE model; pass model= (--heads)")
    opts = metrics if isinstance(metrics, dict) else {m: {} for m in metrics}
    donors: list[int] | None = None
    if controls:
        try:
            keys = reference_keys(records)
            donors = swap_donors(records, seed, keys)
            same = sum(keys[d] == keys[i] for i, d in enumerate(donors))
            control_info["swapped_references"] = {
                "scorer": CONTROLS["swapped_references"],
                "donors": donors,
                "same_files": same,
                "changed": len(records) - same,  # 0: every donor's references are the pair's own images
            }
        except InputError as e:
            scores[CONTROLS["swapped_references"]] = {"error": str(e)}
            control_info["swapped_references"] = {"scorer": CONTROLS["swapped_references"], "error": str(e)}
        control_info["blank_references"] = {"scorer": CONTROLS["blank_references"], "grey": list(BLANK_GREY)}
    # every file decoded once, in worker processes, a chunk of pairs ahead of the scoring: each scorer scores
    # chunk by chunk, in batches of batch_pairs as it would score the whole set
    spans = chunk_slices(len(records), batch_pairs * max(1, 64 // batch_pairs))
    files = [
        [
            p
            for i in range(len(records))[sl]
            for p in (
                *records[i].references,
                *records[i].candidates,
                *(records[donors[i]].references if donors else ()),
            )
            if _is_file(p)
        ]
        for sl in spans
    ]
    parts: dict[str, list[dict[str, np.ndarray]]] = {}
    stream = decoded_chunks(files, workers=workers)
    chunks = zip(spans, stream)
    for sl, cache in (
        progress(chunks, desc="evaluate", total=len(spans), unit="chunk") if progress else chunks
    ):
        rs = records[sl]
        if model is not None:
            ds = [_decoded(r, cache) for r in rs]
            parts.setdefault("mie", []).append(score_pairs_mie(model, ds, batch_pairs=batch_pairs))
            if donors is not None:
                refs = [
                    [cache.get(p) for p in records[donors[i]].references] for i in range(len(records))[sl]
                ]
                parts.setdefault(CONTROLS["swapped_references"], []).append(
                    score_pairs_mie(model, ds, batch_pairs=batch_pairs, references=refs)
                )
            if controls:
                parts.setdefault(CONTROLS["blank_references"], []).append(
                    score_pairs_mie(model, ds, batch_pairs=batch_pairs, references=_blank(ds))
                )
        for name, o in opts.items():
            if name in scores:  # failed on an earlier chunk
                continue
            try:
                ds = [_decoded(r, cache) for r in rs]
                parts.setdefault(name, []).append(score_pairs_metric(name, ds, o, batch_pairs=batch_pairs))
            except Exception as e:  # noqa: BLE001 - one failing baseline must not stop the others
                log.warning("metric %s failed: %s", name, e)
                scores[name] = {"error": f"{type(e).__name__}: {' '.join(str(e).split())[:300]}"}
                parts.pop(name, None)
    for name in ["mie", *CONTROLS.values(), *opts]:
        if name in parts and name not in scores:
            scores[name] = {k: np.concatenate([p[k] for p in parts[name]]) for k in parts[name][0]}
    scores = {k: scores[k] for k in ["mie", *CONTROLS.values(), *opts] if k in scores}
    report = evaluate_scores(
        records, scores, seen_generators=seen_generators, n_boot=n_boot, alpha=alpha, seed=seed
    )
    for info in control_info.values():
        m = report["metrics"].get(info["scorer"], {})
        info["accuracy"] = m["accuracy"]["overall"] if "accuracy" in m else None
    if control_info:
        report["controls"] = control_info
    return report, scores


# ---------------------------------------------------------------------- writing
def _fmt(ci: dict[str, float]) -> str:
    if ci.get("n", 0) == 0 or math.isnan(ci["value"]):
        return "-"
    return f"{ci['value']:.3f} [{ci['low']:.3f}, {ci['high']:.3f}]"


def report_markdown(report: dict[str, Any]) -> str:
    """The evaluation report as Markdown: accuracy per metric with intervals, breakdowns, diagnostics.

    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> records = [MIBPairRecord(f"p{i}", "a cat", (Path("r.png"),), (Path("a.png"), Path("b.png")), ("g1", "g2"), i % 2)
    ...            for i in range(4)]  # scored below without reading images
    >>> scores = {"psnr": {"a": np.array([30.0, 20.0, 31.0, 22.0]), "b": np.array([25.0, 26.0, 24.0, 27.0])}}
    >>> report = evaluate_scores(records, scores, n_boot=50)
    >>> report_markdown(report).splitlines()[0]
    '# MIE evaluation against human preferences'
    """
    subsets = list(report["subsets"])
    lines = [
        "# MIE evaluation against human preferences",
        "",
        f"{report['n_pairs']} pairs; seen generators: "
        f"{', '.join(md_text(g) for g in report['seen_generators']) or '(not given)'}; "
        f"{int(100 * (1 - report['alpha']))}% bootstrap intervals ({report['n_boot']} resamples). "
        "A score tie counts as half right (0.5 = chance).",
        "",
        "## Pairwise accuracy",
        "",
        "| metric | " + " | ".join(f"{s} (n={report['subsets'][s]})" for s in subsets) + " |",
        "|---|" + "---|" * len(subsets),
    ]
    ok = {k: v for k, v in report["metrics"].items() if "error" not in v}
    order = sorted(ok, key=lambda k: -ok[k]["accuracy"]["overall"]["value"])
    for name in order:
        lines.append(
            f"| {md_text(name)} | " + " | ".join(_fmt(ok[name]["accuracy"][s]) for s in subsets) + " |"
        )
    for name, v in report["metrics"].items():
        if "error" in v:
            lines.append(f"| {md_text(name)} | failed: {md_text(v['error'])} |" + " |" * (len(subsets) - 1))
    if report.get("controls"):
        lines += [
            "",
            "## Controls: does the evaluator use its references?",
            "",
            "The same pairs scored with each pair's references swapped for another pair's, and with blank "
            "(uniform grey) references. An evaluator that compares candidates with their references falls "
            "toward 0.5 on both; one that stays at its accuracy judges the candidates alone.",
            "",
            "| control | pairwise accuracy (overall) |",
            "|---|---|",
        ]
        for kind, info in report["controls"].items():
            acc = info.get("accuracy")
            shown = _fmt(acc) if acc else "failed: " + info.get("error", "")
            if info.get("changed") == 0:  # the control scored the pairs as they are: no reading of it
                shown = "– (every pair's references are the same images as another pair's: nothing to swap)"
            lines.append(f"| {kind.replace('_', ' ')} | {shown} |")
    diag = [n for n in order if "diagnostics" in ok[n]]
    if diag:
        lines += [
            "",
            '## Diagnostics: F1 / balanced accuracy / F1 of always answering "passes"',
            "",
            "Labels of exactly 0.5 (annotators split) are left out, as in the authors' analysis. An F1 near "
            "the always-passes F1 with balanced accuracy near 0.5 is the majority class, not agreement.",
            "",
            "| metric | subset | " + " | ".join(DIMENSIONS) + " | macro-F1 | macro bal. acc. |",
            "|---|---|" + "---|" * (len(DIMENSIONS) + 2),
        ]
        for name in diag:
            for sub, blk in ok[name]["diagnostics"].items():
                lines.append(
                    f"| {name} | {sub} | "
                    + " | ".join(
                        f"{blk[f'f1_{d}']:.3f} / {blk[f'balanced_accuracy_{d}']:.3f} / {blk[f'f1_always_passes_{d}']:.3f}"
                        for d in DIMENSIONS
                    )
                    + f" | {_fmt(blk['macro_f1'])} | {blk['macro_balanced_accuracy']:.3f} |"
                )
    for what in BREAKDOWNS:
        lines += ["", f"## Accuracy by {what}", ""]
        keys: list[str] = []
        for name in order:
            keys += [k for k in ok[name]["breakdown"][what] if k not in keys]
        lines += ["| metric | " + " | ".join(keys) + " |", "|---|" + "---|" * len(keys)]
        for name in order:
            b = ok[name]["breakdown"][what]
            lines.append(
                f"| {name} | "
                + " | ".join(_fmt(b[k]) + f" (n={b[k]['n']})" if k in b else "-" for k in keys)
                + " |"
            )
    return "\n".join(lines) + "\n"


def accuracy_plot(report: dict[str, Any], path: Any) -> None:
    """Grouped bar chart: pairwise accuracy per metric (overall / seen / unseen) with CI error bars.

    >>> import tempfile
    >>> from genmetrics.data.jsonl import load_mib_pairs
    >>> from genmetrics.testing import toy_mib_pairs
    >>> with tempfile.TemporaryDirectory() as d:
    ...     records = load_mib_pairs(toy_mib_pairs(d, 2))
    ...     accuracy_plot(evaluate_scores(records, {"constant": {"a": np.zeros(2), "b": np.zeros(2)}}, n_boot=50),
    ...                   Path(d) / "accuracy.png")
    ...     (Path(d) / "accuracy.png").is_file()
    True
    """
    ok = {k: v for k, v in report["metrics"].items() if "error" not in v}
    names = sorted(ok, key=lambda k: -ok[k]["accuracy"]["overall"]["value"])
    subsets = [s for s in ("overall", "seen", "unseen") if s in report["subsets"]]
    fig = Figure(
        figsize=(max(4.0, 0.9 * len(names) * len(subsets) / 2 + 2), 3.6)
    )  # object API: no backend switch
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    width = 0.8 / max(1, len(subsets))
    for j, s in enumerate(subsets):
        vals = [ok[n]["accuracy"][s]["value"] for n in names]
        err = [
            [max(0.0, v - ok[n]["accuracy"][s]["low"]) for n, v in zip(names, vals)],
            [max(0.0, ok[n]["accuracy"][s]["high"] - v) for n, v in zip(names, vals)],
        ]
        vals = [0.0 if math.isnan(v) else v for v in vals]
        err = [[0.0 if math.isnan(e) else e for e in row] for row in err]
        ax.bar(
            np.arange(len(names)) + (j - (len(subsets) - 1) / 2) * width,
            vals,
            width,
            yerr=err,
            capsize=2,
            label=s,
        )
    ax.axhline(0.5, color="gray", lw=0.8, ls="--")
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right")
    ax.set_ylim(0, 1)
    ax.set_ylabel("pairwise accuracy vs humans")
    ax.legend(fontsize=8)
    fig.tight_layout()
    with atomic_output(path) as tmp:  # the write rule (genmetrics/data/output/)
        fig.savefig(tmp, dpi=120)


def write_report(
    report: dict[str, Any], scores: dict[str, dict[str, np.ndarray]], records: Sequence[Any], out: str | Path
) -> dict[str, str]:
    """Write ``report.json``, ``report.md``, ``accuracy.png`` and ``scores.jsonl`` into ``out``.

    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> records = [MIBPairRecord(f"p{i}", "a cat", (Path("r.png"),), (Path("a.png"), Path("b.png")), ("g1", "g2"), i % 2)
    ...            for i in range(4)]  # scored below without reading images
    >>> scores = {"psnr": {"a": np.array([30.0, 20.0, 31.0, 22.0]), "b": np.array([25.0, 26.0, 24.0, 27.0])}}
    >>> report = evaluate_scores(records, scores, n_boot=50)
    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     sorted(Path(p).name for p in write_report(report, scores, records, d).values())
    ['accuracy.png', 'report.json', 'report.md', 'scores.jsonl']
    """
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_json(folder / "report.json", report)
    atomic_write_text(folder / "report.md", report_markdown(report))
    accuracy_plot(report, folder / "accuracy.png")
    lines = []
    for i, r in enumerate(records):
        row: dict[str, Any] = {
            "id": r.id,
            "generators": list(r.generators),
            "preference": r.preference,
            "scores": {
                n: [float(s["a"][i]), float(s["b"][i])] for n, s in scores.items() if "error" not in s
            },
        }
        diags = {
            n: [s["diag_a"][i].tolist(), s["diag_b"][i].tolist()] for n, s in scores.items() if "diag_a" in s
        }
        if diags:
            row["diagnostics"] = diags
        lines.append(json.dumps(row))
    atomic_write_text(folder / "scores.jsonl", "\n".join(lines) + "\n")
    return {
        k: str(folder / f)
        for k, f in (
            ("json", "report.json"),
            ("markdown", "report.md"),
            ("plot", "accuracy.png"),
            ("scores", "scores.jsonl"),
        )
    }
