"""Exception types. Every error says what was expected, what arrived, and how to fix it.

``InputError`` (a ``ValueError``) is bad user input: the CLI maps it to exit code 2.
``WeightsUnavailableError`` (an ``OSError``) is the environment: the CLI maps it to exit code 1.
"""


class GenmetricsError(Exception):
    """Base class of every error raised on purpose by genmetrics."""


class InputError(GenmetricsError, ValueError):
    """An input (image, text, file, option) is not what the metric accepts."""


class WeightsUnavailableError(GenmetricsError, OSError):
    """Model weights could not be found locally and could not be downloaded."""


class MissingDependencyError(GenmetricsError, ImportError):
    """An optional dependency (a ``genmetrics[...]`` extra) is not installed; the message names the extra."""
