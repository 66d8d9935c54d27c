"""``genmetrics`` entry point.

Exit codes: 0 success; 2 bad input or usage (one line ``error: ...`` naming the input); 1 environment
(missing weights, out of memory, ...). ``--debug`` shows tracebacks. Subcommands live with their
family (``genmetrics/<family>/cli.py``) and are imported only when called: ``genmetrics --help`` lists
them from :data:`COMMAND_HELP` without importing any (``tests/cli/test_main.py`` checks the two agree).
"""

from __future__ import annotations

import contextlib
import difflib
import importlib
import logging
import os
import sys
import traceback
import warnings
from collections.abc import Iterator
from typing import Any

import click

from genmetrics.core.options import check_environment
from genmetrics.errors import GenmetricsError, InputError, WorkerDiedError

# command name -> "module:attribute" (a click.Command or click.Group)
LAZY_COMMANDS: dict[str, str] = {
    "list": "genmetrics.cli.basic:list_cmd",
    "info": "genmetrics.cli.basic:info_cmd",
    "score": "genmetrics.cli.score:score_cmd",
    "compare": "genmetrics.raclip.cli:compare_cmd",
    "train": "genmetrics.cli.main:train_group",
    "evaluate-human": "genmetrics.cli.main:evaluate_group",
    "export": "genmetrics.cli.main:export_group",
    "retrieve": "genmetrics.tpips.cli:retrieve_cmd",
    "rank-generators": "genmetrics.mie.cli:rank_cmd",
    "leaderboard": "genmetrics.leaderboard.cli:leaderboard_cmd",
    "weights": "genmetrics.cli.weights:weights_group",
}
TRAIN_COMMANDS = {"tpips": "genmetrics.tpips.cli:train_cmd", "mie": "genmetrics.mie.cli:train_cmd"}
EVALUATE_COMMANDS = {"tpips": "genmetrics.tpips.cli:evaluate_cmd", "mie": "genmetrics.mie.cli:evaluate_cmd"}
EXPORT_COMMANDS = {"mie": "genmetrics.mie.cli:export_cmd"}
#: what ``--help`` shows for each lazy command: the first paragraph of its docstring, kept here so that help
#: imports no command module (tests/cli/test_main.py checks that the two agree)
COMMAND_HELP = {
    "list": "List registered metrics and aliases (optionally matching an fnmatch PATTERN).",
    "info": "Show a metric's card: inputs, direction, range, paper, default weights and options.",
    "score": "Score candidate images with metric NAME.",
    "compare": "Compare real and generated images attribute by attribute: SaD, PaD and R-SaD (RA-CLIPScore).",
    "train": "Train a learned metric (tpips, mie) on your own human judgments.",
    "evaluate-human": "Measure a learned metric's agreement with human judgments.",
    "retrieve": "Aspect-conditioned image retrieval with late-fusion TPIPS embeddings (faiss).",
    "rank-generators": "Rank generators from scored pairs: mean score, win-rate matrix, Bradley-Terry ratings "
    "with CIs.",
    "export": "Write a trained checkpoint in another layout (mie: the authors' own).",
    "leaderboard": "Score every generator of CONFIG with every metric and write a leaderboard to OUT.",
    "weights": "List, download and verify the weights files of metrics (for machines without network).",
}
TRAIN_HELP = {
    "tpips": "Train TPIPS on odd-one-out votes (Eq. 2; LoRA on the language tower).",
    "mie": "Train MIE (score + diagnostic heads; top layers, and LoRA for lora_layer) on pairwise preferences.",
}
EVALUATE_HELP = {
    "tpips": "Agreement with human votes (odd-one-out, 2AFC, BAPPS, NIGHTS) laid out like the paper's Table 3.",
    "mie": "Agreement of MIE (and baselines) with human pairwise preferences and diagnostic labels.",
}
EXPORT_HELP = {
    "mie": "Export a genmetrics MIE CHECKPOINT (a checkpoint folder, or the --out folder of `train mie`)"
}


def defer_torchmetrics_init() -> bool:
    """Let ``import torchmetrics`` skip the package's ``__init__`` until something needs it.

    torchmetrics' ``__init__`` imports every domain (``functional.image`` pulls torchvision and
    ``torch._dynamo``, ``functional.text`` transformers, and scipy.signal): 5.9 of the 6.4 s a one-off
    ``genmetrics score psnr`` took. The base class only needs ``torchmetrics.metric``. This puts a package
    shell in ``sys.modules`` with the real ``__path__`` and ``__spec__``: submodules
    (``torchmetrics.metric``, ``torchmetrics.functional.image``, ...) import as usual; the name ``Metric``
    resolves to ``torchmetrics.metric.Metric`` (what the package exports); any other attribute
    (``torchmetrics.__version__``, ``torchmetrics.Accuracy``, ...) first runs the real ``__init__`` in the
    shell, exactly as a normal import would have. Does nothing (False) when torchmetrics is already
    imported or not installed.

    >>> import torchmetrics  # imported already: nothing left to defer
    >>> defer_torchmetrics_init()
    False
    """
    import importlib.util
    import types

    if "torchmetrics" in sys.modules:
        return False
    spec = importlib.util.find_spec("torchmetrics")
    if spec is None or spec.loader is None or spec.submodule_search_locations is None:
        return False
    loader = spec.loader
    shell = types.ModuleType("torchmetrics")
    state = {"loaded": False}

    # what torchmetrics' submodules take from the package itself, set up as its __init__ does
    log = logging.getLogger("torchmetrics")
    if not log.handlers:
        log.addHandler(logging.StreamHandler())
    log.setLevel(logging.INFO)
    handlers = list(log.handlers)
    root = os.path.dirname(str(spec.origin))
    shell.__dict__.update(_logger=log, _PACKAGE_ROOT=root, _PROJECT_ROOT=os.path.dirname(root))

    def load() -> None:
        if not state["loaded"]:
            state["loaded"] = True
            loader.exec_module(shell)
            log.handlers[:] = handlers  # __init__ added its handler again: one is enough

    def getattr_(name: str) -> Any:
        if name == "Metric" and not state["loaded"]:
            return sys.modules["torchmetrics.metric"].Metric  # imported with torchmetrics.utilities below
        if name.startswith("__") and name not in ("__version__", "__all__"):
            raise AttributeError(name)
        return _loaded_attribute(shell, load, name)

    shell.__spec__ = spec
    shell.__loader__ = loader
    shell.__file__ = spec.origin
    shell.__path__ = list(spec.submodule_search_locations)
    shell.__package__ = "torchmetrics"
    shell.__getattr__ = getattr_  # type: ignore[method-assign]  # PEP 562: only for missing names
    sys.modules["torchmetrics"] = shell
    _defer_plot_module(shell.__path__)
    # the order torchmetrics' own __init__ imports them in: torchmetrics.metric imported first would meet
    # its circular import with torchmetrics.utilities.checks half-way
    importlib.import_module("torchmetrics.utilities")
    return True


def _loaded_attribute(shell: Any, load: Any, name: str) -> Any:
    """``shell.<name>`` after ``load()`` ran the real module's code in the shell (a deferred module's
    ``__getattr__``)."""
    load()
    try:
        return shell.__dict__[name]
    except KeyError:
        raise AttributeError(f"module {shell.__name__!r} has no attribute {name!r}") from None


#: what :func:`_defer_plot_module` gives before matplotlib loads: the types torchmetrics' plot module
#: itself uses when matplotlib is missing (they only appear in annotations)
_PLOT_PLACEHOLDERS = {"_AX_TYPE": object, "_PLOT_OUT_TYPE": tuple[object, object]}


def _defer_plot_module(package_path: list[str]) -> None:
    """Put a shell of ``torchmetrics.utilities.plot`` in ``sys.modules``, so that importing
    ``torchmetrics.metric`` does not import matplotlib (``plot`` imports ``matplotlib.pyplot`` at module
    level: about a fifth of a one-off ``score``'s start-up).

    ``package_path``: torchmetrics' ``__path__``. The shell holds the two annotation types ``torchmetrics.metric`` takes from it, and a
    ``plot_single_or_multi_val`` that loads the real module on its first call; any other name loads the
    real module first (its code runs in the shell, as a normal import would have), so everything plotting
    needs is there when it is asked for.
    """
    import importlib.machinery
    import types

    name = "torchmetrics.utilities.plot"
    if name in sys.modules:
        return
    # found on the package's path, not with importlib.util.find_spec (which imports the parent packages:
    # torchmetrics.utilities imports torchmetrics.metric, which imports the real plot module)
    utilities = [os.path.join(p, "utilities") for p in package_path]
    spec = importlib.machinery.PathFinder.find_spec(name, utilities)
    if spec is None or spec.loader is None:
        return
    loader = spec.loader
    shell = types.ModuleType(name)
    state = {"loaded": False}

    def load() -> None:
        if not state["loaded"]:
            state["loaded"] = True
            loader.exec_module(shell)

    def plot_single_or_multi_val(*args: Any, **kwargs: Any) -> Any:
        load()
        return shell.plot_single_or_multi_val(*args, **kwargs)

    def getattr_(attr: str) -> Any:
        if attr.startswith("__"):
            raise AttributeError(attr)
        return _loaded_attribute(shell, load, attr)

    shell.__dict__.update(_PLOT_PLACEHOLDERS, plot_single_or_multi_val=plot_single_or_multi_val)
    shell.__spec__ = spec
    shell.__loader__ = loader
    shell.__file__ = spec.origin
    shell.__package__ = "torchmetrics.utilities"
    shell.__getattr__ = getattr_  # type: ignore[method-assign]  # PEP 562: only for missing names
    sys.modules[name] = shell


class LazyGroup(click.Group):
    """A click group whose commands are imported only when called (``lazy``: name -> ``"module:attribute"``);
    ``--help`` lists them with the lines of ``helps``."""

    def __init__(
        self,
        *args: Any,
        lazy: dict[str, str] | None = None,
        helps: dict[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})
        self.helps = dict(helps or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        """The names of the group's commands, sorted: those defined on the group and the lazy ones (named in
        ``lazy``, not imported)."""
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of ``--help`` from the help table: no command module is imported."""
        rows = [(n, self.helps.get(n, "")) for n in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        """An unknown command is named with its close matches (``genmetrics scor``: did you mean 'score'?)."""
        name = args[0] if args else ""
        if name and not name.startswith("-") and self.get_command(ctx, name) is None:
            close = difflib.get_close_matches(name, self.list_commands(ctx), n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else "."
            raise click.UsageError(
                f"no such command {name!r}{hint} (`{ctx.command_path} --help` lists them)", ctx
            )
        return super().resolve_command(ctx, args)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        """The command ``name``: a lazy one is imported from its ``"module:attribute"`` now (a command module
        that cannot be imported is a ``UsageError`` naming the command); ``None`` for an unknown name."""
        if name in self.lazy:
            module, _, attr = self.lazy[name].partition(":")
            try:
                return getattr(importlib.import_module(module), attr)
            except (ImportError, AttributeError) as e:
                raise click.UsageError(
                    f"command {name!r} is not available in this installation ({e})"
                ) from None
        return super().get_command(ctx, name)


@click.group(cls=LazyGroup, lazy=TRAIN_COMMANDS, helps=TRAIN_HELP, name="train")
def train_group() -> None:
    """Train a learned metric (tpips, mie) on your own human judgments."""


@click.group(cls=LazyGroup, lazy=EVALUATE_COMMANDS, helps=EVALUATE_HELP, name="evaluate-human")
def evaluate_group() -> None:
    """Measure a learned metric's agreement with human judgments."""


@click.group(cls=LazyGroup, lazy=EXPORT_COMMANDS, helps=EXPORT_HELP, name="export")
def export_group() -> None:
    """Write a trained checkpoint in another layout (mie: the authors' own)."""


@click.group(
    cls=LazyGroup,
    lazy=LAZY_COMMANDS,
    helps=COMMAND_HELP,
    context_settings={"help_option_names": ["-h", "--help"]},
)
@click.version_option(package_name="genmetrics")
@click.option("--debug", is_flag=True, help="Show full tracebacks on errors.")
@click.option("-v", "--verbose", count=True, help="More log output (-vv for debug logs).")
@click.pass_context
def cli(ctx: click.Context, debug: bool, verbose: int) -> None:
    """Evaluate generative image models: RA-CLIPScore (SaD/PaD/R-SaD), TPIPS, MIE and baselines."""
    ctx.ensure_object(dict)
    ctx.obj["debug"] = debug
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(verbose, 2)],
        format="%(levelname)s %(name)s: %(message)s",
    )


def _first_line(err: BaseException | str) -> str:
    msg = str(err).strip() or type(err).__name__
    return " ".join(msg.split())


@contextlib.contextmanager
def _quiet_dead_worker_finalisers(debug: bool) -> Iterator[None]:
    """torch's SIGCHLD handler raises "DataLoader worker (pid N) exited unexpectedly" wherever the main
    process is: also inside a finaliser (the loader iterator's ``__del__`` while the run unwinds), where
    Python prints it as "Exception ignored in ... Traceback". The run's one ``error:`` line already names the
    dead worker, so that report is dropped (``--debug`` keeps it); any other unraisable exception is printed
    as Python does."""
    default = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if debug or WorkerDiedError.of(unraisable.exc_value) is None:
            default(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = default


@contextlib.contextmanager
def _warnings_as_lines(debug: bool) -> Iterator[None]:
    """Python warnings (a dropped animation frame, a truncated prompt) as one ``warning: ...`` line each."""
    with warnings.catch_warnings():
        if not debug:
            seen: set[str] = set()

            def show(
                message: Any, category: Any, filename: str, lineno: int, file: Any = None, line: Any = None
            ) -> None:
                text = " ".join(str(message).split())
                if text not in seen:  # the same file is read by the pre-check and by the metric
                    seen.add(text)
                    click.echo(f"warning: {text}", err=True)

            warnings.showwarning = show
        yield


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; map errors to exit codes and a single ``error:`` line."""
    args = list(sys.argv[1:] if argv is None else argv)
    debug = "--debug" in args
    try:
        with _warnings_as_lines(debug), _quiet_dead_worker_finalisers(debug):
            check_environment()  # a bad GENMETRICS_* variable is named before any work
            cli.main(args=args, prog_name="genmetrics", standalone_mode=False)
        return 0
    except (click.exceptions.Abort, KeyboardInterrupt) as e:  # click turns Ctrl-C (and EOFError) into Abort
        if isinstance(e.__cause__, EOFError):  # an input that ended early, never a Ctrl-C
            if debug:
                traceback.print_exc()
            click.echo(f"error: unexpected end of input: {_first_line(e.__cause__)}", err=True)
            return 1
        click.echo("error: interrupted; finished results were kept", err=True)
        return 130
    except click.exceptions.Exit as e:
        return int(e.exit_code or 0)
    except click.ClickException as e:
        if debug:
            traceback.print_exc()
        click.echo(
            f"error: {_first_line(e.format_message() if hasattr(e, 'format_message') else e)}", err=True
        )
        return 2
    except (InputError, ValueError, FileNotFoundError, IsADirectoryError, NotADirectoryError) as e:
        if debug:
            traceback.print_exc()
        click.echo(f"error: {_first_line(e)}", err=True)
        return 2
    except (GenmetricsError, OSError, RuntimeError, MemoryError) as e:
        if debug:
            traceback.print_exc()
        # torch reports a killed decoding worker from its signal handler, wherever the main process was
        click.echo(f"error: {_first_line(WorkerDiedError.of(e) or e)}", err=True)
        return 1


def entry() -> None:  # pragma: no cover - console script shim
    sys.exit(main())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
