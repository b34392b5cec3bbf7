"""Extreme Forecast Index (ECMWF) against a model climate, and ENS-10's EECRPS."""

from __future__ import annotations

import math
from collections.abc import Hashable, Iterable

import numba
import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, MEMBER, QUANTILE
from ensml.scores.climate import (
    CLIMATE_SAMPLE,
    N_PERCENTILES,
    check_ensemble_climate,
    check_eps,
    climate_quantiles,
    model_climate,
    quantile_levels,
)
from ensml.scores.reduce import check_weights, reduce_score, resolve_reduce_dims

__all__ = ["EFI_METHODS", "eecrps", "extreme_forecast_index", "model_climate", "reforecast_efi"]

#: ``"ecmwf"``: ECMWF's discretised EFI over climate quantiles (default); ``"continuous"``: the
#: closed form over climate samples.
EFI_METHODS = ("ecmwf", "continuous")


@numba.njit(cache=True, nogil=True)
def _efi_ecmwf_kernel(
    fc: np.ndarray,
    clim: np.ndarray,
    p0: np.ndarray,
    dp: np.ndarray,
    i0: np.ndarray,
    i1: np.ndarray,
    eps: float,
) -> np.ndarray:
    n, m = fc.shape
    k = clim.shape[1]
    out = np.empty(n)
    buf = np.empty(m)
    frac = np.empty(k)
    for p in range(n):
        mm = 0
        for i in range(m):
            x = fc[p, i]
            if x == x:
                buf[mm] = x
                mm += 1
        bad = mm == 0
        for j in range(k):
            bad |= clim[p, j] != clim[p, j]
        if bad:
            out[p] = np.nan
            continue
        f = np.sort(buf[:mm])
        for j in range(k):  # F_f at the climate quantiles: fraction of members <= q_j
            frac[j] = np.searchsorted(f, clim[p, j], side="right") / mm
        acc = 0.0
        norm = 0.0
        for j in range(k - 1):
            if eps > 0.0 and not clim[p, j + 1] > eps:
                continue  # bounded variable: intervals where the climate is still ~0 do not count
            # int (p - F_f)/B over [p_j, p_j+1] with F_f = frac_j + s (p - p_j), linear in p
            s = (frac[j + 1] - frac[j]) / dp[j]
            acc += (1.0 - s) * i1[j] - (frac[j] - s * p0[j]) * i0[j]
            norm += i1[j]  # the same with F_f = 0: every member above the climate (EFI-max)
        if eps > 0.0:
            out[p] = acc / max(norm, eps)
        else:
            out[p] = 2.0 / math.pi * acc
    return out


@numba.njit(cache=True, nogil=True)
def _efi_continuous_kernel(fc: np.ndarray, clim: np.ndarray) -> np.ndarray:
    n, m = fc.shape
    k = clim.shape[1]
    out = np.empty(n)
    buf = np.empty(k)
    for p in range(n):
        kk = 0
        for j in range(k):
            v = clim[p, j]
            if v == v:
                buf[kk] = v
                kk += 1
        if kk < 2:
            out[p] = np.nan
            continue
        c = np.sort(buf[:kk])
        acc = 0.0
        mm = 0
        for i in range(m):
            x = fc[p, i]
            if x != x:
                continue
            mm += 1
            # G(x): climate CDF, linear between order statistics at 0, 1/(K-1), ..., 1
            if x <= c[0]:
                u = 0.0
            elif x >= c[kk - 1]:
                u = 1.0
            else:
                j = np.searchsorted(c, x, side="right")  # c[j-1] <= x < c[j]
                lo, hi = c[j - 1], c[j]
                u = (j - 1 + (x - lo) / (hi - lo)) / (kk - 1)
            acc += math.asin(math.sqrt(u))
        if mm == 0:
            out[p] = np.nan
        else:
            out[p] = 4.0 / (math.pi * mm) * acc - 1.0
    return out


def _flat(fc: np.ndarray, clim: np.ndarray) -> tuple[np.ndarray, np.ndarray, tuple[int, ...]]:
    shape = np.broadcast_shapes(fc.shape[:-1], clim.shape[:-1])
    f = np.broadcast_to(fc, (*shape, fc.shape[-1])).reshape(-1, fc.shape[-1])
    c = np.broadcast_to(clim, (*shape, clim.shape[-1])).reshape(-1, clim.shape[-1])
    return np.asarray(f, np.float64), np.asarray(c, np.float64), shape


def _efi_continuous(fc: np.ndarray, clim: np.ndarray) -> np.ndarray:
    f, c, shape = _flat(fc, clim)
    return _efi_continuous_kernel(f, c).reshape(shape)


def _efi_ecmwf(fc: np.ndarray, clim: np.ndarray, levels: np.ndarray, eps: float) -> np.ndarray:
    f, c, shape = _flat(fc, clim)
    # exact integrals over each level interval, with B = sqrt(p(1-p)) and S = asin(sqrt p):
    # int dp/B = 2 dS and int p/B dp = dS - dB
    ds = np.diff(np.arcsin(np.sqrt(levels)))
    db = np.diff(np.sqrt(levels * (1.0 - levels)))
    return _efi_ecmwf_kernel(f, c, levels[:-1], np.diff(levels), 2.0 * ds, ds - db, eps).reshape(shape)


def extreme_forecast_index(
    fcst: xr.DataArray,
    climate: xr.DataArray,
    *,
    method: str = "ecmwf",
    eps: float | None = None,
    member_dim: str = MEMBER,
    climate_dim: str | None = None,
) -> xr.DataArray:
    r"""Extreme Forecast Index of an ensemble against a model climate (Lalaurette 2003; ECMWF).

    .. math::
        \mathrm{EFI} = \frac{2}{\pi}\int_0^1 \frac{p - F_f(p)}{\sqrt{p(1-p)}}\,dp

    where :math:`F_f(p)` is the fraction of members at or below the climate's p-quantile. EFI
    is in [−1, 1]: 1 when every member is above all of the climate, −1 below it, 0 when the
    ensemble is distributed as the climate.

    * ``method="ecmwf"`` (default): ECMWF's operational discretisation. The climate is given
      as quantiles :math:`q_j` at levels :math:`p_j` (ECMWF: 101 percentiles, 0 … 100 %;
      :func:`climate_quantiles` makes them from samples); :math:`F_f` is
      evaluated at each :math:`q_j` (members :math:`\le q_j`), taken linear in p between
      levels, and the integral is exact on each interval. With ``eps`` (bounded variables
      such as precipitation, whose climate has many equal zero quantiles) only the intervals
      :math:`[p_j, p_{j+1}]` with :math:`q_{j+1} > \varepsilon` count, and the sum is divided
      by its value for an ensemble above all of the climate (EFI-max, at least
      :math:`\varepsilon`) instead of multiplied by :math:`2/\pi`: so EFI is 1 when every
      member is above the climate, however many climate values are 0. This is the
      definition of ECMWF's reference implementation, ``earthkit.meteo.extreme.efi``
      (earthkit-meteo 1.2.1; ECMWF's tests give −0.18384 for their 2 m temperature case and
      0.46039 and 0.63301 for their precipitation cases with ``eps=1e-4`` m); ensml's
      tests agree with it to 1e-6.
    * ``method="continuous"``: the climate is samples along ``climate_sample`` (e.g. from
      :func:`model_climate`) and :math:`G`, their CDF, is linear between
      the sorted samples (0 below, 1 above), which gives the closed form
      :math:`\frac{4}{\pi M}\sum_i \arcsin\sqrt{G(x_i)} - 1` with no discretisation. It
      has no bounded-variable rule: where the climate is mostly zeros it differs from
      ``"ecmwf"`` with ``eps`` by up to tenths; otherwise by the discretisation (about 0.01
      with 101 quantiles).

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with ``member_dim``, in the climate's units.
    climate : xr.DataArray
        ``"ecmwf"``: quantiles along ``climate_dim`` (default ``quantile``); its coordinate,
        if any, gives the levels (fractions 0 … 1, or percent 0 … 100, strictly increasing),
        otherwise they are equally spaced from 0 to 1. The values are used as given (ECMWF's
        own M-climate has small inversions). ``"continuous"``: samples along ``climate_dim``
        (default ``climate_sample``). Either over some of the forecast's other dims (it
        broadcasts over the rest).
    method : {"ecmwf", "continuous"}
        See above.
    eps : float, optional
        ``"ecmwf"`` only: the bounded-variable threshold, in the data's units (ECMWF uses
        1e-4 m, i.e. 0.1 mm, for precipitation). Default None: rule off, ECMWF's default.

    Returns
    -------
    xr.DataArray
        Dimensionless EFI, the forecast's dims without ``member_dim``. NaN members are
        dropped (ECMWF's code gives NaN for any NaN member); NaN where no member is valid,
        where any climate quantile is NaN (``"ecmwf"``) or fewer than 2 climate samples are
        valid (``"continuous"``); ±Inf in either input is an error (policy of :mod:`ensml.scores`).

    References
    ----------
    Lalaurette, F. (2003): Early detection of abnormal weather conditions using a probabilistic
    extreme forecast index. Q. J. R. Meteorol. Soc. 129, 3037–3057.
    ECMWF, earthkit-meteo 1.2.1, ``earthkit.meteo.extreme.efi`` (github.com/ecmwf/earthkit-meteo).
    """
    func = "extreme_forecast_index"
    if method not in EFI_METHODS:
        raise EnsmlError(f"{func}: method must be one of {', '.join(EFI_METHODS)}, got {method!r}")
    if method == "continuous" and eps is not None:
        raise EnsmlError(f"{func}: eps applies to method='ecmwf' only (got eps={eps!r} with 'continuous')")
    eps_value = check_eps(eps, func)
    ecmwf = method == "ecmwf"
    climate_dim = climate_dim or (QUANTILE if ecmwf else CLIMATE_SAMPLE)
    hint = ""
    if ecmwf and isinstance(climate, xr.DataArray) and CLIMATE_SAMPLE in climate.dims:
        hint = "; method='ecmwf' takes quantiles: climate_quantiles(samples) makes them"
    fcst, climate = check_ensemble_climate(fcst, climate, member_dim, climate_dim, func, hint)
    if ecmwf:
        levels = quantile_levels(climate, climate_dim, func)
        core, kwargs = _efi_ecmwf, {"levels": levels, "eps": eps_value}
    else:
        core, kwargs = _efi_continuous, {}
    out = xr.apply_ufunc(
        core,
        fcst,
        climate,
        input_core_dims=[[member_dim], [climate_dim]],
        kwargs=kwargs,
        dask="parallelized",
        output_dtypes=[np.float64],
        join="exact",
    )
    attrs = {"units": "1", "long_name": "extreme forecast index", "method": method}
    if eps is not None:
        attrs["eps"] = eps_value
    return out.rename("efi").assign_attrs(attrs)


def reforecast_efi(
    fcst: xr.DataArray,
    *,
    method: str = "ecmwf",
    n_quantiles: int = N_PERCENTILES,
    eps: float | None = None,
    window_days: float = 4,
    past_only: bool = False,
    init_dim: str = INIT_TIME,
    member_dim: str = MEMBER,
) -> xr.DataArray:
    """EFI of every init date of a reforecast set against its own model climate.

    For each ``init_time`` the climate is :func:`model_climate` of the same data. The default,
    ``method="ecmwf"``, turns those samples into ``n_quantiles`` equally spaced quantiles
    (:func:`climate_quantiles`; 101, as ECMWF's M-climate, itself percentiles of reforecast
    samples) and takes ECMWF's EFI: the definition of ECMWF's products, and the one with a
    rule (``eps``) for bounded variables such as precipitation. ``method="continuous"`` uses
    the samples themselves, with no discretisation (see :func:`extreme_forecast_index`).

    Parameters
    ----------
    fcst : xr.DataArray
        Reforecasts with ``init_dim`` and ``member_dim``.
    n_quantiles, eps
        ``"ecmwf"`` only: climate quantiles per point, and the bounded-variable threshold
        in the data's units (None: off).
    window_days, past_only
        The climate's window, as :func:`model_climate`.

    Returns
    -------
    xr.DataArray
        Dimensionless EFI with the forecast's dims less ``member_dim``.
    """
    if init_dim not in fcst.dims:
        raise EnsmlError(f"reforecast_efi: forecast has no '{init_dim}' dimension")
    if method not in EFI_METHODS:
        raise EnsmlError(f"reforecast_efi: method must be one of {', '.join(EFI_METHODS)}, got {method!r}")
    if method == "continuous" and eps is not None:
        raise EnsmlError(
            f"reforecast_efi: eps applies to method='ecmwf' only (got eps={eps!r} with 'continuous')"
        )
    parts = []
    for t in fcst[init_dim].values:
        clim = model_climate(
            fcst, t, window_days=window_days, past_only=past_only, init_dim=init_dim, member_dim=member_dim
        )
        if method == "ecmwf":
            clim = climate_quantiles(clim, n_quantiles)
        efi = extreme_forecast_index(
            fcst.sel({init_dim: t}), clim, method=method, eps=eps, member_dim=member_dim
        )
        parts.append(efi)
    return xr.concat(parts, dim=init_dim).transpose(*[d for d in fcst.dims if d != member_dim])


def eecrps(
    crps: xr.DataArray,
    efi: xr.DataArray,
    *,
    normalised: bool = False,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    r"""Extreme-event CRPS: pointwise CRPS weighted by the extremeness ``|EFI|``.

    * ``normalised=False`` (ENS-10's EECRPS, Ashkboos et al. 2022):
      :math:`\overline{|\mathrm{EFI}|\cdot\mathrm{CRPS}}`, the plain (weighted) mean of the
      product; it shrinks with the number of non-extreme points.
    * ``normalised=True``: :math:`\sum w|\mathrm{EFI}|\,\mathrm{CRPS} / \sum w|\mathrm{EFI}|`,
      an ``|EFI|``-weighted mean CRPS in CRPS units, comparable across regions and periods.

    ``crps`` is the pointwise (unreduced) CRPS of the model being scored; ``efi`` the EFI of
    the raw ensemble, which says how extreme the situation was (the same for every model).
    Points where either is NaN are left out.
    """
    for name, a in (("crps", crps), ("efi", efi)):
        if not isinstance(a, xr.DataArray):
            raise EnsmlError(f"eecrps: {name} must be an xarray.DataArray")
    if set(efi.dims) - set(crps.dims):
        raise EnsmlError(
            f"eecrps: efi dims ({', '.join(map(str, efi.dims))}) not among crps dims "
            f"({', '.join(map(str, crps.dims))})"
        )
    try:
        crps, efi = xr.align(crps, efi, join="exact")
    except ValueError as exc:
        raise EnsmlError(f"eecrps: crps and efi coordinates differ: {exc}") from exc
    a = np.abs(efi)
    prod = a * crps
    ok = prod.notnull()
    kw = {"reduce_dims": reduce_dims, "preserve_dims": preserve_dims, "func": "eecrps"}
    if not normalised:
        out = reduce_score(prod, weights=weights, **kw)
        return out.rename("eecrps").assign_attrs(long_name="mean of |EFI| x CRPS (ENS-10 EECRPS)")
    w = a.where(ok, 0.0)
    if weights is not None:
        w = w * check_weights(weights, prod, "eecrps")
    dims = resolve_reduce_dims(prod.dims, reduce_dims, preserve_dims, "eecrps")
    den = w.sum(dims)
    out = (w * crps.where(ok, 0.0)).sum(dims) / den.where(den > 0)
    return out.rename("eecrps_normalised").assign_attrs(long_name="|EFI|-weighted mean CRPS")
