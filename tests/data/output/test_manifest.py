"""The run manifest (genmetrics.data.output.manifest): installed versions (None when missing), the command as
typed (``python -m genmetrics`` for the module), platform and time, plus what the caller adds."""

from __future__ import annotations

import sys
import time
from importlib.metadata import version

from genmetrics.data.output import manifest as M
from genmetrics.data.output.manifest import manifest, package_versions


def test_package_versions_are_the_installed_ones():
    got = package_versions(["torch", "numpy", "no-such-package-xyz"])
    assert got == {"torch": version("torch"), "numpy": version("numpy"), "no-such-package-xyz": None}


def test_a_source_checkout_says_so(monkeypatch):
    from importlib.metadata import PackageNotFoundError

    def missing(name):
        raise PackageNotFoundError(name)

    monkeypatch.setattr(M, "version", missing)
    assert package_versions(["genmetrics", "torch"]) == {
        "genmetrics": "source checkout (not installed)",
        "torch": None,
    }


def test_the_command_names_python_dash_m(monkeypatch, tmp_path):
    main = tmp_path / "genmetrics" / "__main__.py"
    monkeypatch.setattr(sys, "argv", [str(main), "score", "psnr"])
    assert manifest()["command"] == "python -m genmetrics score psnr"
    monkeypatch.setattr(sys, "argv", ["/usr/bin/genmetrics", "list"])
    assert manifest()["command"] == "/usr/bin/genmetrics list"


def test_manifest_holds_time_platform_versions_and_extras():
    before = time.time()
    m = manifest(seed=3, options={"a": 1})
    created = time.mktime(time.strptime(m["created"][:19], "%Y-%m-%dT%H:%M:%S"))
    assert before - 2 <= created <= time.time() + 1
    assert m["python"] == sys.version.split()[0] and m["seed"] == 3 and m["options"] == {"a": 1}
    assert m["versions"] == package_versions()
