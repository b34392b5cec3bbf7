"""How ensembles lie on disk: one reader per file format, and the layouts of several files.

A file's format is recognised by its content (:mod:`.formats`), never by its name, and read by
the reader registered for it in :data:`READERS`: netCDF (:mod:`.netcdf`), GRIB through cfgrib
(:mod:`.grib`, control and perturbed members merged by :mod:`.grib_merge`), zarr v2/v3
(:mod:`.zarr`) and anemoi datasets through anemoi-datasets (:mod:`.anemoi`, the ``ensml[anemoi]``
extra). Several files combine as members in separate files (:mod:`.members`) or files split by
date in any order (:mod:`.ens10`). :class:`~.options.ReaderOptions` (GRIB filters, the control
member, renames, anemoi's options) apply to every read. Readers return the source's own names; the caller
normalises them (:mod:`ensml.data.normalise`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import xarray as xr

from ensml.data.layouts import anemoi, grib, netcdf, zarr
from ensml.data.layouts.formats import Format, detect_format, unknown_format
from ensml.data.layouts.options import ReaderOptions
from ensml.errors import EnsmlError

Reader = Callable[[Path, str, "dict | str | None", ReaderOptions], xr.Dataset]

#: The reader of each format: ``reader(path, what, chunks, options) -> dataset``.
READERS: dict[Format, Reader] = {
    "netcdf3": netcdf.read,
    "hdf5": netcdf.read,
    "grib": grib.read,
    "zarr": zarr.read,
    "anemoi": anemoi.read,
}


def read_file(
    path: Path, what: str, chunks: dict | str | None, reader: ReaderOptions | None = None
) -> xr.Dataset:
    """One file (or zarr store) read by the reader of its format, the renames applied."""
    kind = detect_format(path)
    if kind is None:
        raise EnsmlError(f"{what} file {path} {unknown_format(path)}")
    options = reader or ReaderOptions()
    options.check_format(kind, path, what)
    return options.apply_rename(READERS[kind](path, what, chunks, options), path, what)


__all__ = ["READERS", "ReaderOptions", "read_file"]
