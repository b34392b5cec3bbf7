"""CF netCDF and zarr outputs, written through an output folder (or a worker's staging).

Every dataset ensml writes carries the same globals (``Conventions = "CF-1.8"``, ``source``,
``history``), numeric data variables are compressed losslessly unless the caller says
otherwise, and floating-point coordinates get no ``_FillValue`` (CF: a coordinate has no
missing values). zarr stores (v2 or v3) have every chunk written, also one equal to the fill
value, so that a missing chunk always means damage.

Post-processing's two incremental forms: a zarr store whose metadata for every init is created
first (:func:`create_zarr_store`) and whose regions are filled one init at a time
(:func:`write_zarr_region`); and a netCDF file under staging grown one init at a time along an
unlimited ``init_time`` (:func:`append_netcdf_init`), renamed into place when complete.
"""

from __future__ import annotations

import uuid
import warnings
from collections.abc import Mapping, Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import dask.array as da
import netCDF4
import numpy as np
import xarray as xr

from ensml import __version__
from ensml.data.outputs.staging import Writes
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, VALID_TIME

CONVENTIONS = "CF-1.8"
# Lossless compression for data variables unless the caller says otherwise. Level 1 is
# several times faster than the usual 4 and within a few percent of its size on model fields.
DEFAULT_COMPRESSION: dict[str, Any] = {"zlib": True, "complevel": 1, "shuffle": True}
_NETCDF_ONLY = ("zlib", "complevel", "shuffle")


def global_attrs(attrs: Mapping[str, Any], history: str | None = None) -> dict[str, Any]:
    """``attrs`` with the CF globals every ensml output carries.

    ``Conventions = "CF-1.8"``, ``source`` (kept if given, else ``"ensml <version>"``) and a
    ``history`` line ``"<UTC ISO time> ensml <version>: <history>"`` put in front of any
    existing history (newest first, as NCO does). Booleans and None become text (netCDF
    attributes cannot hold them).
    """
    out = dict(attrs)
    stamp = datetime.now(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
    line = f"{stamp} ensml {__version__}: {history or 'written'}"
    out["history"] = f"{line}\n{out['history']}" if out.get("history") else line
    out["Conventions"] = CONVENTIONS
    out.setdefault("source", f"ensml {__version__}")
    return {k: (str(v) if isinstance(v, bool | type(None)) else v) for k, v in out.items()}


def netcdf_encoding(ds: xr.Dataset, encoding: Mapping[str, Mapping[str, Any]]) -> dict[str, dict]:
    """Per-variable netCDF encoding: ``encoding`` merged over compression for numeric data
    variables and no ``_FillValue`` on floating-point coordinates. ``shards`` (zarr v3's) is
    dropped.

    Raises
    ------
    EnsmlError
        When ``encoding`` names variables that ``ds`` lacks.
    """
    unknown = sorted(set(encoding) - {str(n) for n in ds.variables})
    if unknown:
        raise EnsmlError(f"netCDF encoding names variables not in the dataset: {', '.join(unknown)}")
    out: dict[str, dict] = {}
    for name, var in ds.variables.items():
        enc: dict[str, Any] = {}
        if name in ds.data_vars and var.dtype.kind in "iufb" and var.ndim > 0:
            enc.update(DEFAULT_COMPRESSION)
        if name in ds.coords and var.dtype.kind == "f" and "_FillValue" not in var.encoding:
            enc["_FillValue"] = None  # CF: coordinate variables must not have missing values
        enc.update(encoding.get(str(name), {}))
        enc.pop("shards", None)
        if enc:
            out[str(name)] = enc
    return out


def zarr_encoding(encoding: Mapping[str, Mapping[str, Any]], zarr_format: int = 3) -> dict[str, dict]:
    """netCDF-style ``encoding`` for zarr: ``chunksizes`` → ``chunks``, netCDF-only keys (``zlib``,
    ``complevel``, ``shuffle``) dropped (zarr's default compressor is used), ``shards`` only in v3.
    """
    if zarr_format not in (2, 3):
        raise EnsmlError(f"zarr_format must be 2 or 3, got {zarr_format!r}")
    out: dict[str, dict] = {}
    for name, enc in encoding.items():
        e = {k: v for k, v in enc.items() if k not in _NETCDF_ONLY}
        if "chunksizes" in e:
            e["chunks"] = e.pop("chunksizes")
        if zarr_format == 2:
            e.pop("shards", None)
        out[str(name)] = e
    return out


def _with_globals(ds: xr.Dataset, history: str | None) -> xr.Dataset:
    out = ds.copy(deep=False)
    out.attrs = global_attrs(ds.attrs, history)
    return out


def write_netcdf(
    target: Writes,
    ds: xr.Dataset,
    name: str,
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    history: str | None = None,
    unlimited_dims: Sequence[str] = (),
) -> Path:
    """Write ``ds`` as CF netCDF4 to output ``name`` of ``target``, whole or not at all.

    Parameters
    ----------
    target
        An :class:`~ensml.data.outputs.OutputFolder` or a worker's
        :class:`~ensml.data.outputs.Staging`.
    ds
        The dataset; not modified (the globals of :func:`global_attrs` go on a shallow copy).
    name
        The output's name relative to the folder, e.g. ``"scores.nc"``.
    encoding
        Per-variable encoding as for :meth:`xarray.Dataset.to_netcdf`, merged over the
        defaults of :func:`netcdf_encoding`.
    history
        What produced the file (for example the command line); default ``"written"``.
    unlimited_dims
        Dimensions to make unlimited.

    Returns
    -------
    Path
        The final path.

    Raises
    ------
    EnsmlError
        ``encoding`` names variables ``ds`` lacks; the name may not be written; or the write
        failed (one line naming the final path: no space left on device, …), leaving the
        previous file as it was.
    """
    enc = netcdf_encoding(ds, encoding or {})
    out = _with_globals(ds, history)
    with target.write(name) as tmp:
        out.to_netcdf(
            tmp, engine="netcdf4", format="NETCDF4", encoding=enc, unlimited_dims=list(unlimited_dims)
        )
    return target.final(name)


def write_zarr(
    target: Writes,
    ds: xr.Dataset,
    name: str,
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
    *,
    zarr_format: int = 3,
    history: str | None = None,
) -> Path:
    """Write ``ds`` as a zarr store (v2 or v3) to output ``name`` of ``target``, whole or not at all.

    ``encoding`` is netCDF-style (:func:`zarr_encoding`). A v2 store has consolidated metadata
    (v3 has none in its specification). Every chunk is written. A previous store of the same
    name is replaced only once the new one is complete. Returns the final path.

    Raises
    ------
    EnsmlError
        As for :func:`write_netcdf`; ``zarr_format`` not 2 or 3.
    """
    enc = zarr_encoding(encoding or {}, zarr_format)
    out = _with_globals(ds, history)
    for var in out.variables:  # netCDF chunking left over from a source file is not zarr's
        out[var].encoding = {}
    with target.write(name) as tmp:
        out.to_zarr(
            tmp,
            mode="w",
            encoding=enc,
            zarr_format=zarr_format,
            consolidated=zarr_format == 2,
            write_empty_chunks=True,
        )
    return target.final(name)


def zarr_template(
    template: xr.Dataset,
    inits: np.ndarray,
    chunks: Mapping[str, Sequence[int]],
    attrs: Mapping[str, Any],
    history: str | None,
) -> xr.Dataset:
    """A whole store's dataset, lazily (dask zeros), from one init's dataset ``template``.

    Data variables with ``init_time`` (their first dimension) are stretched to ``inits`` with
    dask chunks ``chunks[name]``; ``valid_time`` is recomputed for every init and lead.
    """
    inits = np.asarray(inits, dtype="datetime64[ns]")
    coords: dict[str, Any] = {n: c for n, c in template.coords.items() if INIT_TIME not in c.dims}
    coords[INIT_TIME] = (INIT_TIME, inits, template[INIT_TIME].attrs)
    if VALID_TIME in template.coords:
        leads = template[LEAD_TIME].values
        coords[VALID_TIME] = (
            (INIT_TIME, LEAD_TIME),
            inits[:, None] + leads[None, :],
            template[VALID_TIME].attrs,
        )
    data = {}
    for name, var in template.data_vars.items():
        if var.dims[:1] != (INIT_TIME,):
            raise EnsmlError(f"zarr store template: variable {name} does not start with {INIT_TIME}")
        lazy = da.zeros((inits.size, *var.shape[1:]), dtype=var.dtype, chunks=tuple(chunks[str(name)]))
        data[name] = (var.dims, lazy, var.attrs)
    return xr.Dataset(data, coords=coords, attrs=global_attrs(attrs, history))


def create_zarr_store(
    target: Writes,
    name: str,
    template: xr.Dataset,
    inits: np.ndarray,
    encoding: Mapping[str, Mapping[str, Any]],
    attrs: Mapping[str, Any],
    history: str | None = None,
) -> str:
    """Create zarr store ``name`` with the metadata and coordinates for every init (no data).

    Regions are then written one init at a time (:func:`write_zarr_region`), by workers too;
    reserve the store (kind ``dir``) in the run before they start. Every data variable's
    ``encoding`` must give its ``chunks``, one init per chunk so that no two regions share one.

    Returns
    -------
    str
        The store's new id (attribute ``ensml_store_id``): records of regions written into an
        earlier store of the same name never count for this one.
    """
    store_id = uuid.uuid4().hex[:16]
    chunks = {str(n): encoding[str(n)]["chunks"] for n in template.data_vars}
    full = zarr_template(template, inits, chunks, {**attrs, "ensml_store_id": store_id}, history)
    with target.write(name) as tmp, warnings.catch_warnings():
        # Consolidated metadata, as before: plain xr.open_zarr warns on a v3 store without it.
        warnings.filterwarnings("ignore", message="Consolidated metadata is currently not part")
        full.to_zarr(tmp, mode="w", compute=False, encoding=dict(encoding))
    return store_id


def write_zarr_region(store: Path, ds: xr.Dataset, index: int) -> None:
    """Write one init's data variables into region ``index`` (along ``init_time``) of ``store``.

    In place: regions never share a chunk, so workers write different inits at once. A region
    whose write was interrupted is rewritten by the next run (post-processing's manifest says
    which are complete).
    """
    drop = [n for n in ds.variables if INIT_TIME not in ds[n].dims or n in (INIT_TIME, VALID_TIME)]
    ds.drop_vars(drop).to_zarr(store, region={INIT_TIME: slice(index, index + 1)}, mode="r+")


def _encode(var: netCDF4.Variable, values: np.ndarray) -> np.ndarray:
    """``values`` as stored in ``var``: datetimes in its units and calendar, else its dtype."""
    if np.issubdtype(values.dtype, np.datetime64):
        dates = values.astype("datetime64[us]").astype(object)
        nums = np.asarray(netCDF4.date2num(dates, var.units, getattr(var, "calendar", "standard")))
        return np.rint(nums).astype(var.dtype) if var.dtype.kind in "iu" else nums.astype(var.dtype)
    return values.astype(var.dtype, copy=False)


def append_netcdf_init(
    path: Path,
    ds: xr.Dataset,
    index: int,
    attrs: Mapping[str, Any],
    history: str | None,
    encoding: Mapping[str, Mapping[str, Any]] | None = None,
) -> None:
    """Write init ``index`` of a netCDF file that grows one init at a time along ``init_time``.

    ``index`` 0 creates the file (``init_time`` unlimited, the globals of :func:`global_attrs`,
    ``encoding`` as for :func:`write_netcdf`); later ones append. ``path`` is a temporary from
    ``write(name)`` of an output folder or a worker's staging, so memory holds one init however
    many the input has, and the file appears only when complete.

    Raises
    ------
    EnsmlError
        A variable with ``init_time`` does not have it first; ``index`` is not the next init.
    """
    for name, var in ds.variables.items():
        if INIT_TIME in var.dims and var.dims[0] != INIT_TIME:
            raise EnsmlError(f"cannot append to {path}: variable {name} does not start with {INIT_TIME}")
    if index == 0:
        out = ds.copy(deep=False)
        out.attrs = global_attrs(attrs, history)
        out.to_netcdf(
            path,
            engine="netcdf4",
            format="NETCDF4",
            unlimited_dims=[INIT_TIME],
            encoding=netcdf_encoding(ds, encoding or {}),
        )
        return
    with netCDF4.Dataset(path, "a") as nc:
        if len(nc.dimensions[INIT_TIME]) != index:
            raise EnsmlError(
                f"cannot append init {index} to {path}: it holds {len(nc.dimensions[INIT_TIME])}"
            )
        for name, var in ds.variables.items():
            if INIT_TIME in var.dims:
                target = nc.variables[str(name)]
                target[index : index + var.shape[0]] = _encode(target, var.values)


__all__ = [
    "CONVENTIONS",
    "DEFAULT_COMPRESSION",
    "append_netcdf_init",
    "create_zarr_store",
    "global_attrs",
    "netcdf_encoding",
    "write_netcdf",
    "write_zarr",
    "write_zarr_region",
    "zarr_encoding",
    "zarr_template",
]
