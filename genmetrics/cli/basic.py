"""``genmetrics list``, ``info`` and ``score``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from genmetrics.cli.common import echo_json, parse_options, progress


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of metric cards.")
@click.argument("pattern", required=False, default="*")
def list_cmd(pattern: str, as_json: bool) -> None:
    """List registered metrics and aliases (optionally matching an fnmatch PATTERN)."""
    from genmetrics.registry import list_metrics, metric_info

    names = list_metrics(pattern)
    if as_json:
        echo_json([metric_info(n) for n in names])
        return
    width = max((len(n) for n in names), default=4)
    for n in names:
        info = metric_info(n)
        arrow = {True: "higher=better", False: "lower=better", None: ""}[info["higher_is_better"]]
        summary = f"alias of {info['alias_of']}" if info["alias_of"] else info["summary"]
        click.echo(f"{n:<{width}}  {info['family']:<9}  {arrow:<13}  {summary}")


@click.command("info")
@click.argument("name")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def info_cmd(name: str, as_json: bool) -> None:
    """Show a metric's card: inputs, direction, range, paper, default weights and options."""
    from genmetrics.registry import metric_info, metric_options

    info = metric_info(name)
    info["options"] = metric_options(name)
    if as_json:
        echo_json(info)
        return
    for k, v in info.items():
        if isinstance(v, dict):
            click.echo(f"{k}:")
            for kk, vv in v.items():
                click.echo(f"  {kk}: {vv}")
        else:
            click.echo(f"{k}: {v}")


def _expand(paths: tuple[str, ...], role: str) -> list[Path]:
    from genmetrics.data.images import list_images, stem_index

    out: list[Path] = []
    for p in paths:
        out.extend(list_images(p))
    if not out:
        raise click.UsageError(f"--{role}: no images given")
    stem_index(out, role=f"--{role}")  # the leaderboard's rule: one file per stem (sample ids are stems)
    return out


def _conditions(values: tuple[str, ...], n: int) -> list[str] | None:
    from genmetrics.errors import InputError

    if not values:
        return None
    texts = list(values)
    if len(texts) == 1 and texts[0].startswith("@"):
        f = Path(texts[0][1:])
        if not f.exists():
            raise InputError(f"--condition {texts[0]!r}: file {str(f)!r} does not exist")
        texts = [ln.rstrip("\n") for ln in f.read_text(encoding="utf-8").splitlines() if ln.strip()]
    if len(texts) == 1:
        return texts * n
    if len(texts) != n:
        raise InputError(
            f"--condition: got {len(texts)} texts for {n} candidates; give one text for all or one per candidate"
        )
    return texts


def _bad_files(files: list[Path]) -> dict[Path, str]:
    """Check every image before any weights load; returns {path: error message} for unreadable files."""
    from genmetrics.data.images import load_image
    from genmetrics.errors import InputError

    bad: dict[Path, str] = {}
    for f in dict.fromkeys(files):
        try:
            load_image(f)
        except InputError as e:
            bad[f] = str(e)
    return bad


@click.command("score")
@click.argument("name")
@click.option(
    "--reference",
    "-r",
    multiple=True,
    help="Reference image files or folders (matched to candidates by file stem).",
)
@click.option("--candidates", "-c", multiple=True, required=True, help="Candidate image files or folders.")
@click.option(
    "--condition",
    "-t",
    multiple=True,
    help="Text condition(s): one for all, one per candidate, or @file.txt.",
)
@click.option("--attributes", help="Attribute set name or text file (raclip metrics).")
@click.option("--weights", help="Weights to use instead of the default (tag, hub id or local path).")
@click.option("--heads", help="Trained MIE heads (folder written by `genmetrics train mie`, or a hub id).")
@click.option(
    "--adapter", help="Trained TPIPS adapter (folder written by `genmetrics train tpips`, or a hub id)."
)
@click.option("--option", "options", multiple=True, help="Extra metric option KEY=VALUE (JSON values).")
@click.option("--batch-size", type=int, default=None, help="Images per forward pass.")
@click.option("--device", default=None, help="cpu, cuda, cuda:1 ... (default: CUDA if available).")
@click.option(
    "--out", type=click.Path(dir_okay=False), help="Write per-sample results (.jsonl) or a summary (.json)."
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
@click.option(
    "--on-error",
    type=click.Choice(["stop", "skip"]),
    default="stop",
    show_default=True,
    help="A bad image file: stop before scoring (naming it), or report it and score the rest.",
)
def score_cmd(
    name: str,
    reference: tuple[str, ...],
    candidates: tuple[str, ...],
    condition: tuple[str, ...],
    attributes: str | None,
    weights: str | None,
    heads: str | None,
    adapter: str | None,
    options: tuple[str, ...],
    batch_size: int | None,
    device: str | None,
    out: str | None,
    as_json: bool,
    on_error: str,
) -> None:
    """Score candidate images with metric NAME."""
    import torch

    from genmetrics.data.images import match_by_stem, unused_references
    from genmetrics.data.results import atomic_write_json, dumps_line
    from genmetrics.errors import InputError
    from genmetrics.registry import ConditionKind, Granularity, ReferenceKind, create_metric, get_card

    card = get_card(name)
    kwargs: dict[str, Any] = parse_options(options)
    if attributes:
        if card.condition_option is None:
            raise InputError(
                f"{name}: --attributes is not an input of this metric (it takes "
                f"{card.condition.value} as its condition); drop --attributes"
            )
        kwargs[card.condition_option] = attributes
    for key, value in (
        ("weights", weights),
        ("heads", heads),
        ("adapter", adapter),
        ("batch_size", batch_size),
        ("device", device),
    ):
        if value is not None:
            kwargs[key] = value
    if out:  # checked before any scoring: the file is written at the end
        suffix = Path(out).suffix.lower()
        if suffix not in (".json", ".jsonl"):
            raise InputError(
                f"--out {out!r}: expected a .jsonl file (one row per sample) or a .json summary, got "
                f"{'a ' + repr(suffix) if suffix else 'no'} extension (an image or other file is never "
                "overwritten); name the file *.jsonl or *.json"
            )
        if suffix == ".jsonl" and card.level is Granularity.SET:
            raise InputError(f"--out {out!r}: {name} is a set-level metric; write a .json summary instead")
    cand_files = _expand(candidates, "candidates")
    ref_files = _expand(reference, "reference") if reference else []
    ref_kind = card.reference if card.level is Granularity.SAMPLE else ReferenceKind.REAL_SET
    if card.feeds("reference", kwargs) or card.level is Granularity.SET:
        if not ref_files:
            what = {
                ReferenceKind.MATCHED: "one reference image per candidate, matched by file stem",
                ReferenceKind.REAL_SET: "the real images, as a set",
                ReferenceKind.IMAGE_LIST: "the reference images every candidate is compared with",
            }[ref_kind]
            raise InputError(f"{name}: --reference is required ({what})")
    elif ref_files and card.reference is ReferenceKind.NONE:
        raise InputError(f"{name}: takes no reference images; drop --reference")
    if card.feeds("condition", kwargs) and not condition:
        raise InputError(
            f"{name}: --condition is required ({card.condition.value}: one text per candidate, or "
            "one for all)"
        )
    if condition and card.condition in (ConditionKind.NONE, ConditionKind.ATTRIBUTES):
        hint = (
            " (give the attributes with --attributes)" if card.condition is ConditionKind.ATTRIBUTES else ""
        )
        raise InputError(f"{name}: takes no --condition{hint}; drop it")
    # Pair up inputs (before any weights load).
    ids = [p.stem for p in cand_files]
    refs: list[Any] | None = None
    if not ref_files:
        pass
    elif ref_kind is ReferenceKind.REAL_SET:
        refs = ref_files  # fed once as a set, before the candidates
    elif ref_kind is ReferenceKind.IMAGE_LIST:
        refs = [ref_files] * len(cand_files)
    elif len(ref_files) == 1:
        refs = ref_files * len(cand_files)
    else:
        pairs = match_by_stem(ref_files, cand_files, ref_name="--reference", cand_name="--candidates")
        note = unused_references(ref_files, cand_files, ref_name="--reference")
        if note:
            click.echo(f"warning: {note}", err=True)
        ids, refs, cand_files = [p[0] for p in pairs], [p[1] for p in pairs], [p[2] for p in pairs]
    as_set = refs is not None and ref_kind is ReferenceKind.REAL_SET
    conds = _conditions(condition, len(cand_files))
    bad = _bad_files(cand_files + (ref_files if refs is not None else []))
    if bad and on_error == "stop":
        first = next(iter(bad.values()))
        more = f" (and {len(bad) - 1} more bad file(s))" if len(bad) > 1 else ""
        raise InputError(f"{first}{more}; pass --on-error skip to report bad files and score the rest")
    if bad:
        for f, msg in bad.items():
            click.echo(f"warning: skipped {f}: {msg}", err=True)
        if as_set:
            ref_files = [f for f in ref_files if f not in bad]
            refs = ref_files
            keep = [i for i, c in enumerate(cand_files) if c not in bad]
        else:
            keep = [
                i
                for i, c in enumerate(cand_files)
                if c not in bad
                and not (refs is not None and not isinstance(refs[i], list) and refs[i] in bad)
            ]
            if refs is not None:
                refs = [refs[i] for i in keep]
        cand_files, ids = [cand_files[i] for i in keep], [ids[i] for i in keep]
        conds = [conds[i] for i in keep] if conds is not None else None
        if not cand_files or (as_set and not ref_files):
            raise InputError("every candidate (or every reference) was a bad file; nothing left to score")

    metric = create_metric(name, **kwargs)
    bs = max(1, getattr(metric, "batch_size", 32))
    with torch.inference_mode():
        if as_set:  # the real set as a whole, then the candidates
            for i in progress(range(0, len(ref_files), bs), desc=f"{name}: reference", unit="batch"):
                metric.update(reference=ref_files[i : i + bs])
            refs = None
        if card.level is Granularity.SET:
            for i in progress(range(0, len(cand_files), bs), desc=f"{name}: candidates", unit="batch"):
                metric.update(candidates=cand_files[i : i + bs])
        else:
            for i in progress(range(0, len(cand_files), bs), desc=name, unit="batch"):
                sl = slice(i, i + bs)
                metric.update(
                    reference=refs[sl] if refs is not None else None,
                    candidates=cand_files[sl],
                    condition=conds[sl] if conds is not None else None,
                    ids=ids[sl],
                )
        value = metric.compute()
    result: dict[str, Any] = {"metric": name, "n": len(cand_files), "value": value}
    per = metric.per_sample() if hasattr(metric, "per_sample") and card.level is Granularity.SAMPLE else None
    if out:
        outp = Path(out)
        if outp.suffix.lower() == ".jsonl":
            if per is None:
                raise InputError(
                    f"--out {out!r}: {name} is a set-level metric; write a .json summary instead"
                )
            lines = [
                dumps_line({"metric": name, "id": i, "score": s})
                for i, s in zip(per["ids"], per["scores"].tolist())
            ]
            outp.parent.mkdir(parents=True, exist_ok=True)
            outp.write_text("\n".join(lines) + "\n", encoding="utf-8")
        else:
            atomic_write_json(outp, {**result, "per_sample": per})
    if as_json:
        echo_json({**result, "per_sample": per})
    else:
        from genmetrics.data.results import _jsonable

        click.echo(f"{name}: {json.dumps(_jsonable(value))}  (n={len(cand_files)})")
