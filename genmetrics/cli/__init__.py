"""The ``genmetrics`` command line (click). Subcommands load lazily so ``genmetrics list`` is fast."""
