"""Threshold-exceedance probabilities: Brier score and binned reliability.

Of an ensemble (:func:`brier_score`, :func:`reliability`: the probability is the fraction of
its members above the threshold) or of any probability forecast of the events ``y > t``
(:func:`probability_brier_score`, :func:`probability_reliability`: e.g. P(Y > t) of a predictive
distribution, :func:`ensml.scores.predictive.exceedance_family`), binned and scored alike.

NaN/Inf as every ensml score (:mod:`ensml.scores`): the probability is over the valid (non-NaN)
members; a point with none, or a NaN observation, is missing; ±Inf is an error.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.reduce import (
    check_fcst_obs,
    check_no_inf,
    reduce_score,
    require_dataarray,
    resolve_reduce_dims,
)

__all__ = [
    "brier_score",
    "exceedance_probability",
    "probability_bins",
    "probability_brier_score",
    "probability_reliability",
    "reliability",
]

THRESHOLD = "threshold"


def _thresholds(thresholds: Any, func: str) -> xr.DataArray:
    t = np.atleast_1d(np.asarray(thresholds, dtype=np.float64))
    if t.ndim != 1 or t.size == 0:
        raise EnsmlError(f"{func}: thresholds must be a number or a 1-D list of numbers")
    if not np.all(np.isfinite(t)):
        raise EnsmlError(f"{func}: thresholds must be finite")
    return xr.DataArray(t, dims=[THRESHOLD], coords={THRESHOLD: t})


def _check_range(fcst: xr.DataArray, obs: xr.DataArray, t: xr.DataArray, func: str) -> None:
    # a threshold no value reaches makes every probability 0 and the score meaningless
    if fcst.chunks is not None or obs.chunks is not None:
        return
    dmin = float(np.fmin(fcst.min(skipna=True), obs.min(skipna=True)))
    dmax = float(np.fmax(fcst.max(skipna=True), obs.max(skipna=True)))
    out = t.values[(t.values >= dmax) | (t.values < dmin)]
    if out.size:
        raise EnsmlError(
            f"{func}: thresholds {', '.join(f'{v:.6g}' for v in out)} outside the data range "
            f"[{dmin:.6g}, {dmax:.6g})"
        )


def exceedance_probability(fcst: xr.DataArray, threshold: Any, *, member_dim: str = MEMBER) -> xr.DataArray:
    """Fraction of valid (non-NaN) members above ``threshold``; NaN where no member is valid.

    ``threshold`` is a finite number or DataArray (broadcast against ``fcst``); ±Inf in the
    forecast is an error.
    """
    require_dataarray(fcst, "exceedance_probability", "forecast")
    if member_dim not in fcst.dims:
        raise EnsmlError(f"exceedance_probability: forecast has no member dimension '{member_dim}'")
    t = threshold.values if isinstance(threshold, xr.DataArray) else threshold
    if not np.all(np.isfinite(np.asarray(t, dtype=np.float64))):
        raise EnsmlError("exceedance_probability: threshold must be finite")
    fcst = check_no_inf(fcst, "exceedance_probability", "forecast")
    valid = fcst.notnull().sum(member_dim)
    above = (fcst > threshold).sum(member_dim)
    return (above / valid.where(valid > 0)).rename("probability")


def brier_score(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    thresholds: float | Sequence[float],
    *,
    member_dim: str = MEMBER,
    fair: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Brier score of the event ``y > t`` for each threshold ``t`` (Brier 1950).

    .. math:: \mathrm{BS} = (p - o)^2, \quad p = \frac{1}{M}\sum_i 1\{x_i > t\}, \quad o = 1\{y > t\}

    With ``fair=True`` the fair Brier score (Ferro 2014) ``(p - o)^2 - p(1 - p)/(M - 1)``.
    NaN members are dropped (M counts valid members); a point with none, or a NaN
    observation, scores NaN.

    Returns
    -------
    xr.DataArray
        Dimensionless score with a ``threshold`` dim (always kept), reduced as
        :func:`ensml.scores.crps.crps_ensemble`.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "brier_score", member_dim)
    t = _thresholds(thresholds, "brier_score")
    _check_range(fcst, obs, t, "brier_score")
    p = exceedance_probability(fcst, t, member_dim=member_dim)
    o = (obs > t).astype(np.float64).where(obs.notnull())
    bs = (p - o) ** 2
    if fair:
        m = fcst.notnull().sum(member_dim)
        bs = bs - p * (1 - p) / (m - 1).where(m > 1)
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, "brier_score")
    keep = [d for d in bs.dims if d not in dims]
    out = reduce_score(bs, preserve_dims=keep, weights=weights, func="brier_score")
    return out.rename("brier_score").assign_attrs(units="1", long_name="Brier score of exceedance")


def reliability(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    threshold: float,
    *,
    member_dim: str = MEMBER,
    n_bins: int = 10,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """Binned reliability of the exceedance probability of ``threshold`` (reliability diagram).

    The ensemble probability ``p`` (valid members above the threshold) is put in ``n_bins``
    equal bins of [0, 1] (the last bin closed); per bin, over the reduced dims:

    * ``forecast_probability``: mean ``p`` (weighted),
    * ``observed_frequency``: mean ``1{y > t}`` (weighted),
    * ``count``: number of points (unweighted; float64).

    A perfectly reliable forecast has ``observed_frequency == forecast_probability``
    (Wilks 2019, Statistical Methods in the Atmospheric Sciences, §9.4.4). Points with a NaN
    probability or observation are left out; an empty bin gives NaN means and count 0, and a
    reduced slice with no valid point at all gives NaN everywhere, counts included.
    """
    fcst, obs = check_fcst_obs(fcst, obs, "reliability", member_dim)
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise EnsmlError(f"reliability: n_bins must be a positive integer, got {n_bins!r}")
    t = _thresholds(threshold, "reliability")
    if t.size != 1:
        raise EnsmlError("reliability: pass one threshold at a time")
    _check_range(fcst, obs, t, "reliability")
    thr = float(t.values[0])
    p = exceedance_probability(fcst, thr, member_dim=member_dim)
    o = (obs > thr).astype(np.float64).where(obs.notnull())
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, "reliability")
    return _binned(p, o, n_bins, dims, weights, "reliability").assign_attrs(threshold=thr)


def probability_bins(p: xr.DataArray, n_bins: int) -> xr.DataArray:
    """The bin of each probability ``p`` among ``n_bins`` equal bins of [0, 1], as
    :func:`reliability` bins them (0 … n_bins − 1, the last bin closed; a probability ``j/M``
    exactly on an edge goes to the bin above it); NaN where ``p`` is."""
    return np.minimum(np.floor(p * n_bins + 1e-9), n_bins - 1)


def _binned(
    p: xr.DataArray, o: xr.DataArray, n_bins: int, dims: list[Hashable], weights: Any, func: str
) -> xr.Dataset:
    """The reliability table of probabilities ``p`` and events ``o`` (0/1, NaN missing) in
    ``n_bins`` equal bins of [0, 1], reduced over ``dims`` (see :func:`reliability`)."""
    valid = p.notnull() & o.notnull()
    k = probability_bins(p, n_bins)
    edges = np.linspace(0.0, 1.0, n_bins + 1)
    bins = xr.DataArray(np.arange(n_bins), dims=["bin"])
    in_bin = (k == bins) & valid
    keep = [d for d in in_bin.dims if d not in dims]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        fp = reduce_score(p.where(in_bin), preserve_dims=keep, weights=weights, func=func)
        of = reduce_score(o.where(in_bin), preserve_dims=keep, weights=weights, func=func)
    count = in_bin.sum(dims).astype(np.float64).where(valid.any(dims))
    coords = {"bin": np.arange(n_bins), "bin_lower": ("bin", edges[:-1]), "bin_upper": ("bin", edges[1:])}
    return xr.Dataset(
        {
            "forecast_probability": fp.assign_attrs(units="1"),
            "observed_frequency": of.assign_attrs(units="1"),
            "count": count.assign_attrs(units="1"),
        }
    ).assign_coords(coords)


def _events(prob: xr.DataArray, obs: xr.DataArray, func: str) -> tuple[xr.DataArray, xr.DataArray]:
    """``prob`` checked (a ``threshold`` dim with its coordinate, values in [0, 1] or NaN) and
    the observed events ``1{y > t}`` at its thresholds (NaN where ``obs`` is)."""
    require_dataarray(prob, func, "probability")
    require_dataarray(obs, func, "observation")
    if THRESHOLD not in prob.dims or THRESHOLD not in prob.coords:
        raise EnsmlError(
            f"{func}: the probability needs a '{THRESHOLD}' dim with the thresholds as coordinate"
        )
    if THRESHOLD in obs.dims:
        raise EnsmlError(f"{func}: the observation must not have a '{THRESHOLD}' dim")
    extra = [d for d in prob.dims if d != THRESHOLD and d not in obs.dims]
    if extra:
        raise EnsmlError(
            f"{func}: the probability has dims the observation lacks: {', '.join(map(str, extra))}"
        )
    prob = check_no_inf(prob, func, "probability")
    obs = check_no_inf(obs, func, "observation")
    if prob.chunks is None and bool(((prob < 0) | (prob > 1)).any()):
        raise EnsmlError(f"{func}: probabilities must lie in [0, 1]")
    o = (obs > prob[THRESHOLD]).astype(np.float64).where(obs.notnull())
    return prob, o


def probability_brier_score(
    prob: xr.DataArray,
    obs: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Brier score of forecast probabilities of the events ``y > t`` (Brier 1950).

    .. math:: \mathrm{BS} = (p - o)^2, \qquad o = 1\{y > t\}

    with ``p`` any forecast probability of the event, e.g. P(Y > t) of a predictive distribution
    (:func:`ensml.scores.predictive.exceedance_family`); :func:`brier_score` is the same score
    of an ensemble's member fraction.

    Parameters
    ----------
    prob
        Probabilities in [0, 1] with a ``threshold`` dim whose coordinate holds each event's
        threshold ``t`` (in the units of ``obs``), and otherwise dims among the observation's.
    obs
        The observations. NaN in either is a missing point (left out of means).
    reduce_dims, preserve_dims, weights
        As :func:`brier_score` (the ``threshold`` dim is always kept).
    """
    func = "probability_brier_score"
    prob, o = _events(prob, obs, func)
    bs = (prob - o) ** 2
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, func)
    keep = [d for d in bs.dims if d not in dims]
    out = reduce_score(bs, preserve_dims=keep, weights=weights, func=func)
    return out.rename("brier_score").assign_attrs(units="1", long_name="Brier score of exceedance")


def probability_reliability(
    prob: xr.DataArray,
    obs: xr.DataArray,
    *,
    n_bins: int = 10,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """Binned reliability of forecast probabilities of ``y > t`` (a reliability diagram's data).

    As :func:`reliability` (the same bins, means and counts; Wilks 2019, §9.4.4), for any
    probability forecast ``prob`` with a ``threshold`` dim (see :func:`probability_brier_score`),
    which is kept: one table per threshold.
    """
    func = "probability_reliability"
    if not isinstance(n_bins, (int, np.integer)) or n_bins < 1:
        raise EnsmlError(f"{func}: n_bins must be a positive integer, got {n_bins!r}")
    prob, o = _events(prob, obs, func)
    dims = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, func)
    return _binned(prob, o, int(n_bins), dims, weights, func)
