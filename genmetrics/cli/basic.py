"""``genmetrics list`` and ``info``: read from the registry only (no torch import: they start fast)."""

from __future__ import annotations

import json

import click

from genmetrics.core.option_docs import describe_options
from genmetrics.core.registry import list_metrics, metric_info, metric_options
from genmetrics.data.text.jsonable import jsonable


@click.command("list")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list of metric cards.")
@click.argument("pattern", required=False, default="*")
def list_cmd(pattern: str, as_json: bool) -> None:
    """List registered metrics and aliases (optionally matching an fnmatch PATTERN)."""
    names = list_metrics(pattern)
    if as_json:
        click.echo(json.dumps(jsonable([metric_info(n) for n in names]), indent=2))
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
    info = metric_info(name)
    info["options"] = describe_options(str(info.get("alias_of") or info["name"]), metric_options(name))
    if as_json:
        click.echo(json.dumps(jsonable(info), indent=2))
        return
    for k, v in info.items():
        if k == "options":
            click.echo("options:")
            for opt, d in v.items():
                allowed = f"; {d['allowed']}" if d["allowed"] else ""
                what = f": {d['description']}" if d["description"] else ""
                click.echo(f"  {opt} (default {d['default']}{allowed}){what}")
        elif isinstance(v, dict):
            click.echo(f"{k}:")
            for kk, vv in v.items():
                click.echo(f"  {kk}: {vv}")
        else:
            click.echo(f"{k}: {v}")
