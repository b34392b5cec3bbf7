"""Every opened dataset in ensml's vocabulary (:mod:`ensml.names`), whatever its source.

Readers (:mod:`ensml.data.layouts`) return datasets with their sources' names; :func:`normalise`
renames the dimensions, puts latitude north → south and longitude in [0, 360), makes
``lead_time`` a timedelta and attaches CF attributes. :func:`lazy` chunks a dataset one time step
a chunk, so combining files reads nothing.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.data.grid import add_geographic, cell_dim, grid_mapping_names
from ensml.errors import EnsmlError, exception_reason
from ensml.names import (
    COORD_ATTRS,
    DIM_ALIASES,
    FORECAST_DIMS,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LONGITUDE,
    MEMBER,
    TIME,
    VALID_TIME,
)
from ensml.times import truncated_hours


def normalised(ds: xr.Dataset, path: object, what: str) -> xr.Dataset:
    """:func:`normalise`, failing with one line that names the file (e.g. a corrupt coordinate);
    an analysis first gets its valid time as its time (:func:`valid_time_as_time`), a forecast of
    one step its lead (and init) time as dims (:func:`one_step_as_dims`)."""
    try:
        if what == "analysis":
            return normalise(valid_time_as_time(ds))
        return one_step_as_dims(normalise(ds)) if what == "forecast" else normalise(ds)
    except Exception as exc:  # decoding a damaged or odd coordinate raises many types: one line
        reason = exception_reason(exc)
        raise EnsmlError(f"{what} file {path} has coordinates ensml cannot interpret ({reason})") from None


def valid_time_as_time(ds: xr.Dataset) -> xr.Dataset:
    """An analysis verifies at its valid time: where its ``time`` is something else (the start of
    an accumulation: GRIB's ``time`` + ``step`` = ``valid_time``), ``time`` becomes the valid
    time, a dimension also when the file holds one time."""
    if "step" in ds.dims and ds.sizes["step"] == 1:  # cfgrib: an analysis is a step-0 (or one-step) field
        ds = ds.isel(step=0)
    if "valid_time" not in ds.coords or "valid_time" in ds.dims:
        return ds
    valid = ds["valid_time"]
    extra = [c for c in ("valid_time", "step", LEAD_TIME) if c in ds.coords and c not in ds.dims]
    if "time" in ds.dims and valid.dims == ("time",):
        if np.array_equal(valid.values, ds["time"].values):
            return ds.drop_vars(extra)
        return ds.drop_vars(extra).assign_coords(time=valid.values)
    if valid.ndim == 0 and ds.sizes.get("time") == 1:  # one time as a dim, its valid time a scalar
        return ds.drop_vars(extra).assign_coords(time=[valid.values])
    if valid.ndim == 0 and "time" not in ds.dims:
        scalar_time = ["time"] if "time" in ds.coords else []
        return ds.drop_vars(extra + scalar_time).expand_dims(time=[valid.values])
    return ds


def one_step_as_dims(ds: xr.Dataset) -> xr.Dataset:
    """A forecast of one lead time or one init time stored as scalar coordinates (a netCDF of one
    step, ``time`` for the initialisation) with those as dims of length 1, in ensml's order."""
    before = dict(ds.sizes)
    if LEAD_TIME in ds.coords and LEAD_TIME not in ds.dims:
        ds = ds.expand_dims(LEAD_TIME)
    if LEAD_TIME in ds.dims and INIT_TIME not in ds.dims and "time" in ds.dims:
        ds = ds.rename({"time": INIT_TIME})  # with a lead time, "time" is the initialisation
    elif (
        LEAD_TIME in ds.dims and INIT_TIME not in ds.dims and (INIT_TIME in ds.coords or "time" in ds.coords)
    ):
        ds = ds.rename({"time": INIT_TIME}) if INIT_TIME not in ds.coords else ds
        ds = ds.expand_dims(INIT_TIME)
    if dict(ds.sizes) == before:
        return ds
    if INIT_TIME in ds.dims:
        ds = ds.assign_coords({VALID_TIME: ds[INIT_TIME] + ds[LEAD_TIME]})
    order = [d for d in FORECAST_DIMS if d in ds.dims]
    return ds.transpose(*order, ...)


def one_run_as_ensemble(ds: xr.Dataset) -> xr.Dataset:
    """A forecast without members (one deterministic run; GRIB's ``number`` a scalar) as an
    ensemble of one member, its member dim first after the times; other forecasts as they are."""
    if MEMBER in ds.dims or LEAD_TIME not in ds.dims:
        return ds
    ds = ds.expand_dims(MEMBER) if MEMBER in ds.coords else ds.expand_dims({MEMBER: [0]})
    order = [d for d in FORECAST_DIMS if d in ds.dims]
    return ds.transpose(*order, ...)


def normalise(ds: xr.Dataset) -> xr.Dataset:
    """Rename dimensions to ensml's vocabulary and put coordinates in canonical order.

    Latitude is sorted north → south, longitude is mapped to [0, 360) and sorted, ``lead_time``
    becomes timedelta64 (integer steps are read as hours), and CF attributes are attached.
    Projected grids (:mod:`ensml.data.grid`) keep their dims and order: 2-D latitude/longitude
    (also when stored as data variables) and CF grid-mapping variables become coordinates,
    longitude is mapped to [0, 360), and a grid with only projection x/y and a grid mapping gets
    latitude/longitude computed (:func:`ensml.data.grid.add_geographic`).
    """
    renames = {k: v for k, v in DIM_ALIASES.items() if k in ds.variables and v not in ds.variables}
    if "time" in ds.dims and LEAD_TIME in {renames.get(d, d) for d in ds.dims} and INIT_TIME not in ds.dims:
        renames["time"] = INIT_TIME  # cfgrib forecasts: time = initialisation, step = lead
    if "valid_time" in ds.coords and "valid_time" not in ds.dims:
        ds = ds.drop_vars("valid_time")
    ds = ds.rename(renames)
    coords = grid_mapping_names(ds)  # scalar CF grid mappings: not variables to score
    coords += [n for n in (LATITUDE, LONGITUDE) if n in ds.data_vars and ds[n].ndim == 2]
    ds = add_geographic(ds.set_coords(coords) if coords else ds)
    if LEAD_TIME in ds.coords and not np.issubdtype(ds[LEAD_TIME].dtype, np.timedelta64):
        ds = ds.assign_coords({LEAD_TIME: truncated_hours(ds[LEAD_TIME].values)})
    if LONGITUDE in ds.coords and ds[LONGITUDE].ndim == 2:
        lon = ds[LONGITUDE]
        ds = ds.assign_coords({LONGITUDE: (lon.dims, lon.values % 360.0, lon.attrs)})
    elif LONGITUDE in ds.coords:
        lon = ds[LONGITUDE].values % 360.0
        cells = cell_dim(ds) is not None  # cells keep their order and their dim
        if not np.array_equal(lon, ds[LONGITUDE].values):
            new = (ds[LONGITUDE].dims, lon, ds[LONGITUDE].attrs) if cells else lon
            ds = ds.assign_coords({LONGITUDE: new})
        if not cells and np.any(np.diff(lon) < 0):
            ds = ds.sortby(LONGITUDE)
    if (
        LATITUDE in ds.coords
        and ds.sizes.get(LATITUDE, 1) > 1
        and ds[LATITUDE].values[0] < ds[LATITUDE].values[-1]
    ):
        ds = ds.isel({LATITUDE: slice(None, None, -1)})
    if INIT_TIME in ds.dims and LEAD_TIME in ds.dims and VALID_TIME not in ds.coords:
        ds = ds.assign_coords({VALID_TIME: ds[INIT_TIME] + ds[LEAD_TIME]})
    ds = precipitation_in_kg_m2(ds)
    for name, attrs in COORD_ATTRS.items():
        if name in ds.coords:
            ds[name].attrs.update(
                {
                    k: v
                    for k, v in attrs.items()
                    if (not np.issubdtype(ds[name].dtype, np.datetime64) or k != "units")
                    and (k != "axis" or ds[name].dims == (name,))  # CF: axis on dim coordinates only
                }
            )
    return ds


def precipitation_in_kg_m2(ds: xr.Dataset) -> xr.Dataset:
    """Precipitation as ensml holds it: ``kg m-2`` (mm of water), whatever the file's units.

    ECMWF's ``tp`` (and ``cp``, ``lsp``) are metres of water (``lwe_thickness_of_precipitation_amount``);
    they become ``kg m-2`` (× 1000, lazily) with the CF standard name ``precipitation_amount``, so
    that thresholds (``tp > 10`` mm) and units mean one thing everywhere.
    """
    for name in ds.data_vars:
        attrs = ds[name].attrs
        metres = attrs.get("units") == "m" and (
            name in ("tp", "cp", "lsp")
            or attrs.get("standard_name") == "lwe_thickness_of_precipitation_amount"
        )
        if metres:
            converted = ds[name] * 1000.0
            converted.attrs = {**attrs, "units": "kg m-2", "standard_name": "precipitation_amount"}
            ds = ds.assign({name: converted})
    return ds


def lazy(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` as dask arrays of one time step per chunk, so combining files reads nothing.

    A file opened without dask (netCDF, GRIB) would be loaded whole by ``xr.concat``. A chunk
    is one init (or valid) time at one lead, with every member, level and point, so reading a
    lead reads none of the others (``evaluate`` reads a lead at a time; a chunk of all of an
    init's leads would decompress every lead, scored or not, for each).
    """
    if any(var.chunks for var in ds.data_vars.values()):
        return ds
    return ds.chunk({d: 1 for d in (INIT_TIME, TIME, LEAD_TIME) if d in ds.dims})


__all__ = ["lazy", "normalise", "normalised", "one_run_as_ensemble", "one_step_as_dims", "valid_time_as_time"]
