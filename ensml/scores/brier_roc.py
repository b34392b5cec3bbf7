r"""Threshold events beyond the Brier score: its Murphy decomposition and the ROC curve and area.

Both take the ensemble probability of the event ``y > t`` from
:func:`~ensml.scores.probability.exceedance_probability` (the fraction of valid members above
``t``) and the observed event :math:`o = 1\{y > t\}`, for one or more thresholds (a
``threshold`` dim, always kept), reduced over the other dims with ``reduce_dims`` /
``preserve_dims`` and optional ``weights`` (every sum below is then weighted).

NaN/Inf as every ensml score (:mod:`ensml.scores`): NaN members are dropped (p over the valid
members); a point with no valid member or a NaN observation is left out of every sum; a slice
with no valid point gives NaN, never 0; ±Inf is an error.

Cost: one pass over the points per probability value (M + 1 for an M-member ensemble without
NaN members); the distinct values are found first (under dask: one computed pass over the
probabilities, the rest stays lazy).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.probability import _check_range, _thresholds, brier_score, exceedance_probability
from ensml.scores.reduce import check_fcst_obs, check_weights, resolve_reduce_dims

__all__ = ["brier_decomposition", "roc_curve"]

PROBABILITY_THRESHOLD = PT = "probability_threshold"


def _event(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    thresholds: Any,
    member_dim: str,
    reduce_dims: Any,
    preserve_dims: Any,
    weights: xr.DataArray | None,
    func: str,
) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray, list[Hashable]]:
    """(p, weighted validity w, w·o, reduced dims): w is 0 at points left out, p and o there 0."""
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim)
    t = _thresholds(thresholds, func)
    _check_range(fcst, obs, t, func)
    p = exceedance_probability(fcst, t, member_dim=member_dim)
    o = (obs > t).astype(np.float64).where(obs.notnull())
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, func)
    valid = p.notnull() & o.notnull()
    w = valid.astype(np.float64)
    if weights is not None:
        weights = check_weights(weights, p, func)
        weights = weights.drop_vars([c for c in weights.coords if c not in weights.dims])
        if weights.dims and all(d in p.coords for d in weights.dims):
            weights = weights.assign_coords({d: p[d] for d in weights.dims})
        w = w * weights
    return p.fillna(0.0), w, w * o.fillna(0.0), dims


def _distinct(p: xr.DataArray) -> np.ndarray:
    """The distinct probability values: equal fractions (1/2, 2/4) are equal floats (division
    is correctly rounded), so these are the distinct rationals k/M of any valid-member count."""
    if p.chunks is not None:
        import dask.array as da

        v = np.asarray(da.unique(p.data).compute())
    else:
        v = np.unique(p.values)
    return v[np.isfinite(v)]


def brier_decomposition(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    thresholds: float | Sequence[float],
    *,
    member_dim: str = MEMBER,
    bins: int | None = None,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    r"""Murphy (1973) decomposition of the Brier score: reliability, resolution, uncertainty.

    With the points grouped into bins k of :math:`n_k` points (weights: total weight), mean
    forecast probability :math:`\bar p_k` and observed frequency :math:`\bar o_k`, over
    :math:`N = \sum_k n_k` points of observed frequency :math:`\bar o`:

    .. math::
        \mathrm{REL} = \frac1N \sum_k n_k (\bar p_k - \bar o_k)^2, \quad
        \mathrm{RES} = \frac1N \sum_k n_k (\bar o_k - \bar o)^2, \quad
        \mathrm{UNC} = \bar o (1 - \bar o),

    and :math:`\mathrm{BS} = \mathrm{REL} - \mathrm{RES} + \mathrm{UNC}` exactly when every
    bin holds one probability value (Murphy 1973, J. Appl. Meteor. 12, 595; Wilks 2019,
    Statistical Methods in the Atmospheric Sciences, §9.4.2). Lower REL and higher RES are
    better; UNC depends on the observations only.

    Parameters
    ----------
    fcst, obs
        Ensemble (with ``member_dim``) and observation, as :func:`~ensml.scores.brier_score`.
    thresholds : float or sequence of float
        Event thresholds ``t`` (event ``y > t``), in the units of ``obs``.
    bins : int, optional
        None (default): one bin per distinct forecast probability, i.e. the M + 1 values k/M
        of an M-member ensemble (more where NaN members make other fractions), which makes the
        decomposition exact. An int n: n equal bins of [0, 1], as
        :func:`~ensml.scores.reliability`; then BS = REL - RES + UNC + WBV - WBC, the within-bin
        variance and covariance terms of Stephenson et al. (2008, Wea. Forecasting 23, 752),
        and ``brier_score`` shows the difference.
    reduce_dims, preserve_dims, weights
        As :func:`~ensml.scores.brier_score`.

    Returns
    -------
    xr.Dataset
        ``reliability``, ``resolution``, ``uncertainty`` and ``brier_score`` (from
        :func:`~ensml.scores.brier_score`, the same points and weights), dimensionless, over the
        kept dims and ``threshold``.
    """
    func = "brier_decomposition"
    if bins is not None and (isinstance(bins, bool) or not isinstance(bins, (int, np.integer)) or bins < 1):
        raise EnsmlError(
            f"{func}: bins must be None (one per probability value) or an integer >= 1, got {bins!r}"
        )
    p, w, wo, dims = _event(fcst, obs, thresholds, member_dim, reduce_dims, preserve_dims, weights, func)
    if bins is None:
        groups = [p == v for v in _distinct(p)]
    else:
        k = np.minimum(np.floor(p * bins + 1e-9), bins - 1)  # as reliability(): k/M on an edge
        groups = [k == j for j in range(bins)]
    wp = w * p
    rel, res, n_tot, o_tot = 0.0, 0.0, w.sum(dims), wo.sum(dims)
    obar = o_tot / n_tot.where(n_tot > 0)
    for g in groups:
        n_k = w.where(g, 0.0).sum(dims)
        has = n_k > 0
        nk = n_k.where(has)
        pbar_k = wp.where(g, 0.0).sum(dims) / nk
        obar_k = wo.where(g, 0.0).sum(dims) / nk
        rel = rel + (n_k * (pbar_k - obar_k) ** 2).where(has, 0.0)
        res = res + (n_k * (obar_k - obar) ** 2).where(has, 0.0)
    n = n_tot.where(n_tot > 0)
    bs = brier_score(
        fcst,
        obs,
        thresholds,
        member_dim=member_dim,
        reduce_dims=reduce_dims,
        preserve_dims=preserve_dims,
        weights=weights,
    )
    long = "of the Brier score (Murphy 1973)"
    out = xr.Dataset(
        {
            "reliability": (rel / n).assign_attrs(units="1", long_name=f"reliability term {long}"),
            "resolution": (res / n).assign_attrs(units="1", long_name=f"resolution term {long}"),
            "uncertainty": (obar * (1 - obar)).assign_attrs(units="1", long_name=f"uncertainty term {long}"),
            "brier_score": bs,
        }
    )
    binning = "one bin per distinct forecast probability" if bins is None else f"{bins} equal bins of [0, 1]"
    return out.transpose(*bs.dims).assign_attrs(binning=binning)


def _probability_thresholds(q: Any, func: str) -> np.ndarray:
    q = np.atleast_1d(np.asarray(q, dtype=np.float64))
    if q.ndim != 1 or q.size == 0:
        raise EnsmlError(f"{func}: probability_thresholds must be a 1-D list of numbers in [0, 1]")
    if not np.all(np.isfinite(q)) or np.any((q < 0) | (q > 1)):
        raise EnsmlError(
            f"{func}: probability_thresholds must lie in [0, 1] (got {q.min():.6g} to {q.max():.6g})"
        )
    return q


def roc_curve(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    thresholds: float | Sequence[float],
    *,
    member_dim: str = MEMBER,
    probability_thresholds: Sequence[float] | None = None,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    r"""ROC curve and area of the ensemble probability of ``y > t`` (Mason 1982; Wilks 2019 §9.4.6).

    The event is forecast when :math:`p \ge q`; at each probability threshold q

    .. math::
        H(q) = \frac{\sum w\, o\, 1\{p \ge q\}}{\sum w\, o}, \qquad
        F(q) = \frac{\sum w\, (1 - o)\, 1\{p \ge q\}}{\sum w\, (1 - o)},

    (hit rate, false alarm rate), and the area under the curve is the trapezoidal sum over the
    points sorted by q, :math:`A = \sum_k (F_k - F_{k+1})(H_k + H_{k+1})/2`. The thresholds
    always include 0 (the point (1, 1)) and :math:`+\infty` (never forecast: (0, 0)). With the
    default thresholds, every distinct forecast probability (the M + 1 values k/M), the
    trapezoidal area equals the Mann-Whitney statistic, P(p of an event > p of a non-event)
    with ties counted 1/2 (as ``scores.probability.roc_auc``); coarser thresholds give a lower
    area. A = 1 is perfect discrimination, 0.5 none.

    Parameters
    ----------
    fcst, obs, thresholds, reduce_dims, preserve_dims, weights
        As :func:`brier_decomposition`.
    probability_thresholds : sequence of float in [0, 1], optional
        The q of the curve (sorted here); default: the distinct forecast probabilities.

    Returns
    -------
    xr.Dataset
        ``hit_rate`` and ``false_alarm_rate`` over the kept dims, ``threshold`` and
        ``probability_threshold``; ``area`` over the kept dims and ``threshold``;
        dimensionless. A slice without events (or without non-events) has NaN rates and area.
    """
    func = "roc_curve"
    user_q = None if probability_thresholds is None else _probability_thresholds(probability_thresholds, func)
    p, w, wo, dims = _event(fcst, obs, thresholds, member_dim, reduce_dims, preserve_dims, weights, func)
    values = _distinct(p) if user_q is None else user_q
    q = np.unique(np.concatenate([[0.0], values, [np.inf]]))
    wn = w - wo
    hits, fas = [], []
    for qk in q:
        yes = p >= qk
        hits.append(wo.where(yes, 0.0).sum(dims))
        fas.append(wn.where(yes, 0.0).sum(dims))
    qda = xr.DataArray(q, dims=[PROBABILITY_THRESHOLD], coords={PROBABILITY_THRESHOLD: q})
    h_tot, f_tot = wo.sum(dims), wn.sum(dims)
    hr = xr.concat(hits, dim=qda) / h_tot.where(h_tot > 0)
    far = xr.concat(fas, dim=qda) / f_tot.where(f_tot > 0)

    def ends(a: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
        return a.isel({PT: slice(None, -1)}).drop_vars(PT), a.isel({PT: slice(1, None)}).drop_vars(PT)

    (f0, f1), (h0, h1) = ends(far), ends(hr)
    area = ((f0 - f1) * (h0 + h1) / 2).sum(PT, skipna=False)  # NaN rates give a NaN area
    kept = tuple(h_tot.dims)
    return xr.Dataset(
        {
            "hit_rate": hr.transpose(*kept, PROBABILITY_THRESHOLD).assign_attrs(
                units="1", long_name="hit rate"
            ),
            "false_alarm_rate": far.transpose(*kept, PROBABILITY_THRESHOLD).assign_attrs(
                units="1", long_name="false alarm rate"
            ),
            "area": area.transpose(*kept).assign_attrs(units="1", long_name="area under the ROC curve"),
        }
    )
