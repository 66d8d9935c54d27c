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

import dataclasses
import gc
import inspect
import logging
import math
import shutil
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from accelerate import PartialState

from genmetrics.data.images import list_images, unused_references
from genmetrics.data.progress import progress
from genmetrics.data.results import (
    ResultsWriter,
    disk_full_named,
    lock_output_folder,
    merge_results,
    read_results,
)
from genmetrics.errors import GenmetricsError, InputError
from genmetrics.leaderboard.config import LeaderboardConfig, load_config
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
from genmetrics.leaderboard.plan import SET_ID, MetricPlan, Plan, Sample, build_plan, device_for_run
from genmetrics.leaderboard.report import summarize, write_reports
from genmetrics.options import COUNT_MAX, check_environment, integer
from genmetrics.options import seed as check_seed
from genmetrics.registry import Granularity, create_metric, metric_options

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
        return self.out / "leaderboard.md"

    @property
    def results(self) -> Path:
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


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


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
) -> RunResult:
    """Run a leaderboard (see the module docstring). ``metric_kwargs`` maps a metric label to extra
    ``create_metric`` keyword arguments (Python objects allowed, e.g. ``{"clip_i": {"backbone": m}}``);
    they override the config's options. Under torchrun every rank calls this; rank 0 merges and reports.

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
    dev = device_for_run(
        device or cfg.run.device, where="--device" if device else cfg.where(("run", "device"))
    )
    plan = build_plan(cfg, metric_kwargs=metric_kwargs, device=dev)
    return _Run(plan, out_dir, dev, resume=resume, on_error=on_error).execute(plots=plots)


class _Run:
    """One call of :func:`run_leaderboard` on one process: checks, lock, scoring, merge and reports."""

    def __init__(self, plan: Plan, out_dir: Path, device: str, *, resume: bool, on_error: str):
        self.t0 = time.time()
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
        self.done: set[tuple[str, str, str]] = set()
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
                summary = self._finish(plots=plots)
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
        return [self.out / RESULTS, *sorted((self.out / SHARDS).glob("*.jsonl"))]

    def _finished_keys(self) -> None:
        """Rank 0 refuses rows that are not this run's and drops rows whose inputs changed; then every rank
        reads the finished keys before any rank writes."""
        assert self.hashes is not None
        if self.rank == 0 and self.resume:
            drop_stale_rows(
                self._sources(), row_check(self.plan, self.unknown_options), self.hashes, self.out
            )
            self.hashes.save()
        self.state.wait_for_everyone()
        self.done = {
            (str(r.get("generator")), str(r.get("metric")), str(r.get("id")))
            for s in self._sources()
            for r in read_results(s)
        }
        if self.rank == 0 and self.resume:
            print(resume_note(self.plan, self.done), file=sys.stderr)
        self.state.wait_for_everyone()

    def _score_all(self) -> int:
        single = self.world == 1
        mine = self.out / RESULTS if single else self.out / SHARDS / f"rank-{self.rank:05d}.jsonl"
        skipped = self.out / (SKIPPED if single else f"{SHARDS}/skipped-rank-{self.rank:05d}.jsonl")
        scored = 0
        with (
            ResultsWriter(mine, resume=True, root=self.out) as writer,
            ResultsWriter(skipped, resume=True, root=self.out) as skip_writer,
        ):
            skip = _Skipper(skip_writer) if self.on_error == "skip" else None
            for mp in self.plan.metrics:
                torch.manual_seed(self.cfg.run.seed)
                try:
                    if mp.level is Granularity.SET:
                        scored += self._score_set(mp, writer, skip)
                    else:
                        scored += self._score_samples(mp, writer, skip)
                except GenmetricsError as e:  # missing weights, a corrupt image...: say which metric
                    kept = (
                        f"finished results are kept in {str(self.out)!r}; rerun with --resume"
                        if scored or self.done
                        else "nothing was scored"
                    )
                    raise _with_context(
                        e, f"{self.cfg.where((*mp.spec.key, 'name'))} ({mp.spec.name}): {e} [{kept}]"
                    ) from e
        return scored

    def _chunk(self, metric: Any) -> int:
        return self.cfg.run.batch_size or int(getattr(metric, "batch_size", 32) or 32)

    def _update(
        self,
        metric: Any,
        skip: _Skipper | None,
        generator: str,
        label: str,
        kwargs: dict[str, Any],
        ids: list[str],
    ) -> None:
        if skip is not None:
            skip.update(metric, generator, label, kwargs, ids)
        else:
            metric.update(**kwargs)

    def _score_samples(self, mp: MetricPlan, writer: ResultsWriter, skip: _Skipper | None) -> int:
        todo: dict[str, list[Sample]] = {
            g.name: [
                s
                for s in self.shard(mp.samples[g.name])
                if any((g.name, c.name, s.id) not in self.done for c in mp.columns)
            ]
            for g in self.plan.generators
        }
        if not any(todo.values()):
            return 0
        assert self.hashes is not None
        metric = create_metric(mp.spec.name, **mp.kwargs)
        chunk, label, written = self._chunk(metric), mp.spec.label, 0
        with torch.no_grad():
            base = None
            if mp.real is not None:  # a real-set reference, fed whole once (every rank: scores stay exact)
                for batch in self.bar(_chunks(mp.real, chunk), f"{label} | real set"):
                    metric.update(**mp.feeds.real_args(batch))
                base = metric.state_snapshot()
            for g in self.plan.generators:
                for batch in self.bar(_chunks(todo[g.name], chunk), f"{label} | {g.name}"):
                    rows: list[dict[str, Any]] = []
                    for col in mp.columns:
                        sub = [s for s in batch if (g.name, col.name, s.id) not in self.done]
                        if not sub:
                            continue
                        if base is not None:
                            metric.restore_state(base)
                        else:
                            metric.reset()
                        args = mp.feeds.update_args(sub, col.aspect)
                        self._update(metric, skip, g.name, col.name, args, [s.id for s in sub])
                        if not metric.has_data():
                            continue
                        new = _sample_rows(_local_per_sample(metric), g.name, col.name, col.aspect)
                        by_id = {s.id: s for s in sub}
                        for r in new:
                            r["input"] = self.hashes.sample(mp, col, by_id[str(r["id"])])
                        rows.extend(new)
                    written += writer.write(finite_rows(rows, skip))
        metric.reset()
        self.weights[label] = weights_info(metric, mp)
        _free(metric)
        return written

    def _score_set(self, mp: MetricPlan, writer: ResultsWriter, skip: _Skipper | None) -> int:
        label = mp.spec.label
        todo = [g for g in self.plan.generators if (g.name, label, SET_ID) not in self.done]
        if not todo:
            return 0
        assert self.hashes is not None and mp.real is not None
        kwargs = dict(mp.kwargs)
        # per-image scores for a bootstrap interval (the KDE modes offer none and refuse keep_scores)
        if (
            "keep_scores" in metric_options(mp.spec.name)
            and kwargs.get("divergence") != "kde"
            and not kwargs.get("compat")
        ):
            kwargs.setdefault("keep_scores", True)
        metric = create_metric(mp.spec.name, **kwargs)
        chunk, written, run = self._chunk(metric), 0, self.cfg.run
        with torch.no_grad():
            for batch in self.bar(_chunks(self.shard(mp.real), chunk), f"{label} | real set"):
                args = mp.feeds.real_args(batch)
                self._update(metric, skip, "__real__", label, args, [p.stem for p in batch])
            real_state = metric.state_snapshot()
            for g in todo:
                metric.restore_state(real_state)
                files = self.plan.images[g.name]
                for batch in self.bar(_chunks(self.shard(files), chunk), f"{label} | {g.name}"):
                    samples = [Sample(id=p.stem, candidate=p) for p in batch]
                    args = mp.feeds.update_args(samples)
                    self._update(metric, skip, g.name, label, args, [s.id for s in samples])
                value = metric.compute()  # synchronised across ranks (sum states)
                ci = None
                if callable(getattr(metric, "bootstrap_ci", None)):  # every rank: it synchronises
                    ci = metric.bootstrap_ci(n_boot=run.n_boot, alpha=1.0 - run.ci, seed=run.seed)
                if self.rank == 0:
                    row = _set_row(metric, g.name, label, value, ci, len(files), len(mp.real))
                    row["input"] = self.hashes.set_level(mp, g.name)
                    written += writer.write(finite_rows([row], skip))
        metric.reset()
        self.weights[label] = weights_info(metric, mp)
        _free(metric)
        return written

    def _finish(self, *, plots: bool) -> dict[str, Any]:
        order = {k: i for i, k in enumerate(self.plan.keys())}
        big = len(order)
        rows = merge_results(
            self._sources(),
            self.out / RESULTS,
            sort_key=lambda r: order.get(
                (str(r.get("generator")), str(r.get("metric")), str(r.get("id"))), big
            ),
            root=self.out,
        )
        shutil.rmtree(self.out / SHARDS, ignore_errors=True)
        provider = next(
            (i["backbone_provider"] for i in self.identities.values() if i["backbone_provider"]), None
        )
        summary = summarize(self.plan, rows, provider=provider)
        write_reports(self.out, self.plan, summary, plots=plots, rows=rows)
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
