"""The model's surface height, and the lapse-rate correction of 2 m temperature to a station's height.

A model grid point's surface is at the model's (smoothed) orography, not at a station's
elevation: a valley station sits below it and is warmer. The standard correction moves the
model's 2 m temperature along a fixed lapse rate Γ to the station's height:

.. math::
    T_\\text{station} = T_\\text{model} + \\Gamma \\, (z_\\text{model} - z_\\text{station}),
    \\qquad \\Gamma = 0.0065\\ \\mathrm{K\\,m^{-1}}

(the ICAO standard atmosphere's tropospheric lapse rate), with heights in metres above mean sea
level. It applies to 2 m temperature only (:data:`T2M_NAMES`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid, single_field
from ensml.data.open import open_dataset
from ensml.errors import EnsmlError

#: Standard gravity (m s-2): geopotential / g = geopotential height.
GRAVITY = 9.80665
#: The default lapse rate Γ (K m-1).
STANDARD_LAPSE_RATE = 0.0065
#: The names of 2 m temperature, the one variable the correction applies to.
T2M_NAMES = ("t2m", "2t")
#: Names of a surface geopotential (m2 s-2) and of an orography (m) variable.
GEOPOTENTIAL = ("z", "geopotential", "surface_geopotential", "phis", "fis")
OROGRAPHY = ("orog", "orography", "oro", "h", "hgt", "zs", "surface_altitude", "elevation", "height")
GEOPOTENTIAL_UNITS = ("m2 s-2", "m**2 s**-2", "m^2 s^-2", "m2/s2", "m2 s**-2", "m**2 s-2")
METRE_UNITS = ("m", "metre", "metres", "meter", "meters", "gpm")
#: Surface heights (m) outside this range mean wrong units (e.g. a geopotential without them).
PLAUSIBLE_M = (-500.0, 9000.0)


def is_t2m(var: str) -> bool:
    """Whether ``var`` is 2 m temperature (the lapse-rate correction's one variable)."""
    return var.lower() in T2M_NAMES


def _pick(ds: xr.Dataset, name: str) -> tuple[str, bool]:
    """(variable, is a geopotential) of the model-height file."""
    found = [str(v) for v in ds.data_vars]
    std = {str(v): str(ds[v].attrs.get("standard_name", "")) for v in found}
    geo = [
        v for v in found if v.lower() in GEOPOTENTIAL or std[v] in ("geopotential", "surface_geopotential")
    ]
    oro = [
        v
        for v in found
        if v.lower() in OROGRAPHY or std[v] in ("surface_altitude", "height_above_mean_sea_level")
    ]
    if len(geo + oro) != 1:
        what = "has none of" if not geo + oro else "has more than one of"
        raise EnsmlError(
            f"{name} {what} a surface geopotential (z, m2 s-2) or an orography (orog, h, hgt; m) "
            f"(found: {', '.join(found) or 'none'})"
        )
    var = (geo + oro)[0]
    units = str(ds[var].attrs.get("units", "")).strip()
    if units in GEOPOTENTIAL_UNITS:
        return var, True
    if units in METRE_UNITS:
        return var, False
    return var, bool(geo)


def read_model_height(path: str, grid: xr.Dataset, what: str = "forecast") -> xr.DataArray:
    """The model's surface height (m above mean sea level) on ``grid``'s horizontal dims.

    ``path``: a file of the surface geopotential (``z`` or standard name ``geopotential``, m2
    s-2: divided by g = 9.80665 m s-2) or of the orography (``orog``, ``h``, ``hgt`` …, m), on
    the forecast's grid; dims of length 1 besides the grid's (a time, a member) are dropped.

    Raises
    ------
    EnsmlError
        The file cannot be read, holds no such variable (or several), is on another grid, has
        other dims longer than 1, or heights outside -500 … 9000 m (wrong units).
    """
    name = f"model height file {path}"
    ds = open_dataset(path, "model height")
    var, geopotential = _pick(ds, name)
    check_same_grid(grid, ds, what, name)
    h = single_field(ds[var], grid, name).astype(np.float64).load()
    h = h / GRAVITY if geopotential else h
    lo, hi = float(h.min()), float(h.max())
    if not (np.isfinite(lo) and np.isfinite(hi) and PLAUSIBLE_M[0] <= lo and hi <= PLAUSIBLE_M[1]):
        units = "m2 s-2, divided by g" if geopotential else "m"
        raise EnsmlError(
            f"{name}: {var!r} gives surface heights from {lo:g} to {hi:g} m ({units}), outside "
            f"{PLAUSIBLE_M[0]:g} … {PLAUSIBLE_M[1]:g} m: check its units"
        )
    return h.assign_attrs(units="m", long_name="model surface height")


def lapse_rate_correction(
    model: xr.DataArray, model_height: xr.DataArray, elevation: xr.DataArray, lapse_rate: float
) -> xr.DataArray:
    """2 m temperature moved to the stations' heights: ``model + lapse_rate * (model_height - elevation)``.

    ``model`` (..., station) in K; ``model_height``, ``elevation`` (station) in m; ``lapse_rate``
    in K m-1. The attrs of ``model`` are kept.
    """
    out = model + lapse_rate * (model_height - elevation)
    return out.assign_attrs(model.attrs)


def check_heights(variables: Sequence[str], elevation: np.ndarray | None, ids: np.ndarray, name: str) -> None:
    """Raise unless a height correction can apply: a 2 m temperature among ``variables`` and an
    elevation for every station (``name`` names the observations)."""
    if not any(is_t2m(v) for v in variables):
        raise EnsmlError(
            f"model_height corrects 2 m temperature only ({', '.join(T2M_NAMES)}); the variables "
            f"scored are {', '.join(variables)}"
        )
    if elevation is None:
        raise EnsmlError(f"model_height needs the stations' elevations: {name} has no elevation column")
    missing = np.flatnonzero(~np.isfinite(elevation))
    if missing.size:
        raise EnsmlError(
            f"model_height needs every station's elevation: {name} lacks it for {missing.size} "
            f"station(s), e.g. {str(ids[missing[0]])!r}"
        )


__all__ = [
    "GRAVITY",
    "STANDARD_LAPSE_RATE",
    "T2M_NAMES",
    "check_heights",
    "is_t2m",
    "lapse_rate_correction",
    "read_model_height",
]
