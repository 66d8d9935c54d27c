"""Command line for TPIPS: ``genmetrics train tpips``, ``genmetrics evaluate-human tpips`` and
``genmetrics retrieve {index,query}``. Inputs are validated before any weights load; bad input raises
``InputError`` (exit 2, one ``error:`` line), missing weights ``WeightsUnavailableError`` (exit 1).

This is the command-line boundary: torch, transformers and the models are imported inside the commands, so
``--help`` and input errors stay fast; everything below this module imports at the top."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from genmetrics.cli.common import echo_json
from genmetrics.data.io.workers import workers_option
from genmetrics.data.output.atomic import atomic_write_json
from genmetrics.data.output.lock import lock_output_folder
from genmetrics.errors import InputError

_VARIANTS = click.Choice(["late", "mid", "early"])


def _echo(obj: Any, as_json: bool) -> None:
    if as_json:
        echo_json(obj)
    else:
        click.echo(json.dumps(obj))


def _load_model(
    adapter: str | None,
    weights: str | None,
    variant: str | None,
    image_size: int | None,
    batch_size: int | None = None,
    device: str | None = None,
    dtype: str | None = None,
    resize: str | None = None,
) -> Any:
    from genmetrics.tpips.loading import load_tpips  # torch and transformers load only when a model is needed

    kw: dict[str, Any] = {}
    if batch_size:
        kw["batch_size"] = batch_size
    return load_tpips(
        adapter,
        weights=weights,
        variant=variant,
        image_size=image_size,
        device=device,
        dtype=dtype,
        resize=resize,
        **kw,
    )


def _portable(ref: str | None) -> str | None:
    """A local file or folder as an absolute path (so a saved reference works from any folder); a hub id as is."""
    if not ref:
        return ref
    p = Path(ref).expanduser()
    return str(p.resolve()) if p.exists() else ref


# --------------------------------------------------------------------------------------------- train
@click.command("tpips")
@click.option("--data", "data", required=True, type=click.Path(), help="Odd-one-out JSONL of training votes.")
@click.option(
    "--out", "out", required=True, type=click.Path(), help="Output folder (adapter, checkpoints, logs)."
)
@click.option(
    "--variant", type=click.Choice(["late", "mid", "early", "triplet"]), default="late", show_default=True
)
@click.option(
    "--val-data", type=click.Path(), default=None, help="Odd-one-out JSONL for validation agreement."
)
@click.option(
    "--weights",
    default=None,
    help="Base weights (hub id or folder); default Qwen/Qwen3-VL-Embedding-2B "
    "(Qwen/Qwen3-VL-8B-Instruct for --variant triplet).",
)
@click.option(
    "--lr", type=float, default=None, help="Learning rate (default 5e-5 late, 1e-4 early/mid, 3e-5 triplet)."
)
@click.option(
    "--batch-size", type=int, default=None, help="Effective batch (default 128 late/early, 32 mid/triplet)."
)
@click.option(
    "--micro-batch-size", type=int, default=1, show_default=True, help="Examples per forward per device."
)
@click.option("--epochs", type=float, default=1.0, show_default=True)
@click.option("--max-steps", type=int, default=None, help="Stop after this many optimizer steps.")
@click.option(
    "--temperature", type=float, default=None, help="Eq. 2 tau (default 0.05 late/early, 0.0025 mid)."
)
@click.option("--lora-r", type=int, default=16, show_default=True)
@click.option("--lora-alpha", type=int, default=None, help="Default 2 * r.")
@click.option("--lora-dropout", type=float, default=0.05, show_default=True)
@click.option("--warmup-ratio", type=float, default=0.03, show_default=True)
@click.option("--weight-decay", type=float, default=0.01, show_default=True)
@click.option("--max-grad-norm", type=float, default=1.0, show_default=True)
@click.option(
    "--resize",
    type=click.Choice(["smart", "square"]),
    default=None,
    help="Image policy: smart (default; the official Qwen3-VL-Embedding smart_resize) or square.",
)
@click.option(
    "--image-size", type=int, default=None, help="Side of the square policy (selects --resize square)."
)
@click.option(
    "--image-modes",
    type=click.Choice(["official", "genmetrics"]),
    default="official",
    show_default=True,
    help="PIL modes to RGB: official (as the Qwen3-VL-Embedding embedder: LA alpha dropped, 16-bit clipped) or "
    "genmetrics (alpha composited on white, 16-bit rescaled). Recorded in the adapter.",
)
@click.option(
    "--lora-targets",
    type=click.Choice(["qkv-mlp", "all-linear"]),
    default="qkv-mlp",
    show_default=True,
    help="qkv-mlp: q,k,v,gate,up,down (the official Qwen3-VL-Embedding training's); all-linear adds o_proj.",
)
@click.option(
    "--probe-layers", type=int, default=20, show_default=True, help="Mid fusion: number of probe layers."
)
@click.option(
    "--mid-text-norm",
    type=click.Choice(["layer", "none"]),
    default="layer",
    show_default=True,
    help="Mid fusion: LayerNorm on the channel-weight MLPs' input (none: the paper-literal raw average).",
)
@click.option(
    "--val-every", type=int, default=None, help="Validate every N optimizer steps (default: once per epoch)."
)
@click.option("--save-every", type=int, default=200, show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--num-workers", type=int, default=0, show_default=True)
@click.option(
    "--gradient-checkpointing/--no-gradient-checkpointing", default=None, help="Default: on CUDA, off on CPU."
)
@click.option("--resume", is_flag=True, help="Continue from the newest checkpoint in --out.")
@click.option("--overwrite", is_flag=True, help="Train again into a folder that holds a finished run.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as indented JSON.")
def train_cmd(
    data: str,
    out: str,
    variant: str,
    val_data: str | None,
    weights: str | None,
    lr: float | None,
    batch_size: int | None,
    micro_batch_size: int,
    epochs: float,
    max_steps: int | None,
    temperature: float | None,
    lora_r: int,
    lora_alpha: int | None,
    lora_dropout: float,
    warmup_ratio: float,
    weight_decay: float,
    max_grad_norm: float,
    resize: str | None,
    image_size: int | None,
    image_modes: str,
    lora_targets: str,
    probe_layers: int,
    mid_text_norm: str,
    val_every: int | None,
    save_every: int,
    seed: int,
    num_workers: int,
    gradient_checkpointing: bool | None,
    resume: bool,
    overwrite: bool,
    as_json: bool,
) -> None:
    """Train TPIPS on odd-one-out votes (Eq. 2; LoRA on the language tower). Multi-GPU:
    ``accelerate launch -m genmetrics train tpips ...``."""
    from genmetrics.tpips.train import TrainConfig, train_tpips

    cfg = TrainConfig(
        variant=variant,
        lr=lr,
        batch_size=batch_size,
        micro_batch_size=micro_batch_size,
        epochs=epochs,
        max_steps=max_steps,
        temperature=temperature,
        lora_r=lora_r,
        lora_alpha=lora_alpha,
        lora_dropout=lora_dropout,
        warmup_ratio=warmup_ratio,
        weight_decay=weight_decay,
        max_grad_norm=max_grad_norm,
        resize=resize,
        image_size=image_size,
        image_modes=image_modes,
        lora_targets=lora_targets,
        probe_layers=probe_layers,
        mid_text_norm=mid_text_norm,
        val_every=val_every,
        save_every=save_every,
        seed=seed,
        num_workers=num_workers,
        gradient_checkpointing=gradient_checkpointing,
    )
    res = train_tpips(
        data, out, config=cfg, weights=weights, val_data=val_data, resume=resume, overwrite=overwrite
    )
    _echo(
        {
            "adapter": str(res.adapter_dir),
            "best": str(res.best_dir) if res.best_dir else None,
            "steps": res.steps,
            "final_loss": res.losses[-1] if res.losses else None,
            "val": res.val[-1] if res.val else None,
        },
        as_json,
    )


# --------------------------------------------------------------------------------------------- evaluate
@click.command("tpips")
@click.option(
    "--data",
    "data",
    required=True,
    multiple=True,
    type=click.Path(),
    help="Odd-one-out or 2AFC JSONL, or a BAPPS / NIGHTS folder (repeatable: one table column group each).",
)
@click.option(
    "--format",
    "fmt",
    type=click.Choice(["auto", "odd-one-out", "2afc", "bapps", "nights"]),
    default="auto",
    show_default=True,
)
@click.option("--split", default=None, help="BAPPS/NIGHTS split (NIGHTS default: test).")
@click.option("--adapter", default=None, help="A trained TPIPS adapter folder or hub id.")
@click.option(
    "--variant", type=_VARIANTS, default=None, help="Zero-shot variant when no --adapter (default late)."
)
@click.option(
    "--weights", default=None, help="Base weights (default: the adapter's, else Qwen/Qwen3-VL-Embedding-2B)."
)
@click.option(
    "--baseline",
    "baselines",
    multiple=True,
    help="Also evaluate: 'embedding' (App. C.3 Qwen3-VL-Embedding cosine), 'pairwise' (0-10 digit score), "
    "'triplet' (triplet prompt), or 'metric:NAME' (a registered metric, e.g. metric:dino). Repeatable.",
)
@click.option(
    "--generative-weights",
    default="Qwen/Qwen3-VL-2B-Instruct",
    show_default=True,
    help="Backbone of the pairwise / triplet baselines.",
)
@click.option("--no-model", is_flag=True, help="Only the baselines (skip the TPIPS model).")
@click.option("--label", default=None, help="Row label (Family column) of the TPIPS model.")
@click.option(
    "--image-size",
    type=int,
    default=None,
    help="Square resize side (default: the adapter's policy, else the official smart_resize).",
)
@click.option("--batch-size", type=int, default=16, show_default=True)
@click.option("--limit", type=int, default=None, help="Evaluate only the first N records of each dataset.")
@click.option(
    "--out",
    "out",
    type=click.Path(),
    default=None,
    help="Folder for results.json, table.md, per_sample.jsonl.",
)
@click.option(
    "--controls",
    is_flag=True,
    help="Also score each row's records with the aspect replaced (by 'overall', by another record's) and, for "
    "2AFC, with another record's reference: readings next to the agreement, to check the metric uses both.",
)
@click.option("--json", "as_json", is_flag=True, help="Print the results JSON instead of the table.")
@workers_option
def evaluate_cmd(
    data: tuple[str, ...],
    fmt: str,
    split: str | None,
    adapter: str | None,
    variant: str | None,
    weights: str | None,
    baselines: tuple[str, ...],
    generative_weights: str,
    no_model: bool,
    label: str | None,
    image_size: int | None,
    batch_size: int,
    limit: int | None,
    out: str | None,
    controls: bool,
    as_json: bool,
    workers: int | None,
) -> None:
    """Agreement with human votes (odd-one-out, 2AFC, BAPPS, NIGHTS) laid out like the paper's Table 3."""
    from genmetrics.tpips.evaluate import (
        build_scorers,
        check_images_exist,
        evaluate_human,
        load_human_data,
        to_markdown,
        write_report,
    )

    for b in baselines:
        if b not in ("embedding", "pairwise", "triplet") and not b.startswith("metric:"):
            raise InputError(f"--baseline {b!r}: expected embedding, pairwise, triplet or metric:NAME")
    if no_model and not baselines:
        raise InputError("--no-model needs at least one --baseline")
    if limit is not None and limit < 1:
        raise InputError(f"--limit must be >= 1, got {limit}")
    datasets = []
    for d in data:
        ds = load_human_data(d, kind=fmt, split=split)
        if limit:
            ds.records = ds.records[:limit]
        check_images_exist(ds)
        datasets.append(ds)
    names = [d.name for d in datasets]
    for dset in datasets:
        if names.count(dset.name) > 1:
            dset.name = f"{dset.name} ({Path(dset.path).stem})"
    lock = lock_output_folder(out) if out else None  # a second run writing this --out refuses here
    try:
        scorers = build_scorers(
            adapter=adapter,
            variant=variant,
            weights=weights,
            baselines=baselines,
            generative_weights=generative_weights,
            include_model=not no_model,
            label=label,
            image_size=image_size,
            batch_size=batch_size,
        )
        res = evaluate_human(datasets, scorers, controls=controls, workers=workers)
        if out:
            write_report(
                res,
                out,
                data=list(data),
                adapter=adapter,
                weights=weights,
                baselines=list(baselines),
                controls=controls,
            )
    finally:
        if lock is not None:
            lock.release()
    if as_json:
        echo_json(
            {
                "datasets": res["datasets"],
                "models": [{k: v for k, v in m.items() if k != "per_sample"} for m in res["models"]],
            }
        )
    else:
        click.echo(to_markdown(res), nl=False)


# --------------------------------------------------------------------------------------------- retrieve
@click.group("retrieve")
def retrieve_cmd() -> None:
    """Aspect-conditioned image retrieval with late-fusion TPIPS embeddings (faiss)."""


@retrieve_cmd.command("index")
@click.option("--images", required=True, type=click.Path(), help="Folder of images to index.")
@click.option(
    "--index", "index_dir", required=True, type=click.Path(), help="Index folder (created or updated)."
)
@click.option(
    "--aspect",
    "aspects",
    multiple=True,
    help="Aspect to index (repeatable). 'overall' is always added unless --no-overall.",
)
@click.option("--overall/--no-overall", default=True, show_default=True)
@click.option("--adapter", default=None, help="Trained TPIPS adapter (late fusion).")
@click.option(
    "--weights", default=None, help="Base weights (default: the adapter's, else Qwen/Qwen3-VL-Embedding-2B)."
)
@click.option("--image-size", type=int, default=None)
@click.option("--batch-size", type=int, default=32, show_default=True)
@click.option("--recursive", is_flag=True, help="Also index images in subfolders.")
@click.option(
    "--factory", default="Flat", show_default=True, help="faiss index_factory string (inner product)."
)
@click.option("--json", "as_json", is_flag=True)
@workers_option
def index_cmd(
    images: str,
    index_dir: str,
    aspects: tuple[str, ...],
    overall: bool,
    adapter: str | None,
    weights: str | None,
    image_size: int | None,
    batch_size: int,
    recursive: bool,
    factory: str,
    as_json: bool,
    workers: int | None,
) -> None:
    """Embed every image once per aspect and build one faiss index per aspect."""
    from genmetrics.data.io.images import list_images
    from genmetrics.tpips.adapter import adapter_base_weights
    from genmetrics.tpips.common import check_aspects
    from genmetrics.tpips.retrieval import AspectIndex

    files = list_images(images, recursive=recursive)
    if aspects:
        check_aspects(list(aspects), len(aspects), name="--aspect")
    if not aspects and not overall:
        raise InputError("give at least one --aspect (or keep --overall)")
    if batch_size < 1:
        raise InputError(f"--batch-size must be >= 1, got {batch_size}")
    lock = lock_output_folder(index_dir, flag="--index")  # two builds into one index folder would mix files
    try:
        model = _load_model(adapter, weights, "late", image_size, batch_size=batch_size)
        idx = AspectIndex.build(
            files,
            index_dir,
            model,
            list(aspects),
            overall=overall,
            batch_size=batch_size,
            factory=factory,
            workers=workers,
            model_info={
                "adapter": _portable(adapter),
                "weights": _portable(weights or adapter_base_weights(adapter)),
                "image_size": model.image_size,
                "resize": model.resize.mode,
            },
        )
    finally:
        lock.release()
    report = idx.build_report or {}
    _echo(
        {
            "index": str(idx.root),
            "images": len(idx),
            "aspects": idx.aspects,
            **{
                k: report[k]
                for k in ("embedded_images", "reused_images", "dropped_images", "dropped_aspects")
                if k in report
            },
        },
        as_json,
    )


@retrieve_cmd.command("query")
@click.option(
    "--index", "index_dir", required=True, type=click.Path(), help="Index folder from `retrieve index`."
)
@click.option(
    "--query",
    "queries",
    required=True,
    multiple=True,
    type=click.Path(),
    help="Query image (repeat with --aspect for a compositional query).",
)
@click.option(
    "--aspect", "aspects", multiple=True, help="Aspect of each --query (one for all, or one per query)."
)
@click.option(
    "--weight", "weights_", multiple=True, type=float, help="Weight of each query term (default 1)."
)
@click.option("-k", "--k", "k", type=int, default=10, show_default=True)
@click.option(
    "--adjust", type=float, default=None, help="Rank by f(aspect) - ADJUST * f(overall) (the paper uses 0.3)."
)
@click.option("--exclude-query", is_flag=True, help="Never return the query images themselves.")
@click.option("--adapter", default=None, help="Default: the adapter the index was built with.")
@click.option("--weights", default=None, help="Default: the weights the index was built with.")
@click.option("--sheet", type=click.Path(), default=None, help="Write a contact-sheet PNG of the results.")
@click.option("--out", "out", type=click.Path(), default=None, help="Write the hits as JSON.")
@click.option("--json", "as_json", is_flag=True)
def query_cmd(
    index_dir: str,
    queries: tuple[str, ...],
    aspects: tuple[str, ...],
    weights_: tuple[float, ...],
    k: int,
    adjust: float | None,
    exclude_query: bool,
    adapter: str | None,
    weights: str | None,
    sheet: str | None,
    out: str | None,
    as_json: bool,
) -> None:
    """Top-k images of the index for a query image and aspect (or several, summed)."""
    from genmetrics.data.io.images import load_image
    from genmetrics.tpips.common import check_aspects
    from genmetrics.tpips.retrieval import AspectIndex, contact_sheet

    idx = AspectIndex(index_dir)
    if not aspects:
        raise InputError("--aspect: give the aspect of the query (e.g. --aspect lighting; --aspect overall)")
    asp = check_aspects(list(aspects) if len(aspects) > 1 else aspects[0], len(queries), name="--aspect")
    for q in queries:
        load_image(q)  # validate before loading weights
    for a in asp:
        idx.entry(a)
    if adjust and "overall" not in idx.aspects:
        raise InputError("--adjust needs the 'overall' aspect in the index; rebuild it with --overall")
    if weights_ and len(weights_) != len(queries):
        raise InputError(f"--weight: got {len(weights_)} weights for {len(queries)} queries")
    info = idx.manifest.get("model", {})
    model = _load_model(
        adapter or info.get("adapter"),
        weights or info.get("weights"),
        "late",
        info.get("image_size"),
        resize=info.get("resize") or ("square" if info.get("image_size") else None),
    )
    hits = idx.search(
        model,
        list(queries),
        asp,
        k=k,
        adjust=adjust,
        weights=list(weights_) or None,
        exclude=list(queries) if exclude_query else (),
    )
    result: dict[str, Any] = {
        "queries": [{"image": q, "aspect": a} for q, a in zip(queries, asp)],
        "adjust": adjust,
        "hits": [h.to_dict() for h in hits],
    }
    if sheet:
        title = " + ".join(f"{a}" for a in asp) + (f"  (adjust {adjust})" if adjust else "")
        contact_sheet(list(zip(queries, asp)), hits, sheet, title=title)
        result["sheet"] = sheet
    if out:
        atomic_write_json(out, result)
    _echo(result, as_json)
