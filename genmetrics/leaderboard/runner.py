"""The leaderboard runner: score every generator with every metric, crash-safe and shardable.

Order of work: metric by metric (one model in memory at a time, built once and reused for every
generator), generator by generator, images in chunks of ``batch_size`` read from disk (the metric's
state is reset after each chunk, so memory does not grow with the number of images).

Files under ``OUT`` (see docs/leaderboard.md and :mod:`genmetrics.leaderboard.manifest`):

* ``results.jsonl`` one row per (generator, metric column, sample id), appended and fsynced per chunk;
  set-level metrics write one row per generator with ``id = "__set__"``. At the end of a run the file
  is rewritten (atomically) in canonical order, so an interrupted-and-resumed or a sharded run gives
  the same bytes as an uninterrupted single-process run;
* ``shards/rank-XXXXX.jsonl`` per-rank results under ``torchrun`` (merged into results.jsonl by rank 0);
* ``manifest.json`` (atomic); ``summary.json`` and the reports (see :mod:`genmetrics.leaderboard.report`).

Processes: accelerate's :class:`~accelerate.PartialState` reads the torchrun environment and joins the
process group (gloo on CPU, NCCL on CUDA); each rank scores every ``WORLD_SIZE``-th image.
``resume=True`` keeps every finished row (a torn last line is dropped), skips finished keys and refuses to
continue when the metric options or the input files changed since the interrupted run.
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import inspect
import logging
import math
import re
import shutil
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from genmetrics.core.options import COUNT_MAX, check_environment, integer
from genmetrics.core.options import seed as check_seed
from genmetrics.core.registry import Granularity, create_metric, metric_options
from genmetrics.data.io.images import list_images, unused_references
from genmetrics.data.io.pipeline import (
    PATHS,
    DecodedCache,
    check_workers,
    decoded,
    decoded_chunks,
    transform_of,
)
from genmetrics.data.output.disk import disk_full_named
from genmetrics.data.output.lock import lock_output_folder
from genmetrics.data.output.merge import merge_in_order
from genmetrics.data.output.rows import ResultsWriter, iter_results
from genmetrics.data.progress import progress
from genmetrics.errors import GenmetricsError, InputError
from genmetrics.leaderboard.config import KeyPath, LeaderboardConfig, load_config
from genmetrics.leaderboard.inputs import HASHES, InputHashes
from genmetrics.leaderboard.manifest import (
    MANIFEST,
    OUTPUTS,
    RESULTS,
    SHARDS,
    SKIPPED,
    SUMMARY,
    check_resumable,
    describe_option,
    drop_stale_rows,
    metric_identity,
    read_manifest,
    resume_note,
    row_check,
    weights_info,
    write_manifest,
)
from genmetrics.leaderboard.plan import (
    SET_ID,
    MetricPlan,
    Plan,
    Sample,
    build_plan,
    check_plan_weights,
    device_for_run,
)
from genmetrics.leaderboard.scores import KeySet, ScoreTable

__all__ = [
    "HASHES",
    "MANIFEST",
    "RESULTS",
    "SUMMARY",
    "RunResult",
    "finite_rows",
    "run_leaderboard",
    "set_value_score",
]
log = logging.getLogger(__name__)


@dataclass
class RunResult:
    """What :func:`run_leaderboard` returns: the output folder, this process's rank, the number of rows it
    wrote, and (rank 0) the summary; ``report`` and ``results`` are the paths of the Markdown report and
    of ``results.jsonl``.

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False)
    ...     result.rank, result.world_size, result.scored, result.report.is_file(), result.results.name
    (0, 1, 6, True, 'results.jsonl')
    """

    out: Path
    rank: int
    world_size: int
    summary: dict[str, Any] | None  # rank 0 only
    scored: int  # rows written by this process in this call

    @property
    def report(self) -> Path:
        """Path of the run's Markdown leaderboard, ``<out>/leaderboard.md``."""
        return self.out / "leaderboard.md"

    @property
    def results(self) -> Path:
        """Path of the run's per-row results file, ``<out>/results.jsonl``."""
        return self.out / RESULTS


# ------------------------------------------------------------------------------------------ values -> rows
def set_value_score(value: Any) -> tuple[float | None, Any]:
    """``(score, full value)`` of a set-level ``compute()``: a scalar is the score; a dict gives its
    ``score``/``mean``/``value`` entry; a tensor of several values (SaD per attribute, PaD per pair,
    R-SaD per patch and attribute) is scored by the mean absolute value of its entries.

    >>> set_value_score(torch.tensor(0.5))
    (0.5, None)
    >>> score, full = set_value_score({"mean": torch.tensor(0.25), "per_attribute": torch.tensor([0.5, 0.0])})
    >>> score, full["per_attribute"]
    (0.25, [0.5, 0.0])
    """
    if isinstance(value, dict):
        full = {kk: _describe_value(vv) for kk, vv in value.items()}
        key = next((k for k in ("score", "mean", "value") if k in value), None)
        return (set_value_score(value[key])[0] if key else None), full
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), None
    if isinstance(value, torch.Tensor):
        v = value.detach().to("cpu", torch.float64)
        if v.numel() == 1:
            return float(v.reshape(())), None
        return float(v.abs().mean()), v.tolist()
    if hasattr(value, "_asdict"):
        return set_value_score(dict(value._asdict()))
    raise TypeError(
        f"set-level metric returned {type(value).__name__}; expected a tensor, a number or a dict"
    )


def _describe_value(v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return v.item() if v.numel() == 1 else v.tolist()
    return describe_option(v)


def _sample_rows(
    per: dict[str, Any], generator: str, column: str, aspect: str | None
) -> list[dict[str, Any]]:
    ids = per["ids"]
    scores = per["scores"].detach().to("cpu", torch.float64)
    # per-sample extras: tensors with one entry per sample (mie's diagnostics); other keys are metadata
    extras = {
        k: v
        for k, v in per.items()
        if k not in ("ids", "scores")
        and isinstance(v, torch.Tensor)
        and v.ndim >= 1
        and v.shape[0] == len(ids)
    }
    rows = []
    for i, sid in enumerate(ids):
        s = scores[i]
        row: dict[str, Any] = {"generator": generator, "metric": column, "id": sid}
        if s.ndim == 0:
            row["score"] = float(s)
        else:
            row["score"] = float(s.mean())
            row["scores"] = s.tolist()
        if aspect is not None:
            row["aspect"] = aspect
        for k, v in extras.items():
            row[k] = _describe_value(v[i])
        rows.append(row)
    return rows


def _set_row(
    metric: Any, generator: str, label: str, value: Any, ci: Any, n: int, n_real: int
) -> dict[str, Any]:
    score, full = set_value_score(value)
    row: dict[str, Any] = {
        "generator": generator,
        "metric": label,
        "id": SET_ID,
        "score": score,
        "n": n,
        "n_real": n_real,
    }
    if full is not None:
        row["value"] = full
    if ci is not None:
        row["ci"] = [float(ci[0]), float(ci[1])]
    labels = getattr(metric, "attributes", None)
    if isinstance(labels, (list, tuple)) and labels and all(isinstance(a, str) for a in labels):
        row["labels"] = list(labels)
    grid = getattr(metric, "grid", None)
    if isinstance(grid, (list, tuple)) and len(grid) == 2 and all(isinstance(x, int) for x in grid):
        row["grid"] = list(grid)
    return row


def _local_per_sample(metric: Any) -> dict[str, Any]:
    """``per_sample()`` of this process only (ranks score different chunks, so no collective here)."""
    if "sync" in inspect.signature(metric.per_sample).parameters:
        return metric.per_sample(sync=False)
    return metric.per_sample()


class _Skipper:
    """``--on-error skip``: a batch that fails on bad input is retried one sample at a time; the bad
    samples are reported on stderr and in ``skipped.jsonl`` and the rest are scored."""

    def __init__(self, writer: ResultsWriter):
        self.writer = writer
        self.count = 0

    def update(self, metric: Any, generator: str, label: str, kwargs: dict[str, Any], ids: list[str]) -> None:
        try:
            metric.update(**kwargs)
            return
        except InputError:
            pass
        for i in range(len(ids)):
            one = {k: (v[i : i + 1] if isinstance(v, list) else v) for k, v in kwargs.items()}
            try:
                metric.update(**one)
            except InputError as e:
                log.warning("skipped %s / %s / %s: %s", generator, label, ids[i], e)
                self.report(generator, label, ids[i], str(e))

    def report(self, generator: str, label: str, sid: str, msg: str) -> None:
        self.count += 1
        print(f"warning: skipped {generator}/{sid} for {label}: {msg}", file=sys.stderr)
        self.writer.write([{"generator": generator, "metric": label, "id": sid, "error": msg}])


def finite_rows(rows: list[dict[str, Any]], skip: _Skipper | None) -> list[dict[str, Any]]:
    """Rows whose score is a finite number (or null: a set-level value without one). A NaN or infinite
    score is refused naming the generator, column and id, or with ``--on-error skip`` reported in
    ``skipped.jsonl`` and left out: it is never written, averaged or ranked.

    >>> finite_rows([{"score": 1.0}, {"score": None}], None)
    [{'score': 1.0}, {'score': None}]
    >>> finite_rows([{"generator": "g", "metric": "psnr", "id": "7", "score": float("nan")}], None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: g/7 for psnr: the score is nan (not finite); ... or pass --on-error skip to report it and score the rest
    """
    out = []
    for r in rows:
        s = r.get("score")
        if s is None or math.isfinite(s):
            out.append(r)
            continue
        msg = (
            f"the score is {s} (not finite); scores that are not finite are never ranked: check the image "
            "and the metric's options"
        )
        if skip is None:
            raise InputError(
                f"{r['generator']}/{r['id']} for {r['metric']}: {msg}, or pass --on-error skip to "
                "report it and score the rest"
            )
        skip.report(str(r["generator"]), str(r["metric"]), str(r["id"]), msg)
    return out


def _free(metric: Any) -> None:
    heavy = bool(metric.backbones())
    del metric
    if heavy:  # drop the model before the next metric loads its own
        gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def _with_context(err: Exception, msg: str) -> Exception:
    try:
        return type(err)(msg)
    except TypeError:  # an exception class with another signature: keep it as it is
        return err


# ------------------------------------------------------------------------------------------ the run
def run_leaderboard(
    config: str | Path | LeaderboardConfig | dict[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    metric_kwargs: dict[str, dict[str, Any]] | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    plots: bool = True,
    base_dir: str | Path | None = None,
    on_error: str = "stop",
    workers: int | None = None,
) -> RunResult:
    """Run a leaderboard (see the module docstring). ``metric_kwargs`` maps a metric label to extra
    ``create_metric`` keyword arguments (Python objects allowed, e.g. ``{"clip_i": {"backbone": m}}``);
    they override the config's options. Under torchrun every rank calls this; rank 0 merges and reports.
    ``workers``: processes that decode the images (``None``: one per available core but one, at most 8; 0
    decodes in this process); each file is decoded once per run whatever the number of metrics.

    Two generators on 3 references (``toy_leaderboard``: an exact copy and a noisy one), ranked best first;
    a resumed finished run scores nothing again:

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     config, out = toy_leaderboard(d), Path(d) / "out"
    ...     result = run_leaderboard(config, out, base_dir=d, plots=False)
    ...     again = run_leaderboard(config, out, base_dir=d, plots=False, resume=True)
    ...     result.summary["generators"], result.summary["ranking"][0]["psnr"], again.scored
    (['copy', 'noisy'], 100.0, 0)
    """
    check_environment()  # a bad GENMETRICS_* variable is named before any work
    cfg = config if isinstance(config, LeaderboardConfig) else load_config(config, base_dir=base_dir)
    if on_error not in ("stop", "skip"):
        raise InputError(f"--on-error: expected 'stop' or 'skip', got {on_error!r}")
    if batch_size is not None:
        batch_size = integer("--batch-size", batch_size, lo=1, hi=COUNT_MAX)
    if seed is not None:
        seed = check_seed("--seed", seed)
    # command-line values win over the config's (on a copy: the caller's config is left as it is)
    run = dataclasses.replace(
        cfg.run,
        batch_size=batch_size if batch_size is not None else cfg.run.batch_size,
        seed=seed if seed is not None else cfg.run.seed,
    )
    cfg = dataclasses.replace(cfg, run=run)
    out_dir = Path(out) if out is not None else cfg.run.out
    if out_dir is None:
        raise InputError("no output folder: pass --out DIR (or set run.out in the config)")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {str(out_dir)!r} is a file; expected a folder (it is created if missing)")
    _check_out_outside_inputs(cfg, out_dir)
    dev = device_for_run(
        device or cfg.run.device, where="--device" if device else cfg.where(("run", "device"))
    )
    n_workers = check_workers(workers, flag="--workers")
    # a resumed run checks the weights of the metrics it still has to score only, once it knows which
    plan = build_plan(cfg, metric_kwargs=metric_kwargs, device=dev, check_weights=not resume)
    if resume:  # weights no cache holds stop the run before anything is written, unless nothing needs them
        done = KeySet(ScoreTable(plan), _finished_keys_in(out_dir))
        check_plan_weights(plan, {k[1] for k in plan.keys() if k not in done})
    return _Run(plan, out_dir, dev, resume=resume, on_error=on_error, workers=n_workers).execute(plots=plots)


def _result_sources(out_dir: Path) -> list[Path]:
    """The results files of a run folder: ``results.jsonl``, then the shards of its ranks."""
    return [out_dir / RESULTS, *sorted((out_dir / SHARDS).glob("rank-*.jsonl"))]


def _skipped_sources(out_dir: Path) -> list[Path]:
    """The skipped-images files of a run folder: ``skipped.jsonl``, then the shards of its ranks."""
    return [out_dir / SKIPPED, *sorted((out_dir / SHARDS).glob("skipped-rank-*.jsonl"))]


def _finished_keys_in(out_dir: Path) -> Iterator[tuple[str, str, str]]:
    """The ``(generator, column, id)`` of every row in the results files of ``out_dir``, read one row at a
    time (none when it has none); a caller keeps them in a :class:`KeySet`."""
    for src in _result_sources(out_dir):
        for r, _ in iter_results(src):
            if isinstance(
                r, dict
            ):  # a line that is no row is refused with its file and line by the row check
                yield (str(r.get("generator")), str(r.get("metric")), str(r.get("id")))


def _check_out_outside_inputs(cfg: LeaderboardConfig, out_dir: Path) -> None:
    """With ``data.recursive``, an output folder inside an image folder would have the run's own plots and
    gallery read as images by the next run: refused, naming the image folder's config key."""
    if not cfg.data.recursive:
        return
    out = out_dir.resolve()
    folders: list[tuple[KeyPath, Path | None]] = [
        (("data", "references"), cfg.data.references),
        (("data", "real"), cfg.data.real),
    ]
    for g in cfg.generators:
        folders += [
            (("generators", g.index, "images"), g.images),
            (("generators", g.index, "references"), g.references),
        ]
    for key, folder in folders:
        if folder is not None and (out == folder.resolve() or folder.resolve() in out.parents):
            raise cfg.error(
                key,
                f"the output folder --out {str(out_dir)!r} is inside this image folder {str(folder)!r}, and "
                "data.recursive = true reads its sub-folders: the run's plots and galleries would be scored as "
                "images by the next run. Fix: choose an --out outside the image folders",
            )


class _Run:
    """One call of :func:`run_leaderboard` on one process: checks, lock, scoring, merge and reports."""

    def __init__(
        self, plan: Plan, out_dir: Path, device: str, *, resume: bool, on_error: str, workers: int = 0
    ):
        self.t0 = time.time()
        self.workers = workers
        self.plan, self.cfg, self.out, self.device = plan, plan.config, out_dir, device
        self.resume, self.on_error = resume, on_error
        self.identities = {mp.spec.label: metric_identity(mp) for mp in plan.metrics}
        old = read_manifest(out_dir) if resume else None
        self.unknown_options = (
            check_resumable(self.cfg, plan, self.identities, old, out_dir) if resume else set()
        )
        self.old_manifest = old if isinstance(old, dict) else None
        # the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK): accelerate joins the process group
        self.state = PartialState(cpu=not device.startswith("cuda"))
        self.rank, self.world = self.state.process_index, self.state.num_processes
        self.weights: dict[str, Any] = {}
        # the planned keys' positions (an id index per generator), shared by the finished and written keys
        # (a byte per row each) and the end's merge and summary (the scores)
        self.table = ScoreTable(plan)
        self.done = KeySet(self.table)
        self.hashes: InputHashes | None = None

    def shard(self, items: list[Any]) -> list[Any]:
        """This rank's items: every ``world``-th item starting at ``rank`` (of the full sorted list, so the
        assignment does not depend on what is already done)."""
        return items[self.rank :: self.world]

    def bar(self, items: list[Any], desc: str) -> Any:
        return progress(items, desc=desc, total=len(items), unit="batch") if self.rank == 0 else items

    def manifest(self, status: str) -> None:
        write_manifest(
            self.out,
            self.plan,
            self.identities,
            self.old_manifest,
            world_size=self.world,
            device=self.device,
            status=status,
            resumed=self.old_manifest is not None,
            weights=self.weights,
            elapsed=time.time() - self.t0,
        )

    def execute(self, *, plots: bool) -> RunResult:
        kept = f"every row already in {self.out / RESULTS} is kept"
        then = (
            "free space (or move the folder to a larger disk) and run the same command again with --resume "
            "(resume=True): it scores only what is missing"
        )
        with disk_full_named(self.out, kept=kept, then=then):
            return self._execute(plots=plots)

    def _execute(self, *, plots: bool) -> RunResult:
        lock = None
        try:
            if self.rank == 0:
                lock = lock_output_folder(
                    self.out
                )  # a second run on this --out refuses here, before any write
                self._start()
            self.state.wait_for_everyone()
            self.hashes = InputHashes(self.plan, cache_file=self.out / HASHES, root=self.out)
            self._finished_keys()
            scored = self._score_all()
            self.state.wait_for_everyone()
            summary = None
            if self.rank == 0:
                try:
                    summary = self._finish(plots=plots)
                except GenmetricsError as e:  # a report that cannot be written: every row is scored and kept
                    kept = (
                        f"every row is scored and kept in {str(self.out / RESULTS)!r}; after the fix, run the "
                        "same command with --resume: it scores nothing again and writes the reports"
                    )
                    raise _with_context(e, f"{e} [{kept}]") from e
                self.manifest("complete")
            self.state.wait_for_everyone()
            return RunResult(
                out=self.out, rank=self.rank, world_size=self.world, summary=summary, scored=scored
            )
        except BaseException:
            if lock is not None and self._nothing_scored():  # e.g. weights unavailable: leave nothing behind
                self.hashes = None
                self._remove_own_files()
            raise
        finally:
            if self.hashes is not None and self.rank == 0:
                self.hashes.save()  # also after a crash or Ctrl-C: a resume then reads only files it has not hashed
            if lock is not None:
                lock.release()  # the lock file (and the folder, if this run made it) go when nothing else is there

    def _nothing_scored(self) -> bool:
        """A fresh run that wrote no result row (and no skipped row) yet."""
        if self.resume:
            return False
        files = [self.out / RESULTS, self.out / SKIPPED, *(self.out / SHARDS).glob("*.jsonl")]
        return all(not f.is_file() or f.stat().st_size == 0 for f in files)

    def _remove_own_files(self) -> None:
        for name in (*OUTPUTS, HASHES):
            (self.out / name).unlink(missing_ok=True)  # unlink removes a link, never its target
        shutil.rmtree(self.out / SHARDS, ignore_errors=True)

    def _start(self) -> None:
        """Rank 0, under the lock: name unused references; clear a previous run's files (without --resume)."""
        _note_unused_references(self.plan)
        if not self.resume:
            for name in OUTPUTS:
                (self.out / name).unlink(missing_ok=True)  # unlink removes a link, never its target
            shutil.rmtree(self.out / SHARDS, ignore_errors=True)  # rmtree never follows a link
            shutil.rmtree(self.out / "plots", ignore_errors=True)
        self.manifest("running")

    def _sources(self) -> list[Path]:
        return _result_sources(self.out)

    def _finished_keys(self) -> None:
        """Rank 0 refuses rows that are not this run's and drops rows whose inputs changed; then every rank
        reads the finished keys before any rank writes."""
        assert self.hashes is not None
        if self.rank == 0 and self.resume:
            drop_stale_rows(
                self._sources(),
                row_check(self.plan, self.unknown_options),
                self.hashes,
                self.out,
                KeySet(self.table),
            )
            self.hashes.save()
        self.state.wait_for_everyone()
        self.done = KeySet(self.table, _finished_keys_in(self.out))
        if self.rank == 0 and self.resume:
            print(resume_note(self.plan, self.done), file=sys.stderr)
        self.state.wait_for_everyone()

    def _score_all(self) -> int:
        single = self.world == 1
        mine = self.out / RESULTS if single else self.out / SHARDS / f"rank-{self.rank:05d}.jsonl"
        skipped = self.out / (SKIPPED if single else f"{SHARDS}/skipped-rank-{self.rank:05d}.jsonl")
        scored = 0
        with (
            ResultsWriter(mine, resume=True, root=self.out, keys=KeySet(self.table)) as writer,
            ResultsWriter(skipped, resume=True, root=self.out) as skip_writer,
        ):
            skip = _Skipper(skip_writer) if self.on_error == "skip" else None
            self._writer = writer  # what _context reads: whether anything was scored before an error
            # every metric of one level is fed in the same pass, so each file is decoded once per pass
            for level, score in (
                (Granularity.SAMPLE, self._score_samples),
                (Granularity.SET, self._score_set),
            ):
                plans = [mp for mp in self.plan.metrics if mp.level is level]
                if plans:
                    scored += score(plans, writer, skip)
        return scored

    def _context(self, mp: MetricPlan, e: GenmetricsError) -> Exception:
        """A metric's error (missing weights, a corrupt image...) naming the metric and where results are."""
        writer = getattr(self, "_writer", None)
        kept = (
            f"finished results are kept in {str(self.out)!r}; rerun with --resume"
            if self.done or (writer is not None and writer.n_done)
            else "nothing was scored"
        )
        return _with_context(e, f"{self.cfg.where((*mp.spec.key, 'name'))} ({mp.spec.name}): {e} [{kept}]")

    def _build(self, mp: MetricPlan, **kwargs: Any) -> Any:
        torch.manual_seed(self.cfg.run.seed)
        try:
            return create_metric(mp.spec.name, **{**mp.kwargs, **kwargs})
        except GenmetricsError as e:
            raise self._context(mp, e) from e

    def _chunk(self, metrics: list[Any]) -> int:
        sizes = [int(getattr(m, "batch_size", 32) or 32) for m in metrics]
        return self.cfg.run.batch_size or min(sizes, default=32)

    def _update(
        self,
        metric: Any,
        skip: _Skipper | None,
        generator: str,
        label: str,
        kwargs: dict[str, Any],
        ids: list[str],
        mp: MetricPlan,
        files: list[str] | None = None,
    ) -> None:
        try:
            if skip is not None:
                skip.update(metric, generator, label, kwargs, ids)
            else:
                metric.update(**kwargs)
        except InputError as e:
            raise self._context(mp, _name_file(e, files)) from e
        except GenmetricsError as e:
            raise self._context(mp, e) from e

    def _decode_errors(
        self,
        ok: list[Sample],
        cache: DecodedCache,
        generator: str,
        mp: MetricPlan,
        skip: _Skipper | None,
        columns: list[Any] | None = None,
    ) -> list[Sample]:
        """The samples whose files decoded; a file that did not is reported per column (``--on-error skip``)
        or stops the run naming it."""
        good = []
        for s in ok:
            err = next((e for f in _files_of(s) if (e := cache.error(f)) is not None), None)
            if err is None:
                good.append(s)
                continue
            if skip is None:
                raise self._context(mp, err) if isinstance(err, GenmetricsError) else err
            for col in mp.columns if columns is None else columns:
                if (generator, col.name, s.id) not in self.done:
                    skip.report(generator, col.name, s.id, str(err))
        return good

    def _feed_real(self, active: list[tuple[MetricPlan, Any]], skip: _Skipper | None) -> None:
        """Feed each metric its real set; a real set shared by several metrics is decoded once."""
        groups: dict[tuple[Path, ...], list[tuple[MetricPlan, Any]]] = {}
        for mp, metric in active:
            if mp.real is not None:
                real = self.shard(mp.real) if mp.level is Granularity.SET else mp.real
                groups.setdefault(tuple(real), []).append((mp, metric))
        for files, members in groups.items():
            transforms, index = _transforms([m for _, m in members])
            chunk = self._chunk([m for _, m in members])
            labels = ", ".join(mp.spec.label for mp, _ in members)
            stream = decoded(
                list(files), transforms, batch_size=chunk, workers=self.workers, device=self.device
            )
            with contextlib.closing(stream):
                self._feed_stream(members, stream, index, skip, math.ceil(len(files) / chunk), labels)

    def _feed_stream(
        self,
        members: list[tuple[MetricPlan, Any]],
        stream: Any,
        index: dict[int, int],
        skip: _Skipper | None,
        total: int,
        labels: str,
    ) -> None:
        for batch in self.bar_stream(stream, total, f"{labels} | real set"):
            cache = DecodedCache(batch)
            for mp, metric in members:
                ok = self._decode_errors(
                    [Sample(id=Path(p).stem, candidate=Path(p)) for p, _ in batch],
                    cache,
                    "__real__",
                    mp,
                    skip,
                )
                if not ok:
                    continue
                k = index[id(metric)]
                args = {"reference": [_input(cache, s.candidate, k) for s in ok]}
                self._update(metric, skip, "__real__", mp.spec.label, args, [s.id for s in ok], mp)

    def bar_stream(self, stream: Any, total: int, desc: str) -> Any:
        return progress(stream, desc=desc, total=total, unit="batch") if self.rank == 0 else stream

    def _score_samples(self, plans: list[MetricPlan], writer: ResultsWriter, skip: _Skipper | None) -> int:
        """Every per-sample metric in one pass over the sample ids, in chunks: the chunk's references and each
        generator's candidates are decoded once (in worker processes) and fed to every metric and column."""
        todo: dict[int, dict[str, list[Sample]]] = {}
        for mp in plans:
            todo[id(mp)] = {
                g.name: [
                    s
                    for s in self.shard(mp.samples[g.name])
                    if any((g.name, c.name, s.id) not in self.done for c in mp.columns)
                ]
                for g in self.plan.generators
            }
        plans = [mp for mp in plans if any(todo[id(mp)].values())]
        if not plans:
            return 0
        assert self.hashes is not None
        active = [(mp, self._build(mp)) for mp in plans]
        transforms, index = _transforms([m for _, m in active])
        chunk, written = self._chunk([m for _, m in active]), 0
        with torch.no_grad(), contextlib.ExitStack() as stack:
            self._feed_real([(mp, m) for mp, m in active if mp.real is not None], skip)
            base = {id(m): m.state_snapshot() for mp, m in active if mp.real is not None}
            # one order of ids for every generator, so a chunk's references are decoded for all of them at once
            stems = list(
                dict.fromkeys(
                    s.id for mp in plans for g in self.plan.generators for s in todo[id(mp)][g.name]
                )
            )
            units = []  # per chunk of ids: (generator, {id(mp): samples}) and every file the chunk needs
            for c in range(0, len(stems), chunk):
                ids = set(stems[c : c + chunk])
                per_g = [
                    (g.name, {id(mp): [s for s in todo[id(mp)][g.name] if s.id in ids] for mp in plans})
                    for g in self.plan.generators
                ]
                units.append(
                    (
                        per_g,
                        [f for _, subs in per_g for ss in subs.values() for s in ss for f in _files_of(s)],
                    )
                )
            # each file decoded once: a chunk's references once for all generators, a shared one held
            caches = decoded_chunks(
                [files for _, files in units],
                transforms,
                batch_size=chunk,
                workers=self.workers,
                device=self.device,
            )
            stream = stack.enter_context(contextlib.closing(caches))
            labels = ", ".join(mp.spec.label for mp in plans)
            for (per_g, _), cache in zip(self.bar(units, labels), stream):
                for gname, subs in per_g:
                    rows: list[dict[str, Any]] = []
                    for mp, metric in active:
                        k = index[id(metric)]
                        for col in mp.columns:
                            sub = [s for s in subs[id(mp)] if (gname, col.name, s.id) not in self.done]
                            if k >= 0:
                                sub = self._decode_errors(sub, cache, gname, mp, skip, [col])
                            if not sub:
                                continue
                            if mp.real is not None:
                                metric.restore_state(base[id(metric)])
                            else:
                                metric.reset()
                            args = _decoded_args(mp.feeds.update_args(sub, col.aspect), cache, k)
                            cand = [str(s.candidate) for s in sub]
                            self._update(metric, skip, gname, col.name, args, [s.id for s in sub], mp, cand)
                            if not metric.has_data():
                                continue
                            new = _sample_rows(_local_per_sample(metric), gname, col.name, col.aspect)
                            by_id = {s.id: s for s in sub}
                            for r in new:
                                r["input"] = self.hashes.sample(mp, col, by_id[str(r["id"])])
                            rows.extend(new)
                    written += writer.write(finite_rows(rows, skip))
        return written + self._release(active)

    def _release(self, active: list[tuple[MetricPlan, Any]]) -> int:
        """Record each metric's weights and drop it (the models go before the next pass loads its own)."""
        for mp, metric in active:
            metric.reset()
            self.weights[mp.spec.label] = weights_info(metric, mp)
        while active:
            _free(active.pop()[1])
        return 0

    def _score_set(self, plans: list[MetricPlan], writer: ResultsWriter, skip: _Skipper | None) -> int:
        """Every set-level metric in one pass: the real set decoded once and fed to each, then each generator's
        files decoded once and fed to each (restored to its real-set state)."""
        todo = {
            id(mp): [g for g in self.plan.generators if (g.name, mp.spec.label, SET_ID) not in self.done]
            for mp in plans
        }
        plans = [mp for mp in plans if todo[id(mp)]]
        if not plans:
            return 0
        assert self.hashes is not None
        active = []
        for mp in plans:
            assert mp.real is not None
            kwargs: dict[str, Any] = {}
            # per-image scores for a bootstrap interval (the KDE modes offer none and refuse keep_scores)
            if (
                "keep_scores" in metric_options(mp.spec.name)
                and mp.kwargs.get("divergence") != "kde"
                and not mp.kwargs.get("compat")
                and "keep_scores" not in mp.kwargs
            ):
                kwargs["keep_scores"] = True
            active.append((mp, self._build(mp, **kwargs)))
        transforms, index = _transforms([m for _, m in active])
        chunk, written, run = self._chunk([m for _, m in active]), 0, self.cfg.run
        with torch.no_grad():
            self._feed_real(active, skip)
            real_state = {id(m): m.state_snapshot() for _, m in active}
            for g in self.plan.generators:
                members = [(mp, m) for mp, m in active if g in todo[id(mp)]]
                if not members:
                    continue
                for _, m in members:
                    m.restore_state(real_state[id(m)])
                files = self.plan.images[g.name]
                mine = self.shard(files)
                stream = decoded(mine, transforms, batch_size=chunk, workers=self.workers, device=self.device)
                labels = ", ".join(mp.spec.label for mp, _ in members)
                with contextlib.closing(stream):
                    for batch in self.bar_stream(
                        stream, math.ceil(len(mine) / chunk), f"{labels} | {g.name}"
                    ):
                        cache = DecodedCache(batch)
                        samples = [Sample(id=Path(p).stem, candidate=Path(p)) for p, _ in batch]
                        for mp, metric in members:
                            ok = self._decode_errors(samples, cache, g.name, mp, skip)
                            if not ok:
                                continue
                            k = index[id(metric)]
                            args = {"candidates": [_input(cache, s.candidate, k) for s in ok]}
                            ids = [s.id for s in ok]
                            files_ok = [str(s.candidate) for s in ok]
                            self._update(metric, skip, g.name, mp.spec.label, args, ids, mp, files_ok)
                for mp, metric in members:
                    value = metric.compute()  # synchronised across ranks (sum states)
                    ci = None
                    if callable(getattr(metric, "bootstrap_ci", None)):  # every rank: it synchronises
                        ci = metric.bootstrap_ci(n_boot=run.n_boot, alpha=1.0 - run.ci, seed=run.seed)
                    if self.rank == 0:
                        row = _set_row(
                            metric, g.name, mp.spec.label, value, ci, len(files), len(mp.real or [])
                        )
                        row["input"] = self.hashes.set_level(mp, g.name)
                        written += writer.write(finite_rows([row], skip))
        return written + self._release(active)

    def _finish(self, *, plots: bool) -> dict[str, Any]:
        """Merge the results into ``results.jsonl`` in canonical order and write the summary and reports,
        streamed: the rows are read one at a time into a :class:`ScoreTable` (float64 scores), never held."""
        table = self.table
        merge_in_order(
            self._sources(), self.out / RESULTS, table.position, table.size, visit=table.put, root=self.out
        )
        # the ranks' skipped images too (in the same canonical order), before their shards go
        merge_in_order(
            _skipped_sources(self.out), self.out / SKIPPED, table.position, table.size, root=self.out
        )
        shutil.rmtree(self.out / SHARDS, ignore_errors=True)
        provider = next(
            (i["backbone_provider"] for i in self.identities.values() if i["backbone_provider"]), None
        )
        # the reports (pandas, matplotlib, scipy: seconds of imports) load when there is something to report,
        # not for a run that stops at its plan (a missing file, weights that are not there)
        from genmetrics.leaderboard.report import summarize, write_reports

        summary = summarize(self.plan, table, provider=provider)
        write_reports(self.out, self.plan, summary, plots=plots, rows=table)
        return summary


def _note_unused_references(plan: Plan) -> None:
    """Say which reference images no generator image matches (they are not used), once per folder and
    generator, on stderr: nothing is skipped without a word."""
    if not any("reference" in mp.uses for mp in plan.metrics):
        return
    cfg = plan.config
    for g in plan.generators:
        folder = g.references or cfg.data.references
        if folder is None:
            continue
        note = unused_references(
            list_images(folder, recursive=cfg.data.recursive),
            plan.images[g.name],
            ref_name=f"generator {g.name!r}: references {str(folder)!r}",
        )
        if note:
            print(f"note: {note}", file=sys.stderr)


def _files_of(s: Sample) -> list[Path]:
    """The candidate, then its reference(s)."""
    refs = s.reference if isinstance(s.reference, list) else [s.reference] if s.reference else []
    return [s.candidate, *refs]


def _transforms(metrics: list[Any]) -> tuple[list[Any], dict[int, int]]:
    """The distinct per-image transforms the metrics ask for, and each metric's index among them (-1: the
    metric is given the file paths)."""
    out: list[Any] = []
    index: dict[int, int] = {}
    for m in metrics:
        t = transform_of(m)
        if t == PATHS:
            index[id(m)] = -1
            continue
        if t not in out:
            out.append(t)
        index[id(m)] = out.index(t)
    return out, index


def _input(cache: DecodedCache, path: Any, k: int) -> Any:
    """What a metric is fed for ``path``: its decoded output ``k``, or the path itself (``k`` -1)."""
    return str(path) if k < 0 else cache.get(path, k)


def _decoded_args(args: dict[str, Any], cache: DecodedCache, k: int) -> dict[str, Any]:
    """``metric.update`` arguments with every file path replaced by its decoded image (output ``k``; -1: paths)."""
    out = dict(args)
    if k < 0:
        return out
    if out.get("candidates") is not None:
        out["candidates"] = [_input(cache, p, k) for p in out["candidates"]]
    ref = out.get("reference")
    if ref is not None:
        out["reference"] = [
            [_input(cache, p, k) for p in r] if isinstance(r, list) else _input(cache, r, k) for r in ref
        ]
    return out


def _name_file(e: InputError, files: list[str] | None) -> InputError:
    """A metric's error on decoded images (``candidates[3]: ...``) naming the file it came from."""
    m = re.match(r"(candidates|reference)\[(\d+)\]", str(e))
    if files is None or m is None or m[1] != "candidates" or int(m[2]) >= len(files):
        return e
    return InputError(f"{files[int(m[2])]}: {e}")
