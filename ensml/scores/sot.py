"""Shift of Tails (SOT; Zsótér 2006) of an ensemble against model-climate quantiles, as ECMWF computes it."""

from __future__ import annotations

import math
import warnings

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER, QUANTILE
from ensml.scores.climate import check_ensemble_climate, check_eps, level_index, quantile_levels

__all__ = ["SOT_BOUND", "shift_of_tails"]

#: ECMWF clips the SOT to [−SOT_BOUND, SOT_BOUND].
SOT_BOUND = 10.0
_DEFAULTS = {"upper": (90.0, 99.0), "lower": (10.0, 1.0)}


def _sot_core(
    fc: np.ndarray, clim: np.ndarray, *, q: float, i_level: int, i_tail: int, eps: float
) -> np.ndarray:
    if eps > 0:
        fc = np.where(fc < eps, 0.0, fc)  # NaN stays NaN
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # no valid member: NaN
        qf = np.nanpercentile(np.asarray(fc, np.float64), q, axis=-1)
    clim = np.asarray(clim, np.float64)
    qc, qt = clim[..., i_level], clim[..., i_tail]
    if eps > 0:
        qc = np.where(qc < eps, 0.0, qc)  # ECMWF leaves the tail quantile as it is
    den = qt - qc
    with np.errstate(divide="ignore", invalid="ignore"):
        sot = np.where(np.abs(den) > eps, (qf - qt) / den, np.nan)
    return np.clip(sot, -SOT_BOUND, SOT_BOUND)


def shift_of_tails(
    fcst: xr.DataArray,
    climate: xr.DataArray,
    *,
    tail: str = "upper",
    percentile: float | None = None,
    tail_percentile: float | None = None,
    eps: float | None = None,
    member_dim: str = MEMBER,
    climate_dim: str = QUANTILE,
) -> xr.DataArray:
    r"""Shift of Tails of an ensemble against model-climate quantiles (Zsótér 2006; ECMWF).

    .. math::
        \mathrm{SOT} = \frac{Q_f(p) - Q_c(p_t)}{Q_c(p_t) - Q_c(p)}

    with :math:`Q_f` the ensemble's and :math:`Q_c` the climate's quantiles at ``percentile``
    :math:`p` and ``tail_percentile`` :math:`p_t`: upper tail 90 and 99 %, lower tail 10 and
    1 % (defaults). SOT > 0 when the ensemble's own tail lies beyond the climate's extreme
    quantile (above its 99 % for the upper tail, below its 1 % for the lower one), in units of
    the climate's tail width; ECMWF's charts show SOT ≥ 0 with the EFI, which saturates at 1.

    This follows ECMWF's reference implementation, ``earthkit.meteo.extreme.sot``
    (earthkit-meteo 1.2.1; ECMWF's tests give −2.14617638 upper and −1.3086723 lower for
    their 2 m temperature case); ensml's tests agree with it to 1e-6:

    * :math:`Q_f` is the members' percentile with linear interpolation (``numpy.percentile``'s
      default); :math:`Q_c` are climate quantiles read at those levels, not interpolated.
    * Clipped to [−10, 10] (``SOT_BOUND``); NaN where the climate's tail width
      :math:`|Q_c(p_t) - Q_c(p)|` is not above ``eps`` (or 0 without it).
    * ``eps`` (bounded variables such as precipitation): members and :math:`Q_c(p)` below
      ``eps`` count as 0 (not :math:`Q_c(p_t)`), and a tail narrower than ``eps`` gives NaN.

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with ``member_dim``, in the climate's units.
    climate : xr.DataArray
        Quantiles along ``climate_dim`` (levels from its coordinate, fractions or percent, or
        equally spaced from 0 to 1 without one, as :func:`extreme_forecast_index`),
        which must include ``percentile`` and ``tail_percentile`` (ECMWF's 101 percentiles
        do); over some of the forecast's other dims (it broadcasts over the rest).
    tail : {"upper", "lower"}
        Which tail; sets the default percentiles.
    percentile, tail_percentile : float, optional
        In percent: upper tail 50 < percentile < tail_percentile ≤ 100, lower tail
        0 ≤ tail_percentile < percentile < 50.
    eps : float, optional
        Bounded-variable threshold in the data's units (e.g. 1e-4 m of precipitation); default
        None, ECMWF's default: rule off.

    Returns
    -------
    xr.DataArray
        Dimensionless SOT, the forecast's dims without ``member_dim``. NaN members are dropped;
        NaN where no member is valid or a climate quantile used is NaN; ±Inf in either input
        is an error (policy of :mod:`ensml.scores`).

    References
    ----------
    Zsótér, E. (2006): Recent developments in extreme weather forecasting. ECMWF Newsletter
    107, 8–17.
    ECMWF, earthkit-meteo 1.2.1, ``earthkit.meteo.extreme.sot`` (github.com/ecmwf/earthkit-meteo).
    """
    func = "shift_of_tails"
    if tail not in _DEFAULTS:
        raise EnsmlError(f"{func}: tail must be 'upper' or 'lower', got {tail!r}")
    p, pt = _DEFAULTS[tail]
    p = p if percentile is None else percentile
    pt = pt if tail_percentile is None else tail_percentile
    for name, v in (("percentile", p), ("tail_percentile", pt)):
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, np.integer, np.floating))
            or not math.isfinite(v)
        ):
            raise EnsmlError(f"{func}: {name} must be a finite number in percent, got {v!r}")
    ok = 50 < p < pt <= 100 if tail == "upper" else 0 <= pt < p < 50
    if not ok:
        order = (
            "50 < percentile < tail_percentile <= 100"
            if tail == "upper"
            else "0 <= tail_percentile < percentile < 50"
        )
        raise EnsmlError(
            f"{func}: the {tail} tail needs {order}, got percentile={p:g}, tail_percentile={pt:g}"
        )
    eps_value = check_eps(eps, func)
    fcst, climate = check_ensemble_climate(fcst, climate, member_dim, climate_dim, func)
    levels = quantile_levels(climate, climate_dim, func)
    kwargs = {
        "q": float(p),
        "i_level": level_index(levels, p, climate_dim, func),
        "i_tail": level_index(levels, pt, climate_dim, func),
        "eps": eps_value,
    }
    out = xr.apply_ufunc(
        _sot_core,
        fcst,
        climate,
        input_core_dims=[[member_dim], [climate_dim]],
        kwargs=kwargs,
        dask="parallelized",
        output_dtypes=[np.float64],
        join="exact",
    )
    attrs = {"units": "1", "long_name": f"shift of tails ({tail}, {p:g}/{pt:g} %)"}
    if eps is not None:
        attrs["eps"] = eps_value
    return out.rename(f"sot_{tail}").assign_attrs(attrs)
