"""Reaching the weights hub (genmetrics.backbones.hub): decided once per process and address, through the proxy
that applies; the first failed request decides for the rest of the process; inside ``hub_calls`` the libraries
are offline when the hub cannot be used and quiet always, and everything is restored after the block."""

from __future__ import annotations

import http.server
import logging
import socket
import threading
import time

import pytest
from huggingface_hub import constants as hf_constants

from genmetrics.backbones import hub

LIMIT_S = 5.0


@pytest.fixture(autouse=True)
def _fresh_verdicts():
    hub.forget()
    yield
    hub.forget()


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_closed_port_is_refused_once_and_remembered(monkeypatch):
    url = f"http://127.0.0.1:{_closed_port()}"
    t0 = time.perf_counter()
    why = hub.unreachable(url)
    assert (
        why.startswith(f"the hub {url} cannot be reached: ConnectionRefusedError")
        and time.perf_counter() - t0 < LIMIT_S
    )
    monkeypatch.setattr(hub, "_connect", lambda *a: pytest.fail("asked twice"))
    assert hub.unreachable(url) == why  # decided once per process and address


def test_a_listening_port_is_reachable():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        assert hub.unreachable(f"http://127.0.0.1:{s.getsockname()[1]}") is None


def test_the_proxy_is_what_is_asked(monkeypatch):
    port = _closed_port()
    monkeypatch.setattr(hub.urllib.request, "getproxies", lambda: {"https": f"127.0.0.1:{port}"})
    monkeypatch.setattr(hub.urllib.request, "proxy_bypass", lambda host: False)
    why = hub.unreachable("https://hub.example")
    assert why.startswith(f"the hub the proxy 127.0.0.1:{port} for https://hub.example cannot be reached")
    assert hub.unreachable("https:///no-host") == "https:///no-host is not a hub address"


def test_mark_unreachable_keeps_the_first_failure():
    url = "http://127.0.0.3:1"
    hub.mark_unreachable("first", url)
    hub.mark_unreachable("second", url)
    assert hub.unreachable(url) == "first"


@pytest.mark.parametrize(
    "offline,network,expect",
    [(True, True, "downloads are disabled (offline mode)"), (False, False, None), (True, False, None)],
)
def test_hub_calls_reasons_and_restores_the_libraries(monkeypatch, offline, network, expect):
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(hub, "unreachable", lambda url=None: pytest.fail("the network was asked"))
    lg = logging.getLogger("transformers")
    before = (list(lg.handlers), lg.propagate)
    with hub.hub_calls("http://127.0.0.1:9", offline=offline, network=network) as why:
        assert why == expect
        assert hf_constants.HF_HUB_OFFLINE is (expect is not None)
        assert lg.propagate is False
    assert hf_constants.HF_HUB_OFFLINE is False and (list(lg.handlers), lg.propagate) == before


class _Always503(http.server.BaseHTTPRequestHandler):
    seen: list[str] = []

    def _answer(self) -> None:
        type(self).seen.append(f"{self.command} {self.path}")
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_HEAD = do_GET = _answer

    def log_message(self, *args) -> None:  # quiet
        pass


def test_the_first_failed_request_decides(monkeypatch, tmp_path, capsys):
    """A hub that accepts connections but fails (HTTP 503): huggingface_hub's retry loop (``http_backoff``, 5
    retries sleeping 1 + 2 + 4 + 8 + 8 s) ends after its first failed attempt, and later loads of the process
    ask the hub nothing."""
    from huggingface_hub import hf_hub_download
    from huggingface_hub.utils import http_backoff

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Always503)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    monkeypatch.setattr(hf_constants, "ENDPOINT", url)
    monkeypatch.setattr(hf_constants, "HF_HUB_OFFLINE", False)
    hub.forget()
    _Always503.seen.clear()
    try:
        t0 = time.perf_counter()
        with hub.hub_calls() as why, pytest.raises(ConnectionError):  # the retry is refused: offline now
            http_backoff("HEAD", f"{url}/org/model/resolve/main/config.json")
        assert why is None  # the connection itself worked
        assert time.perf_counter() - t0 < LIMIT_S
        assert _Always503.seen == ["HEAD /org/model/resolve/main/config.json"]
        assert "503" in str(hub.unreachable())
        assert not hf_constants.HF_HUB_OFFLINE  # restored after the block
        with hub.hub_calls() as why_later:  # a later load of the process asks nothing
            assert why_later is not None and "503" in why_later
            with pytest.raises(Exception):  # noqa: B017 - the library's own error type
                hf_hub_download("org/model", "other.json", cache_dir=str(tmp_path))
        assert len(_Always503.seen) == 1, _Always503.seen
        assert capsys.readouterr().err == ""  # the library's retry notices stay out of the terminal
    finally:
        server.shutdown()
        hub.forget()
