"""Exception types (genmetrics.errors): each deliberate error is a ``GenmetricsError`` and also the builtin a
caller already catches; a dead decoding worker is recognised from torch's words or a broken hand-over only;
a changed dependency names the member, the installed version and the install command."""

from __future__ import annotations

from importlib.metadata import version

import pytest

from genmetrics import errors as E


@pytest.mark.parametrize(
    "cls,builtin",
    [
        (E.InputError, ValueError),
        (E.WeightsUnavailableError, OSError),
        (E.MissingDependencyError, ImportError),
        (E.PluginError, TypeError),
        (E.WorkerDiedError, RuntimeError),
        (E.DependencyChanged, RuntimeError),
    ],
)
def test_every_error_is_a_genmetrics_error_and_its_builtin(cls, builtin):
    assert issubclass(cls, E.GenmetricsError) and issubclass(cls, builtin)
    with pytest.raises(builtin):
        raise cls("x")


@pytest.mark.parametrize(
    "err,handing_over,dead",
    [
        (RuntimeError("DataLoader worker (pid 12) is killed by signal: Killed."), False, True),
        (RuntimeError("DataLoader worker (pid 12) exited unexpectedly"), True, True),
        (RuntimeError("CUDA out of memory"), True, False),
        (EOFError("received 0 items of ancdata"), True, True),
        (EOFError("received 0 items of ancdata"), False, False),  # not handing over: not a worker's death
        (ConnectionResetError(104, "reset"), True, True),
        (ValueError("DataLoader worker (pid 12)"), True, False),
    ],
)
def test_worker_died_of_recognises_only_a_worker_s_death(err, handing_over, dead):
    died = E.WorkerDiedError.of(err, handing_over=handing_over)
    assert (died is not None) is dead
    if dead:
        assert died.__cause__ is err and "--resume" in str(died) and "--workers 0" in str(died)
        what = str(err) if isinstance(err, RuntimeError) else f"{type(err).__name__}: {err}"
        assert what in str(died)
        assert E.WorkerDiedError.of(died) is died  # already one: kept


def test_dependency_changed_names_member_version_and_range():
    e = E.DependencyChanged.missing("torch", "Tensor._gone", "genmetrics.accel.views", "torch>=2.4,<3")
    assert str(e) == (
        f"torch {version('torch')} has no Tensor._gone, which genmetrics (genmetrics.accel.views) uses; "
        "install a release within the supported range (pip install 'torch>=2.4,<3')"
    )
    assert E.installed_version("no-such-distribution-xyz") == "unknown"
