"""Exception types. Every error says what was expected, what arrived, and how to fix it.

``InputError`` (a ``ValueError``) is bad user input: the CLI maps it to exit code 2.
``WeightsUnavailableError`` (an ``OSError``) is the environment: the CLI maps it to exit code 1.
"""

from __future__ import annotations


class GenmetricsError(Exception):
    """Base class of every error raised on purpose by genmetrics.

    >>> import genmetrics as gm
    >>> try:
    ...     gm.create_metric("psnr", max_db=-1)
    ... except GenmetricsError as e:  # catches every deliberate genmetrics error
    ...     print(type(e).__name__)
    InputError
    """


class InputError(GenmetricsError, ValueError):
    """An input (image, text, file, option) is not what the metric accepts.

    A ``ValueError`` too, so code that catches ``ValueError`` keeps working; the message names the input:

    >>> import torch, genmetrics as gm
    >>> gm.create_metric("psnr").update(reference=torch.zeros(2, 3, 8, 8), candidates=torch.zeros(3, 3, 8, 8))
    ... # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: mismatched input lengths (reference=2, candidates=3); every input needs one entry ...
    >>> issubclass(InputError, ValueError)
    True
    """


class WeightsUnavailableError(GenmetricsError, OSError):
    """Model weights could not be found locally and could not be downloaded.

    >>> issubclass(WeightsUnavailableError, OSError), issubclass(WeightsUnavailableError, GenmetricsError)
    (True, True)
    """


class MissingDependencyError(GenmetricsError, ImportError):
    """An optional dependency (a ``genmetrics[...]`` extra) is not installed; the message names the extra.

    >>> issubclass(MissingDependencyError, ImportError)  # ``except ImportError`` still catches it
    True
    """


class PluginError(GenmetricsError, TypeError):
    """A metric class breaks the contract of docs/plugins.md: a hook returned something it must not, or the
    class states a fact its card declares. The message names the class, what arrived and the fix; the
    command-line tools exit 1 with it (one line, no traceback).

    >>> issubclass(PluginError, TypeError), issubclass(PluginError, ValueError)
    (True, False)
    """


class WorkerDiedError(GenmetricsError, RuntimeError):
    """A decoding worker process ended before its work was handed over (killed, out of memory); the
    command-line tools exit 1 with this message, and ``--resume`` continues from the finished results.

    >>> issubclass(WorkerDiedError, RuntimeError), issubclass(WorkerDiedError, KeyboardInterrupt)
    (True, False)
    >>> str(WorkerDiedError.of(RuntimeError("DataLoader worker (pid 7) is killed by signal: Killed.")))[:60]
    'a decoding worker process ended (DataLoader worker (pid 7) i'
    >>> WorkerDiedError.of(RuntimeError("CUDA error")) is None
    True
    """

    @classmethod
    def of(cls, e: BaseException, *, handing_over: bool = False) -> WorkerDiedError | None:
        """The dead worker that ``e`` reports, or ``None``: torch's ``RuntimeError`` "DataLoader worker (pid
        N) ..." (raised by its SIGCHLD handler or watchdog, wherever the main process is), or, while a batch is
        handed over (``handing_over``), the ``EOFError`` / refused connection of the shared-memory transfer."""
        if isinstance(e, cls):
            return e
        torch_says = isinstance(e, RuntimeError) and str(e).startswith("DataLoader worker (pid")
        if not (torch_says or (handing_over and isinstance(e, (EOFError, ConnectionError)))):
            return None
        what = str(e) if torch_says else f"while handing over a batch: {type(e).__name__}: {e}"
        died = cls(
            f"a decoding worker process ended ({what.strip()}); run the command again (`leaderboard --resume` "
            "continues from the finished results; --workers 0 decodes in the main process)"
        )
        died.__cause__ = e
        return died


class DependencyChanged(GenmetricsError, RuntimeError):
    """An installed dependency no longer has a private member genmetrics relies on (a release renamed or
    dropped it); the message names the member, the installed version and the supported range.

    >>> e = DependencyChanged.missing("torch", "Tensor._nothing", "genmetrics.x", "torch>=2.4,<2.15")
    >>> "torch" in str(e) and "Tensor._nothing" in str(e) and isinstance(e, RuntimeError)
    True
    """

    @classmethod
    def missing(cls, dist: str, member: str, where: str, requirement: str) -> DependencyChanged:
        """The error for ``member`` of the distribution ``dist`` missing, used by genmetrics module ``where``;
        ``requirement`` is the range ``pyproject.toml`` admits (shown as the install command)."""
        return cls(
            f"{dist} {installed_version(dist)} has no {member}, which genmetrics ({where}) uses; install a "
            f"release within the supported range (pip install '{requirement}')"
        )


def installed_version(dist: str) -> str:
    """The installed version of the distribution ``dist`` (``"unknown"`` when its metadata is missing).

    >>> installed_version("torch").count(".") >= 1, installed_version("no-such-distribution-xyz")
    (True, 'unknown')
    """
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(dist)
    except PackageNotFoundError:
        return "unknown"
