r"""Zonal power spectra of gridded fields, and how the members' spectra compare with the truth's.

A generative ensemble can score well pointwise while its members are too smooth (or too noisy)
at small scales: their spatial structure is not that of a real field. The zonal power spectrum
along each latitude circle shows it scale by scale, and the ratio of the members' mean spectrum
to the truth's (:func:`spectrum_ratio`) is then 1 at every wavenumber for realistic members,
below 1 at high wavenumbers for members that are too smooth (the usual finding for
ensemble-mean-like or diffusion-blurred fields). :func:`mean_abs_log_ratio` sums it up in one
number.

The spectrum is that of WeatherBench2's ``ZonalEnergySpectrum`` in spirit (an FFT along each
latitude circle, averaged over latitude with cos-latitude weights; Rasp et al. 2024, JAMES 16,
e2023MS004019), but as a variance spectrum: its sum over wavenumbers is the zonal mean square of
the field (Parseval), in the field's units squared, not scaled to an energy per unit length.

NaN/Inf policy: ±Inf is an :class:`~ensml.errors.EnsmlError`; a latitude row with a NaN has a NaN
spectrum, and is left out of the latitude mean (its weight too); a mean without a valid row is
NaN.
"""

from __future__ import annotations

import warnings
from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import LATITUDE, LONGITUDE, MEMBER
from ensml.scores.reduce import check_fcst_obs, check_no_inf, require_dataarray, resolve_reduce_dims

__all__ = ["WAVENUMBER", "mean_abs_log_ratio", "spectrum_ratio", "zonal_power_spectrum"]

#: The zonal wavenumber dim of a spectrum: cycles per latitude circle, 0 … W // 2.
WAVENUMBER = "wavenumber"

#: Relative tolerance on the longitude steps of a regular global grid.
_LON_RTOL = 1e-3
#: Truth power at a wavenumber below this fraction of its total is no power (FFT round-off of
#: float64 is ~1e-32 of the total; real spectra span far fewer decades).
_NO_POWER = 1e-24


def _power_units(units: str | None) -> str | None:
    if units is None:
        return None
    return f"({units})^2" if any(c in units for c in " /.*") else f"{units}^2"


def _check_longitude(field: xr.DataArray, lon_dim: Hashable, func: str) -> int:
    if lon_dim not in field.dims:
        raise EnsmlError(
            f"{func}: field has no longitude dim '{lon_dim}' "
            f"(dims: {', '.join(map(str, field.dims)) or 'none'}); pass lon_dim=..."
        )
    w = field.sizes[lon_dim]
    if w < 2:
        raise EnsmlError(f"{func}: needs at least 2 longitudes along '{lon_dim}', got {w}")
    if lon_dim in field.coords:
        lon = np.asarray(field[lon_dim].values, dtype=np.float64)
        steps = np.diff(np.append(lon, lon[0])) % 360.0  # east (or west) by 360/W, wrapping round
        step = 360.0 / w
        if not (
            np.allclose(steps, step, rtol=_LON_RTOL, atol=0)
            or np.allclose(360.0 - steps, step, rtol=_LON_RTOL, atol=0)
        ):
            raise EnsmlError(
                f"{func}: the {w} longitudes along '{lon_dim}' must go once round the circle in equal "
                f"steps of {step:g}° (steps from {steps.min():g}° to {steps.max():g}°); a regional or "
                f"irregular grid has no zonal Fourier spectrum (drop the '{lon_dim}' coordinate to treat "
                "the points as periodic anyway)"
            )
    return w


def _row_spectrum(x: np.ndarray) -> np.ndarray:
    # x (..., W) -> (..., W // 2 + 1): one-sided |FFT|² / W², doubled except at k = 0 and Nyquist
    w = x.shape[-1]
    power = np.abs(np.fft.rfft(x.astype(np.float64, copy=False), axis=-1)) ** 2 / w**2
    power[..., 1 : (w + 1) // 2] *= 2.0
    return power


def zonal_power_spectrum(
    field: xr.DataArray,
    *,
    lon_dim: str = LONGITUDE,
    lat_dim: str | None = LATITUDE,
) -> xr.DataArray:
    r"""One-sided zonal power spectrum of a field on a regular latitude-longitude grid.

    Along each latitude circle of W points, with :math:`F_k = \sum_{n=0}^{W-1} f_n
    e^{-2\pi i k n / W}` the discrete Fourier transform,

    .. math::
        S_k = \frac{c_k}{W^2} |F_k|^2, \quad k = 0, \dots, \lfloor W/2 \rfloor, \qquad
        c_k = \begin{cases} 1 & k = 0 \text{ or } k = W/2 \text{ (W even)} \\
        2 & \text{otherwise,} \end{cases}

    so that Parseval's theorem reads :math:`\sum_k S_k = \frac1W \sum_n f_n^2`, the mean of
    :math:`f^2` over longitude: :math:`S_0` is the squared zonal mean, :math:`S_k` (k ≥ 1) the
    variance in zonal wavenumber k (cycles per latitude circle); a wave
    :math:`A \cos(2\pi k n / W + \phi)`, 0 < k < W/2, has :math:`S_k = A^2/2`. When the field has
    ``lat_dim``, the rows' spectra are then averaged with weights :math:`\cos\varphi`
    (:math:`\bar S_k = \sum_j \cos\varphi_j S_{jk} / \sum_j \cos\varphi_j`), whose sum over k is
    the cos-latitude-weighted mean of :math:`f^2` (about the area mean on a regular grid; WeatherBench2's
    ``ZonalEnergySpectrum`` averages alike). Computed in float64.

    Parameters
    ----------
    field : xr.DataArray
        Any dims, among them ``lon_dim``: e.g. (member, latitude, longitude) or (init_time,
        latitude, longitude). Numpy- or dask-backed (dask: each chunk holds whole latitude
        circles). A ``lon_dim`` coordinate, if present, must go once round the circle in equal
        steps (degrees, eastward or westward, any range such as 0 … 360 or −180 … 180); without
        one, the W points are taken to do so.
    lon_dim : str
        The longitude dim (at least 2 points), replaced by ``wavenumber``.
    lat_dim : str or None
        The latitude dim, averaged over with cos-latitude weights; its coordinate (degrees north,
        within [−90, 90]) is required. ``None``, or a dim the field does not have: no latitude
        mean (a spectrum per row).

    Returns
    -------
    xr.DataArray
        float64 spectrum named ``zonal_power_spectrum``, in the field's units squared, with
        ``wavenumber`` (0 … W // 2, integer coordinate) where ``lon_dim`` was and without
        ``lat_dim``. NaN policy: see the module docstring.

    Examples
    --------
    >>> zonal_power_spectrum(fc["t"].sel(level=500))  # doctest: +SKIP
    """
    func = "zonal_power_spectrum"
    require_dataarray(field, func, "field")
    if not (np.issubdtype(field.dtype, np.floating) or np.issubdtype(field.dtype, np.integer)):
        raise EnsmlError(f"{func}: field must be real and numeric, got dtype {field.dtype}")
    w = _check_longitude(field, lon_dim, func)
    if lat_dim is not None and lat_dim == lon_dim:
        raise EnsmlError(f"{func}: lat_dim and lon_dim are both '{lon_dim}'")
    average = lat_dim is not None and lat_dim in field.dims
    if average:
        if lat_dim not in field.coords:
            raise EnsmlError(
                f"{func}: field has a '{lat_dim}' dim but no coordinate for the cos-latitude weights; "
                "assign latitudes in degrees north, or pass lat_dim=None"
            )
        lat = np.asarray(field[lat_dim].values, dtype=np.float64)
        if lat.ndim != 1 or not np.all(np.abs(lat) <= 90.0):
            raise EnsmlError(f"{func}: latitudes along '{lat_dim}' must be 1-D degrees within [-90, 90]")
    field = check_no_inf(field, func, "field")
    if field.chunks is not None:
        field = field.chunk({lon_dim: -1})
    n_wave = w // 2 + 1
    spec = xr.apply_ufunc(
        _row_spectrum,
        field,
        input_core_dims=[[lon_dim]],
        output_core_dims=[[WAVENUMBER]],
        dask="parallelized",
        output_dtypes=[np.float64],
        dask_gufunc_kwargs={"output_sizes": {WAVENUMBER: n_wave}},
    )
    order = [WAVENUMBER if d == lon_dim else d for d in field.dims]
    spec = spec.transpose(*order).assign_coords(
        {WAVENUMBER: (WAVENUMBER, np.arange(n_wave), {"long_name": "zonal wavenumber", "units": "1"})}
    )
    if average:
        weights = xr.DataArray(np.clip(np.cos(np.deg2rad(lat)), 0.0, None), dims=[lat_dim])
        weights = weights.assign_coords({lat_dim: spec[lat_dim]})
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            spec = spec.weighted(weights).mean(lat_dim, skipna=True)
    attrs = {"long_name": "zonal power spectrum" + (f" of {field.name}" if field.name is not None else "")}
    units = _power_units(field.attrs.get("units"))
    if units is not None:
        attrs["units"] = units
    return spec.rename("zonal_power_spectrum").assign_attrs(attrs)


def spectrum_ratio(
    members_spectrum: xr.DataArray,
    truth_spectrum: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
) -> xr.DataArray:
    r"""Per wavenumber, the members' mean spectrum over the truth's.

    .. math::
        R_k = \overline{\tfrac1M \textstyle\sum_m S^{(m)}_k} \,\big/\, \overline{S^{\mathrm{truth}}_k}

    with the bars means over the case dims reduced (by default all but ``wavenumber``: e.g.
    ``init_time``), over the cases where both are valid. A ratio of means, not a mean of ratios,
    so that a case with little power at some k does not dominate. :math:`R_k < 1` at high k:
    members smoother than the truth; :math:`R_k > 1`: too much small-scale variance. A wavenumber
    where the truth has no power (:math:`\overline{S^{\mathrm{truth}}_k}` at most 1e-24 of its
    sum over k, i.e. zero up to round-off: e.g. k = 0 of anomalies, or every k but one of a pure
    wave) gives NaN.

    Parameters
    ----------
    members_spectrum : xr.DataArray
        :func:`zonal_power_spectrum` of the members: the dims of ``truth_spectrum`` plus
        ``member_dim``. NaN members are left out of the member mean.
    truth_spectrum : xr.DataArray
        :func:`zonal_power_spectrum` of the truth (analysis, observation), with ``wavenumber``;
        coordinates are aligned with the members' (a partial overlap is an error).
    member_dim : str
        The member dim.
    reduce_dims, preserve_dims
        Case dims to average the spectra over before the ratio, or to keep (never
        ``wavenumber``); neither: all but ``wavenumber``.

    Returns
    -------
    xr.DataArray
        float64 ratio named ``spectrum_ratio`` (units 1) over ``wavenumber`` and the kept dims.
    """
    func = "spectrum_ratio"
    members, truth = check_fcst_obs(members_spectrum, truth_spectrum, func, member_dim)
    if WAVENUMBER not in truth.dims:
        raise EnsmlError(
            f"{func}: spectra must have a '{WAVENUMBER}' dim (from zonal_power_spectrum); "
            f"the truth has {', '.join(map(str, truth.dims)) or 'none'}"
        )
    case_dims = tuple(d for d in truth.dims if d != WAVENUMBER)
    for name, arg in (("reduce_dims", reduce_dims), ("preserve_dims", preserve_dims)):
        if arg is not None and WAVENUMBER in ([arg] if isinstance(arg, str) else list(arg)):
            raise EnsmlError(f"{func}: {name} must not name '{WAVENUMBER}': the ratio is per wavenumber")
    dims = resolve_reduce_dims(case_dims, reduce_dims, preserve_dims, func)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN slices give NaN
        mean = members.mean(member_dim, skipna=True)
        ok = mean.notnull() & truth.notnull()
        num = mean.where(ok).mean(dims, skipna=True)
        den = truth.where(ok).mean(dims, skipna=True)
    total = den.sum(WAVENUMBER, skipna=True)
    ratio = (num / den.where(den > _NO_POWER * total)).astype(np.float64)
    return ratio.rename("spectrum_ratio").assign_attrs(
        units="1", long_name="mean member power spectrum over the truth's"
    )


def mean_abs_log_ratio(ratio: xr.DataArray, *, min_wavenumber: int = 1) -> xr.DataArray:
    r"""One number for a :func:`spectrum_ratio`: :math:`\frac{1}{|K|} \sum_{k \in K} |\ln R_k|`.

    The mean over the wavenumbers :math:`K = \{k \ge k_{\min}\}` with a finite ratio (NaN ratios
    are left out; none finite gives NaN): 0 for members whose spectrum is the truth's, ln 2 =
    0.69 for members with half (or twice) the truth's power at every scale. The default
    :math:`k_{\min} = 1` leaves out the zonal mean (k = 0), a bias rather than structure. Members
    with no power where the truth has some (:math:`R_k = 0`) give +Inf. Dimensionless.

    Parameters
    ----------
    ratio : xr.DataArray
        The ratio, with a ``wavenumber`` dim and coordinate; other dims are kept.
    min_wavenumber : int
        The smallest wavenumber counted (≥ 0).
    """
    func = "mean_abs_log_ratio"
    require_dataarray(ratio, func, "ratio")
    if WAVENUMBER not in ratio.dims or WAVENUMBER not in ratio.coords:
        raise EnsmlError(f"{func}: ratio must have a '{WAVENUMBER}' dim and coordinate (from spectrum_ratio)")
    if (
        isinstance(min_wavenumber, bool)
        or not isinstance(min_wavenumber, (int, np.integer))
        or min_wavenumber < 0
    ):
        raise EnsmlError(f"{func}: min_wavenumber must be an integer >= 0, got {min_wavenumber!r}")
    if bool((ratio < 0).any()):
        raise EnsmlError(f"{func}: a ratio of power spectra cannot be negative")
    kept = ratio.where(ratio[WAVENUMBER] >= min_wavenumber, drop=True)
    if kept.sizes[WAVENUMBER] == 0:
        raise EnsmlError(
            f"{func}: no wavenumber >= {min_wavenumber} (largest {int(ratio[WAVENUMBER].max())})"
        )
    with np.errstate(divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        out = abs(np.log(kept)).mean(WAVENUMBER, skipna=True)
    return out.rename("mean_abs_log_ratio").assign_attrs(
        units="1", long_name=f"mean |ln spectrum ratio| over wavenumbers >= {min_wavenumber}"
    )
