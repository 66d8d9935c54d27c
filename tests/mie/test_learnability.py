"""MIE learns to use its references (slow): on procedurally generated pairs whose worse candidate has one
subject recoloured and nothing else changed (any candidate-only metric is at chance by construction),
training through the project's trainer lifts held-out pairwise accuracy from chance to >= 0.80, and giving
every held-out pair another pair's references brings it back to <= 0.60. See benchmarks/mie_learnability.py."""

import importlib.util
from pathlib import Path

import pytest


def _bench():
    path = Path(__file__).resolve().parents[2] / "benchmarks" / "mie_learnability.py"
    spec = importlib.util.spec_from_file_location("mie_learnability", path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_appearance_candidates_are_at_chance_alone(tmp_path):
    """Both candidates of an appearance pair show two distinct palette colours: the colour multiset of the
    better candidate and of the worse one have the same distribution, so only the references tell them apart."""
    import numpy as np
    from PIL import Image

    bench = _bench()
    recs = bench.make_pairs(tmp_path, "appearance", 40, seed=3)
    for r in recs:
        good = np.asarray(Image.open(tmp_path / r["candidates"][r["preference"]]))
        bad = np.asarray(Image.open(tmp_path / r["candidates"][1 - r["preference"]]))
        refs = {tuple(np.asarray(Image.open(tmp_path / p))[0, 0]) for p in r["references"]}
        for im in (good, bad):  # two halves, two distinct palette colours, same layout
            left, right = tuple(im[0, 0]), tuple(im[0, -1])
            assert left != right and left in map(tuple, bench.PALETTE) and right in map(tuple, bench.PALETTE)
        assert {tuple(good[0, 0]), tuple(good[0, -1])} == refs
        assert len({tuple(bad[0, 0]), tuple(bad[0, -1])} & refs) == 1  # exactly one subject recoloured


@pytest.mark.slow
def test_appearance_is_learned_from_the_references(tmp_path):
    res = _bench().run(tasks=("appearance",), workdir=str(tmp_path))
    app = res["tasks"]["appearance"]
    print(res)
    assert app["before"]["pairwise_accuracy"] <= 0.65
    assert app["after"]["pairwise_accuracy"] >= 0.80
    assert app["swapped_references"]["pairwise_accuracy"] <= 0.60
