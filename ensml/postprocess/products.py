"""What a forecaster consumes, for one init time: a CF-described dataset of every product.

For every variable ``v`` of the checkpoints, dims (init_time, lead_time, [member | quantile |
threshold], level, latitude, longitude), float32, in the variable's units:

======================  ===============================================================
``v_mean``, ``v_std``   mixed: the calibrated Gaussian's mean and std; spread: the K-member
                        mean and the estimated M-member spread (std, ddof 0)
``v_quantile``          quantiles of N(mean, std²) at ``products.quantiles``
``v``                   calibrated members by ECC-Q (the raw forecast's dims and name, so
                        the products open as an ensemble, e.g. in ``ensml evaluate``)
``<key>_exceedance``    P(X > threshold) for each ``products.thresholds`` entry (units 1);
                        ``t850_exceedance`` has no level dim, ``t_exceedance`` has one
======================  ===============================================================
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from ensml.data.outputs import DEFAULT_COMPRESSION
from ensml.names import (
    COORD_ATTRS,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    QUANTILE,
    VALID_TIME,
    VARIABLE_ATTRS,
)
from ensml.postprocess.ecc import ecc_members, exceedance, gaussian_quantiles
from ensml.postprocess.options import Products, ThresholdSet
from ensml.predictions import RunMeta

# Times are stored as numbers of this unit, so every write (and append) encodes them alike.
TIME_UNITS = "minutes since 1970-01-01 00:00:00"
TIME_ENCODING = {"units": TIME_UNITS, "calendar": "proleptic_gregorian", "dtype": "int64"}
LEAD_ENCODING = {"units": "hours", "dtype": "int64"}


def _describe(var: str, what: str, *, keep_standard_name: bool, units: str | None = None) -> dict:
    attrs = dict(VARIABLE_ATTRS.get(var, {"long_name": var}))
    if not keep_standard_name:
        attrs.pop("standard_name", None)
    attrs["long_name"] = f"{attrs.get('long_name', var)}: {what}"
    if units is not None:
        attrs["units"] = units
    return attrs


def _without_levels(ds: xr.Dataset, surface: Sequence[str]) -> xr.Dataset:
    """``ds`` with the products of surface variables (``v``, ``v_*``) taken at one level."""
    for name in list(ds.data_vars):
        if LEVEL in ds[name].dims and any(name == v or str(name).startswith(f"{v}_") for v in surface):
            ds[name] = ds[name].isel({LEVEL: 0}, drop=True)
    return ds


def product_dataset(
    init: np.datetime64,
    meta: RunMeta,
    latitude: np.ndarray,
    longitude: np.ndarray,
    mean: np.ndarray,
    std: np.ndarray,
    raw: np.ndarray,
    products: Products,
    thresholds: Sequence[ThresholdSet],
) -> xr.Dataset:
    """The products of one init time, with the run's metadata in its attributes.

    Parameters
    ----------
    init
        The init time.
    meta
        The run (:class:`ensml.predictions.RunMeta`): task, k, variables, levels, surface
        variables (their products keep no level dimension) and leads.
    latitude, longitude
        The grid (H,) and (W,), degrees.
    mean, std
        (V, L, D, H, W): the predictive mean and std (mixed) or the K-member mean and the
        estimated M-member spread (spread), by variable and target lead, in physical units.
    raw
        (V, L, M, D, H, W): the raw members at the target leads, the ECC template.
    products, thresholds
        What to derive: quantiles, calibrated members, exceedance probabilities.
    """
    n = raw.shape[2] if products.members is None else products.members
    leads = np.asarray(meta.leads, dtype="timedelta64[ns]")
    inits = np.array([init], dtype="datetime64[ns]")
    coords = {
        INIT_TIME: inits,
        LEAD_TIME: leads,
        LEVEL: np.asarray(meta.levels, dtype=np.float64),
        LATITUDE: np.asarray(latitude, dtype=np.float64),
        LONGITUDE: np.asarray(longitude, dtype=np.float64),
        VALID_TIME: ((INIT_TIME, LEAD_TIME), inits[:, None] + leads[None, :]),
    }
    ds = xr.Dataset(coords=coords, attrs=meta.to_attrs())
    q = np.asarray(products.quantiles, dtype=np.float64)
    if q.size:
        ds = ds.assign_coords({QUANTILE: (QUANTILE, q, {"long_name": "probability level", "units": "1"})})
    if n:
        ds = ds.assign_coords({MEMBER: (MEMBER, np.arange(n, dtype=np.int32))})
    names = _names(meta, raw.shape[2])
    for i, var in enumerate(meta.variables):
        _variable_products(ds, var, mean[i], std[i], raw[i], q, n, products.ecc_spacing, names)
    for t in thresholds:
        i = list(meta.variables).index(t.variable)
        _exceedance(ds, t, mean[i], std[i], meta.levels, names["dist"])
    for name in ds.coords:
        ds[name].attrs.update(COORD_ATTRS.get(str(name), {}))
    if n:
        ds[MEMBER].attrs.update(standard_name="realization", long_name="calibrated member number")
    return _without_levels(ds, meta.surface)


def _names(meta: RunMeta, m: int) -> dict[str, str]:
    """What the centre, the width and the distribution are called in the long names."""
    if meta.is_spread:
        return {
            "centre": f"mean of the first {meta.k} members",
            "width": f"estimated {m}-member spread (std)",
            "dist": f"N(mean of {meta.k} members, estimated spread²)",
        }
    return {
        "centre": "predictive mean (calibrated Gaussian)",
        "width": "predictive std (calibrated Gaussian)",
        "dist": "the calibrated Gaussian",
    }


def _variable_products(
    ds: xr.Dataset,
    var: str,
    mu: np.ndarray,
    sd: np.ndarray,
    raw: np.ndarray,
    q: np.ndarray,
    n: int,
    spacing: str,
    names: dict[str, str],
) -> None:
    """Add ``var``'s mean, std, quantiles and ECC members (``mu``, ``sd`` (L, D, H, W)) to ``ds``."""
    field_dims = (INIT_TIME, LEAD_TIME, LEVEL, LATITUDE, LONGITUDE)
    ds[f"{var}_mean"] = (field_dims, mu[None], _describe(var, names["centre"], keep_standard_name=True))
    ds[f"{var}_std"] = (field_dims, sd[None], _describe(var, names["width"], keep_standard_name=False))
    dist = names["dist"]
    if q.size:
        values = gaussian_quantiles(mu, sd, q, axis=1)[None]
        attrs = _describe(var, f"quantile of {dist}", keep_standard_name=True)
        ds[f"{var}_quantile"] = ((INIT_TIME, LEAD_TIME, QUANTILE, *field_dims[2:]), values, attrs)
    if n:
        members = ecc_members(mu, sd, raw, n, spacing, axis=1)[None]
        attrs = _describe(var, f"calibrated member (ECC-Q of {dist})", keep_standard_name=True)
        attrs["ecc_spacing"] = spacing
        attrs["ecc_template"] = f"rank order of the {raw.shape[1]} raw members"
        ds[var] = ((INIT_TIME, LEAD_TIME, MEMBER, *field_dims[2:]), members, attrs)


def _exceedance(
    ds: xr.Dataset, t: ThresholdSet, mu: np.ndarray, sd: np.ndarray, levels: Sequence[float], dist: str
) -> None:
    """Add ``P(X > threshold)`` of one ``products.thresholds`` entry to ``ds``."""
    dim = f"{t.key}_threshold"
    ds.coords[dim] = (dim, np.asarray(t.values), _describe(t.variable, "threshold", keep_standard_name=True))
    where = "" if t.level is None else f" at {t.level:g} hPa"
    attrs = _describe(t.variable, f"probability of exceeding {dim}{where} ({dist})",
                      keep_standard_name=False, units="1")  # fmt: skip
    if t.level is None:
        values = exceedance(mu, sd, np.asarray(t.values), axis=1)[None]
        ds[f"{t.key}_exceedance"] = ((INIT_TIME, LEAD_TIME, dim, LEVEL, LATITUDE, LONGITUDE), values, attrs)
    else:
        j = [float(x) for x in levels].index(t.level)
        values = exceedance(mu[:, j], sd[:, j], np.asarray(t.values), axis=1)[None]
        attrs["level"], attrs["level_units"] = t.level, "hPa"
        ds[f"{t.key}_exceedance"] = ((INIT_TIME, LEAD_TIME, dim, LATITUDE, LONGITUDE), values, attrs)


def product_encoding(ds: xr.Dataset, zarr: bool = False) -> dict[str, dict]:
    """Per-variable encoding: one chunk per init, lead and member/quantile/threshold; float32."""
    enc: dict[str, dict] = {
        INIT_TIME: dict(TIME_ENCODING),
        VALID_TIME: dict(TIME_ENCODING),
        LEAD_TIME: dict(LEAD_ENCODING),
    }
    for name, var in ds.data_vars.items():
        chunks = tuple(1 if d not in (LEVEL, LATITUDE, LONGITUDE) else ds.sizes[d] for d in var.dims)
        if zarr:
            enc[str(name)] = {"chunks": chunks, "dtype": "float32"}
        else:
            enc[str(name)] = {**DEFAULT_COMPRESSION, "chunksizes": chunks, "dtype": "float32"}
    return enc
