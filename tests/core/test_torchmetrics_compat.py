"""The private torchmetrics / torch members genmetrics still uses (genmetrics/core/_torchmetrics_compat.py), each
checked against the installed versions: a release that renames or changes one fails here, by name, before
any metric misbehaves. And no other module of genmetrics touches a private member of torchmetrics.Metric."""

from __future__ import annotations

import ast
import inspect
import re
from pathlib import Path

import pytest
import torch
import torchmetrics
from torchmetrics.aggregation import SumMetric

import genmetrics as gm
from genmetrics.core import _torchmetrics_compat as compat
from genmetrics.testing import tiny_dino

PACKAGE = Path(__file__).resolve().parents[2] / "genmetrics"
VERSION = f"torchmetrics {torchmetrics.__version__}, torch {torch.__version__}"


def _changed(member: str, job: str) -> str:
    return (
        f"{VERSION} changed the private member {member!r} that genmetrics/core/_torchmetrics_compat.py uses to "
        f"{job}; adapt that module (and only it) to the new release"
    )


def test_update_count_is_the_counter_behind_update_count():
    m = SumMetric()
    m.update(torch.tensor(1.0))
    assert getattr(m, compat.MEMBERS["update_count"], None) == m.update_count == 1, _changed(
        "_update_count", "restore the update counter"
    )
    compat.set_update_count(m, 5)
    assert m.update_count == 5, _changed("_update_count", "restore the update counter")


def test_computed_is_the_cached_compute_value():
    m = SumMetric()
    m.update(torch.tensor(2.0))
    value = m.compute()
    member = compat.MEMBERS["cached_value"]
    assert torch.equal(getattr(m, member, None), value), _changed(member, "drop the cached compute() value")
    setattr(m, member, torch.tensor(-1.0))  # torchmetrics answers from the cache while it is set
    assert float(m.compute()) == -1.0, _changed(member, "drop the cached compute() value")
    compat.set_update_count(m, 1)
    assert float(m.compute()) == 2.0, _changed(member, "drop the cached compute() value")


def test_is_synced_follows_sync_and_unsync():
    m = SumMetric()
    m.update(torch.tensor(3.0))
    assert not compat.is_synced(m)
    m.sync(dist_sync_fn=lambda t, group=None: [t], distributed_available=lambda: True)
    assert compat.is_synced(m), _changed("_is_synced", "refuse forward() on a synced metric")
    m.unsync()
    assert not compat.is_synced(m), _changed("_is_synced", "refuse forward() on a synced metric")


def test_forward_cache_is_where_forward_keeps_the_batch_value():
    m = SumMetric()
    value = m(torch.tensor(4.0))
    member = compat.MEMBERS["forward_cache"]
    assert torch.equal(getattr(m, member, None), value), _changed(member, "record forward()'s batch value")
    lightning = pytest.importorskip("lightning.pytorch.trainer.connectors.logger_connector.result")
    assert member in inspect.getsource(lightning), (
        f"Lightning no longer reads {member!r} for on_step logging; genmetrics' forward need not write it"
    )


def test_apply_is_the_hook_of_to_and_takes_exclude_state():
    params = inspect.signature(torchmetrics.Metric._apply).parameters
    assert "exclude_state" in params, _changed("_apply", "move the backbones with .to()")
    m = gm.create_metric("dino", backbone=tiny_dino())
    m.to(torch.float64)
    assert next(m.backbones()["backbone"].parameters()).dtype == torch.float64, _changed(
        "_apply", "move the backbones with .to()"
    )
    m.set_dtype(torch.float16)  # states only
    assert next(m.backbones()["backbone"].parameters()).dtype == torch.float64


def _torchmetrics_private_members() -> set[str]:
    src = inspect.getsource(torchmetrics.Metric)
    names = set(re.findall(r"self\.(_[a-zA-Z][a-zA-Z0-9_]*)", src))
    names |= {n for n in vars(torchmetrics.Metric) if n.startswith("_") and not n.startswith("__")}
    return names - {n for n in dir(torch.nn.Module) if n.startswith("_")}


def private_uses(path: Path, members: set[str]) -> list[str]:
    """Attribute reads/writes and method definitions of ``members`` in ``path`` (as ``file:line name``)."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        name = (
            node.attr
            if isinstance(node, ast.Attribute)
            else node.name
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
            else None
        )
        if name in members:
            out.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {name}")
    return out


#: other areas' remaining uses, owned by their engineers (may only shrink): mie/metric.py stores its
#: dtype option in torchmetrics' own ``_dtype`` (which ``.to()`` overwrites) and reads ``_device``;
#: raclip's bootstrap_ci reads ``_to_sync`` (``sync_on_compute`` is the public twin); the embedding
#: baselines keep their FeatureCache in ``_cache``, torchmetrics' sync cache (``reset()`` drops it)
KNOWN_ELSEWHERE = {
    "genmetrics/mie/metric.py": {"_device"},  # raclip's _to_sync, embedding's _cache and mie's _dtype: fixed
}


def test_only_the_compat_module_touches_torchmetrics_privates():
    members = _torchmetrics_private_members()
    assert {"_update_count", "_computed", "_reduce_states", "_wrap_compute"} <= members  # the scan sees them
    offenders = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        rel = str(path.relative_to(PACKAGE.parent))
        if rel == "genmetrics/core/_torchmetrics_compat.py":
            continue
        uses = [
            u for u in private_uses(path, members) if u.split()[-1] not in KNOWN_ELSEWHERE.get(rel, set())
        ]
        if uses:
            offenders[rel] = uses
    assert not offenders, (
        f"private torchmetrics members used outside genmetrics/core/_torchmetrics_compat.py: {offenders}"
    )
    for rel, names in KNOWN_ELSEWHERE.items():  # the list shrinks as those areas are fixed
        still = {u.split()[-1] for u in private_uses(PACKAGE.parent / rel, members)}
        assert names <= still, f"{rel} no longer uses {sorted(names - still)}: delete it from KNOWN_ELSEWHERE"


def test_the_scan_sees_reads_writes_and_overrides(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("a = m._update_count\nm._computed = None\nclass M:\n    def _sync_dist(self): pass\n")
    (tmp_path / "genmetrics").mkdir()
    g = tmp_path / "genmetrics" / "x.py"
    g.write_text(f.read_text())
    global PACKAGE
    old, PACKAGE = PACKAGE, tmp_path / "genmetrics"
    try:
        assert len(private_uses(g, _torchmetrics_private_members())) == 3
    finally:
        PACKAGE = old
