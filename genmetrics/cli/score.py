"""``genmetrics score``: score files or folders with one metric.

What the metric is fed is decided by :mod:`genmetrics.core.wiring` from its card (the function the
leaderboard uses too); this module turns the flags into that function's sources and its errors into flag
names.
"""

from __future__ import annotations

import contextlib
import json
import math
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

from genmetrics.backbones.precheck import check_metric
from genmetrics.backbones.provider import describe_provider
from genmetrics.cli.common import echo_json, parse_options
from genmetrics.cli.main import defer_torchmetrics_init
from genmetrics.core.registry import (
    Granularity,
    MetricCard,
    ReferenceKind,
    create_metric,
    get_card,
    metric_options,
)
from genmetrics.core.wiring import Feeds, Sample, Sources, WiringError, feeds, wire
from genmetrics.data.io.files import list_images, stem_index, unused_references
from genmetrics.data.io.workers import check_workers, workers_option
from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
from genmetrics.data.output.rows import dumps_line
from genmetrics.data.progress import progress
from genmetrics.data.text.inputs import as_text_list
from genmetrics.data.text.jsonable import jsonable
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.leaderboard.notes import SMALL_SET, banner, small_sets

if TYPE_CHECKING:
    from genmetrics.data.io.pipeline import DecodedCache

# torch and the image pipeline (data.io.images / pipeline / batching import torch) are imported where image
# files are read: everything before the weights pre-check in ``score_cmd`` runs without them, so a metric
# whose weights cannot be had fails after the interpreter's start-up alone

#: what ``--reference`` is, by the input the card needs
_REFERENCE_NEEDS = {
    "reference": "one reference image per candidate, matched by file stem",
    "real": "the real images, as a set",
    "reference_sets": "the reference images every candidate is compared with",
}
#: significant digits float32 arithmetic resolves in a score (epsilon 1.19e-7: 6.9 digits, one kept for
#: the rounding of reductions); a score with a bounded range keeps that many relative to the range's width
DISPLAY_DIGITS = 6


def _expand(paths: tuple[str, ...], role: str) -> list[Path]:
    out: list[Path] = []
    for p in paths:
        out.extend(list_images(p))
    if not out:
        raise click.UsageError(f"--{role}: no images given")
    stem_index(out, role=f"--{role}")  # the leaderboard's rule: one file per stem (sample ids are stems)
    return out


def _conditions(values: tuple[str, ...], n: int) -> list[str] | None:
    if not values:
        return None
    texts = list(values)
    if len(texts) == 1 and texts[0].startswith("@"):
        f = Path(texts[0][1:])
        if not f.is_file():
            raise InputError(f"--condition {texts[0]!r}: file {str(f)!r} does not exist")
        try:
            raw = f.read_text(encoding="utf-8")
        except UnicodeDecodeError as e:
            raise InputError(
                f"--condition {texts[0]!r}: {str(f)!r} is not UTF-8 text (byte {e.start}); save it as UTF-8"
            ) from None
        texts = [ln for ln in raw.splitlines() if ln.strip()]
    if len(texts) == 1:
        return texts * n
    if len(texts) != n:
        raise InputError(
            f"--condition: got {len(texts)} texts for {n} candidates; give one text for all or one per candidate"
        )
    return texts


def _bad_files(files: list[Path], sizes: dict[Path, tuple[int, int]] | None = None) -> dict[Path, str]:
    """Check every image from its header before any weights load (format, size against the bomb limit);
    returns {path: error message} for unreadable files. Pixel data is decoded once, while scoring: a file
    whose data turns out corrupt then is reported per ``--on-error`` too."""
    from genmetrics.data.io.images import check_image_header

    bad: dict[Path, str] = {}
    for f in dict.fromkeys(files):
        try:
            size = check_image_header(f)
            if sizes is not None:
                sizes[f] = size
        except InputError as e:
            bad[f] = str(e)
    return bad


def _keeps_size(name: str, kwargs: dict[str, Any]) -> bool:
    """Whether the metric compares pixels without resizing (its ``resize`` option is ``"none"``); the default
    from the metric's class (imported: the command builds the metric next)."""
    if "resize" in kwargs:
        return str(kwargs["resize"]) == "none"
    resize = metric_options(name, static=False).get("resize", "None").strip("'\"")
    return str(resize) == "none"


def _references(s: Sample) -> list[Path]:
    return s.reference if isinstance(s.reference, list) else [s.reference] if s.reference else []


def _flag_error(name: str, card: MetricCard, e: WiringError, candidates: list[Path]) -> InputError:
    """A wiring error in terms of the command's flags."""
    if e.need in _REFERENCE_NEEDS and not e.missing:
        return InputError(f"{name}: --reference is required ({_REFERENCE_NEEDS[e.need]})")
    if e.need == "reference":
        names = {p.stem: p.name for p in candidates}
        return InputError(
            f"--candidates: {len(e.missing)} file(s) have no reference with the same stem in --reference "
            f"(first: {', '.join(names[i] for i in e.missing[:3])}); references are matched by file name "
            "without extension"
        )
    if e.need == "condition":
        return InputError(
            f"{name}: --condition is required ({card.condition.value}: one text per candidate, or one for all)"
        )
    if e.need == "no_reference":
        return InputError(f"{name}: takes no reference images; drop --reference")
    if e.need == "no_condition":
        hint = " (give the attributes with --attributes)" if card.condition_option else ""
        return InputError(f"{name}: takes no --condition{hint}; drop it")
    return InputError(f"{name}: {e}")


def rounded(value: Any, card: MetricCard) -> Any:
    """``value`` (a number, or lists / dicts of numbers) rounded to the precision of the metric's scores:
    :data:`DISPLAY_DIGITS` significant digits, relative to the width of the card's range when it is bounded
    (PSNR in [0, 100]: 4 decimals; SSIM in [-1, 1]: 5; CLIPScore in [-100, 100]: 3).

    >>> from genmetrics.core.registry import get_card
    >>> rounded(42.0123456789, get_card("psnr")), rounded([0.123456789], get_card("ssim"))
    (42.0123, [0.12346])
    >>> rounded({"mean": 4.76912345e-05}, get_card("sad"))  # unbounded: significant digits
    {'mean': 4.76912e-05}
    """
    if isinstance(value, dict):
        return {k: rounded(v, card) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v, card) for v in value]
    if not isinstance(value, float) or not math.isfinite(value):
        return value
    lo, hi = card.range if card.range is not None else (-math.inf, math.inf)
    if math.isfinite(lo) and math.isfinite(hi) and hi > lo:
        return round(value, max(0, DISPLAY_DIGITS - math.ceil(math.log10(hi - lo))))
    return float(f"{value:.{DISPLAY_DIGITS}g}")


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
    help="A bad image file: stop (naming it), or report it and score the rest.",
)
@workers_option
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
    workers: int | None,
) -> None:
    """Score candidate images with metric NAME."""
    card = get_card(name)
    n_workers = check_workers(workers, flag="--workers")
    kwargs = _metric_options(name, card, options, attributes, weights, heads, adapter, batch_size, device)
    _check_out(out, name, card)
    cand_files = _expand(candidates, "candidates")
    ref_files = _expand(reference, "reference") if reference else []
    given = {"reference"} if ref_files else set()
    given |= {"condition"} if condition else set()
    try:
        feed = feeds(card, kwargs, free_text=True, given=given)
        samples, real = wire(feed, cand_files, _sources(feed, cand_files, ref_files, condition))
    except WiringError as e:
        raise _flag_error(name, card, e, cand_files) from None
    if ref_files and not feed.uses_reference:
        click.echo(
            f"warning: --reference is not used ({name} is built with an option that replaces it)", err=True
        )
    # offline, or an unreachable hub: weights in no cache are reported before torch, open_clip or
    # transformers is imported (the image files are read after it), after the flags and folders the metric
    # would have refused first (a misspelt --option, an empty --condition, a missing folder)
    try:
        check_metric(card, kwargs)
    except WeightsUnavailableError:
        if condition:
            as_text_list(list(condition), name="--condition")
        raise
    defer_torchmetrics_init()  # before anything imports torchmetrics (the metric's module does)
    same_size = get_card(name).reference is ReferenceKind.MATCHED and _keeps_size(name, kwargs)
    samples, real = _drop_bad_files(samples, real, on_error, same_size=same_size)
    metric = create_metric(name, **kwargs)
    value, per, n = _run(
        metric, name, feed, samples, real, workers=n_workers, on_error=on_error, same_size=same_size
    )
    result: dict[str, Any] = {"metric": name, "n": n, "value": value}
    if out:
        _write_out(Path(out), name, result, per)
    if as_json:
        echo_json({**result, "per_sample": per})
        return
    for note in _notes(feed, samples, real):
        click.echo(f"note: {note}")
    click.echo(f"{name}: {json.dumps(rounded(jsonable(value), card))}  (n={n})")


def _notes(feed: Feeds, samples: list[Sample], real: list[Path] | None) -> list[str]:
    """What the reader must know before the number: random backbones, a set-level value from small sets (the
    leaderboard's notes, worded the same)."""
    out = []
    provider = describe_provider()
    if provider is not None:
        out.append(banner(provider))
    if feed.level is Granularity.SET and min(len(samples), len(real or [])) < SMALL_SET:
        out.append(small_sets(f"{len(real or [])} real and {len(samples)} generated images"))
    return out


def _metric_options(
    name: str,
    card: MetricCard,
    options: tuple[str, ...],
    attributes: str | None,
    weights: str | None,
    heads: str | None,
    adapter: str | None,
    batch_size: int | None,
    device: str | None,
) -> dict[str, Any]:
    kwargs: dict[str, Any] = parse_options(options)
    if attributes:
        if card.condition_option is None:
            raise InputError(
                f"{name}: --attributes is not an input of this metric (it takes "
                f"{card.condition.value} as its condition); drop --attributes"
            )
        _one_spelling(kwargs, card.condition_option, "--attributes")
        kwargs[card.condition_option] = attributes
    flags = {
        "weights": weights,
        "heads": heads,
        "adapter": adapter,
        "batch_size": batch_size,
        "device": device,
    }
    for k, v in flags.items():
        if v is not None:
            _one_spelling(kwargs, k, f"--{k.replace('_', '-')}")
            kwargs[k] = v
    return kwargs


def _one_spelling(kwargs: dict[str, Any], key: str, flag: str) -> None:
    """Refuse an option given both as ``--option KEY=...`` and as its own flag (one value would be dropped)."""
    if key in kwargs:
        raise InputError(
            f"--option {key}={kwargs[key]!r} and {flag} both set {key}; expected one of them. Fix: drop one"
        )


def _check_out(out: str | None, name: str, card: MetricCard) -> None:
    """``--out`` is checked before any scoring (the file is written at the end)."""
    if not out:
        return
    suffix = Path(out).suffix.lower()
    if suffix not in (".json", ".jsonl"):
        raise InputError(
            f"--out {out!r}: expected a .jsonl file (one row per sample) or a .json summary, got "
            f"{'a ' + repr(suffix) if suffix else 'no'} extension (an image or other file is never "
            "overwritten); name the file *.jsonl or *.json"
        )
    if suffix == ".jsonl" and card.level is Granularity.SET:
        raise InputError(f"--out {out!r}: {name} is a set-level metric; write a .json summary instead")


def _sources(
    feed: Feeds, cand_files: list[Path], ref_files: list[Path], condition: tuple[str, ...]
) -> Sources:
    """The flags as wiring sources: ``--reference`` matched by stem (one file: shared by every candidate),
    as every candidate's reference list, or as the real set; ``--condition`` as a text per candidate."""
    stems = [p.stem for p in cand_files]
    texts = _conditions(condition, len(cand_files))
    by_stem: dict[str, Path] | None = None
    if len(ref_files) == 1:
        by_stem = dict.fromkeys(stems, ref_files[0])
    elif ref_files:
        by_stem = stem_index(ref_files, role="--reference")
        if "reference" in feed.uses:
            note = unused_references(ref_files, cand_files, ref_name="--reference")
            if note:
                click.echo(f"warning: {note}", err=True)
    return Sources(
        references=by_stem,
        reference_lists=dict.fromkeys(stems, ref_files) if ref_files else None,
        real=ref_files or None,
        texts=dict(zip(stems, texts)) if texts is not None else None,
    )


def _drop_bad_files(
    samples: list[Sample], real: list[Path] | None, on_error: str, *, same_size: bool = False
) -> tuple[list[Sample], list[Path] | None]:
    """Decode every image the metric will get before any weights load; stop at a bad one or skip it."""
    files = [s.candidate for s in samples] + [r for s in samples for r in _references(s)] + list(real or [])
    sizes: dict[Path, tuple[int, int]] = {}
    bad = _bad_files(files, sizes)
    for s in samples if same_size else []:  # a pixel metric that does not resize: sizes from the headers
        if s.candidate not in bad and isinstance(s.reference, Path) and s.reference not in bad:
            (rw, rh), (cw, ch) = sizes[s.reference], sizes[s.candidate]
            if (rw, rh) != (cw, ch):
                bad[s.candidate] = _size_differs(s, (ch, cw), (rh, rw))
    if not bad:
        return samples, real
    if on_error == "stop":
        first = next(iter(bad.values()))
        more = f" (and {len(bad) - 1} more bad file(s))" if len(bad) > 1 else ""
        raise InputError(f"{first}{more}; pass --on-error skip to report bad files and score the rest")
    for f, msg in bad.items():
        _skipped(f, msg)
    samples = [s for s in samples if s.candidate not in bad and not any(r in bad for r in _references(s))]
    real = [f for f in real if f not in bad] if real is not None else None
    if not samples or (real is not None and not real):
        raise InputError("every candidate (or every reference) was a bad file; nothing left to score")
    return samples, real


def _skipped(f: Path, msg: str) -> None:
    """The ``--on-error skip`` report of one file (a message that starts with the file's name names it once)."""
    click.echo(f"warning: skipped {f}: {msg.removeprefix(f'{f}: ')}", err=True)


def _size_differs(s: Sample, cand: tuple[int, ...], ref: tuple[int, ...]) -> str:
    """The error for a candidate whose ``(height, width)`` differs from its reference's."""
    return (
        f"{s.candidate}: size {cand} differs from its reference {s.reference} {ref}; resize the images or "
        "pass --option resize=to_first to resize candidates to their reference"
    )


def _decoded_size_error(s: Sample, cache: Any, on_error: str) -> bool:
    """Whether the decoded candidate's size differs from its reference's (a file replaced after the header
    check): stop naming it, or (``--on-error skip``) report it, as the header check does."""
    if not isinstance(s.reference, Path):
        return False
    c, r = cache.get(s.candidate), cache.get(s.reference)
    if not all(hasattr(x, "shape") and len(x.shape) == 3 for x in (c, r)) or c.shape[-2:] == r.shape[-2:]:
        return False
    msg = _size_differs(s, tuple(c.shape[-2:]), tuple(r.shape[-2:]))
    if on_error == "stop":
        raise InputError(f"{msg}; pass --on-error skip to report bad files and score the rest")
    _skipped(s.candidate, msg)
    return True


def _run(
    metric: Any,
    name: str,
    feed: Feeds,
    samples: list[Sample],
    real: list[Path] | None,
    *,
    workers: int = 0,
    on_error: str = "stop",
    same_size: bool = False,
) -> tuple[Any, dict[str, Any] | None, int]:
    """Feed the metric (the real set first, then the candidates, in chunks of its batch size), each file
    decoded once by the input pipeline; returns the value, the per-sample results and the samples scored.
    ``same_size``: the metric compares pixels without resizing (decoded sizes are checked per pair)."""
    import torch

    from genmetrics.data.io.batching import fixed_batches
    from genmetrics.data.io.pipeline import PATHS, DecodedCache, decoded, decoded_chunks, transform_of

    bs = max(1, int(getattr(metric, "batch_size", 32) or 32))
    transform, device = transform_of(metric), getattr(metric, "device", None)
    paths = transform == PATHS  # the metric reads the files itself
    transforms = [] if paths else [transform]
    scored = fed = 0
    with torch.inference_mode():
        if real is not None:  # the real set as a whole, then the candidates
            stream = decoded(real, transforms, batch_size=bs, workers=workers, device=device)
            for batch in progress(stream, desc=f"{name}: reference", unit="batch", total=-(-len(real) // bs)):
                cache = DecodedCache(batch)
                good = [p for p, _ in batch if not _decode_error(cache, [p], on_error)]
                if good:
                    metric.update(reference=[str(p) if paths else cache.get(p) for p in good])
                    fed += len(good)
        if real is not None and not fed:
            raise InputError("every reference was a bad file; nothing left to score")
        chunks = list(fixed_batches(samples, bs))
        files = [[f for s in chunk for f in (s.candidate, *_references(s))] for chunk in chunks]
        caches = decoded_chunks(files, transforms, batch_size=bs, workers=workers, device=device)
        with contextlib.closing(caches):
            for chunk, cache in progress(zip(chunks, caches), desc=name, unit="batch", total=len(chunks)):
                good = [
                    s
                    for s in chunk
                    if not _decode_error(cache, [s.candidate, *_references(s)], on_error)
                    and not (same_size and not paths and _decoded_size_error(s, cache, on_error))
                ]
                if not good:
                    continue
                args = feed.update_args(good)
                metric.update(**(args if paths else _decoded(args, cache)))
                scored += len(good)
        if not scored:
            raise InputError("every candidate (or every reference) was a bad file; nothing left to score")
        value = metric.compute()
    per = metric.per_sample() if feed.level is Granularity.SAMPLE and hasattr(metric, "per_sample") else None
    return value, per, scored


def _decode_error(cache: DecodedCache, files: list[Path], on_error: str) -> bool:
    """Whether one of ``files`` could not be decoded: stop naming it, or (``--on-error skip``) report it."""
    for f in files:
        err = cache.error(f)
        if err is None:
            continue
        if on_error == "stop":
            raise InputError(f"{err}; pass --on-error skip to report bad files and score the rest")
        _skipped(f, str(err))
        return True
    return False


def _decoded(args: dict[str, Any], cache: DecodedCache) -> dict[str, Any]:
    """``metric.update`` arguments with every file path replaced by its decoded image."""
    out = dict(args)
    out["candidates"] = [cache.get(p) for p in out["candidates"]]
    ref = out.get("reference")
    if ref is not None:
        out["reference"] = [[cache.get(p) for p in r] if isinstance(r, list) else cache.get(r) for r in ref]
    return out


def _write_out(outp: Path, name: str, result: dict[str, Any], per: dict[str, Any] | None) -> None:
    """``--out``: one row per sample (``.jsonl``) or the summary (``.json``), under the write rule."""
    if outp.suffix.lower() == ".jsonl":
        if per is None:
            raise InputError(
                f"--out {str(outp)!r}: {name} is a set-level metric; write a .json summary instead"
            )
        lines = [
            dumps_line({"metric": name, "id": i, "score": s})
            for i, s in zip(per["ids"], per["scores"].tolist())
        ]
        atomic_write_text(outp, "\n".join(lines) + "\n")
    else:
        atomic_write_json(outp, {**result, "per_sample": per})
