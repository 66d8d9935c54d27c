"""The run folder's policy: what ``manifest.json`` records (versions, config, per-metric identity, weights
and backbone fingerprints, input fingerprints, finished runs) and when ``--resume`` may continue (the same
options and input files; every kept row a row of this config, scored from unchanged files).

File names of a run folder (see docs/leaderboard.md) are defined here.
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
import time
from collections.abc import Container
from pathlib import Path
from typing import Any

import torch

from genmetrics.backbones.provider import describe_provider
from genmetrics.backbones.weights import sha256_file
from genmetrics.core.registry import Granularity
from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
from genmetrics.data.output.manifest import manifest
from genmetrics.data.output.rows import RowCheck, check_result_row, dumps_line, iter_results, read_results
from genmetrics.errors import InputError
from genmetrics.leaderboard.config import LeaderboardConfig
from genmetrics.leaderboard.inputs import InputHashes
from genmetrics.leaderboard.plan import MetricPlan, Plan

RESULTS = "results.jsonl"
SHARDS = "shards"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
SKIPPED = "skipped.jsonl"
#: files of a previous run that a fresh run (without ``--resume``) removes first
OUTPUTS = (
    SKIPPED,
    RESULTS,
    MANIFEST,
    SUMMARY,
    "leaderboard.md",
    "leaderboard.csv",
    "leaderboard.html",
    "paired.csv",
)
#: options that do not change results (metrics are batch-size invariant): a run may resume with others
NOT_IDENTITY = ("device", "batch_size", "cache_dir")


def describe_option(v: Any) -> Any:
    """JSON-able description of an option value (objects such as backbones become ``<ClassName>``).

    >>> describe_option({"weights": Path("w.pt"), "backbone": torch.nn.Linear(1, 1), "k": (1, 2)})
    {'weights': 'w.pt', 'backbone': '<Linear>', 'k': [1, 2]}
    """
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [describe_option(x) for x in v]
    if isinstance(v, dict):
        return {str(k): describe_option(x) for k, x in v.items()}
    if isinstance(v, Path):
        return str(v)
    return f"<{type(v).__name__}>"


def metric_identity(mp: MetricPlan) -> dict[str, Any]:
    """What must not change between a run and its resume: name, options, aspects and backbone provider.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> sorted(metric_identity(plan.metrics[0]))
    ['aspects', 'backbone_provider', 'name', 'options']
    """
    options = {k: v for k, v in mp.kwargs.items() if k not in NOT_IDENTITY}
    return {
        "name": mp.spec.name,
        "options": describe_option(options),
        "aspects": mp.spec.aspects,
        "backbone_provider": describe_provider(),
    }


def backbone_fingerprint(module: Any) -> dict[str, Any]:
    """A cheap identity of loaded weights: sha256 over parameter names, shapes, dtypes and a strided
    sample of values (at most 64 per tensor), plus the parameter count.

    >>> layer = torch.nn.Linear(2, 2)
    >>> before = backbone_fingerprint(layer)
    >>> with torch.no_grad():
    ...     layer.weight[0, 0] += 1.0
    >>> sorted(before), before == backbone_fingerprint(layer)
    (['class', 'fingerprint', 'parameters'], False)
    """
    h = hashlib.sha256()
    n = 0
    for name, t in sorted(module.state_dict().items()):
        if not isinstance(t, torch.Tensor):
            continue
        n += t.numel()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        flat = t.detach().reshape(-1)
        if flat.numel():
            step = max(1, flat.numel() // 64)
            h.update(flat[::step][:64].to("cpu", torch.float64).numpy().tobytes())
    return {"class": type(module).__name__, "parameters": n, "fingerprint": h.hexdigest()[:16]}


def weights_info(metric: Any, mp: MetricPlan) -> dict[str, Any]:
    """The manifest's ``weights`` of one metric: default and given weights (sha256 of a local file), the
    labels of vector scores, and a fingerprint of every loaded backbone.

    >>> import tempfile
    >>> import genmetrics as gm
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> weights_info(gm.create_metric("psnr"), plan.metrics[0])  # no weights, no backbone
    {'default_weights': None}
    """
    info: dict[str, Any] = {"default_weights": mp.card.default_weights}
    if "weights" in mp.kwargs:
        info["weights"] = describe_option(mp.kwargs["weights"])
        w = mp.kwargs["weights"]
        if isinstance(w, (str, Path)) and Path(w).is_file():
            info["weights_sha256"] = sha256_file(w)
    labels = getattr(metric, "attributes", None)  # what the columns of vector scores ("scores") are
    if isinstance(labels, (list, tuple)) and labels and all(isinstance(a, str) for a in labels):
        info["labels"] = list(labels)
    backbones = metric.backbones()
    if backbones:
        info["backbones"] = {k: backbone_fingerprint(m) for k, m in backbones.items()}
    return info


def provider_in_use(manifest_metrics: dict[str, Any]) -> bool:
    """Whether any metric of a manifest's ``metrics`` table was scored with a backbone provider.

    >>> provider_in_use({"psnr": {"identity": {"backbone_provider": None}}})
    False
    """
    return any(
        isinstance(m, dict) and isinstance(m.get("identity"), dict) and m["identity"].get("backbone_provider")
        for m in manifest_metrics.values()
    )


# ------------------------------------------------------------------------------------------ manifest
def read_manifest(out_dir: Path) -> dict[str, Any] | str | None:
    """The manifest, ``None`` when there is none, or a string saying why it cannot be read.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / MANIFEST).write_text('{"metrics": ')  # torn
    ...     read_manifest(Path(d)).endswith("cannot be read (JSONDecodeError: line 1, column 13)")
    True
    """
    p = out_dir / MANIFEST
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except json.JSONDecodeError as e:
        return f"{p} cannot be read (JSONDecodeError: line {e.lineno}, column {e.colno})"
    except UnicodeDecodeError as e:
        return f"{p} cannot be read (not UTF-8 text at byte {e.start})"
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        return f"{p} is not a run manifest (no 'metrics' table)"
    return doc


def check_resumable(
    cfg: LeaderboardConfig,
    plan: Plan,
    identities: dict[str, Any],
    old: dict[str, Any] | str | None,
    out_dir: Path,
) -> set[str]:
    """Refuse a resume whose options or input files differ from the run being resumed, or whose manifest is
    missing or unreadable while results exist. Returns the metric labels the manifest does not record.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     out = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).out
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     ids = {mp.spec.label: metric_identity(mp) for mp in plan.metrics}
    ...     same = check_resumable(plan.config, plan, ids, read_manifest(out), out)
    ...     ids["psnr"]["options"] = {"max_db": 60.0}  # as if the config had changed
    ...     try:
    ...         check_resumable(plan.config, plan, ids, read_manifest(out), out)
    ...     except InputError as e:
    ...         print(same, "configured differently" in str(e))
    set() True
    """
    hint = f"start a new --out folder, or run without --resume to start {str(out_dir)!r} afresh"
    has_rows = any(
        p.is_file() and p.stat().st_size > 0
        for p in [out_dir / RESULTS, *sorted((out_dir / SHARDS).glob("*.jsonl"))]
    )
    if not isinstance(old, dict):
        if has_rows:
            why = old if isinstance(old, str) else f"{out_dir / MANIFEST} is missing"
            raise InputError(
                f"--resume: {why}, so the options the finished rows were computed with are unknown; {hint}"
            )
        return set()
    unknown: set[str] = set()
    old_metrics = old.get("metrics", {})
    for mp in plan.metrics:
        prev = old_metrics.get(mp.spec.label)
        prev = prev.get("identity") if isinstance(prev, dict) else None
        if prev is None:
            unknown.add(mp.spec.label)
        elif prev != identities[mp.spec.label]:
            raise cfg.error(
                mp.spec.key,
                f"metric {mp.spec.label!r} is configured differently from the run being "
                f"resumed in {str(out_dir)!r} (was {json.dumps(prev)}, now "
                f"{json.dumps(identities[mp.spec.label])}); {hint}",
            )
    old_inputs = old.get("inputs", {})
    for key, fp in plan.fingerprints.items():
        was = _key_in_old_run(key, cfg, old)
        if was in old_inputs and old_inputs[was] != fp:
            raise InputError(
                f"{cfg.source}: {key}: the image files changed since the run being resumed in "
                f"{str(out_dir)!r} (files added, removed or rewritten); {hint}"
            )
    return unknown


def _key_in_old_run(key: str, cfg: LeaderboardConfig, old: dict[str, Any]) -> str | None:
    """The key the input fingerprint ``key`` (``generators[1].references``) had in the resumed run's manifest:
    its generator found by name, since generators may have been added, removed or reordered in the config
    since (None: a generator that run did not have). Keys of ``data`` and manifests without their generators'
    names are kept as they are.

    >>> from types import SimpleNamespace as NS
    >>> cfg = NS(generators=[NS(name="good"), NS(name="mid")])
    >>> old = {"generators": {"mid": {}, "bad": {}, "good": {}}}
    >>> _key_in_old_run("generators[0]", cfg, old), _key_in_old_run("generators[1].references", cfg, old)
    ('generators[2]', 'generators[0].references')
    >>> _key_in_old_run("data.references", cfg, old), _key_in_old_run("generators[0]", NS(generators=[NS(name="new")]), old)
    ('data.references', None)
    """
    m = re.fullmatch(r"generators\[(\d+)\](.*)", key)
    names = old.get("generators")
    if m is None or not isinstance(names, dict):
        return key
    names = list(names)
    name = cfg.generators[int(m[1])].name
    return f"generators[{names.index(name)}]{m[2]}" if name in names else None


def write_manifest(
    out_dir: Path,
    plan: Plan,
    identities: dict[str, Any],
    old: dict[str, Any] | None,
    *,
    world_size: int,
    device: str,
    status: str,
    resumed: bool,
    weights: dict[str, Any],
    elapsed: float,
) -> None:
    """Write ``manifest.json`` (atomically): ``status`` ``running`` at the start, ``complete`` at the end.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     ids = {mp.spec.label: metric_identity(mp) for mp in plan.metrics}
    ...     write_manifest(Path(d), plan, ids, None, world_size=1, device="cpu", status="running",
    ...                    resumed=False, weights={}, elapsed=0.0)
    ...     doc = read_manifest(Path(d))
    >>> doc["status"], sorted(doc["metrics"]), doc["inputs"] == plan.fingerprints
    ('running', ['psnr'], True)
    """
    cfg = plan.config
    old_metrics = (old or {}).get("metrics", {})
    metrics = {}
    for mp in plan.metrics:
        prev = old_metrics.get(mp.spec.label, {})
        w = weights.get(mp.spec.label) or prev.get("weights") or {"default_weights": mp.card.default_weights}
        metrics[mp.spec.label] = {
            "identity": identities[mp.spec.label],
            "family": mp.card.family,
            "level": mp.level,
            "higher_is_better": mp.higher_is_better,
            "columns": [c.name for c in mp.columns],
            "weights": w,
        }
    cfg_sha = hashlib.sha256(cfg.path.read_bytes()).hexdigest() if cfg.path is not None else None
    runs = list((old or {}).get("runs", [])) if resumed else []
    if status == "complete":
        runs.append(
            {
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "world_size": world_size,
                "device": device,
                "elapsed_s": round(elapsed, 3),
            }
        )
    doc = manifest(
        tool="genmetrics leaderboard",
        status=status,
        resumed=resumed,
        config=str(cfg.path) if cfg.path is not None else None,
        config_sha256=cfg_sha,
        config_data=describe_option(cfg.raw),
        seed=cfg.run.seed,
        n_boot=cfg.run.n_boot,
        ci=cfg.run.ci,
        batch_size=cfg.run.batch_size,
        device=device,
        world_size=world_size,
        generators={
            g.name: {"images": str(g.images), "n": len(plan.images[g.name])} for g in plan.generators
        },
        inputs=plan.fingerprints,
        metrics=metrics,
        runs=runs,
    )
    atomic_write_json(out_dir / MANIFEST, doc, root=out_dir)


# ------------------------------------------------------------------------------------------ resume
def row_check(plan: Plan, unknown_options: set[str]) -> RowCheck:
    """The check of a results row on resume: a result row (:func:`check_result_row`) of a generator, metric
    column and id of this config, of a metric whose options the manifest records.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     check = row_check(build_plan(load_config(toy_leaderboard(d), base_dir=d)), set())
    >>> check({"generator": "copy", "metric": "psnr", "id": "000", "score": 1.0}) is None
    True
    >>> check({"generator": "old", "metric": "psnr", "id": "000", "score": 1.0})
    "generator 'old' is not in the config"
    >>> check({"generator": "copy", "metric": "psnr", "id": "000", "score": None})  # doctest: +ELLIPSIS
    "'score' of a per-image metric should be a finite number, got null ..."
    """
    gens = {g.name for g in plan.generators}
    cols = {c.name: mp.spec.label for mp in plan.metrics for c in mp.columns}
    # a per-image score is always a finite number when a run writes it (null is a set value without a score)
    per_image = {c.name for mp in plan.metrics if mp.card.level == Granularity.SAMPLE for c in mp.columns}
    planned = set(plan.keys())

    def check(row: Any) -> str | None:
        why = check_result_row(row)
        if why:
            return why
        g, m, i = row["generator"], row["metric"], row["id"]
        if g not in gens:
            return f"generator {g!r} is not in the config"
        if m not in cols:
            return f"metric column {m!r} is not in the config"
        if (g, m, i) not in planned:
            return f"id {i!r} is not an image of generator {g!r}"
        if row["score"] is None and m in per_image:
            return (
                "'score' of a per-image metric should be a finite number, got null (a run never writes one): "
                "remove the line to have it scored again"
            )
        if cols[m] in unknown_options:
            return (
                f"manifest.json does not record the options of metric {cols[m]!r}, so this row cannot be "
                "trusted"
            )
        return None

    return check


def drop_stale_rows(
    sources: list[Path],
    check: RowCheck,
    hashes: InputHashes,
    out_dir: Path,
    seen: Any = None,
) -> int:
    """Check every row of ``sources`` (refusing foreign rows with file:line) and remove the rows whose inputs
    changed since they were scored (they are scored again); says how many on stderr and returns it. A key
    found in two rows that differ (an edited file: which one is the run's cannot be told) is refused with both
    files and lines; copies of one row are kept once, as the merge does. ``seen``: an empty container with
    ``add`` and ``in`` for the keys (a :class:`~genmetrics.leaderboard.scores.KeySet`; default a set).

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     config = toy_leaderboard(d)
    ...     out = run_leaderboard(config, Path(d) / "out", base_dir=d, plots=False).out
    ...     _ = (Path(d) / "copy" / "000.png").write_bytes((Path(d) / "noisy" / "000.png").read_bytes())
    ...     plan = build_plan(load_config(config, base_dir=d))
    ...     dropped = drop_stale_rows([out / RESULTS], row_check(plan, set()), InputHashes(plan), out)
    >>> dropped  # the row of the replaced image: it is scored again on --resume
    1
    """
    stale_total = 0
    seen = set() if seen is None else seen
    twice: set[tuple[str, str, str]] = set()  # keys in more than one row (none in a run's own files)
    for src in sources:
        rows = read_results(src, check=check)
        keep = [r for r in rows if r.get("input") == hashes.of_key((r["generator"], r["metric"], r["id"]))]
        for r in keep:
            key = (r["generator"], r["metric"], r["id"])
            if key in seen:
                twice.add(key)
            seen.add(key)
        if len(keep) != len(rows):
            stale_total += len(rows) - len(keep)
            atomic_write_text(src, "".join(dumps_line(r) + "\n" for r in keep), root=out_dir)
    if twice:
        _refuse_differing_copies(sources, twice)
    if stale_total:
        print(
            f"note: --resume: {stale_total} finished row(s) were scored from files that changed since (same "
            "names, other content); they are scored again",
            file=sys.stderr,
        )
    return stale_total


def _refuse_differing_copies(sources: list[Path], keys: set[tuple[str, str, str]]) -> None:
    """Raise :class:`InputError` for the first of ``keys`` whose rows in ``sources`` are not all the same,
    naming the two files and lines (read again, a line at a time: only for keys found twice)."""
    first: dict[tuple[str, str, str], tuple[dict[str, Any], str]] = {}
    for src in sources:
        with open(src, "rb") as f:
            line, pos = 0, 0
            for row, offset in iter_results(src):
                while pos <= offset:  # the line number of the row at ``offset``
                    pos += len(f.readline())
                    line += 1
                key = (row["generator"], row["metric"], row["id"])
                if key not in keys:
                    continue
                if key not in first:
                    first[key] = (row, f"{src}:{line}")
                elif first[key][0] != row:
                    g, m, i = key
                    raise InputError(
                        f"{first[key][1]} and {src}:{line}: two different rows for generator {g!r}, column "
                        f"{m!r}, id {i!r} (score {first[key][0].get('score')!r} and {row.get('score')!r}), and "
                        "which one the run wrote cannot be told; delete the wrong line (or both, to have it scored "
                        "again), or run without --resume to start afresh"
                    )


def resume_note(plan: Plan, done: Container[tuple[str, str, str]]) -> str:
    """What a resume keeps and what is left, per column: ``note: --resume: kept 4 of 6 row(s); left: psnr
    2 of 6``.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> resume_note(plan, {("copy", "psnr", "000")})
    'note: --resume: kept 1 finished row(s) of 6; left to score: psnr 5 of 6'
    >>> resume_note(plan, set(plan.keys()))
    'note: --resume: kept 6 finished row(s) of 6; nothing left to score'
    """
    keys = plan.keys()
    kept = sum(1 for k in keys if k in done)
    left: dict[str, list[int]] = {}
    for k in keys:
        count = left.setdefault(k[1], [0, 0])
        count[1] += 1
        count[0] += k not in done
    rest = [f"{c} {n} of {total}" for c, (n, total) in left.items() if n]
    tail = f"left to score: {', '.join(rest)}" if rest else "nothing left to score"
    return f"note: --resume: kept {kept} finished row(s) of {len(keys)}; {tail}"
