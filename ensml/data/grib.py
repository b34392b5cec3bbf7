"""Read GRIB ensembles with cfgrib into ensml's vocabulary.

cfgrib names members ``number``, initialisation ``time``, lead ``step`` and levels
``isobaricInhPa``; :func:`ensml.data.io.normalise` renames them. A file with a single step (an
analysis ensemble such as the ERA5 EDA, or one forecast step) carries ``step`` as a scalar: it is
made a length-1 ``lead_time`` dimension so that such files open as forecasts with one lead time,
``time`` becoming ``init_time``; a single-time file's scalar ``time`` likewise becomes a length-1
``init_time`` (and ``valid_time`` is derived as for every forecast). Index files are never
written (``indexpath=""``), so read-only data stays untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import xarray as xr

from ensml.errors import EnsmlError, exception_reason
from ensml.names import FORECAST_DIMS


def read_grib(path: str | Path, chunks: dict | None = None, filter_by_keys: dict | None = None) -> xr.Dataset:
    """Open one GRIB file with cfgrib, cfgrib's names kept, ``step`` made a dimension.

    Raises
    ------
    EnsmlError
        If the file is missing or cfgrib cannot read it (e.g. several hypercubes: pass
        ``filter_by_keys``).
    """
    path = Path(path)
    if not path.is_file():
        raise EnsmlError(f"GRIB file {path} does not exist")
    kwargs = {"indexpath": ""}
    if filter_by_keys:
        kwargs["filter_by_keys"] = dict(filter_by_keys)
    try:
        ds = xr.open_dataset(path, engine="cfgrib", backend_kwargs=kwargs, chunks=chunks, cache=False)
    except Exception as exc:  # cfgrib raises DatasetBuildError, ValueError, eccodes errors ...
        raise EnsmlError(f"GRIB file {path} cannot be read ({_one_line(exc)})") from None
    for dim in ("step", "time"):  # a single-step or single-time file: a length-1 dimension
        if dim in ds.coords and dim not in ds.dims:
            ds = ds.expand_dims(dim)
    cfgrib_order = ("time", "step", "number", "isobaricInhPa", "latitude", "longitude")
    return ds.transpose(*[d for d in cfgrib_order if d in ds.dims], ...)


def _one_line(exc: Exception) -> str:
    """cfgrib's message on one line, whole (its hypercube hint lists the filters to use)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if lines and lines[0].startswith("multiple values for unique key") and len(lines) > 1:
        options = ", ".join(line.removeprefix("filter_by_keys=") for line in lines[1:])
        return f"it holds several hypercubes; select one with filter_by_keys, e.g. {options}"
    return "; ".join(lines) or exception_reason(exc)


def open_grib(
    path: str | Path, variables: Sequence[str] | None = None, chunks: dict | None = None
) -> xr.Dataset:
    """Open a GRIB ensemble normalised to ensml's names, dims in forecast order where present."""
    from ensml.data.io import normalise

    ds = normalise(read_grib(path, chunks))
    if variables:
        missing = [v for v in variables if v not in ds.data_vars]
        if missing:
            found = ", ".join(map(str, ds.data_vars))
            raise EnsmlError(f"GRIB file {path} has no variable {missing[0]!r} (found: {found})")
        ds = ds[list(variables)]
    order = [d for d in FORECAST_DIMS if d in ds.dims]
    return ds.transpose(*order, ...)


__all__ = ["open_grib", "read_grib"]
