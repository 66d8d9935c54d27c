"""Pure tensor math (torch, numpy, scipy only; float64 internally; no nn.Module, no I/O).

Names are loaded from their modules on first use:

* ``divergence``: gaussian_kl, gaussian_kl_2d, sad, pad, rsad, rsad_ranking, cohens_d, hellinger_gaussian,
  one_minus_ovl, kde_sad, kde_pad
* ``agreement``: odd_one_out_agreement, two_afc_agreement, human_consensus, triplet_probabilities
* ``ranking``: pairwise_accuracy, macro_f1, f1_per_class, bradley_terry, win_rate_matrix
* ``bootstrap``: bootstrap_ci, bootstrap_interval, paired_bootstrap, two_sample_ci (scipy.stats.bootstrap;
  studentized / BCa)
"""

from __future__ import annotations

import importlib
from typing import Any

_EXPORTS = {
    "divergence": (
        "gaussian_kl",
        "gaussian_kl_2d",
        "sad",
        "pad",
        "rsad",
        "rsad_ranking",
        "cohens_d",
        "hellinger_gaussian",
        "one_minus_ovl",
        "kde_sad",
        "kde_pad",
    ),
    "agreement": ("odd_one_out_agreement", "two_afc_agreement", "human_consensus", "triplet_probabilities"),
    "ranking": ("pairwise_accuracy", "macro_f1", "f1_per_class", "bradley_terry", "win_rate_matrix"),
    "bootstrap": ("bootstrap_ci", "bootstrap_interval", "paired_bootstrap", "two_sample_ci"),
}
_WHERE = {name: mod for mod, names in _EXPORTS.items() for name in names}
__all__ = sorted(_WHERE)


def __getattr__(name: str) -> Any:
    mod = _WHERE.get(name)
    if mod is None:
        raise AttributeError(f"module 'genmetrics.functional' has no attribute {name!r}")
    return getattr(importlib.import_module(f"genmetrics.functional.{mod}"), name)


def __dir__() -> list[str]:
    return __all__
