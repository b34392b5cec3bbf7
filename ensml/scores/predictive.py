r"""Scores of a predictive distribution given as a family and its parameter fields.

A forecast here is a :class:`~ensml.scores.distributions.Family` (normal, truncated normal,
censored shifted gamma, Bernstein quantile function, …) and a mapping of its parameter names to
DataArrays (``{"shape": …, "scale": …, "shift": …}``), in the variable's units. These are the
xarray faces of what the family itself computes point by point, reduced like every ensml score
(``reduce_dims`` / ``preserve_dims``, optional ``weights``):

- :func:`crps_family`: the family's CRPS (closed form, or its own quadrature for ``bqn``);
- :func:`exceedance_family`: P(Y > t) at thresholds t, the probability of a Brier score or a
  reliability diagram (:func:`ensml.scores.probability.probability_brier_score`);
- :func:`twcrps_family`: the threshold-weighted CRPS of the upper tail (heavy precipitation,
  strong wind);
- :func:`pit_family`: the randomised PIT, uniform for a calibrated forecast even where the
  forecast has a point mass (dry days);
- :func:`median_family`: the median, the point forecast of SEEPS and the fractions skill score.

NaN/Inf as every ensml score (:mod:`ensml.scores`): NaN in a parameter or the observation gives
NaN (a missing point, left out of means); ±Inf is an error. Parameters outside their family's
range are refused by the family (one line naming the parameter).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.distributions import Family, get_family
from ensml.scores.probability import THRESHOLD, _thresholds
from ensml.scores.reduce import aligned_fields, check_no_inf, reduce_score

__all__ = [
    "CHAINED_FAMILIES",
    "crps_family",
    "exceedance_family",
    "median_family",
    "pit_family",
    "twcrps_family",
]

Params = Mapping[str, xr.DataArray]

#: Gauss-Legendre nodes of each of the two pieces of the twCRPS quadrature (:func:`twcrps_family`):
#: errors below 1e-5 of the mean score for the truncated normal (scipy's ``quad`` as reference).
TWCRPS_NODES = 24
#: Families whose twCRPS is computed in closed form (:func:`twcrps_family`): chained, each is a
#: family with a closed-form CRPS again; the others use the quantile quadrature.
CHAINED_FAMILIES = ("normal", "cnormal", "clogistic", "csg0")
#: Points per block of the quadrature: bounds its memory (points × nodes × 8 bytes per temporary).
_BLOCK = 1 << 15


def _fields(family: Family, params: Params, obs: xr.DataArray | None, func: str) -> list[xr.DataArray]:
    """The family's parameter fields (then ``obs``), aligned whole and free of ±Inf."""
    missing = [k for k in family.params if k not in params]
    if missing:
        raise EnsmlError(f"{func}: no {', '.join(missing)} for the {family.name} family")
    arrays: dict[str, Any] = {k: params[k] for k in family.params}
    for k, a in arrays.items():
        if not isinstance(a, xr.DataArray):
            raise EnsmlError(f"{func}: the {family.name} parameter {k} must be a DataArray")
    # without observations, the parameters' common grid stands for them (its values unused)
    arrays["obs"] = xr.broadcast(*arrays.values())[0] if obs is None else obs
    fields = aligned_fields(arrays, func)
    return [check_no_inf(f, func, name) for f, name in zip(fields, arrays)]


def _numpy_params(family: Family, fields: list[xr.DataArray], like: xr.DataArray) -> dict[str, np.ndarray]:
    """The parameter fields as float64 numpy arrays in the dim order of ``like``."""
    return {
        k: np.asarray(f.broadcast_like(like).transpose(*like.dims).values, dtype=np.float64)
        for k, f in zip(family.params, fields)
    }


def crps_family(
    family: Family | str,
    params: Params,
    obs: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""CRPS of the predictive distributions ``family(params)`` for the observations ``obs``.

    .. math:: \mathrm{CRPS}(F, y) = \int (F(z) - 1\{y \le z\})^2\, dz

    in the closed form of the family (:meth:`Family.crps`; Gneiting et al. 2005 for the normal,
    Jordan, Krüger & Lerch 2019 for the truncated and censored ones, Scheuerer & Hamill 2015,
    Mon. Wea. Rev. 143, 4578, for the censored shifted gamma), or its quantile quadrature
    (``bqn``). For ``normal`` this is :func:`ensml.scores.gaussian.crps_gaussian_xr` of
    ``mean`` and ``std``, to the last bits of float64. An observation below the family's
    support adds its distance to it. In the units of ``obs``.

    Parameters
    ----------
    family
        A :class:`Family` or its name.
    params
        Each of ``family.params`` as a DataArray with dims among those of ``obs``.
    obs
        The observations.
    reduce_dims, preserve_dims, weights
        As :func:`ensml.scores.crps.crps_ensemble`.
    """
    family = get_family(family)
    *fields, y = _fields(family, params, obs, "crps_family")
    score = family.crps(dict(zip(family.params, fields)), y)
    score = score.transpose(*y.dims).rename("crps")
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    out = reduce_score(score, **kw, func="crps_family")
    return out.assign_attrs({k: v for k, v in obs.attrs.items() if k == "units"})


def exceedance_family(
    family: Family | str, params: Params, thresholds: float | Iterable[float]
) -> xr.DataArray:
    """P(Y > t) of ``family(params)`` at each threshold ``t`` (in the variable's units).

    Returns
    -------
    xr.DataArray
        Dimensionless probabilities with a ``threshold`` dim first (its coordinate the
        thresholds), then the parameters' dims; NaN where a parameter is NaN.
    """
    family = get_family(family)
    t = _thresholds(thresholds, "exceedance_family")
    fields = _fields(family, params, None, "exceedance_family")
    like = fields[-1]
    p = _numpy_params(family, fields[:-1], like)
    with np.errstate(invalid="ignore"):
        prob = np.stack([family.exceedance(p, float(v)) for v in t.values])
    missing = np.logical_or.reduce([np.isnan(v) for v in p.values()])
    prob = np.where(missing[None], np.nan, prob)
    coords = {k: c for k, c in like.coords.items() if set(c.dims) <= set(like.dims)}
    out = xr.DataArray(prob, dims=(THRESHOLD, *like.dims), coords={**coords, THRESHOLD: t.values})
    return out.rename("probability").assign_attrs(units="1", long_name="probability of exceedance")


def median_family(family: Family | str, params: Params) -> xr.DataArray:
    """The median Q(1/2) of ``family(params)``, in the variable's units (NaN where a parameter is)."""
    family = get_family(family)
    fields = _fields(family, params, None, "median_family")
    like = fields[-1]
    p = _numpy_params(family, fields[:-1], like)
    with np.errstate(invalid="ignore"):
        q = np.asarray(family.ppf(p, np.float64(0.5)), dtype=np.float64)
    missing = np.logical_or.reduce([np.isnan(v) for v in p.values()])
    q = np.where(missing, np.nan, np.broadcast_to(q, like.shape))
    return like.copy(data=q).rename("median").assign_attrs(long_name="median of the predictive distribution")


def pit_family(family: Family | str, params: Params, obs: xr.DataArray, *, seed: int = 0) -> xr.DataArray:
    r"""The randomised probability integral transform of ``obs`` under ``family(params)``.

    .. math:: \mathrm{PIT} = F(y^-) + V\,(F(y) - F(y^-)), \qquad V \sim U(0, 1)

    which is :math:`F(y)` where F is continuous at y and uniform over the jump of a point mass
    (a dry day under a censored forecast), so that the PIT of a calibrated forecast is uniform
    (Czado, Gneiting & Held 2009, Biometrics 65, 1254; :meth:`Family.pit`). ``V`` comes from a
    generator seeded by ``seed``: the same inputs give the same values. NaN where ``obs`` or a
    parameter is NaN.
    """
    family = get_family(family)
    *fields, y = _fields(family, params, obs, "pit_family")
    p = _numpy_params(family, fields, y)
    yv = np.asarray(y.values, dtype=np.float64)
    with np.errstate(invalid="ignore"):
        pit = family.pit(p, yv, np.random.default_rng(seed))
    missing = np.isnan(yv) | np.logical_or.reduce([np.isnan(v) for v in p.values()])
    pit = np.where(missing, np.nan, np.broadcast_to(pit, y.shape))
    return y.copy(data=pit).rename("pit").assign_attrs(units="1", long_name="randomised PIT")


def twcrps_family(
    family: Family | str,
    params: Params,
    obs: xr.DataArray,
    threshold: float,
    *,
    method: str = "auto",
    nodes: int = TWCRPS_NODES,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Threshold-weighted CRPS of ``family(params)`` with weight :math:`1\{z > u\}` (upper tail).

    .. math::
        \mathrm{twCRPS}(F, y) = \int_u^\infty (F(z) - 1\{y \le z\})^2\, dz
        = \mathrm{CRPS}(F \circ v^{-1}, v(y)), \qquad v(z) = \max(z, u)

    (Gneiting & Ranjan 2011, JBES 29, 411; Allen, Ginsbourger & Ziegel 2023, SIAM/ASA JUQ 11,
    906): the CRPS of the chained forecast, ``F`` censored from below at ``u``, for the chained
    observation. It is evaluated from the quantile function (``method="quadrature"``): with
    :math:`a = F(u)` and :math:`\tau_y = F(v(y))`,

    .. math::
        \mathrm{twCRPS} = 2\int_0^1 \rho_\tau(v(y) - v(Q(\tau)))\, d\tau
        = (v(y) - u)\, a^2 + 2\int_a^{\tau_y} \tau\,(v(y) - Q(\tau))\, d\tau
          + 2\int_{\tau_y}^1 (1 - \tau)(Q(\tau) - v(y))\, d\tau

    (ρ the pinball loss; Laio & Tamea 2007 for the CRPS as its integral), each integral by
    Gauss-Legendre on ``nodes`` levels, split where the integrand has its kink: errors below
    1e-5 of the mean score for the truncated normal at the default 24 levels, about 1e-4 at 64
    for a censored shifted gamma of shape below 1 (whose quantile function is steep where it
    leaves 0), measured against the definition's integral and the closed forms below; it
    costs ``2 × nodes`` quantiles per point. Where the chained
    distribution is again a family with a closed-form CRPS (``method="auto"``, the default),
    that is used instead, exactly: for ``u`` at or above the support's lower bound,
    ``max(X, u) = u + max(X − u, 0)``, so the normal and the normal (logistic) censored at 0
    chain to a normal (logistic) censored at 0 of location ``loc − u``, and the censored
    shifted gamma to one of shift ``shift + u``, scored against ``v(y) − u``. The truncated
    families and ``bqn`` use the quadrature.

    Parameters
    ----------
    family, params, obs, reduce_dims, preserve_dims, weights
        As :func:`crps_family`.
    threshold
        ``u``, in the units of ``obs``; at or above the family's lower bound (0 for the
        bounded families: below it the weight would cover the whole support, and the CRPS is
        the score to use; an error).
    method
        ``"auto"`` (closed form where there is one) or ``"quadrature"`` (always the quantile
        quadrature).
    nodes
        Gauss-Legendre levels per piece of the quadrature.

    Returns
    -------
    xr.DataArray
        The score in the units of ``obs``; NaN where ``obs`` or a parameter is NaN.
    """
    family = get_family(family)
    u = float(threshold)
    if not np.isfinite(u):
        raise EnsmlError(f"twcrps_family: threshold must be finite, got {threshold}")
    if family.lower is not None and u < family.lower:
        raise EnsmlError(
            f"twcrps_family: threshold {u:g} is below the {family.name} family's lower bound "
            f"{family.lower:g}: the weight would cover the whole support (use the CRPS)"
        )
    if method not in ("auto", "quadrature"):
        raise EnsmlError(f"twcrps_family: method must be 'auto' or 'quadrature', got {method!r}")
    *fields, y = _fields(family, params, obs, "twcrps_family")
    chained = _chained(family, dict(zip(family.params, fields)), u) if method == "auto" else None
    if chained is not None:
        fam2, p2 = chained
        score = fam2.crps(p2, np.maximum(y, u) - u).transpose(*y.dims)
    else:
        p = _numpy_params(family, fields, y)
        values = _twcrps_quadrature(family, p, np.asarray(y.values, dtype=np.float64), u, nodes)
        score = y.copy(data=values.astype(np.result_type(y.dtype, np.float32), copy=False))
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "weights": weights}
    out = reduce_score(score.rename("twcrps"), **kw, func="twcrps_family")
    attrs = {"long_name": f"threshold-weighted CRPS, weight 1{{z > {u:g}}}"}
    if "units" in obs.attrs:
        attrs["units"] = obs.attrs["units"]
    return out.assign_attrs(attrs)


def _chained(family: Family, params: dict[str, xr.DataArray], u: float) -> tuple[Family, dict] | None:
    """``(family, params)`` of ``max(Y, u) − u`` where it is a family with a closed-form CRPS."""
    name = family.name
    if name not in CHAINED_FAMILIES:
        return None
    if name in ("normal", "cnormal"):
        loc, scale = family.params
        return get_family("cnormal"), {"loc": params[loc] - u, "scale": params[scale]}
    if name == "clogistic":
        return family, {"loc": params["loc"] - u, "scale": params["scale"]}
    return family, {"shape": params["shape"], "scale": params["scale"], "shift": params["shift"] + u}


def _twcrps_quadrature(
    family: Family, params: dict[str, np.ndarray], y: np.ndarray, u: float, nodes: int
) -> np.ndarray:
    """The quantile quadrature of :func:`twcrps_family`, in blocks of points (float64)."""
    shape = y.shape
    flat = {k: np.broadcast_to(v, shape).reshape(-1) for k, v in params.items()}
    yf = y.reshape(-1)
    out = np.empty(yf.size, dtype=np.float64)
    x, w = np.polynomial.legendre.leggauss(nodes)
    s, ws = (x + 1.0) / 2.0, w / 2.0
    for i in range(0, yf.size, _BLOCK):
        block = slice(i, i + _BLOCK)
        out[block] = _twcrps_block(family, {k: v[block] for k, v in flat.items()}, yf[block], u, s, ws)
    return out.reshape(shape)


def _twcrps_block(
    family: Family, p: dict[str, np.ndarray], y: np.ndarray, u: float, s: np.ndarray, ws: np.ndarray
) -> np.ndarray:
    missing = np.isnan(y) | np.logical_or.reduce([np.isnan(v) for v in p.values()])
    y = np.where(missing, u, y)
    p = {k: np.where(missing, 1.0, v) for k, v in p.items()}  # any valid value: masked below
    vy = np.maximum(y, u)
    with np.errstate(invalid="ignore", divide="ignore", over="ignore"):
        a = np.clip(np.broadcast_to(family.cdf(p, np.float64(u)), y.shape), 0.0, 1.0)
        ty = np.clip(family.cdf(p, vy), a, 1.0)
        out = (vy - u) * a**2  # levels below F(u): v(Q) = u
        pe = {k: v[:, None] for k, v in p.items()}
        for lo, hi, below in ((a, ty, True), (ty, np.ones_like(ty), False)):
            length = hi - lo
            some = length > 0
            tau = np.where(some[:, None], lo[:, None] + length[:, None] * s, 0.5)
            q = np.maximum(family.ppf(pe, tau), u)
            # below the kink Q ≤ v(y): ρ = τ (v(y) − Q); above: (1 − τ)(Q − v(y)); a level
            # rounded to 1 has an infinite quantile and a zero weight: its limit, 0
            term = tau * (vy[:, None] - q) if below else (1.0 - tau) * (q - vy[:, None])
            term = np.where(np.isfinite(q), term, 0.0)
            out = out + np.where(some, 2.0 * length * (term * ws).sum(-1), 0.0)
    return np.where(missing, np.nan, np.maximum(out, 0.0))
