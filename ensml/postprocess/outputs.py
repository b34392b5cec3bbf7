"""Where products go: one netCDF file per input (appended init by init), or regions of one zarr store.

netCDF: the file is written under a temporary name (:func:`ensml.data.writers.atomic_path`),
one init time after another along the unlimited ``init_time`` dimension, so memory holds one
init's products however many inits the input has, and renamed only when complete.

zarr: the client creates the store's metadata for every init of the run first (no data); each
work unit then writes its init's region. Chunks never span two inits, so units never write
the same chunk; a region whose write was interrupted is rewritten by the next run (the manifest
says which regions are complete).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import dask.array as da
import netCDF4
import numpy as np
import xarray as xr

from ensml.data.writers import atomic_path, global_attrs
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, VALID_TIME
from ensml.postprocess.products import TIME_UNITS, product_encoding

_EPOCH = np.datetime64("1970-01-01T00:00", "m")


def _encode(name: str, values: np.ndarray) -> np.ndarray:
    if np.issubdtype(values.dtype, np.datetime64):  # as TIME_UNITS: minutes since 1970
        return (values.astype("datetime64[m]") - _EPOCH).astype(np.int64)
    return values.astype(np.float32, copy=False)


def write_netcdf_init(path: Path, ds: xr.Dataset, index: int, attrs: dict[str, Any], history: str) -> None:
    """Write init ``index`` of an output: create the file at 0, append along ``init_time`` after."""
    if index == 0:
        out = ds.copy(deep=False)
        out.attrs = global_attrs({**attrs, **ds.attrs}, history)
        out.to_netcdf(path, engine="netcdf4", format="NETCDF4", unlimited_dims=[INIT_TIME],
                      encoding=product_encoding(ds))  # fmt: skip
        return
    with netCDF4.Dataset(path, "a") as nc:
        if nc.variables[INIT_TIME].units != TIME_UNITS:  # pragma: no cover - we wrote it
            raise EnsmlError(f"{path}: unexpected time units {nc.variables[INIT_TIME].units}")
        for name, var in ds.variables.items():
            if INIT_TIME in var.dims:
                nc.variables[str(name)][index : index + 1] = _encode(str(name), var.values)


def zarr_template(template: xr.Dataset, inits: np.ndarray, attrs: dict[str, Any], history: str) -> xr.Dataset:
    """The whole store's dataset, lazily (dask zeros), from one init's products."""
    inits = np.asarray(inits, dtype="datetime64[ns]")
    n = inits.size
    coords = {name: c for name, c in template.coords.items() if INIT_TIME not in c.dims}
    coords[INIT_TIME] = (INIT_TIME, inits, template[INIT_TIME].attrs)
    leads = template[LEAD_TIME].values
    coords[VALID_TIME] = ((INIT_TIME, LEAD_TIME), inits[:, None] + leads[None, :], template[VALID_TIME].attrs)
    data = {}
    enc = product_encoding(template, zarr=True)
    for name, var in template.data_vars.items():
        shape = (n, *var.shape[1:])
        lazy = da.zeros(shape, dtype=np.float32, chunks=enc[str(name)]["chunks"])
        data[name] = (var.dims, lazy, var.attrs)
    return xr.Dataset(data, coords=coords, attrs=global_attrs({**attrs, **template.attrs}, history))


def create_zarr_store(store: Path, template: xr.Dataset, inits: np.ndarray, attrs: dict, history: str) -> str:
    """Write the metadata and coordinates of ``store`` for ``inits`` (no data), atomically.

    Returns the store's new id (attribute ``ensml_store_id``): records of regions written into
    an earlier store of the same name never count for this one.
    """
    store_id = uuid.uuid4().hex[:16]
    full = zarr_template(template, inits, {**attrs, "ensml_store_id": store_id}, history)
    try:
        with atomic_path(store) as tmp:
            full.to_zarr(tmp, mode="w", compute=False, encoding=product_encoding(template, zarr=True))
    except OSError as err:
        raise EnsmlError(f"cannot create zarr store {store}: {err}") from err
    return store_id


def write_zarr_region(store: Path, ds: xr.Dataset, index: int) -> None:
    """Write one init's data variables into region ``index`` of an existing store."""
    data = ds.drop_vars(
        [n for n in ds.variables if INIT_TIME not in ds[n].dims or n in (INIT_TIME, VALID_TIME)]
    )
    data.to_zarr(store, region={INIT_TIME: slice(index, index + 1)}, mode="r+")


def zarr_store_id(store: Path, inits: np.ndarray, names: Sequence[str]) -> str | None:
    """The id of ``store`` if it exists with exactly these inits and data variables, else None."""
    if not store.is_dir():
        return None
    try:
        with xr.open_zarr(store) as ds:
            same = np.array_equal(ds[INIT_TIME].values, np.asarray(inits, dtype="datetime64[ns]"))
            if same and sorted(map(str, ds.data_vars)) == sorted(names):
                return ds.attrs.get("ensml_store_id")
    except Exception:  # unreadable or half-created: rebuild it
        return None
    return None


def data_sha256(ds: xr.Dataset) -> str:
    """Hex SHA-256 of the data variables' float32 bytes (name order): a zarr region's checksum."""
    digest = hashlib.sha256()
    for name in sorted(map(str, ds.data_vars)):
        digest.update(name.encode())
        digest.update(np.ascontiguousarray(ds[name].values, dtype=np.float32).tobytes())
    return digest.hexdigest()
