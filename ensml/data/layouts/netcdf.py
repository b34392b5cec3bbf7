"""netCDF files (classic and netCDF-4/HDF5), opened lazily with xarray's netCDF4 engine."""

from __future__ import annotations

from pathlib import Path

import xarray as xr

from ensml.data.layouts.guarded import GuardedBackend
from ensml.data.layouts.options import ReaderOptions
from ensml.errors import EnsmlError, exception_reason


def open_with_xarray(path: Path, what: str, chunks: dict | str | None, engine: str) -> xr.Dataset:
    """``xr.open_dataset`` of ``path``; any reader failure becomes one line naming the file.

    A zarr store is read through :class:`~ensml.data.layouts.guarded.GuardedBackend`: a chunk
    that cannot be decoded, whenever it is read, is one line naming the store and the variable.
    """
    try:
        if engine == "zarr":
            guard = {"engine": GuardedBackend, "inner_engine": engine, "what": what}
            return xr.open_dataset(path, chunks=chunks, cache=False, **guard)
        return xr.open_dataset(path, engine=engine, chunks=chunks, cache=False)
    except Exception as exc:  # netCDF4/HDF5/zarr raise OSError, ValueError, RuntimeError ...
        raise EnsmlError(f"{what} file {path} cannot be read ({exception_reason(exc)})") from None


def read(path: Path, what: str, chunks: dict | str | None, options: ReaderOptions) -> xr.Dataset:
    """A netCDF file, lazily (``options`` are GRIB's and the renames, applied by the caller)."""
    return open_with_xarray(path, what, chunks, "netcdf4")


__all__ = ["open_with_xarray", "read"]
