"""``genmetrics weights list|download|verify METRIC...``: the files a metric's default weights need, fetched
on a machine with network access into ``GENMETRICS_HOME`` through the libraries' own hub caches, checked by
sha256, and what to copy to a machine without network (docs/weights.md).

Layout (the caches the loaders read, so nothing is converted or moved):

* open_clip weights: ``$GENMETRICS_HOME/open_clip/models--ORG--NAME/`` (``open_clip.pretrained.download_pretrained``
  with ``cache_dir``, i.e. ``hf_hub_download``; a weight with no hub copy is a single file from its URL);
* transformers weights (DINOv2, the Qwen backbones): ``$GENMETRICS_HOME/hf/models--ORG--NAME/``
  (``huggingface_hub.snapshot_download`` with ``cache_dir``);
* ``$GENMETRICS_HOME/weights.json``: per weights, every file with its size and sha256 as recorded at download.
"""

from __future__ import annotations

import datetime as _dt
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import click

from genmetrics.errors import InputError, WeightsUnavailableError

MANIFEST = "weights.json"
#: held while weights.json is read, changed and written
LOCK = "weights.json.lock"
#: what a transformers checkpoint needs (weights, configs, tokenizer and processor files, chat template);
#: legacy pickles, TF / Flax / ONNX copies are left on the hub
HF_ALLOW = ("*.json", "*.safetensors", "*.txt", "*.model", "*.jinja", "*.tiktoken")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


@dataclass
class NeededWeights:
    """One set of weights: which metrics use it, where it comes from and where it goes."""

    weights: str
    source: str  # "open_clip-hub" | "open_clip-url" | "hf"
    repo: str  # hub repo id or URL
    files: str  # what is fetched, in words
    dest: Path  # the folder (or file) it lands in
    metrics: list[str] = field(default_factory=list)
    cfg: dict[str, Any] = field(default_factory=dict)


def _home() -> Path:
    from genmetrics.backbones.weights import genmetrics_home

    return genmetrics_home()


def _hub_folder(cache: Path, repo: str) -> Path:
    return cache / ("models--" + repo.replace("/", "--"))


def metric_weights(name: str) -> list[str]:
    """The default weights a registered metric loads (``[]`` for pixel metrics)."""
    from genmetrics.core.registry import get_card

    card = get_card(name)  # an unknown name: InputError with close matches
    return [card.default_weights] if card.default_weights else []


def resolve(weights: str) -> NeededWeights:
    """Where ``weights`` come from: an open_clip ``MODEL/TAG`` or ``hf-hub:`` id, else a transformers hub id.

    A metric's default weights (recorded in :mod:`genmetrics.backbones.pretrained`) and a transformers hub
    id are resolved without importing open_clip; other open_clip weights ask open_clip."""
    from genmetrics.backbones.precheck import weights_kind
    from genmetrics.backbones.pretrained import HF_WEIGHTS_NAME, SAFE_ALTERNATIVES, open_clip_record

    home = _home()
    record = open_clip_record(weights)
    hf_id = record is None and not weights.startswith("hf-hub:") and weights_kind(weights) == "hf"
    if not hf_id and (weights.startswith("hf-hub:") or "/" in weights):
        cfg: dict[str, Any] = {}
        if weights.startswith("hf-hub:"):
            cfg = {"hf_hub": weights[len("hf-hub:") :].rstrip("/") + "/"}
        elif record is not None:
            cfg = record
        else:
            import open_clip.pretrained as ocp

            from genmetrics.backbones.openclip import parse_clip_weights

            w = parse_clip_weights(weights)
            cfg = dict(ocp.get_pretrained_cfg(w.model, w.pretrained)) if w.pretrained else {}
        if cfg.get("hf_hub"):
            repo, filename = cfg["hf_hub"].rstrip("/"), ""
            if not cfg["hf_hub"].endswith("/"):
                repo, filename = cfg["hf_hub"].rsplit("/", 1)
            filename = filename or HF_WEIGHTS_NAME
            if filename in SAFE_ALTERNATIVES:
                safe = list(SAFE_ALTERNATIVES[filename])
            else:
                from genmetrics.backbones._openclip_compat import safetensors_alternatives

                safe = safetensors_alternatives(filename)
            files = f"{safe[0]} (else {filename})" if safe else filename
            cache = home / "open_clip"
            return NeededWeights(weights, "open_clip-hub", repo, files, _hub_folder(cache, repo), cfg=cfg)
        if cfg.get("url"):
            url = cfg["url"]
            return NeededWeights(
                weights,
                "open_clip-url",
                url,
                url.rsplit("/", 1)[-1],
                home / "open_clip" / url.rsplit("/", 1)[-1],
                cfg=cfg,
            )
    if weights.count("/") != 1 or weights.startswith(("/", ".", "~")):
        raise InputError(
            f"weights {weights!r}: expected an open_clip MODEL/TAG or a hub id ORG/NAME; a local path needs "
            "no download"
        )
    return NeededWeights(
        weights, "hf", weights, "snapshot: " + ", ".join(HF_ALLOW), _hub_folder(home / "hf", weights)
    )


def needs(metrics: tuple[str, ...] | list[str]) -> tuple[list[NeededWeights], list[str]]:
    """The weights of ``metrics`` (every registered metric when empty; an item with a ``/`` names weights
    directly: ``ViT-B-16/openai``, ``Qwen/Qwen3.5-0.8B``), one entry per weights, and the metrics that need
    none."""
    from genmetrics.core.registry import alias_of, list_metrics

    names = list(metrics) or [n for n in list_metrics() if alias_of(n) is None]
    out: dict[str, NeededWeights] = {}
    none: list[str] = []
    for name in names:
        direct = "/" in name or name.startswith("hf-hub:")  # weights named directly (no metric has a "/")
        specs = [name] if direct else metric_weights(name)
        if not specs:
            none.append(name)
        for spec in specs:
            if spec not in out:
                out[spec] = resolve(spec)
            if not direct:
                out[spec].metrics.append(name)
    return list(out.values()), none


def _read_manifest(home: Path) -> dict[str, Any]:
    """``weights.json`` (an empty manifest when there is none), read with bounded size and nesting
    (:func:`~genmetrics.data.caches.homefile.read_json_record`); anything unusable is one line, exit 1."""
    from genmetrics.data.caches.homefile import HomeFileError, read_json_record

    p = home / MANIFEST
    try:
        data = read_json_record(p)
    except HomeFileError as e:
        raise WeightsUnavailableError(f"{e}; then run `genmetrics weights download` again") from None
    if data is None:
        return {"version": 1, "weights": {}}
    if not isinstance(data, dict) or not isinstance(data.get("weights"), dict):
        raise WeightsUnavailableError(
            f"{p} is not a genmetrics weights manifest; delete it and download again"
        )
    return data


def _update_manifest(home: Path, weights: str, entry: dict[str, Any]) -> None:
    """Record ``entry`` for ``weights`` in ``weights.json``: read, changed and written whole (renamed into
    place) under ``weights.json.lock``, so downloads running at once into one GENMETRICS_HOME all stay
    recorded."""
    from genmetrics.data.caches.homefile import HomeFileError, home_lock
    from genmetrics.data.output.atomic import atomic_write_json

    try:
        with home_lock(home / LOCK):
            manifest = _read_manifest(home)
            manifest["weights"][weights] = entry
            atomic_write_json(home / MANIFEST, manifest, root=home)
    except HomeFileError as e:
        raise WeightsUnavailableError(f"{e}; {weights} was downloaded but is not recorded") from None


def _record(path: Path, home: Path) -> dict[str, Any]:
    """A downloaded file's entry: path under ``home``, size, sha256; checked against the hub's sha256 when
    the hub cache names the blob by it (every LFS file: the weights)."""
    from genmetrics.backbones.weights import sha256_file

    digest = sha256_file(path)
    blob = path.resolve().name
    hub = blob if _SHA256.match(blob) else None
    if hub is not None and hub != digest:
        stored = path.resolve()
        for p in (path, stored):  # never kept as good: the next download fetches it again
            p.unlink(missing_ok=True)
        raise WeightsUnavailableError(
            f"{path} has sha256 {digest}, the hub says {hub}: the download is corrupt and was deleted; run "
            "`genmetrics weights download` again"
        )
    return {
        "path": path.relative_to(home).as_posix(),
        "size": path.stat().st_size,
        "sha256": digest,
        "hub_sha256": hub,
    }


def _download(need: NeededWeights, home: Path) -> list[Path]:
    if need.source == "hf":
        import huggingface_hub
        from huggingface_hub import utils as hf_utils

        from genmetrics.data.progress import progress_mode

        # the hub's bars only where genmetrics draws bars (a terminal, or GENMETRICS_PROGRESS=1): into a log
        # or a pipe they are lines of carriage-return noise
        quiet = progress_mode() != "bar" and not hf_utils.are_progress_bars_disabled()
        if quiet:
            hf_utils.disable_progress_bars()
        try:
            folder = huggingface_hub.snapshot_download(
                need.repo, cache_dir=str(home / "hf"), allow_patterns=list(HF_ALLOW)
            )
        finally:
            if quiet:
                hf_utils.enable_progress_bars()
        files = sorted(p for p in Path(folder).rglob("*") if p.is_file())
        if not files:  # an empty listing (or none of its entries a file) is no download
            raise WeightsUnavailableError(
                f"the hub listed no files of {need.repo} matching {', '.join(HF_ALLOW)}, so nothing was "
                f"downloaded or recorded for {need.weights}; check the name, then run `genmetrics weights "
                "download` again"
            )
        return files
    import open_clip.pretrained as ocp

    got = ocp.download_pretrained(need.cfg, cache_dir=str(home / "open_clip"))
    if not got:
        raise WeightsUnavailableError(f"open_clip has no download for {need.weights!r}")
    return [Path(got)]


def _fetch(need: NeededWeights, home: Path, again: str) -> list[dict[str, Any]]:
    """Download ``need`` and describe its files; any failure (the hub cannot be reached, a connection dropped
    mid-file, a listing the library cannot read, a corrupt file) is one :class:`WeightsUnavailableError` and
    nothing of this attempt is recorded. ``again``: the command to run again."""
    from genmetrics.backbones import hub
    from genmetrics.backbones.weights import cause_text

    url = need.repo if need.source == "open_clip-url" else None
    down = hub.unreachable(url)
    if down is not None:  # the first failed request decides: nothing is tried
        raise WeightsUnavailableError(
            f"cannot download {need.weights}: {down}. `genmetrics weights download` needs network access: run "
            f"`{again}` on a machine that has it, then copy its GENMETRICS_HOME folder here (`genmetrics "
            "weights --help`)"
        )
    why: str | None = None
    try:
        with hub.hub_calls(url) as why:
            files = _download(need, home)
            return [_record(p, home) for p in files]
    except WeightsUnavailableError:
        raise
    except Exception as e:  # noqa: BLE001 - a dropped connection, a malformed listing, ...: one line
        reason = why or cause_text(e, limit=200)
        raise WeightsUnavailableError(
            f"downloading {need.weights} failed ({reason}); nothing of it was recorded as downloaded: run "
            f"`{again}` again"
        ) from None


def _offline_download(found: list[NeededWeights], home: Path) -> None:
    """``weights download`` with downloads off: every requested weights already here (recorded in
    GENMETRICS_HOME, or transformers weights in the Hugging Face cache, which the loader reads) is said and
    exits 0, as there is nothing to fetch; otherwise one error naming what is missing."""
    recorded = _read_manifest(home)["weights"]
    where = {n.weights: (str(n.dest) if n.weights in recorded else _in_hf_cache(n)) for n in found}
    missing = [w for w, at in where.items() if at is None]
    if missing:
        raise WeightsUnavailableError(
            f"downloads are disabled (GENMETRICS_OFFLINE, HF_HUB_OFFLINE or TRANSFORMERS_OFFLINE is set) and "
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not here: run `genmetrics weights "
            "download` with them unset on a machine with network access"
        )
    for w, at in where.items():
        click.echo(f"{w}: already here ({at}); nothing to download")


def _copy_note(found: list[NeededWeights], home: Path) -> list[str]:
    lines = ["To use these weights without network, copy to the same places under GENMETRICS_HOME there:"]
    for need in found:
        lines.append(f"  {need.dest.relative_to(home).as_posix()}")
    lines.append(f"  {MANIFEST}")
    lines.append(
        f"(e.g. `rsync -a --relative {home}/./<each path> HOST:<its GENMETRICS_HOME>/`), then set "
        "GENMETRICS_HOME and GENMETRICS_OFFLINE=1 there and run `genmetrics weights verify METRIC...`."
    )
    return lines


def _in_hf_cache(need: NeededWeights) -> str | None:
    """The folder of ``need`` (transformers weights) in the Hugging Face cache (``HF_HOME``), which the loader
    reads after ``GENMETRICS_HOME``; ``None`` when it is not there (or the weights are open_clip's)."""
    if need.source != "hf":
        return None
    from huggingface_hub import constants

    from genmetrics.backbones.precheck import has_snapshot

    folder = _hub_folder(Path(constants.HF_HUB_CACHE), need.repo)
    # what the loader looks up first (as the pre-check of `score` does): an empty snapshot is no model
    return str(folder) if has_snapshot(folder, "config.json") else None


@click.group("weights")
def weights_group() -> None:
    """List, download and verify the weights files of metrics (for machines without network)."""


#: metric names (default: every registered metric) or weights named directly (``ORG/NAME``, ``MODEL/TAG``)
_metrics_arg = click.argument("metrics", nargs=-1)


@weights_group.command("list")
@_metrics_arg
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
def weights_list_cmd(metrics: tuple[str, ...], as_json: bool) -> None:
    """Show every file METRICS (default: all) need, where it goes under GENMETRICS_HOME, and whether it is there."""
    home = _home()
    found, none = needs(metrics)
    recorded = _read_manifest(home)["weights"]
    rows: list[dict[str, Any]] = [
        {
            "metrics": n.metrics,
            "weights": n.weights,
            "source": n.source,
            "from": n.repo,
            "files": n.files,
            "dest": str(n.dest),
            "downloaded": n.weights in recorded,
            "hf_cache": _in_hf_cache(n),
        }
        for n in found
    ]
    if as_json:
        click.echo(json.dumps({"home": str(home), "weights": rows, "no_weights": none}, indent=2))
        return
    click.echo(f"GENMETRICS_HOME: {home}")
    for r in rows:
        state = "downloaded" if r["downloaded"] else "not downloaded"
        if not r["downloaded"] and r["hf_cache"]:  # what the loader reads too: no download needed here
            state += f"; in the Hugging Face cache {r['hf_cache']}, loaded from there"
        used = f"{', '.join(r['metrics'])}; " if r["metrics"] else ""
        click.echo(f"{r['weights']}  ({used}{state})")
        click.echo(f"  from {r['source']} {r['from']}: {r['files']}")
        click.echo(f"  to   {r['dest']}")
    if none:
        click.echo(f"no weights needed: {', '.join(none)}")


@weights_group.command("download")
@_metrics_arg
def download_cmd(metrics: tuple[str, ...]) -> None:
    """Download the weights of METRICS (default: all) into GENMETRICS_HOME and record their sha256."""
    import shlex

    from genmetrics.backbones.weights import offline

    home = _home()
    found, _ = needs(metrics)
    if offline():
        _offline_download(found, home)
        return
    again = shlex.join(["genmetrics", "weights", "download", *metrics])
    _read_manifest(home)  # an unreadable manifest is named before anything downloads
    for need in found:
        click.echo(f"downloading {need.weights} ({need.source} {need.repo}) ...")
        files = _fetch(need, home, again)
        entry = {
            "source": need.source,
            "from": need.repo,
            "metrics": need.metrics,
            "downloaded": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
            "files": files,
        }
        _update_manifest(home, need.weights, entry)  # after each: a later failure keeps it
        size = sum(f["size"] for f in files)
        click.echo(f"  {len(files)} files, {size / 2**20:.1f} MiB in {need.dest}")
    for line in _copy_note(found, home):
        click.echo(line)


@weights_group.command("verify")
@_metrics_arg
def verify_cmd(metrics: tuple[str, ...]) -> None:
    """Check that every file of METRICS (default: all) is in GENMETRICS_HOME with its recorded sha256."""
    from genmetrics.backbones.weights import sha256_file

    home = _home()
    found, _ = needs(metrics)
    recorded = _read_manifest(home)["weights"]
    problems: list[str] = []
    for need in found:
        entry = recorded.get(need.weights)
        cached = _in_hf_cache(need) if entry is None else None
        if cached is not None:  # what the loader reads, as `list` and `download` say; no sha256 to check
            click.echo(
                f"ok       {need.weights} in the Hugging Face cache {cached} (not recorded: no sha256 to check)"
            )
            continue
        if entry is None:
            problems.append(f"{need.weights}: not downloaded")
            click.echo(f"MISSING  {need.weights} (not in {home / MANIFEST})")
            continue
        for f in _entry_files(need.weights, entry, home):
            p = home / f["path"]
            if not p.is_file():
                problems.append(f"{f['path']}: missing")
                click.echo(f"MISSING  {p}")
            elif sha256_file(p) != f["sha256"]:
                problems.append(f"{f['path']}: sha256 differs")
                click.echo(f"CORRUPT  {p}")
            else:
                click.echo(f"ok       {p}")
    if problems:
        names = " ".join(metrics) if metrics else ""
        raise WeightsUnavailableError(
            f"{len(problems)} weights problem(s) in {home}: {'; '.join(problems[:5])}"
            f"{' ...' if len(problems) > 5 else ''}. Fix: run `genmetrics weights download {names}`".rstrip()
            + " on a machine with network access and copy the files over again"
        )


def _entry_files(weights: str, entry: Any, home: Path) -> list[dict[str, str]]:
    """The files of ``weights.json``'s entry for ``weights``, each a relative path inside GENMETRICS_HOME with
    a sha256. An entry that is not that (no ``files``, ``files`` empty or not a list, a path that is not a
    string, is absolute or climbs out with ``..``, a missing or malformed sha256) is one
    :class:`WeightsUnavailableError` naming the entry: it cannot vouch for any file.

    >>> _entry_files("w", {"files": [{"path": "hf/x", "sha256": "0" * 64}]}, Path("/h"))
    [{'path': 'hf/x', 'sha256': '0000000000000000000000000000000000000000000000000000000000000000'}]
    >>> _entry_files("w", {"files": [{"path": "../../x", "sha256": "0" * 64}]}, Path("/h"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: /h/weights.json: entry 'w': file 1 has path '../../x', which leaves GENMETRICS_HOME; ...
    """
    where = f"{home / MANIFEST}: entry {weights!r}"
    fix = f"delete the entry (or {MANIFEST}) and run `genmetrics weights download {weights}` again"
    files = entry.get("files") if isinstance(entry, dict) else None
    if not isinstance(entry, dict) or "files" not in entry:
        raise WeightsUnavailableError(f"{where} has no list of files; {fix}")
    if not isinstance(files, list):
        raise WeightsUnavailableError(
            f"{where}: 'files' is {type(files).__name__}, not a list of files; {fix}"
        )
    if not files:
        raise WeightsUnavailableError(f"{where}: 'files' is empty, so nothing can be verified; {fix}")
    out = []
    for i, f in enumerate(files, 1):
        path = f.get("path") if isinstance(f, dict) else None
        digest = f.get("sha256") if isinstance(f, dict) else None
        if not isinstance(path, str) or not path:
            got = type(path).__name__ if isinstance(f, dict) else f"a {type(f).__name__}"
            raise WeightsUnavailableError(f"{where}: file {i} has no path (a string; got {got}); {fix}")
        parts = Path(path).parts
        if Path(path).is_absolute() or ".." in parts or "\\" in path or ":" in (parts[0] if parts else ""):
            raise WeightsUnavailableError(
                f"{where}: file {i} has path {path!r}, which leaves GENMETRICS_HOME; {fix}"
            )
        if not isinstance(digest, str) or not _SHA256.match(digest):
            raise WeightsUnavailableError(f"{where}: file {i} ({path}) has no sha256 (64 hex digits); {fix}")
        out.append({"path": path, "sha256": digest})
    return out
