"""Turn a config into a checked plan: every file, image folder, stem match, prompt and metric option is
validated here, before any metric scores anything (and before any weights load).

What each metric gets is decided by :mod:`genmetrics.core.wiring` from the typed input fields of its
card (the same function wires ``genmetrics score``); this module supplies the sources (the generator's
folder, its references matched by stem, the prompts file, the real set) and words a missing input with the
config key that supplies it.
"""

from __future__ import annotations

import difflib
import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from genmetrics.backbones.precheck import check_metric
from genmetrics.backbones.weights import genmetrics_home
from genmetrics.core.options import device as check_device
from genmetrics.core.registry import Granularity, MetricCard, create_metric, get_card, metric_options
from genmetrics.core.wiring import Feeds, Sample, Sources, WiringError, feeds, wire
from genmetrics.data.device import available_devices
from genmetrics.data.io.images import list_images, stem_index
from genmetrics.data.jsonl import iter_jsonl
from genmetrics.errors import GenmetricsError, InputError, PluginError
from genmetrics.leaderboard.config import (
    GeneratorSpec,
    KeyPath,
    LeaderboardConfig,
    MetricSpec,
    key_str,
    resolve_option_paths,
)

SET_ID = "__set__"  #: the ``id`` of the one results row a set-level metric writes per generator
__all__ = [
    "SET_ID",
    "Column",
    "MetricPlan",
    "Plan",
    "Sample",
    "build_plan",
    "device_for_run",
    "file_list_hash",
]


@dataclass
class Column:
    """A result column: one per metric, or one per aspect of a metric scored under several aspects.

    >>> import tempfile
    >>> from genmetrics.leaderboard import load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> [(c.name, c.metric.name, c.aspect) for c in plan.columns()]
    [('psnr', 'psnr', None)]
    """

    name: str  # result column (the ``metric`` field of a results row)
    metric: MetricSpec
    aspect: str | None = None


@dataclass
class MetricPlan:
    """What one metric will do: its card, options, columns, the samples per generator (or the real set),
    and which inputs its card wired in (:class:`~genmetrics.core.wiring.Feeds`).

    >>> import tempfile
    >>> from genmetrics.leaderboard import load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> mp = plan.metrics[0]
    >>> mp.card.name, mp.uses, mp.higher_is_better, sorted(mp.samples)
    ('psnr', ('reference',), True, ['copy', 'noisy'])
    """

    spec: MetricSpec
    card: MetricCard
    kwargs: dict[str, Any]
    columns: list[Column]
    feeds: Feeds
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # generator -> samples (sample level)
    real: list[Path] | None = None  # the real set (set level, or a real-set reference)

    @property
    def uses(self) -> tuple[str, ...]:
        """Inputs filled in: reference, reference_sets, real, prompt, aspects."""
        return self.feeds.uses

    @property
    def level(self) -> Granularity:
        """Whether the metric scores each sample or only a whole set (from its card)."""
        return self.card.level

    @property
    def higher_is_better(self) -> bool | None:
        """The metric's direction from its card (None where neither way is better)."""
        return self.card.higher_is_better


@dataclass
class Plan:
    """Everything a run will score (see :func:`build_plan`): images per generator, metric plans, input
    fingerprints; ``keys()`` lists every ``(generator, column, id)`` in the canonical order.

    >>> import tempfile
    >>> from genmetrics.leaderboard import load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> [g.name for g in plan.generators], len(plan.keys()), sorted(plan.fingerprints)
    (['noisy', 'copy'], 6, ['data.references', 'generators[0]', 'generators[1]'])
    """

    config: LeaderboardConfig
    images: dict[str, list[Path]]  # generator -> candidate files, sorted by stem
    metrics: list[MetricPlan]
    fingerprints: dict[str, str]  # "generators[i]" / "data.references" / "data.real" -> file-list hash

    @property
    def generators(self) -> list[GeneratorSpec]:
        """The generators to score, in config order."""
        return self.config.generators

    def columns(self) -> list[Column]:
        """Every result column of the run, metric by metric (one per aspect for aspect metrics)."""
        return [c for m in self.metrics for c in m.columns]

    def metric_of(self, column: str) -> MetricPlan:
        """The metric plan that owns the result column named ``column``."""
        return next(m for m in self.metrics if any(c.name == column for c in m.columns))

    def keys(self) -> list[tuple[str, str, str]]:
        """Every planned ``(generator, column, id)`` in canonical order (metric, column, generator, id)."""
        out = []
        for m in self.metrics:
            for c in m.columns:
                for g in self.generators:
                    if m.level is Granularity.SET:
                        out.append((g.name, c.name, SET_ID))
                    else:
                        out.extend((g.name, c.name, s.id) for s in m.samples[g.name])
        return out


# ------------------------------------------------------------------------------------------ helpers
def file_list_hash(files: list[Path]) -> str:
    """sha256 of the sorted ``(name, size)`` list: changes when a file is added, removed or rewritten
    with another size (resume refuses changed inputs).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     a = Path(d) / "000.png"
    ...     _ = a.write_bytes(b"12")
    ...     before = file_list_hash([a])
    ...     _ = a.write_bytes(b"123")
    ...     before == file_list_hash([a]), len(before)
    (False, 16)
    """
    h = hashlib.sha256()
    for f in sorted(files, key=lambda p: p.stem):
        try:
            size = os.path.getsize(f)
        except OSError:  # missing or a broken link: named when it is read, per --on-error
            size = -1
        h.update(f"{f.name}\t{size}\n".encode())
    return h.hexdigest()[:16]


def device_for_run(device: str, *, where: str = "--device") -> str:
    """``auto`` -> ``cuda:<LOCAL_RANK>`` when CUDA is available, else ``cpu``. A device this machine does not
    have is refused in one line naming ``where`` (the flag or config key) and the devices it has.

    >>> import torch
    >>> device_for_run("cpu"), device_for_run("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")
    ('cpu', True)
    >>> device_for_run("cuda:99", where="run.device")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.GenmetricsError: run.device = 'cuda:99': this machine has no such device (it has: cpu...
    """
    device = check_device(where, device)
    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    kind, _, index = device.partition(":")
    if kind in ("cuda", "mps"):
        have = available_devices()
        want = device if index or kind == "mps" else "cuda:0"
        if want not in have:
            raise GenmetricsError(
                f"{where} = {device!r}: this machine has no such device (it has: {', '.join(have)}); "
                'choose one of those, or "auto"'
            )
    return device


@dataclass
class _PromptRow:
    line: int
    prompt: str | None
    references: list[Path] | None


@dataclass
class _Inputs:
    """The files of a config, read and checked once (every metric takes its sources from here)."""

    images: dict[str, list[Path]] = field(default_factory=dict)
    ref_files: dict[Path, list[Path]] = field(default_factory=dict)
    ref_keys: dict[Path, KeyPath] = field(default_factory=dict)
    real: list[Path] | None = None
    prompts: dict[Path, dict[str, _PromptRow]] = field(default_factory=dict)
    prompt_keys: dict[Path, KeyPath] = field(default_factory=dict)
    fingerprints: dict[str, str] = field(default_factory=dict)


def _files(cfg: LeaderboardConfig, folder: Path, key: KeyPath) -> list[Path]:
    try:
        files = list_images(folder, recursive=cfg.data.recursive)
        stem_index(files, role=str(folder))  # the rule `genmetrics score` applies too: one file per stem
    except InputError as e:
        raise cfg.error(key, str(e)) from None
    return sorted(files, key=lambda p: p.stem)


def _load_prompts(cfg: LeaderboardConfig, path: Path, key: KeyPath) -> dict[str, _PromptRow]:
    rows: dict[str, _PromptRow] = {}
    try:
        for n, obj in iter_jsonl(path):
            where = f"{path.name}:{n}"
            sid = obj.get("id")
            if isinstance(sid, int) and not isinstance(sid, bool):
                sid = str(sid)
            if not isinstance(sid, str) or not sid:
                raise InputError(f"{where}: missing or bad 'id' (the image file stem), got {sid!r}")
            if sid in rows:
                raise InputError(f"{where}: id {sid!r} repeats line {rows[sid].line}")
            prompt = obj.get("prompt")
            if prompt is not None and (not isinstance(prompt, str) or not prompt.strip()):
                raise InputError(f"{where}: 'prompt' should be a non-empty string, got {prompt!r}"[:300])
            refs = obj.get("references")
            ref_paths = None
            if refs is not None:
                if not isinstance(refs, list) or not all(isinstance(r, str) and r for r in refs):
                    raise InputError(
                        f"{where}: 'references' should be a list of image paths, got {refs!r}"[:300]
                    )
                ref_paths = [Path(r) if Path(r).is_absolute() else path.parent / r for r in refs]
            unknown = set(obj) - {"id", "prompt", "references"}
            if unknown:
                raise InputError(
                    f"{where}: unknown key(s) {sorted(unknown)}; a line holds id, prompt and references"
                )
            rows[sid] = _PromptRow(n, prompt, ref_paths)
    except InputError as e:
        raise cfg.error(key, str(e)) from None
    return rows


def _read_inputs(cfg: LeaderboardConfig) -> _Inputs:
    """Every folder and prompts file of the config (checked whether or not a metric uses it: typos fail
    early), with the fingerprints of the file lists."""
    inp = _Inputs()
    for g in cfg.generators:
        inp.images[g.name] = _files(cfg, g.images, (*g.key, "images"))
        inp.fingerprints[f"generators[{g.index}]"] = file_list_hash(inp.images[g.name])
    for key, folder in [(("data", "references"), cfg.data.references)] + [
        ((*g.key, "references"), g.references) for g in cfg.generators
    ]:
        if folder is not None and folder not in inp.ref_files:
            inp.ref_files[folder] = _files(cfg, folder, key)
            inp.ref_keys[folder] = key
            inp.fingerprints[key_str(key)] = file_list_hash(inp.ref_files[folder])
    if cfg.data.real is not None:
        inp.real = _files(cfg, cfg.data.real, ("data", "real"))
        inp.fingerprints["data.real"] = file_list_hash(inp.real)
    elif cfg.data.references is not None:
        inp.real = inp.ref_files[cfg.data.references]
    for key, f in [(("data", "prompts"), cfg.data.prompts)] + [
        ((*g.key, "prompts"), g.prompts) for g in cfg.generators
    ]:
        if f is not None and f not in inp.prompts:
            inp.prompts[f] = _load_prompts(cfg, f, key)
            inp.prompt_keys[f] = key
    return inp


# ------------------------------------------------------------------------------------------ plan
def build_plan(
    cfg: LeaderboardConfig,
    *,
    metric_kwargs: dict[str, dict[str, Any]] | None = None,
    device: str | None = None,
    check_construct: bool = True,
    check_weights: bool = True,
) -> Plan:
    """Check everything a run needs and list the work. Raises :class:`InputError` naming the config
    key and line; nothing is scored and no weights load here (metrics are constructed once to check
    their options, which by the house rules loads no weights). ``check_weights=False`` leaves weights that
    cannot be had to the run (a resumed run checks only the metrics it still has to score:
    :func:`check_plan_weights`).

    Inputs are wired from the metric cards' typed fields (psnr: a reference matched by file stem):

    >>> import tempfile
    >>> from genmetrics.leaderboard import load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     sample = plan.metrics[0].samples["copy"][0]
    ...     plan.metrics[0].uses, len(plan.keys()), sample.id, sample.reference.name == sample.candidate.name
    (('reference',), 6, '000', True)
    """
    metric_kwargs = dict(metric_kwargs or {})
    unknown = set(metric_kwargs) - {m.label for m in cfg.metrics}
    if unknown:
        raise InputError(
            f"metric_kwargs names {sorted(unknown)}, which are not metric labels of the config "
            f"({', '.join(m.label for m in cfg.metrics)})"
        )
    inp = _read_inputs(cfg)
    plans = [
        _metric_plan(
            cfg, spec, inp, metric_kwargs.get(spec.label, {}), device, check_construct, check_weights
        )
        for spec in cfg.metrics
    ]
    _share_samples(plans)
    if cfg.run.rank_by is not None:
        m = next(p for p in plans if cfg.run.rank_by in [c.name for c in p.columns])
        if m.higher_is_better is None:
            raise cfg.error(
                ("run", "rank_by"),
                f"metric {m.spec.name!r} has no direction (higher_is_better is "
                "unknown), so it cannot rank generators; choose another column",
            )
    return Plan(config=cfg, images=inp.images, metrics=plans, fingerprints=inp.fingerprints)


def _metric_kwargs(
    cfg: LeaderboardConfig, spec: MetricSpec, given: dict[str, Any], device: str | None
) -> dict[str, Any]:
    """The ``create_metric`` options of one metric: the config's (paths resolved), then ``given`` (Python
    objects), the run's device and feature cache where the metric takes them. Unknown keys are refused."""
    key = spec.key
    try:
        accepted = metric_options(spec.name)
    except (ImportError, AttributeError) as e:
        raise GenmetricsError(
            f"{cfg.where((*key, 'name'))}: metric {spec.name!r} is registered but its code "
            f"cannot be loaded ({type(e).__name__}: {e})"
        ) from None
    for opt in spec.options:
        if opt not in accepted:
            close = difflib.get_close_matches(opt, list(accepted), n=2, cutoff=0.6)
            hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
            raise cfg.error(
                (*key, opt),
                f"unknown key {opt!r} for metric {spec.name!r}{hint} "
                f"(metric options: {', '.join(accepted) or 'none'}; runner keys: name, label, aspects)",
            )
    kwargs = {**resolve_option_paths(cfg, spec.options), **given}
    if device is not None and "device" in accepted and "device" not in kwargs:
        kwargs["device"] = device
    if cfg.run.cache is not False and "cache_dir" in accepted and "cache_dir" not in kwargs:
        kwargs["cache_dir"] = str(
            cfg.run.cache if cfg.run.cache is not True else genmetrics_home() / "features"
        )
    return kwargs


def _check_weights(
    cfg: LeaderboardConfig, spec: MetricSpec, card: MetricCard, kwargs: dict[str, Any]
) -> None:
    """Weights of a metric that no cache holds and no download can fetch, or trained weights its family needs
    and ``kwargs`` do not give (the card's ``precheck``), named with the metric's config key."""
    try:
        check_metric(card, kwargs)
    except GenmetricsError as e:  # same type, with the config key
        raise type(e)(f"{cfg.where(spec.key)}: {e}") from None


def check_plan_weights(plan: Plan, left: set[str]) -> None:
    """:func:`build_plan`'s weights check (``check_weights=True``) for the metrics that own a column of
    ``left`` only: a resumed run whose model-based metrics are finished needs none of their weights."""
    for mp in plan.metrics:
        if any(c.name in left for c in mp.columns):
            _check_weights(plan.config, mp.spec, mp.card, mp.kwargs)


def _metric_plan(
    cfg: LeaderboardConfig,
    spec: MetricSpec,
    inp: _Inputs,
    given: dict[str, Any],
    device: str | None,
    check_construct: bool,
    check_weights: bool = True,
) -> MetricPlan:
    key = spec.key
    try:
        card = get_card(spec.name)
    except ValueError as e:
        raise cfg.error((*key, "name"), str(e)) from None
    kwargs = _metric_kwargs(cfg, spec, given, device)
    if check_construct:
        if check_weights:
            _check_weights(cfg, spec, card, kwargs)  # before open_clip loads
        try:
            create_metric(spec.name, **kwargs)
        except PluginError as e:  # the metric's class is at fault, not the options the config gives it
            raise PluginError(f"{cfg.where(key)}: {e}") from None
        except (InputError, ValueError, TypeError) as e:
            raise cfg.error(key, f"metric {spec.name!r} rejects its options: {e}") from None
        except GenmetricsError as e:  # e.g. weights that are not there: same type, with the config key
            raise type(e)(f"{cfg.where(key)}: {e}") from None
    try:
        feed = feeds(card, kwargs, aspects=spec.aspects)
    except WiringError as e:
        raise _wiring_error(cfg, spec, card.level, None, e, inp) from None
    aspects: list[str | None] = list(spec.aspects) if spec.aspects else [None]
    mp = MetricPlan(
        spec=spec,
        card=card,
        kwargs=kwargs,
        columns=[Column(c, spec, a) for c, a in zip(spec.columns(), aspects)],
        feeds=feed,
    )
    for g in cfg.generators:
        try:
            samples, mp.real = wire(feed, inp.images[g.name], _sources(cfg, g, inp))
        except WiringError as e:
            raise _wiring_error(cfg, spec, card.level, g, e, inp) from None
        if feed.level is Granularity.SAMPLE:
            _check_reference_lists(cfg, g, samples, inp)
            mp.samples[g.name] = samples
    return mp


def _share_samples(plans: list[MetricPlan]) -> None:
    """Metrics wired to the same samples of a generator (psnr and ssim: each image and its reference) share
    one list of them: a large run holds one ``Sample`` per image and generator, not one per metric too."""
    seen: dict[str, list[list[Sample]]] = {}
    for mp in plans:
        for g, samples in mp.samples.items():
            known = seen.setdefault(g, [])
            same = next((k for k in known if k == samples), None)
            if same is None:
                known.append(samples)
            else:
                mp.samples[g] = same


def _sources(cfg: LeaderboardConfig, g: GeneratorSpec, inp: _Inputs) -> Sources:
    """What generator ``g``'s samples can be fed: its references by stem, its prompts file's prompts and
    reference lists, the real set."""
    folder = g.references or cfg.data.references
    prompt_file = g.prompts or cfg.data.prompts
    rows = inp.prompts[prompt_file] if prompt_file is not None else None
    return Sources(
        references={r.stem: r for r in inp.ref_files[folder]} if folder is not None else None,
        reference_lists={k: r.references for k, r in rows.items() if r.references}
        if rows is not None
        else None,
        real=inp.real,
        texts={k: r.prompt for k, r in rows.items() if r.prompt is not None} if rows is not None else None,
    )


def _check_reference_lists(
    cfg: LeaderboardConfig, g: GeneratorSpec, samples: list[Sample], inp: _Inputs
) -> None:
    prompt_file = g.prompts or cfg.data.prompts
    for s in samples:
        if isinstance(s.reference, list):
            assert prompt_file is not None  # a reference list comes from the prompts file
            for r in s.reference:
                if not r.is_file():
                    row = inp.prompts[prompt_file][s.id]
                    raise cfg.error(
                        inp.prompt_keys[prompt_file],
                        f"{prompt_file.name}:{row.line}: reference image {str(r)!r} of id {s.id!r} does not exist",
                    )


def _wiring_error(
    cfg: LeaderboardConfig,
    spec: MetricSpec,
    level: Granularity,
    g: GeneratorSpec | None,
    e: WiringError,
    inp: _Inputs,
) -> InputError:
    """A missing input, worded with the config key that supplies it."""
    name, key = spec.name, spec.key
    if e.need in ("aspects", "no_aspects"):
        return cfg.error(key if e.need == "aspects" else (*key, "aspects"), str(e))
    if e.need == "real":
        what = (
            "is a set-level metric that compares each generator with the real set"
            if level is Granularity.SET
            else "needs the real set (its reference is the real images as a set)"
        )
        return cfg.error(
            key, f"{name!r} {what}: set data.real (or data.references) to a folder of real images"
        )
    assert g is not None  # the other needs come from a generator's sources
    gkey = (*g.key, "images")
    if e.need == "reference":
        folder = g.references or cfg.data.references
        if folder is None:
            return cfg.error(
                key,
                f"{name!r} compares each image with its reference: set data.references (or "
                f"generators[{g.index}].references) to a folder of reference images with the same file stems",
            )
        names = {f.stem: f.name for f in inp.images[g.name]}
        return cfg.error(
            gkey,
            f"{len(e.missing)} image(s) have no reference with the same stem in {cfg.ref(inp.ref_keys[folder])} = "
            f"{str(folder)!r} (first: {', '.join(names[i] for i in e.missing[:3])}); {name!r} matches "
            "references by file name without extension",
        )
    prompt_file = g.prompts or cfg.data.prompts
    what = "reference images per sample" if e.need == "reference_sets" else "a prompt per image"
    if prompt_file is None:
        return cfg.error(
            key,
            f"{name!r} needs {what}: set data.prompts (or generators[{g.index}].prompts) to a JSONL file of "
            '{"id": stem, "prompt": ..., "references": [...]}',
        )
    rows, pkey = inp.prompts[prompt_file], inp.prompt_keys[prompt_file]
    no_line = [i for i in e.missing if i not in rows]
    if no_line:
        return cfg.error(
            gkey,
            f"{len(no_line)} image(s) have no line in {cfg.ref(pkey)} = {str(prompt_file)!r} "
            f"(first ids: {', '.join(no_line[:3])}); {name!r} needs one per image",
        )
    field_name = "references" if e.need == "reference_sets" else "prompt"
    row = rows[e.missing[0]]
    return cfg.error(
        pkey,
        f"{prompt_file.name}:{row.line}: id {e.missing[0]!r} has no {field_name!r}, which {name!r} "
        f"(metrics[{spec.index}]) needs",
    )
