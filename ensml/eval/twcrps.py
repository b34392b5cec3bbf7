"""Threshold-weighted ensemble CRPS (upper tail, lower tail, interval).

NaN/Inf as :func:`ensml.eval.crps.crps_ensemble`; ±Inf is refused before chaining, which would
map -Inf to a finite threshold.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import Any, Literal

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.eval.crps import crps_pointwise
from ensml.eval.reduce import check_fcst_obs, reduce_score
from ensml.names import MEMBER

__all__ = ["twcrps_ensemble"]

Tail = Literal["upper", "lower", "interval"]


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
    if not np.isscalar(t) or isinstance(t, (str, bool)):
        raise EnsmlError(f"twcrps_ensemble: {name} must be a number or a DataArray, got {type(t).__name__}")
    if not np.isfinite(t):
        raise EnsmlError(f"twcrps_ensemble: {name} must be finite, got {t}")
    return float(t)


def _tmin(t: xr.DataArray | float) -> float:
    return float(t.min()) if isinstance(t, xr.DataArray) else t


def _tmax(t: xr.DataArray | float) -> float:
    return float(t.max()) if isinstance(t, xr.DataArray) else t


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
        As :func:`ensml.eval.crps.crps_ensemble` (same NaN/Inf policy).
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
    if tail == "interval":
        if not (isinstance(threshold, (tuple, list)) and len(threshold) == 2):
            raise EnsmlError("twcrps_ensemble: tail='interval' needs threshold=(lower, upper)")
        lo_t, hi_t = threshold
    elif tail in ("upper", "lower"):
        lo_t = hi_t = threshold
    else:
        raise EnsmlError(f"twcrps_ensemble: tail must be 'upper', 'lower' or 'interval', got {tail!r}")
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
        rng = f"[{dmin:.6g}, {dmax:.6g}]"
        if tail in ("upper", "interval") and _tmin(lo) >= dmax:
            raise EnsmlError(f"twcrps_ensemble: threshold {_tmin(lo):.6g} is above the data range {rng}")
        if tail in ("lower", "interval") and _tmax(hi) <= dmin:
            raise EnsmlError(f"twcrps_ensemble: threshold {_tmax(hi):.6g} is below the data range {rng}")

    in_memory = fcst.chunks is None and obs.chunks is None
    if fused:
        bounds = (lo if tail != "lower" else -np.inf, hi if tail != "upper" else np.inf)
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
