"""Reaching the weights hub: decided once, in seconds, and quietly.

Before a loader lets open_clip, transformers or huggingface_hub reach the network it enters
:func:`hub_calls`. There:

* the hub (``HF_ENDPOINT``, or the proxy that serves it) is asked for one TCP connection, once per process,
  within :data:`CONNECT_TIMEOUT` seconds; when that fails, every hub request of the process fails at once
  (the libraries' offline mode), so the libraries fall back on their caches without their retry loops
  (which otherwise wait 50-80 s on an unreachable hub);
* the first request that fails later (a dropped connection, an HTTP 5xx) also decides: the retry the
  library would make is refused the same way;
* the libraries' log lines and warnings (retry notices, download warnings) are kept out of the terminal:
  what went wrong is in the one error the loader raises (:func:`unreachable` gives its reason).

Nothing here downloads; nothing imports torch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import threading
import urllib.request
import warnings
from collections.abc import Iterator
from urllib.parse import urlsplit

__all__ = ["CONNECT_TIMEOUT", "endpoint", "hub_calls", "mark_unreachable", "unreachable"]

#: seconds one connection attempt to the hub may take before the hub counts as unreachable
CONNECT_TIMEOUT = 3.0
#: the libraries whose log lines and warnings stay out of the terminal while weights load
QUIET_LOGGERS = (
    "huggingface_hub",
    "transformers",
    "open_clip",
    "httpx",
    "httpx2",
    "httpcore",
    "urllib3",
    "filelock",
)
_QUIET_MODULES = r"(huggingface_hub|transformers|open_clip|httpx2?|httpcore|urllib3|timm|peft)(\.|$)"

_verdicts: dict[str, str | None] = {}  # "host:port" -> None (reachable) or why not
_lock = threading.Lock()


def endpoint() -> str:
    """The hub's address: huggingface_hub's ``ENDPOINT`` (``HF_ENDPOINT``; default ``https://huggingface.co``).

    >>> endpoint().startswith(("http://", "https://"))
    True
    """
    try:
        from huggingface_hub import constants

        return str(constants.ENDPOINT)
    except ImportError:  # pragma: no cover - huggingface_hub is a dependency
        return os.environ.get("HF_ENDPOINT", "https://huggingface.co")


def _target(url: str) -> tuple[str, int, str]:
    """``(host, port, what)`` a connection to ``url`` opens first: its proxy when one applies."""
    parts = urlsplit(url)
    host = parts.hostname or ""
    port = parts.port or (443 if parts.scheme == "https" else 80)
    proxy = urllib.request.getproxies().get(parts.scheme)
    if proxy and host and not urllib.request.proxy_bypass(host):
        p = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        if p.hostname:
            return p.hostname, p.port or 80, f"the proxy {p.hostname}:{p.port or 80} for {url}"
    return host, port, url


def _connect(host: str, port: int, out: list[str | None]) -> None:
    try:
        socket.create_connection((host, port), timeout=CONNECT_TIMEOUT).close()
        out.append(None)
    except OSError as e:
        out.append(f"{type(e).__name__}: {e.strerror or e}")


def unreachable(url: str | None = None) -> str | None:
    """Why the hub at ``url`` (default :func:`endpoint`) cannot be reached, or ``None`` when one TCP connection
    to it (or its proxy) opens within :data:`CONNECT_TIMEOUT` seconds. Asked once per process and address (name
    resolution included in the time limit); :func:`mark_unreachable` records a later failure.

    >>> unreachable("http://127.0.0.1:9")  # a closed port: refused at once  # doctest: +ELLIPSIS
    'the hub http://127.0.0.1:9 cannot be reached: ConnectionRefusedError: ...'
    """
    host, port, what = _target(url or endpoint())
    key = f"{host}:{port}"
    with _lock:
        if key in _verdicts:
            return _verdicts[key]
    if not host:
        reason: str | None = f"{what} is not a hub address"
    else:
        out: list[str | None] = []
        t = threading.Thread(target=_connect, args=(host, port, out), daemon=True)
        t.start()
        t.join(CONNECT_TIMEOUT + 0.5)  # name resolution has no timeout of its own
        cause = out[0] if out else f"no answer within {CONNECT_TIMEOUT:g} s"
        reason = None if out and out[0] is None else f"the hub {what} cannot be reached: {cause}"
    with _lock:
        _verdicts[key] = reason
    return reason


def mark_unreachable(reason: str, url: str | None = None) -> None:
    """Record that a request to the hub failed: every later hub request of this process fails at once.

    >>> mark_unreachable("test", "http://127.0.0.2:1"); unreachable("http://127.0.0.2:1")
    'test'
    >>> forget()
    """
    host, port, _ = _target(url or endpoint())
    with _lock:
        if _verdicts.get(f"{host}:{port}") is None:  # the first failure is the one kept
            _verdicts[f"{host}:{port}"] = reason


def forget() -> None:
    """Drop every verdict (the next :func:`unreachable` asks again); for tests."""
    with _lock:
        _verdicts.clear()


class _FirstFailure(logging.Handler):
    """Sees huggingface_hub's retry notices: the first failed request trips offline mode, so the retry it
    announces is refused at once (its request hook checks offline mode on every attempt)."""

    def __init__(self, url: str) -> None:
        super().__init__(logging.WARNING)
        self.url = url
        self.reason: str | None = None

    def emit(self, record: logging.LogRecord) -> None:
        msg = record.getMessage()
        if self.reason is None and ("thrown while requesting" in msg or msg.startswith("HTTP Error")):
            self.reason = f"{self.url}: {' '.join(msg.split())[:200]}"
            mark_unreachable(self.reason, self.url)
            _set_hub_offline(True)


def _set_hub_offline(value: bool) -> bool:
    """Set huggingface_hub's offline switch (read at each request); returns the previous value."""
    from huggingface_hub import constants

    previous = bool(constants.HF_HUB_OFFLINE)
    constants.HF_HUB_OFFLINE = value
    return previous


def _hub_offline() -> bool:
    from huggingface_hub import constants

    return bool(constants.HF_HUB_OFFLINE)


class _DropLibraryRecords(logging.Filter):
    """On the root logger: drop the lines open_clip logs there (its download failures, said in our error)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return f"{os.sep}open_clip{os.sep}" not in (record.pathname or "")


@contextlib.contextmanager
def hub_calls(url: str | None = None, *, offline: bool = False, network: bool = True) -> Iterator[str | None]:
    """Around library calls that may reach the hub at ``url`` (default :func:`endpoint`): yields why the hub
    cannot be used (``None`` when it can). When ``offline`` or the hub is unreachable, every hub request inside
    fails at once and the libraries read their caches only; the first failure inside decides the same way for
    the rest of the process. Library log lines and warnings are kept out of the terminal. ``network=False``
    (a local file is loaded): only that.

    >>> with hub_calls("http://127.0.0.1:9") as why:  # doctest: +ELLIPSIS
    ...     print(why)
    the hub http://127.0.0.1:9 cannot be reached: ConnectionRefusedError: ...
    """
    where = url or endpoint()
    reason = (
        None if not network else "downloads are disabled (offline mode)" if offline else unreachable(where)
    )
    breaker = _FirstFailure(where)
    saved: list[tuple[logging.Logger, list[logging.Handler], bool]] = []
    for name in QUIET_LOGGERS:
        lg = logging.getLogger(name)
        saved.append((lg, list(lg.handlers), lg.propagate))
        lg.handlers[:] = [breaker if name == "huggingface_hub" else logging.NullHandler()]
        lg.propagate = False
    drop = _DropLibraryRecords()
    logging.getLogger().addFilter(drop)
    previous = _set_hub_offline(reason is not None or _hub_offline())
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", module=_QUIET_MODULES)
            yield reason
    finally:
        logging.getLogger().removeFilter(drop)
        for lg, handlers, propagate in saved:
            lg.handlers[:] = handlers
            lg.propagate = propagate
        _set_hub_offline(previous)
