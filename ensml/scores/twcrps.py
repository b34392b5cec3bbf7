"""Threshold-weighted ensemble CRPS (upper tail, lower tail, interval).

NaN/Inf as :func:`ensml.scores.crps.crps_ensemble`; ±Inf is refused before chaining, which would
map -Inf to a finite threshold.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Literal

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.crps import _crps_array, crps_pointwise
from ensml.scores.reduce import check_fcst_obs, infinite_error, reduce_score

__all__ = ["twcrps_ensemble", "twcrps_ensemble_array"]

Tail = Literal["upper", "lower", "interval"]


def _tail_thresholds(threshold: Any, tail: str, func: str) -> tuple[Any, Any]:
    """The (lower, upper) thresholds of the chaining function as given (one of them unused)."""
    if tail == "interval":
        if not (isinstance(threshold, (tuple, list)) and len(threshold) == 2):
            raise EnsmlError(f"{func}: tail='interval' needs threshold=(lower, upper)")
        return threshold[0], threshold[1]
    if tail in ("upper", "lower"):
        return threshold, threshold
    raise EnsmlError(f"{func}: tail must be 'upper', 'lower' or 'interval', got {tail!r}")


def _chain_bounds(tail: str, lo: Any, hi: Any) -> tuple[Any, Any]:
    """``(lo, hi)`` of ``v(z) = min(max(z, lo), hi)`` for the tail: ±Inf where it does not clamp."""
    return (lo if tail != "lower" else -np.inf, hi if tail != "upper" else np.inf)


def _check_range(func: str, tail: str, lo: Any, hi: Any, dmin: float, dmax: float) -> None:
    """Refuse a weighted region entirely outside the data ``[dmin, dmax]`` (the score is all 0)."""
    rng = f"[{dmin:.6g}, {dmax:.6g}]"
    if tail in ("upper", "interval") and float(np.min(lo)) >= dmax:
        raise EnsmlError(f"{func}: threshold {float(np.min(lo)):.6g} is above the data range {rng}")
    if tail in ("lower", "interval") and float(np.max(hi)) <= dmin:
        raise EnsmlError(f"{func}: threshold {float(np.max(hi)):.6g} is below the data range {rng}")


def _as_number(t: Any, func: str, name: str, other: str) -> float:
    if not np.isscalar(t) or isinstance(t, (str, bool)):
        raise EnsmlError(f"{func}: {name} must be a number or {other}, got {type(t).__name__}")
    if not np.isfinite(t):
        raise EnsmlError(f"{func}: {name} must be finite, got {t}")
    return float(t)


def _as_threshold(t: Any, obs: xr.DataArray, name: str) -> xr.DataArray | float:
    if isinstance(t, xr.DataArray):
        extra = [d for d in t.dims if d not in obs.dims]
        if extra:
            raise EnsmlError(
                f"twcrps_ensemble: {name} dims ({', '.join(map(str, t.dims))}) not among the "
                f"observation dims ({', '.join(map(str, obs.dims))})"
            )
        for d in t.dims:
            if t.sizes[d] != obs.sizes[d]:
                raise EnsmlError(
                    f"twcrps_ensemble: {name} has size {t.sizes[d]} along '{d}', "
                    f"the observation {obs.sizes[d]}"
                )
        if t.chunks is None and not np.all(np.isfinite(t.values)):
            raise EnsmlError(f"twcrps_ensemble: {name} contains NaN or infinite values")
        return t
    return _as_number(t, "twcrps_ensemble", name, "a DataArray")


def twcrps_ensemble(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    threshold: Any,
    *,
    tail: Tail = "upper",
    member_dim: str = MEMBER,
    fair: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Threshold-weighted CRPS of an ensemble, via its chaining function.

    .. math::
        \mathrm{twCRPS}(F, y) = \int (F(z) - 1\{y \le z\})^2\, w(z)\, dz
        = \mathrm{CRPS}(v_\#F, v(y)), \qquad v(z) = \int^z w

    (Gneiting & Ranjan 2011, JBES 29, 411; Allen, Ginsbourger & Ziegel 2023, SIAM/ASA JUQ
    11, 906). The ensemble estimator scores the chained members ``v(x_i)`` against ``v(y)``:

    * ``tail="upper"``, ``w = 1{z > t}``: ``v(z) = max(z, t)``;
    * ``tail="lower"``, ``w = 1{z < t}``: ``v(z) = min(z, t)``;
    * ``tail="interval"``, ``w = 1{a < z < b}``: ``v(z) = min(max(z, a), b)``,
      ``threshold=(a, b)``.

    Parameters
    ----------
    fcst, obs, member_dim, fair, reduce_dims, preserve_dims, weights
        As :func:`ensml.scores.crps.crps_ensemble` (same NaN/Inf policy).
    threshold
        A number, or a DataArray over some of the observation's dims (a threshold per point,
        e.g. a climatological percentile), in the units of ``obs``; for ``"interval"`` a pair
        ``(a, b)`` of such, with ``a < b``.
    tail
        ``"upper"``, ``"lower"`` or ``"interval"``.

    Numeric thresholds are applied inside the CRPS kernel, block by block in cache, so no
    chained copy of the data is made (±Inf members are left unchained there, so they are still
    reported); DataArray thresholds chain in xarray first.

    Raises
    ------
    EnsmlError
        Also when the weighted region lies entirely outside the data range (the score would be
        identically 0); checked for in-memory data only.
    """
    lo_t, hi_t = _tail_thresholds(threshold, tail, "twcrps_ensemble")
    # numeric thresholds are chained inside the CRPS kernel, which also finds ±Inf (left unchained)
    fused = not isinstance(lo_t, xr.DataArray) and not isinstance(hi_t, xr.DataArray)
    fcst, obs = check_fcst_obs(fcst, obs, "twcrps_ensemble", member_dim, finite=not fused)
    if tail == "interval":
        lo = _as_threshold(lo_t, obs, "lower threshold")
        hi = _as_threshold(hi_t, obs, "upper threshold")
        if bool(np.any(np.asarray(xr.DataArray(hi) - xr.DataArray(lo)) <= 0)):
            raise EnsmlError("twcrps_ensemble: interval thresholds need lower < upper everywhere")
    else:
        lo = hi = _as_threshold(lo_t, obs, "threshold")

    def check_range() -> None:  # a weighted region outside the data scores identically 0
        dmin = float(np.fmin(fcst.min(skipna=True), obs.min(skipna=True)))
        dmax = float(np.fmax(fcst.max(skipna=True), obs.max(skipna=True)))
        _check_range("twcrps_ensemble", tail, lo, hi, dmin, dmax)

    in_memory = fcst.chunks is None and obs.chunks is None
    if fused:
        bounds = _chain_bounds(tail, lo, hi)
        score = crps_pointwise(
            fcst, obs, member_dim=member_dim, fair=fair, func="twcrps_ensemble", bounds=bounds
        )
        # all 0 (or NaN): only then look at the range (fmax skips NaN and allocates nothing)
        if in_memory and not (score.size and np.fmax.reduce(score.values, axis=None) > 0):
            check_range()
    else:
        if in_memory:
            check_range()

        def chain(x: xr.DataArray) -> xr.DataArray:
            # np.maximum/np.minimum keep NaN, so NaN members are still dropped later.
            if tail in ("upper", "interval"):
                x = np.maximum(x, lo)
            if tail in ("lower", "interval"):
                x = np.minimum(x, hi)
            return x

        vf = chain(fcst).transpose(*fcst.dims)
        vo = chain(obs).transpose(*obs.dims)
        score = crps_pointwise(
            vf.astype(fcst.dtype, copy=False),
            vo.astype(obs.dtype, copy=False),
            member_dim=member_dim,
            fair=fair,
            func="twcrps_ensemble",
        )
    score = reduce_score(
        score, reduce_dims=reduce_dims, preserve_dims=preserve_dims, weights=weights, func="twcrps_ensemble"
    )
    attrs = {"long_name": f"threshold-weighted {'fair ' if fair else ''}ensemble CRPS ({tail})"}
    if "units" in obs.attrs:
        attrs["units"] = obs.attrs["units"]
    return score.rename("twcrps").assign_attrs(attrs)


def _as_threshold_array(t: Any, shape: tuple[int, ...], func: str, name: str) -> np.ndarray | float:
    if isinstance(t, np.ndarray) and t.ndim == 0:
        t = t.item()
    if not isinstance(t, np.ndarray):
        return _as_number(t, func, name, "an array")
    if t.shape != shape:
        raise EnsmlError(f"{func}: {name} shape {t.shape} does not match the observation shape {shape}")
    if not np.issubdtype(t.dtype, np.number) or not np.all(np.isfinite(t)):
        raise EnsmlError(f"{func}: {name} must be finite numbers")
    return t


def twcrps_ensemble_array(
    fcst: Any,
    obs: Any,
    threshold: Any,
    axis: int = 0,
    *,
    tail: Tail = "upper",
    fair: bool = False,
    parallel: bool = True,
) -> np.ndarray:
    """Threshold-weighted CRPS of numpy arrays, point by point: :func:`twcrps_ensemble` without xarray.

    ``fcst``, ``obs``, ``axis``, ``fair`` and ``parallel`` as
    :func:`ensml.scores.crps.crps_ensemble_array` (same NaN/Inf policy); ``threshold`` and
    ``tail`` as :func:`twcrps_ensemble`, a threshold being a number (chained inside the kernel,
    no copy of the data) or an array of the observation's shape (chained in numpy first).

    Raises
    ------
    EnsmlError
        As :func:`ensml.scores.crps.crps_ensemble_array`, for a bad threshold or tail, and when
        the weighted region lies entirely outside the data range (the score would be all 0).
    """
    func = "twcrps_ensemble_array"
    lo_t, hi_t = _tail_thresholds(threshold, tail, func)
    y = np.asarray(obs)
    lo = _as_threshold_array(lo_t, y.shape, func, "lower threshold" if tail == "interval" else "threshold")
    hi = _as_threshold_array(hi_t, y.shape, func, "upper threshold" if tail == "interval" else "threshold")
    if tail == "interval" and np.any(np.asarray(hi) - np.asarray(lo) <= 0):
        raise EnsmlError(f"{func}: interval thresholds need lower < upper everywhere")
    lo_c, hi_c = _chain_bounds(tail, lo, hi)
    if np.isscalar(lo_c) and np.isscalar(hi_c):
        score = _crps_array(fcst, y, axis, fair, parallel, func, bounds=(lo_c, hi_c))
    else:  # per-point thresholds: refuse ±Inf first (chaining would make it finite), then chain
        f = np.asarray(fcst)
        for name, a in (("forecast", f), ("observation", y)):
            n_inf = int(np.count_nonzero(np.isinf(a))) if np.issubdtype(a.dtype, np.floating) else 0
            if n_inf:
                raise infinite_error(func, name, n_inf)
        if not -f.ndim <= axis < f.ndim:  # before expand_dims, which would raise numpy's error
            raise EnsmlError(f"{func}: member axis {axis} out of range for {f.ndim}-D forecast")

        def members(t: np.ndarray | float) -> np.ndarray | float:  # a per-point threshold, per member
            return np.expand_dims(t, axis % f.ndim) if np.ndim(t) else t

        def same(v: np.ndarray, like: np.ndarray) -> np.ndarray:  # float32 stays float32
            return v.astype(like.dtype, copy=False) if np.issubdtype(like.dtype, np.floating) else v

        vf = same(np.minimum(np.maximum(f, members(lo_c)), members(hi_c)), f)
        vy = same(np.minimum(np.maximum(y, lo_c), hi_c), y)
        score = _crps_array(vf, vy, axis, fair, parallel, func)
    if score.size and not np.fmax.reduce(score, axis=None) > 0:  # all 0 (or NaN): outside the data?
        f = np.asarray(fcst)  # fmin/fmax skip NaN (all NaN: NaN, and no error)
        dmin = float(np.fmin(np.fmin.reduce(f, axis=None), np.fmin.reduce(y, axis=None)))
        dmax = float(np.fmax(np.fmax.reduce(f, axis=None), np.fmax.reduce(y, axis=None)))
        _check_range(func, tail, lo, hi, dmin, dmax)
    return score
