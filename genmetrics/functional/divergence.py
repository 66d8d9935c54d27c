"""Attribute divergences between a real and a generated set (RA-CLIPScore paper, DESIGN section 3).

All functions take per-image score tables (``real [N,C]``, ``gen [M,C]``) or maps (``[N,P,C]``), work
in float64 and return float64 tensors on the input's device.

* :func:`gaussian_kl`, :func:`gaussian_kl_2d` — closed-form KL of 1-D / 2-D Gaussians (nats);
* :func:`sad` (Eq. 12), :func:`pad` (Eq. 13), :func:`rsad` (Eq. 14), :func:`rsad_ranking`;
* :func:`gaussian_stats` / :func:`sad_from_stats` / :func:`pad_from_stats` — the same from sufficient
  statistics (counts, sums, cross-products), which is what the streaming metrics keep;
* :func:`kde_sad`, :func:`kde_pad` — the 2024 HCS code's KDE-on-a-grid estimates (parity mode);
* separation statistics of the paper's ablation (Supp. B.4, Eqs. 17-19): :func:`cohens_d`,
  :func:`hellinger_gaussian`, :func:`one_minus_ovl`.

KL direction: ``"gen||real"`` (default, DESIGN) is KL(N_gen || N_real); ``"real||gen"`` is the
direction of the HCS code. Every variance (and the diagonal of every 2x2 covariance) gets the ridge
``eps`` added, so saturated (constant) scores never divide by zero; identical sets still give 0.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from scipy.stats import gaussian_kde

DIRECTIONS = ("gen||real", "real||gen")
#: default variance ridge added to every variance (scores in [0,1] have variances around 1e-2..1e-1)
DEFAULT_EPS = 1e-6
#: grid of the HCS code (scores are 100 * cosine, so -35..35 covers them)
HCS_GRID = (-35.0, 35.0)
HCS_POINTS = 10000


# ----------------------------------------------------------------------------------------- checks
def _f64(x: Any, name: str) -> torch.Tensor:
    if isinstance(x, np.ndarray):
        x = torch.from_numpy(x)
    if not isinstance(x, torch.Tensor):
        try:  # Python numbers: straight to float64 (torch.as_tensor would round them through float32)
            x = torch.as_tensor(x, dtype=torch.float64)
        except (TypeError, ValueError, RuntimeError):
            raise ValueError(f"{name}: expected a tensor, got {type(x).__name__}") from None
    if not (x.is_floating_point() or x.dtype in (torch.int32, torch.int64, torch.int16, torch.uint8)):
        raise ValueError(f"{name}: expected a real-valued tensor, got dtype {x.dtype}")
    x = x.to(torch.float64)
    # a finite total implies finite entries (one NaN or inf makes the sum NaN or inf); only a non-finite
    # total (or an overflowing one) needs the elementwise check, which costs a pass and a mask
    if not bool(torch.isfinite(x.sum())) and not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name}: contains NaN or infinite values; drop those images or scores first")
    return x


def _table(x: Any, name: str, *, min_rows: int = 2) -> torch.Tensor:
    x = _f64(x, name)
    if x.ndim == 1:
        x = x.unsqueeze(1)
    if x.ndim != 2:
        raise ValueError(f"{name}: expected per-image scores [N,C], got shape {tuple(x.shape)}")
    if x.shape[0] < min_rows:
        raise ValueError(
            f"{name}: {x.shape[0]} image(s); fitting a distribution needs at least {min_rows} images per set"
        )
    if x.shape[1] == 0:
        raise ValueError(f"{name}: no attributes (C=0); pass at least one attribute")
    return x


def _pair(real: torch.Tensor, gen: torch.Tensor) -> None:
    if real.shape[1] != gen.shape[1]:
        raise ValueError(
            f"real has {real.shape[1]} attributes but gen has {gen.shape[1]}; score both sets with the same attribute list"
        )


def check_direction(direction: str) -> str:
    """``direction`` when it is a KL direction this module knows (``"gen||real"`` or ``"real||gen"``).

    >>> check_direction("real||gen")
    'real||gen'
    """
    if direction not in DIRECTIONS:
        raise ValueError(f"kl_direction: expected one of {DIRECTIONS}, got {direction!r}")
    return direction


def _check_eps(eps: float) -> float:
    if not isinstance(eps, (int, float)) or isinstance(eps, bool) or not eps >= 0 or not math.isfinite(eps):
        raise ValueError(f"eps: expected a finite variance ridge >= 0, got {eps!r}")
    return float(eps)


# -------------------------------------------------------------------------------- closed-form KL
def gaussian_kl(mu_p: Any, var_p: Any, mu_q: Any, var_q: Any) -> torch.Tensor:
    """KL(p || q) of 1-D Gaussians, elementwise, in nats (broadcasts; float64).

    >>> float(gaussian_kl(0.0, 1.0, 0.0, 1.0))  # identical Gaussians
    0.0
    >>> gaussian_kl(torch.tensor([1.0, 2.0]), 1.0, 0.0, 1.0).tolist()  # unit variances: (mu_p - mu_q)^2 / 2
    [0.5, 2.0]
    """
    mu_p, var_p, mu_q, var_q = (
        _f64(v, n) for v, n in ((mu_p, "mu_p"), (var_p, "var_p"), (mu_q, "mu_q"), (var_q, "var_q"))
    )
    if (var_p <= 0).any() or (var_q <= 0).any():
        raise ValueError("gaussian_kl: variances must be > 0; add a ridge (eps) for constant scores")
    return 0.5 * (torch.log(var_q / var_p) + (var_p + (mu_p - mu_q) ** 2) / var_q - 1.0)


def _det2(c: torch.Tensor) -> torch.Tensor:
    return c[..., 0, 0] * c[..., 1, 1] - c[..., 0, 1] * c[..., 1, 0]


def _kl2_parts(mu_p, a_p, b_p, d_p, mu_q, a_q, b_q, d_q) -> torch.Tensor:
    """KL of bivariate Gaussians given covariance entries [[a, b], [b, d]] (vectorised, no checks)."""
    det_p = a_p * d_p - b_p * b_p
    det_q = a_q * d_q - b_q * b_q
    # inverse of q: [[d, -b], [-b, a]] / det_q
    trace = (d_q * a_p - 2.0 * b_q * b_p + a_q * d_p) / det_q
    dx, dy = mu_q[0] - mu_p[0], mu_q[1] - mu_p[1]
    maha = (d_q * dx * dx - 2.0 * b_q * dx * dy + a_q * dy * dy) / det_q
    return 0.5 * (trace + maha - 2.0 + torch.log(det_q / det_p))


def gaussian_kl_2d(mu_p: Any, cov_p: Any, mu_q: Any, cov_q: Any) -> torch.Tensor:
    """KL(p || q) of bivariate Gaussians: means ``[...,2]``, covariances ``[...,2,2]`` -> ``[...]`` nats.

    With identity covariances it is half the squared distance of the means, as in 1-D:

    >>> eye = torch.eye(2)
    >>> float(gaussian_kl_2d(torch.zeros(2), eye, torch.zeros(2), eye))
    0.0
    >>> float(gaussian_kl_2d(torch.tensor([1.0, 1.0]), eye, torch.zeros(2), eye))
    1.0
    """
    mu_p, cov_p, mu_q, cov_q = (
        _f64(v, n) for v, n in ((mu_p, "mu_p"), (cov_p, "cov_p"), (mu_q, "mu_q"), (cov_q, "cov_q"))
    )
    for c, n in ((cov_p, "cov_p"), (cov_q, "cov_q")):
        if c.shape[-2:] != (2, 2):
            raise ValueError(f"{n}: expected covariances [...,2,2], got shape {tuple(c.shape)}")
        if (_det2(c) <= 0).any() or (c[..., 0, 0] <= 0).any():
            raise ValueError(f"{n}: covariance is not positive definite; add a ridge (eps) to its diagonal")
    for m, n in ((mu_p, "mu_p"), (mu_q, "mu_q")):
        if m.shape[-1] != 2:
            raise ValueError(f"{n}: expected means [...,2], got shape {tuple(m.shape)}")
    mp, mq = mu_p.movedim(-1, 0), mu_q.movedim(-1, 0)
    return _kl2_parts(
        mp,
        cov_p[..., 0, 0],
        cov_p[..., 0, 1],
        cov_p[..., 1, 1],
        mq,
        cov_q[..., 0, 0],
        cov_q[..., 0, 1],
        cov_q[..., 1, 1],
    )


# ---------------------------------------------------------------------------- sufficient statistics
def gaussian_stats(scores: Any, *, name: str = "scores") -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(n, sum [C], cross [C,C])`` of a score table ``[N,C]`` in float64 (what the metrics accumulate).

    >>> n, s, cross = gaussian_stats([[1.0, 2.0], [3.0, 4.0]])
    >>> float(n), s.tolist(), cross.tolist()
    (2.0, [4.0, 6.0], [[10.0, 14.0], [14.0, 20.0]])
    """
    x = _table(scores, name, min_rows=0)
    return torch.tensor(float(x.shape[0]), dtype=torch.float64, device=x.device), x.sum(0), gram(x)


#: below this many columns the full product is as quick as the symmetric one
_SYRK_MIN_COLUMNS = 64


def gram(x: torch.Tensor) -> torch.Tensor:
    """``x.T @ x`` of a float64 table ``[N,C]``, each pair of columns multiplied once.

    On the CPU the upper triangle comes from BLAS ``dsyrk`` (half the multiply-adds of the full product)
    and is mirrored, so the result is exactly symmetric; every entry is one dot product over the N rows,
    the same as in the full product up to float64 summation order. Other devices and narrow tables use
    the full product.

    >>> x = torch.arange(6.0, dtype=torch.float64).reshape(3, 2)
    >>> gram(x).tolist()
    [[20.0, 26.0], [26.0, 35.0]]
    """
    if x.device.type != "cpu" or x.dtype != torch.float64 or x.ndim != 2 or x.shape[1] < _SYRK_MIN_COLUMNS:
        return x.T @ x
    if x.shape[0] == 0:
        return x.new_zeros(x.shape[1], x.shape[1])
    from scipy.linalg.blas import dsyrk  # here, not at import: only PaD needs it

    # a C-ordered [N,C] table is a Fortran-ordered [C,N] one: dsyrk reads it in place (trans=0: A A^T)
    upper = torch.from_numpy(dsyrk(1.0, x.contiguous().numpy().T, trans=0, lower=0))
    return upper.triu() + upper.triu(1).T


def _moments(
    n: torch.Tensor, s: torch.Tensor, cross: torch.Tensor | None, sq: torch.Tensor | None, name: str
):
    """Mean and unbiased (co)variances from sums. ``cross`` [C,C] or, for variances only, ``sq`` [C]."""
    n_ = float(n)
    if n_ < 2:
        raise ValueError(
            f"{name} set: {int(n_)} image(s); SaD/PaD fit a Gaussian per set and need at least 2 images in each "
            f"set (pass more {'reference' if name == 'real' else 'candidate'} images)"
        )
    mean = s / n_
    if cross is not None:
        cov = (cross - n_ * torch.outer(mean, mean)) / (n_ - 1.0)
        var = torch.diagonal(cov).clone()
    else:
        assert sq is not None, "_moments needs the cross products or the squares"
        cov = None
        var = (sq - n_ * mean * mean) / (n_ - 1.0)
    return mean, var.clamp_min(0.0), cov


def sad_from_stats(
    real_stats, gen_stats, *, direction: str = "gen||real", eps: float = DEFAULT_EPS
) -> torch.Tensor:
    """SaD per attribute from ``(n, sum [C], sq [C] or cross [C,C])`` of each set.

    The statistics a metric accumulates give :func:`sad` of the full tables:

    >>> g = torch.Generator().manual_seed(0)
    >>> real, gen = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 0.5
    >>> torch.allclose(sad_from_stats(gaussian_stats(real), gaussian_stats(gen)), sad(real, gen))
    True
    """
    check_direction(direction)
    eps = _check_eps(eps)
    out = []
    for (n, s, second), name in ((real_stats, "real"), (gen_stats, "gen")):
        second = torch.as_tensor(second, dtype=torch.float64)
        if second.ndim == 2:
            mean, var, _ = _moments(torch.as_tensor(n), s.double(), second, None, name)
        else:
            mean, var, _ = _moments(torch.as_tensor(n), s.double(), None, second, name)
        out.append((mean, var + eps))
    (mr, vr), (mg, vg) = out
    if direction == "gen||real":
        return gaussian_kl(mg, vg, mr, vr)
    return gaussian_kl(mr, vr, mg, vg)


def pad_from_stats(
    real_stats, gen_stats, *, direction: str = "gen||real", eps: float = DEFAULT_EPS, chunk: int = 1 << 22
) -> torch.Tensor:
    """PaD per unordered attribute pair (``itertools.combinations`` order) from ``(n, sum, cross)``.

    >>> g = torch.Generator().manual_seed(0)
    >>> real, gen = torch.randn(50, 3, generator=g), torch.randn(40, 3, generator=g) + 0.5
    >>> torch.allclose(pad_from_stats(gaussian_stats(real), gaussian_stats(gen)), pad(real, gen))
    True
    """
    check_direction(direction)
    eps = _check_eps(eps)
    (nr, sr, cr), (ng, sg, cg) = real_stats, gen_stats
    mr, _, covr = _moments(torch.as_tensor(nr), sr.double(), cr.double(), None, "real")
    mg, _, covg = _moments(torch.as_tensor(ng), sg.double(), cg.double(), None, "gen")
    c = mr.shape[0]
    if c < 2:
        raise ValueError(f"PaD needs at least 2 attributes to form a pair, got {c}")
    ridge = eps * torch.eye(c, dtype=torch.float64, device=covr.device)
    covr, covg = covr + ridge, covg + ridge
    if direction == "real||gen":
        (mp, covp), (mq, covq) = (mr, covr), (mg, covg)
    else:
        (mp, covp), (mq, covq) = (mg, covg), (mr, covr)
    iu, ju = torch.triu_indices(c, c, offset=1, device=covr.device)
    out = torch.empty(iu.numel(), dtype=torch.float64, device=covr.device)
    vp, vq = torch.diagonal(covp), torch.diagonal(covq)
    for start in range(0, iu.numel(), chunk):
        i, j = iu[start : start + chunk], ju[start : start + chunk]
        out[start : start + chunk] = _kl2_parts(
            (mp[i], mp[j]), vp[i], covp[i, j], vp[j], (mq[i], mq[j]), vq[i], covq[i, j], vq[j]
        )
    return out.clamp_min(0.0)


# ----------------------------------------------------------------------------------- SaD/PaD/R-SaD
def sad(real: Any, gen: Any, *, direction: str = "gen||real", eps: float = DEFAULT_EPS) -> torch.Tensor:
    """Eq. 12: per attribute, KL between single Gaussians fitted to the scores -> ``[C]`` (nats).

    ``real [N,C]``, ``gen [M,C]``; unbiased variances plus the ridge ``eps``; default KL(gen || real).

    >>> real = torch.randn(500, 3, generator=torch.Generator().manual_seed(0))
    >>> gen = real.clone()
    >>> gen[:, 1] += 1.0  # only attribute 1 moves
    >>> d = sad(real, gen)
    >>> tuple(d.shape), int(d.argmax()), float(d[0]) < 1e-12
    ((3,), 1, True)
    """
    real, gen = _table(real, "real"), _table(gen, "gen")
    _pair(real, gen)
    # centred sums of squares are better conditioned than raw squares when means are large
    rs = (torch.tensor(float(real.shape[0]), dtype=torch.float64), real.sum(0), _centred_sq(real))
    gs = (torch.tensor(float(gen.shape[0]), dtype=torch.float64), gen.sum(0), _centred_sq(gen))
    return sad_from_stats(rs, gs, direction=direction, eps=eps)


def _centred_sq(x: torch.Tensor) -> torch.Tensor:
    """Sum of squares that reproduces the unbiased variance exactly with ``_moments``."""
    n = x.shape[0]
    m = x.mean(0)
    return ((x - m) ** 2).sum(0) + n * m * m


def pad(real: Any, gen: Any, *, direction: str = "gen||real", eps: float = DEFAULT_EPS) -> torch.Tensor:
    """Eq. 13: KL between bivariate Gaussians (mean vector, full 2x2 covariance) fitted to every unordered
    attribute pair -> ``[C*(C-1)//2]`` in ``itertools.combinations(range(C), 2)`` order (nats).

    >>> real = torch.randn(500, 3, generator=torch.Generator().manual_seed(0))
    >>> gen = real.clone()
    >>> gen[:, 2] += 1.0  # pairs (0, 2) and (1, 2) change, (0, 1) does not
    >>> d = pad(real, gen)
    >>> tuple(d.shape), float(d[0]) < 1e-12, bool((d[1:] > 0.1).all())
    ((3,), True, True)
    """
    # a table that _table had to convert is a private copy: it is centred in place (no second [N,C] copy)
    owned = [
        not (isinstance(v, (torch.Tensor, np.ndarray)) and v.dtype in (torch.float64, np.float64))
        for v in (real, gen)
    ]
    real, gen = _table(real, "real"), _table(gen, "gen")
    _pair(real, gen)
    if real.shape[1] < 2:
        raise ValueError(f"PaD needs at least 2 attributes to form a pair, got {real.shape[1]}")

    def stats(x: torch.Tensor, own: bool):
        n = x.shape[0]
        s = x.sum(0)
        m = x.mean(0)
        xc = x.sub_(m) if own else x - m
        return torch.tensor(float(n), dtype=torch.float64), s, gram(xc) + n * torch.outer(m, m)

    return pad_from_stats(stats(real, owned[0]), stats(gen, owned[1]), direction=direction, eps=eps)


def rsad(real_maps: Any, gen_maps: Any) -> torch.Tensor:
    """Eq. 14: mean refined patch score of the real set minus that of the generated set -> ``[P,C]``.

    Positive: the attribute is more present in that region in the real data.

    >>> real, gen = torch.full((4, 9, 2), 0.3), torch.full((2, 9, 2), 0.1)  # [N, patches, attributes]
    >>> r = rsad(real, gen)
    >>> tuple(r.shape), round(float(r.mean()), 6)
    ((9, 2), 0.2)
    """
    r, g = _f64(real_maps, "real_maps"), _f64(gen_maps, "gen_maps")
    for x, n in ((r, "real_maps"), (g, "gen_maps")):
        if x.ndim != 3:
            raise ValueError(f"{n}: expected patch score maps [N,P,C], got shape {tuple(x.shape)}")
        if x.shape[0] == 0:
            raise ValueError(f"{n}: the set is empty; R-SaD needs at least one image in each set")
    if r.shape[1:] != g.shape[1:]:
        raise ValueError(
            f"real_maps has maps {tuple(r.shape[1:])} but gen_maps {tuple(g.shape[1:])}; use one backbone, "
            "one input size and one attribute list for both sets"
        )
    return r.mean(0) - g.mean(0)


def rsad_ranking(rsad_map: Any) -> torch.Tensor:
    """The paper's ranking score per attribute, ``mean_j |R-SaD_j(t)|`` -> ``[C]`` (sort descending).

    >>> [round(v, 6) for v in rsad_ranking(torch.tensor([[0.2, -0.1], [-0.4, 0.0]])).tolist()]
    [0.3, 0.05]
    """
    m = _f64(rsad_map, "rsad_map")
    if m.ndim != 2:
        raise ValueError(f"rsad_map: expected [P,C], got shape {tuple(m.shape)}")
    return m.abs().mean(0)


# -------------------------------------------------------------------------------- HCS-compatible KDE
def _kde(samples: np.ndarray, name: str):
    try:
        return gaussian_kde(samples)
    except (np.linalg.LinAlgError, ValueError) as e:
        raise ValueError(
            f"{name}: the kernel density estimate failed ({str(e).splitlines()[0][:120]}); the scores are constant "
            "or perfectly correlated. Use the Gaussian mode (divergence='gaussian'), which has a variance ridge"
        ) from None


def _grid_kl(p: np.ndarray, q: np.ndarray, direction: str) -> float:
    # The 2024 code's estimate: mean over grid cells of P*log(P/Q), clipped at 0, P = real.
    if direction == "gen||real":
        p, q = q, p
    return max(float(np.mean(p * np.log(p / q))), 0.0)


def kde_sad(
    real: Any,
    gen: Any,
    *,
    n_points: int = HCS_POINTS,
    grid: tuple[float, float] = HCS_GRID,
    direction: str = "real||gen",
    eps: float = 1e-10,
) -> torch.Tensor:
    """SaD as the 2024 HCS code computes it (parity mode) -> ``[C]``.

    Per attribute: ``scipy.stats.gaussian_kde`` (Scott's rule) of each set, evaluated on ``n_points``
    evenly spaced points of ``grid`` and multiplied by ``width / n_points``; ``eps`` (1e-10) is added and
    the KL is the *mean* over grid points of ``P log(P/Q)``, clipped at 0. The HCS code's direction is
    KL(real || gen) (``P`` = real), hence the default here. Numbers are not nats of a density: they depend
    on the grid and are only comparable with the same grid.

    >>> g = torch.Generator().manual_seed(0)
    >>> real = torch.randn(200, 2, generator=g) + 20
    >>> gen = real.clone()
    >>> gen[:, 0] += 3.0
    >>> d = kde_sad(real, gen, n_points=2000)
    >>> float(d[1]), bool(d[0] > 0)  # the unchanged attribute gives exactly 0
    (0.0, True)
    """
    check_direction(direction)
    real, gen = _table(real, "real"), _table(gen, "gen")
    _pair(real, gen)
    lo, hi = float(grid[0]), float(grid[1])
    if not hi > lo or int(n_points) < 2:
        raise ValueError(
            f"kde grid: expected lo < hi and n_points >= 2, got grid={grid!r}, n_points={n_points!r}"
        )
    xs = np.linspace(lo, hi, int(n_points))
    width = (hi - lo) / int(n_points)
    r, g = real.cpu().numpy(), gen.cpu().numpy()
    out = []
    for c in range(r.shape[1]):
        pr = _kde(r[:, c], f"real[:, {c}]")(xs) * width + eps
        pg = _kde(g[:, c], f"gen[:, {c}]")(xs) * width + eps
        out.append(_grid_kl(pr, pg, direction))
    return torch.tensor(out, dtype=torch.float64)


def kde_pad(
    real: Any,
    gen: Any,
    *,
    n_points: int = HCS_POINTS,
    grid: tuple[float, float] = HCS_GRID,
    direction: str = "real||gen",
    eps: float = 1e-10,
) -> torch.Tensor:
    """PaD as the 2024 HCS code computes it (parity mode) -> ``[C*(C-1)//2]`` (combinations order).

    Per pair: a 2-D ``gaussian_kde`` of each set evaluated on a ``(b+1) x (b+1)`` grid over ``grid``²
    with ``b = isqrt(n_points)``, averaged over 2x2 windows (stride 1) into ``b x b`` cells, times the
    cell area, plus ``eps``; KL = mean over cells of ``P log(P/Q)``, clipped at 0, ``P`` = real by default.

    >>> g = torch.Generator().manual_seed(0)
    >>> real = torch.randn(200, 3, generator=g) + 20
    >>> gen = real.clone()
    >>> gen[:, 2] += 3.0
    >>> d = kde_pad(real, gen, n_points=400)
    >>> tuple(d.shape), float(d[0]), bool((d[1:] > 0).all())  # pair (0, 1) is unchanged
    ((3,), 0.0, True)
    """
    check_direction(direction)
    real, gen = _table(real, "real"), _table(gen, "gen")
    _pair(real, gen)
    c = real.shape[1]
    if c < 2:
        raise ValueError(f"PaD needs at least 2 attributes to form a pair, got {c}")
    lo, hi = float(grid[0]), float(grid[1])
    b = math.isqrt(int(n_points))
    if not hi > lo or b < 2:
        raise ValueError(
            f"kde grid: expected lo < hi and n_points >= 4, got grid={grid!r}, n_points={n_points!r}"
        )
    ax = np.linspace(lo, hi, b + 1)
    gx, gy = np.meshgrid(ax, ax)
    pts = np.vstack([gx.ravel(), gy.ravel()])
    area = ((hi - lo) / b) ** 2
    r, g = real.cpu().numpy(), gen.cpu().numpy()

    def cells(kde) -> np.ndarray:
        d = kde(pts).reshape(b + 1, b + 1)
        pooled = (d[:-1, :-1] + d[1:, :-1] + d[:-1, 1:] + d[1:, 1:]) / 4.0
        return pooled * area + eps

    out = []
    for i in range(c):
        for j in range(i + 1, c):
            pr = cells(_kde(np.vstack([r[:, i], r[:, j]]), f"real[:, ({i}, {j})]"))
            pg = cells(_kde(np.vstack([g[:, i], g[:, j]]), f"gen[:, ({i}, {j})]"))
            out.append(_grid_kl(pr, pg, direction))
    return torch.tensor(out, dtype=torch.float64)


# --------------------------------------------------------------------------- separation statistics
def _two_samples(pos: Any, neg: Any) -> tuple[torch.Tensor, torch.Tensor]:
    p, n = _f64(pos, "pos").flatten(), _f64(neg, "neg").flatten()
    for x, name in ((p, "pos"), (n, "neg")):
        if x.numel() < 2:
            raise ValueError(f"{name}: need at least 2 scores, got {x.numel()}")
    return p, n


def cohens_d(pos: Any, neg: Any) -> float:
    """Cohen's d as the RA-CLIPScore paper defines it (Eq. 17):
    ``|mu_p - mu_n| / sqrt((sigma_p^2 + sigma_n^2) / 2)``.

    The two variances are averaged with equal weight whatever the group sizes (not pooled by size), each
    the unbiased (N-1) sample variance of its group; the result is >= 0 and symmetric in its arguments.
    Constant scores in both groups give ``inf`` (different means) or ``0`` (equal means).

    >>> cohens_d([1.0, 2.0, 3.0], [4.0, 5.0, 6.0])  # |2 - 5| / sqrt((1 + 1) / 2)
    3.0
    >>> cohens_d([4.0, 5.0, 6.0], [1.0, 2.0, 3.0])  # symmetric
    3.0
    """
    p, n = _two_samples(pos, neg)
    mean_var = (p.var() + n.var()) / 2.0
    gap = float((p.mean() - n.mean()).abs())
    if float(mean_var) <= 0:
        return math.inf if gap != 0 else 0.0
    return gap / math.sqrt(float(mean_var))


def _kde_grid(p: torch.Tensor, n: torch.Tensor, n_points: int):
    lo = float(min(p.min(), n.min()))
    hi = float(max(p.max(), n.max()))
    span = hi - lo if hi > lo else 1.0
    pad_ = 0.25 * span
    xs = np.linspace(lo - pad_, hi + pad_, int(n_points))
    dx = xs[1] - xs[0]
    fp = _kde(p.cpu().numpy(), "pos")(xs)
    fn = _kde(n.cpu().numpy(), "neg")(xs)
    return fp, fn, dx


def hellinger_gaussian(pos: Any, neg: Any, *, method: str = "kde", n_points: int = 2048) -> float:
    """Hellinger distance in [0, 1] between the positive- and negative-score distributions.

    ``method="kde"`` (the paper, Supp. 0.B.4): Gaussian-kernel KDEs on a common grid,
    ``H = sqrt(1 - ∫ sqrt(p q))``; ``method="gaussian"``: closed form for fitted Gaussians.

    >>> hellinger_gaussian([1.0, 2.0, 3.0], [1.0, 2.0, 3.0], method="gaussian")  # same distribution
    0.0
    >>> round(hellinger_gaussian([0.0, 1.0, 2.0], [100.0, 101.0, 102.0]), 3)  # far apart
    1.0
    """
    p, n = _two_samples(pos, neg)
    if method == "gaussian":
        v1, v2 = float(p.var()), float(n.var())
        if v1 <= 0 or v2 <= 0:
            raise ValueError("hellinger_gaussian: a score set is constant; use method='kde' or add noise")
        m1, m2 = float(p.mean()), float(n.mean())
        bc = math.sqrt(2 * math.sqrt(v1 * v2) / (v1 + v2)) * math.exp(-((m1 - m2) ** 2) / (4 * (v1 + v2)))
        return math.sqrt(max(0.0, 1.0 - bc))
    if method != "kde":
        raise ValueError(f"method: expected 'kde' or 'gaussian', got {method!r}")
    fp, fn, dx = _kde_grid(p, n, n_points)
    bc = float(np.sum(np.sqrt(fp * fn)) * dx)
    return math.sqrt(max(0.0, 1.0 - min(bc, 1.0)))


def one_minus_ovl(pos: Any, neg: Any, *, method: str = "kde", n_points: int = 2048) -> float:
    """1 - overlapping coefficient, ``1 - ∫ min(p, q)``, in [0, 1] (1 = fully separated).

    ``method="kde"`` (the paper): Gaussian-kernel KDEs on a common grid; ``"gaussian"``: fitted
    Gaussians integrated on the same kind of grid.

    >>> round(one_minus_ovl([0.0, 1.0, 2.0], [100.0, 101.0, 102.0]), 3)  # no overlap
    1.0
    >>> round(one_minus_ovl([0.0, 1.0, 2.0, 3.0], [0.0, 1.0, 2.0, 3.0], method="gaussian"), 3)  # full overlap
    0.0
    """
    p, n = _two_samples(pos, neg)
    if method == "gaussian":
        xs_lo = float(min(p.min(), n.min()))
        xs_hi = float(max(p.max(), n.max()))
        m1, s1, m2, s2 = float(p.mean()), float(p.std()), float(n.mean()), float(n.std())
        if s1 <= 0 or s2 <= 0:
            raise ValueError("one_minus_ovl: a score set is constant; use method='kde' or add noise")
        lo, hi = min(xs_lo, m1 - 6 * s1, m2 - 6 * s2), max(xs_hi, m1 + 6 * s1, m2 + 6 * s2)
        xs = np.linspace(lo, hi, int(n_points))
        fp = np.exp(-0.5 * ((xs - m1) / s1) ** 2) / (s1 * math.sqrt(2 * math.pi))
        fn = np.exp(-0.5 * ((xs - m2) / s2) ** 2) / (s2 * math.sqrt(2 * math.pi))
        dx = xs[1] - xs[0]
    elif method == "kde":
        fp, fn, dx = _kde_grid(p, n, n_points)
    else:
        raise ValueError(f"method: expected 'kde' or 'gaussian', got {method!r}")
    ovl = float(np.sum(np.minimum(fp, fn)) * dx)
    return min(1.0, max(0.0, 1.0 - ovl))
