"""JSON values from Python ones (tensors, numpy values, paths, non-finite floats), without importing
anything heavy: used by every JSON writer and by ``genmetrics list --json``."""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any

__all__ = ["jsonable"]


def jsonable(x: Any) -> Any:
    """``x`` with tensors, numpy values and paths made JSON values; NaN becomes ``null`` and infinities
    the largest double (JSON has neither).

    >>> import math
    >>> jsonable({"p": Path("a.png"), "v": (1, float("nan")), 2: math.inf})
    {'p': 'a.png', 'v': [1, None], '2': 1e+308}
    >>> import numpy as np
    >>> jsonable(np.array([[0.5, np.nan]], dtype=np.float32))
    [[0.5, None]]
    """
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is imported; never import it here
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else (1e308 if x > 0 else -1e308)
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        try:
            return jsonable(x.item())
        except (ValueError, TypeError):
            pass
    if hasattr(x, "tolist") and callable(x.tolist) and hasattr(x, "shape"):  # a numpy array
        return jsonable(x.tolist())
    if isinstance(x, Path):
        return str(x)
    return x
