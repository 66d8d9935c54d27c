"""Command line for MIE: ``genmetrics train mie``, ``genmetrics evaluate-human mie`` and
``genmetrics rank-generators``. Every input is validated before any weights load.

This module is part of the CLI table's lazy boundary: ``genmetrics --help`` imports it to list
``rank-generators`` and must not import torch, so the commands import the MIE modules when they run.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from genmetrics.data.io.workers import MAX_WORKERS, workers_option
from genmetrics.errors import InputError


def _split(values: tuple[str, ...]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def _check_images(records: list[Any], path: str) -> None:
    for r in records:
        for p in (*r.references, *r.candidates):
            if not Path(p).is_file():
                raise InputError(f"{path}: pair {r.id!r} names image {str(p)!r}, which does not exist")


@click.command("mie")
@click.option(
    "--data", required=True, type=click.Path(dir_okay=False), help="MIB pairs JSONL (silver labels)."
)
@click.option(
    "--out",
    required=True,
    type=click.Path(file_okay=False),
    help="Output folder (checkpoints, best/, final/).",
)
@click.option(
    "--recipe",
    type=click.Choice(["paper", "released"]),
    default="paper",
    show_default=True,
    help="paper: Appendix E (4 x 8 pairs, 3 epochs, patience 2, 512 px); released: the authors' released "
    "pipeline (4 x 4 pairs, 600-step cap, patience 1, unresized). Options given explicitly win.",
)
@click.option(
    "--val-data",
    default=None,
    type=click.Path(dir_okay=False),
    help="Validation pairs JSONL (default: a seeded --val-fraction of --data).",
)
@click.option(
    "--val-fraction",
    default=0.1,
    show_default=True,
    type=float,
    help="Validation share when --val-data is not given.",
)
@click.option(
    "--backbone",
    default="0.8b",
    show_default=True,
    help="0.8b | 2b | 4b (Qwen3.5), a hub id or local folder of a Qwen3.5/Qwen3-VL VLM.",
)
@click.option(
    "--tuning", type=click.Choice(["layer_only", "lora_layer"]), default="layer_only", show_default=True
)
@click.option(
    "--unfreeze-layers", default=4, show_default=True, type=int, help="Top language layers trained fully."
)
@click.option("--lora-r", default=16, show_default=True, type=int)
@click.option("--lora-alpha", default=32, show_default=True, type=int)
@click.option("--lora-dropout", default=0.0, show_default=True, type=float)
@click.option(
    "--image-size",
    default=None,
    help="Longer image side in px (aspect kept), or 'none': unresized, as the authors' code trains "
    "[recipe: paper 512, released none].",
)
@click.option("--subset", default=9600, show_default=True, type=int, help="Random subset of pairs (0 = all).")
@click.option(
    "--epochs",
    default=None,
    type=int,
    help="Maximum epochs (early stopping may end sooner) [recipe: paper 3, released 3].",
)
@click.option("--lr", default=2e-5, show_default=True, type=float)
@click.option("--weight-decay", default=0.01, show_default=True, type=float)
@click.option(
    "--warmup",
    default=0.03,
    show_default=True,
    type=float,
    help="Warm-up fraction of the steps (cosine schedule).",
)
@click.option("--grad-clip", default=1.0, show_default=True, type=float)
@click.option(
    "--batch-pairs",
    default=None,
    type=int,
    help="Pairs per micro-batch per process [recipe: paper 4, released 4].",
)
@click.option(
    "--grad-accum",
    default=None,
    type=int,
    help="Micro-batches per optimizer step [recipe: paper 8, released 4].",
)
@click.option("--alpha", default=1.0, show_default=True, type=float, help="Weight of the rank loss.")
@click.option("--beta", default=0.5, show_default=True, type=float, help="Weight of the diagnostic BCE loss.")
@click.option(
    "--margin", default=0.1, show_default=True, type=float, help="Margin of the margin ranking loss."
)
@click.option(
    "--rank-loss", type=click.Choice(["margin", "bradley_terry"]), default="margin", show_default=True
)
@click.option(
    "--reference-contrast",
    default=0.0,
    show_default=True,
    type=float,
    help="Weight of the reference-swap term: each preferred candidate must score higher with its own "
    "references than with another pair's (0 = off, the authors' objective).",
)
@click.option(
    "--patience",
    "early_stopping_patience",
    default=None,
    type=int,
    help="Early stopping: epochs without improvement of the validation monitor; 0 = never stop early "
    "[recipe: paper 2, released 1].",
)
@click.option("--min-delta", "early_stopping_min_delta", default=1e-3, show_default=True, type=float)
@click.option("--token-budget", default=16384, show_default=True, type=int, help="Tokens per forward batch.")
@click.option(
    "--max-steps",
    default=None,
    type=int,
    help="Cap on optimizer steps: the run is min(cap, epochs x steps per epoch); 0 = no cap "
    "[recipe: paper none, released 600].",
)
@click.option(
    "--save-every", default=200, show_default=True, type=int, help="Checkpoint every N optimizer steps."
)
@click.option("--seed", default=3407, show_default=True, type=int)
@click.option(
    "--resume", is_flag=True, help="Continue the unfinished run in --out from its newest checkpoint."
)
@click.option("--overwrite", is_flag=True, help="Train again into an --out that holds a finished run.")
@click.option("--gradient-checkpointing", is_flag=True)
@click.option(
    "--workers",
    type=click.IntRange(min=0, max=MAX_WORKERS),
    default=0,
    show_default=True,
    help="DataLoader processes that decode and preprocess the training batches (0: the main process).",
)
@click.option("--json", "as_json", is_flag=True, help="Print the result as JSON.")
def train_cmd(**kw: Any) -> None:
    """Train MIE (score + diagnostic heads; top layers, and LoRA for lora_layer) on pairwise preferences.

    Multi-GPU: ``accelerate launch -m genmetrics train mie ...``."""
    from genmetrics.mie.common import image_size_option
    from genmetrics.mie.train import RECIPE_FIELDS, TrainConfig, load_training_pairs, train_mie

    as_json = kw.pop("as_json")
    kw["subset"] = kw["subset"] or None
    if kw["image_size"] is not None:
        kw["image_size"] = image_size_option(kw["image_size"], owner="train mie --image-size")
    # an option not given takes its recipe's value (TrainConfig fills it in)
    cfg = TrainConfig(**{k: v for k, v in kw.items() if v is not None or k not in RECIPE_FIELDS})
    cfg.check()
    load_training_pairs(cfg.data, subset=cfg.subset, seed=cfg.seed)  # validate before weights load
    res = train_mie(cfg)
    train_rows = [h for h in res["history"] if h.get("kind") == "train"]
    final = train_rows[-1]["loss"] if train_rows else None
    if as_json:
        click.echo(json.dumps({k: v for k, v in res.items() if k != "history"} | {"final_loss": final}))
    else:
        click.echo(
            f"trained {res['steps']} steps; final loss {final if final is not None else float('nan'):.4f}; "
            f"checkpoint: {res['checkpoint']}"
        )


@click.command("mie")
@click.option(
    "--data", required=True, type=click.Path(dir_okay=False), help="MIB pairs JSONL with human labels (gold)."
)
@click.option(
    "--heads", default=None, help="Trained MIE checkpoint folder or hub id (omit to score baselines only)."
)
@click.option("--backbone", default=None, help="Backbone to use instead of the one named in the checkpoint.")
@click.option(
    "--metrics",
    "baselines",
    multiple=True,
    help="Registered metrics scored on the same pairs (comma-separated or repeated), e.g. psnr,ssim,clip_i.",
)
@click.option(
    "--seen-generators",
    multiple=True,
    help="Generators seen in training (comma-separated). Default: read from the checkpoint's training.json.",
)
@click.option("--out", default="mie_eval", show_default=True, type=click.Path(file_okay=False))
@click.option("--n-boot", default=1000, show_default=True, type=int)
@click.option("--batch-pairs", default=16, show_default=True, type=int)
@click.option("--token-budget", default=16384, show_default=True, type=int)
@click.option(
    "--image-size",
    default="checkpoint",
    show_default=True,
    help="Longer image side in px, 'none' (unresized) or 'checkpoint': the checkpoint's own (genmetrics' "
    "format: its training size; the authors' layout: unresized, as their code).",
)
@click.option(
    "--controls",
    is_flag=True,
    help="Also score the pairs with references swapped between pairs and with blank references, and print "
    "both accuracies next to MIE's (an evaluator that uses its references falls to ~0.5 on both).",
)
@click.option("--device", default=None)
@click.option("--json", "as_json", is_flag=True)
@workers_option
def evaluate_cmd(
    data: str,
    heads: str | None,
    backbone: str | None,
    baselines: tuple[str, ...],
    seen_generators: tuple[str, ...],
    out: str,
    n_boot: int,
    batch_pairs: int,
    token_budget: int,
    image_size: str,
    controls: bool,
    device: str | None,
    as_json: bool,
    workers: int | None,
) -> None:
    """Agreement of MIE (and baselines) with human pairwise preferences and diagnostic labels."""
    from genmetrics.core.registry import list_metrics, metric_info
    from genmetrics.data.jsonl import load_mib_pairs
    from genmetrics.mie.common import image_size_option

    size = image_size_option(image_size, owner="evaluate-human mie --image-size", allow_checkpoint=True)

    records = load_mib_pairs(data)
    _check_images(records, data)
    names = _split(baselines)
    known = list_metrics()
    for n in names:
        if n not in known:
            metric_info(n)  # raises with close matches
    if heads is None and not names:
        raise InputError(
            "nothing to evaluate: pass --heads (a trained MIE checkpoint) and/or --metrics psnr,ssim,..."
        )
    if controls and heads is None:
        raise InputError("--controls score an MIE checkpoint with other references: pass --heads")
    if controls and len(records) < 2:
        raise InputError(
            f"--controls: {data} holds {len(records)} pair; swapping references needs at least 2"
        )
    if batch_pairs < 1:
        raise InputError("--batch-pairs must be >= 1")
    from genmetrics.functional.bootstrap import check_n_boot

    check_n_boot(n_boot, "--n-boot")
    seen = _split(seen_generators)
    from genmetrics.data.output.lock import lock_output_folder

    lock = lock_output_folder(out)  # a second evaluation writing this --out refuses here
    try:
        _evaluate_into(
            records,
            out,
            as_json,
            heads=heads,
            backbone=backbone,
            names=names,
            seen=seen,
            n_boot=n_boot,
            batch_pairs=batch_pairs,
            token_budget=token_budget,
            image_size=size,
            controls=controls,
            device=device,
            workers=workers,
        )
    finally:
        lock.release()


def _evaluate_into(
    records: list[Any],
    out: str,
    as_json: bool,
    *,
    heads: str | None,
    backbone: str | None,
    names: list[str],
    seen: list[str],
    n_boot: int,
    batch_pairs: int,
    token_budget: int,
    image_size: Any,
    controls: bool,
    device: str | None,
    workers: int | None = None,
) -> None:
    from genmetrics.cli.common import progress
    from genmetrics.mie.checkpoint import resolve_heads
    from genmetrics.mie.evaluate import evaluate_human, write_report

    model = None
    if heads is not None:
        folder = resolve_heads(heads)
        if not seen and (folder / "training.json").is_file():
            seen = json.loads((folder / "training.json").read_text(encoding="utf-8")).get("generators", [])
        from genmetrics.mie.common import FROM_CHECKPOINT
        from genmetrics.mie.model import MIEModel, build_backbone

        vlm, proc = build_backbone(backbone, device=device) if backbone else (None, None)
        sized = {} if image_size == FROM_CHECKPOINT else {"image_size": image_size}
        model = MIEModel.from_pretrained(
            folder, vlm, proc, device=device, token_budget=token_budget, vision_cache_size=256, **sized
        )
    report, scores = evaluate_human(
        records,
        model=model,
        metrics=names,
        seen_generators=seen,
        n_boot=n_boot,
        batch_pairs=batch_pairs,
        progress=progress,
        controls=controls,
        workers=workers,
    )
    files = write_report(report, scores, records, out)
    control_acc = {k: (v.get("accuracy") or {}).get("value") for k, v in report.get("controls", {}).items()}
    # a swap that changed no pair's references scored the pairs as they are: no reading (report.json keeps it)
    unchanged = sorted(k for k, v in report.get("controls", {}).items() if v.get("changed") == 0)
    if as_json:
        click.echo(
            json.dumps(
                {
                    "files": files,
                    "accuracy": {
                        k: v["accuracy"]["overall"]["value"]
                        for k, v in report["metrics"].items()
                        if "error" not in v
                    },
                }
                | (
                    {"controls": {k: None if k in unchanged else v for k, v in control_acc.items()}}
                    if control_acc
                    else {}
                )
                | ({"controls_nothing_to_swap": unchanged} if unchanged else {})
            )
        )
        return
    controls_names = {v["scorer"] for v in report.get("controls", {}).values()}
    for name, m in report["metrics"].items():
        if name in controls_names:
            continue  # printed on the controls line below
        if "error" in m:
            click.echo(f"{name}: failed ({m['error']})")
            continue
        acc = m["accuracy"]
        parts = [
            f"{s} {acc[s]['value']:.3f}" for s in ("overall", "seen", "unseen") if s in acc and acc[s]["n"]
        ]
        extra = (
            f"; macro-F1 {m['diagnostics']['overall']['macro_f1']['value']:.3f}" if "diagnostics" in m else ""
        )
        click.echo(f"{name}: pairwise accuracy " + ", ".join(parts) + extra)
    if control_acc:
        shown = ", ".join(
            f"{k.replace('_', ' ')} "
            + ("– (nothing to swap)" if k in unchanged else "failed" if v is None else f"{v:.3f}")
            for k, v in control_acc.items()
        )
        click.echo(f"mie controls: {shown} (an evaluator that uses its references falls to ~0.5 on both)")
    click.echo(f"report: {files['markdown']}")


@click.command("mie")
@click.argument("checkpoint")
@click.option(
    "--authors-layout",
    "out",
    required=True,
    type=click.Path(file_okay=False),
    help="Folder to write the authors' layout into (mie_config.json, mie_heads.pt, trainable_backbone.pt, "
    "lora_adapter/), loadable by their MIE_Inference/mie_loader.py.",
)
@click.option("--overwrite", is_flag=True, help="Write into a folder that is not empty.")
@click.option("--json", "as_json", is_flag=True)
def export_cmd(checkpoint: str, out: str, overwrite: bool, as_json: bool) -> None:
    """Export a genmetrics MIE CHECKPOINT (a checkpoint folder, or the --out folder of `train mie`) to the
    authors' layout. Reads the files only; no backbone is loaded."""
    from genmetrics.mie.checkpoint import export_authors_layout

    info = export_authors_layout(checkpoint, out, overwrite=overwrite)
    if as_json:
        click.echo(json.dumps(info))
        return
    t = info["tensors"]
    click.echo(
        f"exported {info['mode']} checkpoint to {info['out']}: {t['heads']} head tensors, {t['backbone']} "
        f"trained-layer tensors, {t['lora']} LoRA tensors on {info['lora_modules']} linear layers"
    )
    for note in info["notes"]:
        click.echo(f"note: {note}")


@click.command("rank-generators")
@click.option(
    "--scores",
    "scores_path",
    default=None,
    type=click.Path(dir_okay=False),
    help="scores.jsonl written by `genmetrics evaluate-human mie` (or any JSONL with generators + scores).",
)
@click.option(
    "--data",
    default=None,
    type=click.Path(dir_okay=False),
    help="MIB pairs JSONL to score with --heads first.",
)
@click.option("--heads", default=None, help="MIE checkpoint used with --data.")
@click.option("--metric", default="mie", show_default=True, help="Which scores in --scores to rank by.")
@click.option("--human", is_flag=True, help="Rank by the human preferences in the file instead of a metric.")
@click.option("--n-boot", default=1000, show_default=True, type=int)
@click.option(
    "--prior", default=0.5, show_default=True, type=float, help="Bradley-Terry regulariser (virtual wins)."
)
@click.option(
    "--out",
    default=None,
    type=click.Path(file_okay=False),
    help="Write ranking.json, ranking.md, ranking.png here.",
)
@click.option("--device", default=None)
@click.option("--json", "as_json", is_flag=True)
@click.option(
    "--on-error",
    type=click.Choice(["stop", "skip"]),
    default="stop",
    show_default=True,
    help="A score that is not finite (NaN, inf): stop naming it, or leave its pair out and report it.",
)
@workers_option
def rank_cmd(
    scores_path: str | None,
    data: str | None,
    heads: str | None,
    metric: str,
    human: bool,
    n_boot: int,
    prior: float,
    out: str | None,
    device: str | None,
    as_json: bool,
    on_error: str = "stop",
    workers: int | None = None,
) -> None:
    """Rank generators from scored pairs: mean score, win-rate matrix, Bradley-Terry ratings with CIs."""
    from genmetrics.mie.ranking import rank_generators, ranking_markdown, ranking_plot

    if (scores_path is None) == (data is None):
        raise InputError("give either --scores FILE (scored pairs) or --data FILE with --heads DIR")
    from genmetrics.functional.bootstrap import check_n_boot

    check_n_boot(n_boot, "--n-boot")
    if prior < 0:
        raise InputError("--prior must be >= 0")
    if scores_path is not None:
        ga, gb, sa, sb, outcome = _read_scores(scores_path, metric, human)
    else:
        from genmetrics.data.jsonl import load_mib_pairs

        assert data is not None  # exactly one of --scores / --data, checked above
        records = load_mib_pairs(data)
        _check_images(records, data)
        ga = [r.generators[0] for r in records]
        gb = [r.generators[1] for r in records]
        if human:
            sa = sb = None
            outcome = [1.0 - r.preference for r in records]
        else:
            if heads is None:
                raise InputError("--data needs --heads (a trained MIE checkpoint) unless --human is given")
            from genmetrics.cli.common import progress
            from genmetrics.mie.evaluate import score_pairs_mie
            from genmetrics.mie.model import MIEModel

            model = MIEModel.from_pretrained(heads, device=device, vision_cache_size=256)
            sc = score_pairs_mie(model, records, progress=progress, workers=workers)
            sa, sb, outcome = sc["a"].tolist(), sc["b"].tolist(), None
    result = rank_generators(ga, gb, sa, sb, outcome=outcome, n_boot=n_boot, prior=prior, on_error=on_error)
    result["by"] = "human" if human else metric
    if out:
        from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text

        folder = Path(out)
        folder.mkdir(parents=True, exist_ok=True)
        atomic_write_json(folder / "ranking.json", result)
        atomic_write_text(
            folder / "ranking.md", ranking_markdown(result, title=f"Generator ranking by {result['by']}")
        )
        ranking_plot(result, folder / "ranking.png")
    if as_json:
        click.echo(json.dumps(result))
    else:
        click.echo(ranking_markdown(result, title=f"Generator ranking by {result['by']}").rstrip())


def _read_scores(
    path: str, metric: str, human: bool
) -> tuple[list[str], list[str], list[float] | None, list[float] | None, list[float] | None]:
    from genmetrics.data.jsonl import iter_jsonl

    ga, gb, sa, sb, outcome = [], [], [], [], []
    for n, obj in iter_jsonl(path):
        gens = obj.get("generators")
        if not (isinstance(gens, list) and len(gens) == 2 and all(isinstance(g, str) for g in gens)):
            raise InputError(f"{path}:{n}: 'generators' should be two strings, got {gens!r}")
        ga.append(gens[0])
        gb.append(gens[1])
        if human:
            pref = obj.get("preference")
            if pref not in (0, 1):
                raise InputError(f"{path}:{n}: --human needs 'preference' 0 or 1, got {pref!r}")
            outcome.append(1.0 - pref)
            continue
        scores = obj.get("scores")
        pair = scores.get(metric) if isinstance(scores, dict) else None
        if pair is None and isinstance(scores, list):
            pair = scores
        if not (isinstance(pair, list) and len(pair) == 2 and all(isinstance(x, (int, float)) for x in pair)):
            avail = sorted(scores) if isinstance(scores, dict) else []
            if pair is None:
                raise InputError(
                    f"{path}:{n}: no scores for metric {metric!r} (two numbers expected); available: {avail}"
                )
            raise InputError(
                f"{path}:{n}: scores of metric {metric!r} should be two numbers (candidate a, candidate b), "
                f"got {pair!r}"[:300]
                + '; fix the line (a text such as "nan" is not a score)'
            )
        sa.append(float(pair[0]))
        sb.append(float(pair[1]))
    if not ga:
        raise InputError(f"{path}: no pairs")
    return (ga, gb, None, None, outcome) if human else (ga, gb, sa, sb, None)
