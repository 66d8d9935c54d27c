"""``genmetrics leaderboard CONFIG --out DIR [--resume]``."""

from __future__ import annotations

import click

from genmetrics.data.io.workers import workers_option
from genmetrics.leaderboard.notes import notes

# the runner (torch, accelerate, the image pipeline) is imported after the weights pre-check: a metric whose
# weights cannot be had fails after the interpreter's start-up alone


def _weights_first(config: str, out: str | None, resume: bool = False) -> None:
    """Offline, or an unreachable hub: a metric of ``config`` built from its card's default weights, which no
    cache holds, or MIE without heads, is reported (with its config key, as the run's plan reports it) before
    torch is imported.
    A metric's own weights, heads or adapter are judged as the run judges them, their relative paths
    resolved against the config's folder. A config the run would refuse or no output folder is left to the
    run. The run would have
    named an image folder or another metric's option values first (checked there with torch imported).
    With ``resume`` the run decides, once it knows which metrics still have rows to score (a resumed run
    whose model-based metrics are finished needs none of their weights)."""
    if resume:
        return
    from genmetrics.backbones.precheck import check_metric
    from genmetrics.core.registry import get_card
    from genmetrics.errors import GenmetricsError, WeightsUnavailableError
    from genmetrics.leaderboard.config import load_config, resolve_option_paths

    try:
        cfg = load_config(config)
    except (GenmetricsError, ValueError, OSError):
        return  # named by the run, as before
    if out is None and cfg.run.out is None:
        return  # the run names the missing --out first
    for spec in cfg.metrics:
        try:
            card = get_card(spec.name)
            check_metric(card, resolve_option_paths(cfg, spec.options))  # paths as the run resolves them
        except WeightsUnavailableError as e:
            raise type(e)(f"{cfg.where(spec.key)}: {e}") from None
        except (GenmetricsError, ValueError):
            return  # an unknown metric: the run names it with its config key


@click.command("leaderboard")
@click.argument("config", type=click.Path(dir_okay=False))
@click.option(
    "--out",
    "out",
    type=click.Path(file_okay=False),
    default=None,
    help="Output folder (default: run.out of the config).",
)
@click.option("--resume", is_flag=True, help="Keep finished results in OUT and score only what is missing.")
@click.option(
    "--device",
    default=None,
    help="auto, cpu, cuda, cuda:1 ... (default: run.device of the config, else auto).",
)
@click.option(
    "--batch-size",
    type=int,
    default=None,
    help="Images per streamed chunk (default: each metric's batch_size).",
)
@click.option("--seed", type=int, default=None, help="Bootstrap and torch seed (default: run.seed, else 0).")
@click.option("--no-plots", is_flag=True, help="Skip the PNG plots and the per-generator gallery pages.")
@click.option(
    "--on-error",
    type=click.Choice(["stop", "skip"]),
    default="stop",
    show_default=True,
    help="A bad image: stop (finished results are kept; fix it and --resume), or report it in "
    "OUT/skipped.jsonl and score the rest.",
)
@workers_option
def leaderboard_cmd(
    config: str,
    out: str | None,
    resume: bool,
    device: str | None,
    batch_size: int | None,
    seed: int | None,
    no_plots: bool,
    on_error: str,
    workers: int | None,
) -> None:
    """Score every generator of CONFIG with every metric and write a leaderboard to OUT.

    Under `torchrun --nproc_per_node N -m genmetrics leaderboard ...` each rank scores its shard of
    the images and rank 0 merges the results and writes the reports.
    """
    _weights_first(config, out, resume)
    from accelerate import PartialState

    from genmetrics.leaderboard.runner import run_leaderboard

    result = run_leaderboard(
        config,
        out,
        resume=resume,
        device=device,
        batch_size=batch_size,
        seed=seed,
        plots=not no_plots,
        on_error=on_error,
        workers=workers,
    )
    PartialState().destroy_process_group()  # under torchrun: the run is over (a no-op in one process)
    if result.rank != 0 or result.summary is None:
        return
    s = result.summary
    cols = list(s["columns"])
    for note in notes(s):  # random backbones, small sets, incomplete cells: before the numbers
        click.echo(f"note: {note}")
    click.echo(f"{s['title']} (best first by {s['rank_by']}):")
    width = max(len(g) for g in s["generators"])
    for item in s["ranking"]:
        vals = "  ".join(f"{c}={_short(item[c])}" for c in cols)
        click.echo(f"  {item['rank']:>2}. {item['generator']:<{width}}  {vals}")
    click.echo(
        f"report: {result.report}  (also leaderboard.csv, leaderboard.html, summary.json; "
        f"per-image results: {result.results})"
    )


def _short(x: object) -> str:
    return "–" if x is None else f"{x:.4g}"
