"""Command-line flags shared by several commands (only click here: commands import it at start-up)."""

from __future__ import annotations

import click

__all__ = ["workers_option"]

#: ``--workers N``: processes that decode the images (every command that reads image files)
workers_option = click.option(
    "--workers",
    type=click.IntRange(min=0),
    default=None,
    help="Processes that decode images, overlapped with the model (default: one per available core but "
    "one, at most 8; 0 decodes in the main process).",
)
