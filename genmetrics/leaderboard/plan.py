"""Turn a config into a checked plan: every file, image folder, stem match, prompt and metric option is
validated here, before any metric scores anything (and before any weights load).

What each metric gets is read from the typed input fields of its card
(:class:`genmetrics.registry.MetricCard`), never from the family's code, the card's prose or its name:

* ``level`` :attr:`~genmetrics.registry.Granularity.SET`: the real set (``data.real``, else
  ``data.references``) and each generator's folder; one value per generator;
* ``reference``: :attr:`~genmetrics.registry.ReferenceKind.MATCHED` the reference image with the same
  file stem; ``REAL_SET`` the whole real set, fed once before the candidates; ``IMAGE_LIST`` the list
  ``references`` of the sample's prompts-file line;
* ``condition``: ``PROMPT`` the sample's ``prompt`` from the prompts file, or, when the metric entry has
  ``aspects = [...]``, each aspect in turn (one result column per aspect); ``ASPECTS`` requires
  ``aspects``; ``ATTRIBUTES`` is an option of the metric, never fed per sample.

An input is fed only when :meth:`MetricCard.feeds` says so: it is required, and the option that would
replace it (``reference_option`` / ``condition_option``, e.g. ``attributes``) is not set.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genmetrics.errors import GenmetricsError, InputError
from genmetrics.leaderboard.config import GeneratorSpec, KeyPath, LeaderboardConfig, MetricSpec, key_str
from genmetrics.registry import ConditionKind, Granularity, MetricCard, ReferenceKind

SET_ID = "__set__"  #: the ``id`` of the one results row a set-level metric writes per generator


@dataclass
class Sample:
    """One planned sample: its id (the candidate's file stem), the candidate and what it is compared with.

    >>> import tempfile
    >>> from genmetrics.leaderboard import load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> s = plan.metrics[0].samples["noisy"][0]
    >>> s.id, s.candidate.parent.name, s.reference.parent.name, s.condition
    ('000', 'noisy', 'refs', None)
    """

    id: str
    candidate: Path
    reference: Path | list[Path] | None = None
    condition: str | None = None


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
    and which inputs the typed card fields wired in.

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
    samples: dict[str, list[Sample]] = field(default_factory=dict)  # generator -> samples (sample level)
    real: list[Path] | None = None  # set level
    uses: tuple[str, ...] = ()  # inputs filled in: reference, reference_sets, real, prompt, aspects

    @property
    def level(self) -> Granularity:
        return self.card.level

    @property
    def higher_is_better(self) -> bool | None:
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
        return self.config.generators

    def columns(self) -> list[Column]:
        return [c for m in self.metrics for c in m.columns]

    def metric_of(self, column: str) -> MetricPlan:
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
def _files(cfg: LeaderboardConfig, folder: Path, key: KeyPath) -> list[Path]:
    from genmetrics.data.images import list_images, stem_index

    try:
        files = list_images(folder, recursive=cfg.data.recursive)
        stem_index(files, role=str(folder))  # the rule `genmetrics score` applies too: one file per stem
    except InputError as e:
        raise cfg.error(key, str(e)) from None
    return sorted(files, key=lambda p: p.stem)


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
        h.update(f"{f.name}\t{os.path.getsize(f)}\n".encode())
    return h.hexdigest()[:16]


@dataclass
class _PromptRow:
    line: int
    prompt: str | None
    references: list[Path] | None


def _load_prompts(cfg: LeaderboardConfig, path: Path, key: KeyPath) -> dict[str, _PromptRow]:
    from genmetrics.data.jsonl import iter_jsonl

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


#: what the planner calls each reference kind in ``MetricPlan.uses``
_REFERENCE_USE = {
    ReferenceKind.MATCHED: "reference",
    ReferenceKind.REAL_SET: "real",
    ReferenceKind.IMAGE_LIST: "reference_sets",
}


def _resolve_paths(cfg: LeaderboardConfig, options: dict[str, Any]) -> dict[str, Any]:
    """String options that name a path relative to the config (``./x``, ``../x``, or an existing file or
    folder next to it) become absolute; anything else (hub ids, attribute-set names) is left alone."""
    from genmetrics.options import expand_user

    out = {}
    for k, v in options.items():
        if isinstance(v, str) and v.startswith("~"):
            v = str(expand_user(v, what=f"option {k}"))
        if isinstance(v, str) and v and not Path(v).is_absolute():
            p = cfg.base_dir / v
            if v.startswith(("./", "../", ".\\", "..\\")) or p.exists():
                v = str(p.resolve())
        out[k] = v
    return out


def device_for_run(device: str) -> str:
    """``auto`` -> ``cuda:<LOCAL_RANK>`` when CUDA is available, else ``cpu``.

    >>> import torch
    >>> device_for_run("cpu"), device_for_run("auto") == ("cuda:0" if torch.cuda.is_available() else "cpu")
    ('cpu', True)
    """
    import torch

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if device == "cuda" and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        device = f"cuda:{int(os.environ.get('LOCAL_RANK', '0'))}"
    return device


# ------------------------------------------------------------------------------------------ plan
def build_plan(
    cfg: LeaderboardConfig,
    *,
    metric_kwargs: dict[str, dict[str, Any]] | None = None,
    device: str | None = None,
    check_construct: bool = True,
) -> Plan:
    """Check everything a run needs and list the work. Raises :class:`InputError` naming the config
    key and line; nothing is scored and no weights load here (metrics are constructed once to check
    their options, which by the house rules loads no weights).

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
    from genmetrics.registry import get_card, metric_options

    metric_kwargs = dict(metric_kwargs or {})
    unknown = set(metric_kwargs) - {m.label for m in cfg.metrics}
    if unknown:
        raise InputError(
            f"metric_kwargs names {sorted(unknown)}, which are not metric labels of the config "
            f"({', '.join(m.label for m in cfg.metrics)})"
        )
    # -- files and folders (checked whether or not a metric uses them: typos fail early)
    fingerprints: dict[str, str] = {}
    images: dict[str, list[Path]] = {}
    for g in cfg.generators:
        images[g.name] = _files(cfg, g.images, (*g.key, "images"))
        fingerprints[f"generators[{g.index}]"] = file_list_hash(images[g.name])
    ref_files: dict[Path, list[Path]] = {}
    ref_keys: dict[Path, KeyPath] = {}
    for key, folder in [(("data", "references"), cfg.data.references)] + [
        ((*g.key, "references"), g.references) for g in cfg.generators
    ]:
        if folder is not None and folder not in ref_files:
            ref_files[folder] = _files(cfg, folder, key)
            ref_keys[folder] = key
            fingerprints[key_str(key)] = file_list_hash(ref_files[folder])
    real: list[Path] | None = None
    if cfg.data.real is not None:
        real = _files(cfg, cfg.data.real, ("data", "real"))
        fingerprints["data.real"] = file_list_hash(real)
    elif cfg.data.references is not None:
        real = ref_files[cfg.data.references]
    prompts: dict[Path, dict[str, _PromptRow]] = {}
    prompt_keys: dict[Path, KeyPath] = {}
    for key, f in [(("data", "prompts"), cfg.data.prompts)] + [
        ((*g.key, "prompts"), g.prompts) for g in cfg.generators
    ]:
        if f is not None and f not in prompts:
            prompts[f] = _load_prompts(cfg, f, key)
            prompt_keys[f] = key

    # -- metrics
    plans: list[MetricPlan] = []
    for spec in cfg.metrics:
        key = spec.key
        try:
            card = get_card(spec.name)
        except ValueError as e:
            raise cfg.error((*key, "name"), str(e)) from None
        try:
            accepted = metric_options(spec.name)
        except (ImportError, AttributeError) as e:
            raise GenmetricsError(
                f"{cfg.where((*key, 'name'))}: metric {spec.name!r} is registered but its code "
                f"cannot be loaded ({type(e).__name__}: {e})"
            ) from None
        for opt in spec.options:
            if opt not in accepted:
                import difflib

                close = difflib.get_close_matches(opt, list(accepted), n=2, cutoff=0.6)
                hint = f"; did you mean {' or '.join(map(repr, close))}?" if close else ""
                raise cfg.error(
                    (*key, opt),
                    f"unknown key {opt!r} for metric {spec.name!r}{hint} "
                    f"(metric options: {', '.join(accepted) or 'none'}; "
                    "runner keys: name, label, aspects)",
                )
        kwargs: dict[str, Any] = {}
        kwargs.update(_resolve_paths(cfg, spec.options))
        kwargs.update(metric_kwargs.get(spec.label, {}))
        if device is not None and "device" in accepted and "device" not in kwargs:
            kwargs["device"] = device
        if cfg.run.cache is not False and "cache_dir" in accepted and "cache_dir" not in kwargs:
            from genmetrics.backbones.weights import genmetrics_home

            kwargs["cache_dir"] = str(
                cfg.run.cache if cfg.run.cache is not True else genmetrics_home() / "features"
            )
        if check_construct:
            from genmetrics.registry import create_metric

            try:
                m = create_metric(spec.name, **kwargs)
            except (InputError, ValueError, TypeError) as e:
                raise cfg.error(key, f"metric {spec.name!r} rejects its options: {e}") from None
            except GenmetricsError as e:  # e.g. weights that are not there: same type, with the config key
                raise type(e)(f"{cfg.where(key)}: {e}") from None
            del m

        aspects: list[str | None] = list(spec.aspects) if spec.aspects else [None]
        mp = MetricPlan(
            spec=spec,
            card=card,
            kwargs=kwargs,
            columns=[Column(c, spec, a) for c, a in zip(spec.columns(), aspects)],
        )
        if card.level is Granularity.SET:
            if spec.aspects:
                raise cfg.error(
                    (*key, "aspects"), f"{spec.name!r} is a set-level metric; it takes no aspects"
                )
            if real is None:
                raise cfg.error(
                    key,
                    f"{spec.name!r} is a set-level metric that compares each generator with the real "
                    "set: set data.real (or data.references) to a folder of real images",
                )
            mp.real = real
            mp.uses = ("real",)
        else:
            _plan_samples(cfg, mp, images, ref_files, ref_keys, prompts, prompt_keys, real)
        plans.append(mp)

    if cfg.run.rank_by is not None:
        m = next(p for p in plans if cfg.run.rank_by in [c.name for c in p.columns])
        if m.higher_is_better is None:
            raise cfg.error(
                ("run", "rank_by"),
                f"metric {m.spec.name!r} has no direction (higher_is_better is "
                "unknown), so it cannot rank generators; choose another column",
            )
    return Plan(config=cfg, images=images, metrics=plans, fingerprints=fingerprints)


def _plan_samples(
    cfg: LeaderboardConfig,
    mp: MetricPlan,
    images: dict[str, list[Path]],
    ref_files: dict[Path, list[Path]],
    ref_keys: dict[Path, KeyPath],
    prompts: dict[Path, dict[str, _PromptRow]],
    prompt_keys: dict[Path, KeyPath],
    real: list[Path] | None,
) -> None:
    spec, card, key = mp.spec, mp.card, mp.spec.key
    use = _REFERENCE_USE.get(card.reference) if card.feeds("reference", mp.kwargs) else None
    ref_sets = use == "reference_sets"
    needs_cond = card.feeds("condition", mp.kwargs)
    if spec.aspects and card.condition not in (ConditionKind.PROMPT, ConditionKind.ASPECTS):
        raise cfg.error(
            (*key, "aspects"), f"{spec.name!r} takes no condition (text per sample), so it takes no aspects"
        )
    use_aspects = bool(spec.aspects)
    if needs_cond and not use_aspects and card.condition is ConditionKind.ASPECTS:
        raise cfg.error(
            key,
            f"{spec.name!r} compares images with respect to an aspect: add "
            'aspects = ["overall", ...] to this metric (one result column per aspect)',
        )
    needs_prompt = needs_cond and not use_aspects
    mp.uses = tuple(
        u
        for u, on in (
            ("reference_sets", ref_sets),
            ("reference", use == "reference"),
            ("real", use == "real"),
            ("prompt", needs_prompt),
            ("aspects", use_aspects),
        )
        if on
    )
    if use == "real":
        if real is None:
            raise cfg.error(
                key,
                f"{spec.name!r} needs the real set (its reference is the real images as a set): set data.real "
                "(or data.references) to a folder of real images",
            )
        mp.real = real
    for g in cfg.generators:
        files = images[g.name]
        gkey = (*g.key, "images")
        samples = [Sample(id=f.stem, candidate=f) for f in files]
        prompt_file = g.prompts or cfg.data.prompts
        if ref_sets or needs_prompt:
            if prompt_file is None:
                what = "reference images per sample" if ref_sets else "a prompt per image"
                raise cfg.error(
                    key,
                    f"{spec.name!r} needs {what}: set data.prompts (or generators[{g.index}].prompts) "
                    'to a JSONL file of {"id": stem, "prompt": ..., "references": [...]}',
                )
            rows = prompts[prompt_file]
            pkey = prompt_keys[prompt_file]
            missing = [s.id for s in samples if s.id not in rows]
            if missing:
                raise cfg.error(
                    gkey,
                    f"{len(missing)} image(s) have no line in {cfg.ref(pkey)} = {str(prompt_file)!r} "
                    f"(first ids: {', '.join(missing[:3])}); {spec.name!r} needs one per image",
                )
            for s in samples:
                row = rows[s.id]
                if needs_prompt:
                    if row.prompt is None:
                        raise cfg.error(
                            pkey,
                            f"{prompt_file.name}:{row.line}: id {s.id!r} has no 'prompt', which "
                            f"{spec.name!r} (metrics[{spec.index}]) needs",
                        )
                    s.condition = row.prompt
                if ref_sets:
                    if not row.references:
                        raise cfg.error(
                            pkey,
                            f"{prompt_file.name}:{row.line}: id {s.id!r} has no 'references', "
                            f"which {spec.name!r} (metrics[{spec.index}]) needs",
                        )
                    for r in row.references:
                        if not r.is_file():
                            raise cfg.error(
                                pkey,
                                f"{prompt_file.name}:{row.line}: reference image {str(r)!r} of "
                                f"id {s.id!r} does not exist",
                            )
                    s.reference = list(row.references)
        if use == "reference":
            folder = g.references or cfg.data.references
            if folder is None:
                raise cfg.error(
                    key,
                    f"{spec.name!r} compares each image with its reference: set data.references "
                    f"(or generators[{g.index}].references) to a folder of reference images with "
                    "the same file stems",
                )
            by_stem = {r.stem: r for r in ref_files[folder]}
            missing = [s.candidate.name for s in samples if s.id not in by_stem]
            if missing:
                raise cfg.error(
                    gkey,
                    f"{len(missing)} image(s) have no reference with the same stem in "
                    f"{cfg.ref(ref_keys[folder])} = {str(folder)!r} (first: {', '.join(missing[:3])}); "
                    f"{spec.name!r} matches references by file name without extension",
                )
            for s in samples:
                s.reference = by_stem[s.id]
        mp.samples[g.name] = samples
