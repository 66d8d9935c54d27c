"""The package's top level (genmetrics/__init__.py): importing it is light (no torch, transformers or
open_clip), every name of ``__all__`` resolves, ``Metric`` loads on first use, an unknown name is named."""

from __future__ import annotations

import subprocess
import sys

import pytest

import genmetrics as gm


def test_import_is_light():
    code = (
        "import sys, genmetrics as gm; names = gm.list_metrics(); "
        "heavy = [m for m in ('torch', 'transformers', 'open_clip') if m in sys.modules]; "
        "assert not heavy, heavy; assert 'psnr' in names; "
        "M = gm.Metric; assert 'torch' in sys.modules"  # Metric is what loads torch, on first use
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]


def test_every_public_name_resolves_to_its_home():
    from genmetrics import errors
    from genmetrics.core import metric, registry

    homes = {
        "Metric": metric,
        "GenmetricsError": errors,
        "InputError": errors,
        "WeightsUnavailableError": errors,
    }
    for name in gm.__all__:
        value = getattr(gm, name)
        if name == "__version__":
            from importlib.metadata import version

            assert value == version("genmetrics")
            continue
        assert value is getattr(homes.get(name, registry), name), name


def test_an_unknown_name_is_an_attribute_error_naming_it():
    with pytest.raises(AttributeError, match="module 'genmetrics' has no attribute 'Metrik'"):
        gm.Metrik  # noqa: B018
    assert not hasattr(gm, "Metrik")


def test_the_old_registry_path_is_the_core_registry():
    import genmetrics.core.registry as core_registry

    assert gm.registry.create_metric is core_registry.create_metric
