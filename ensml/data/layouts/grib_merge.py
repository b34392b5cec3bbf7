"""Merge the hypercubes of one GRIB file into one dataset (see :func:`ensml.data.layouts.grib.read_grib`).

cfgrib's ``open_datasets`` groups messages that cannot share one set of coordinates into
separate datasets: the control forecast (``dataType=cf``, a scalar ``number``) apart from the
perturbed members (``pf``, a ``number`` dimension), and each ``typeOfLevel`` apart. Here the
scalar coordinates that only mark a hypercube become dimensions again (``number``, ``time``,
``step``, ``isobaricInhPa``) or are dropped (single-level markers such as ``surface``,
``heightAboveGround``, ``meanSea``), and the datasets are merged on their coordinates.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError, exception_reason

#: Scalar coordinates made length-1 dimensions before merging; other scalar coordinates that are
#: not ``valid_time`` are level markers of single-level variables and are dropped.
EXPAND = ("number", "time", "step", "isobaricInhPa")
CONTROL = "cf"


def _data_type(ds: xr.Dataset) -> str | None:
    kinds = {da.attrs.get("GRIB_dataType") for da in ds.data_vars.values()}
    return kinds.pop() if len(kinds) == 1 else None


def without_control(parts: list[xr.Dataset], path: str | Path) -> list[xr.Dataset]:
    """``parts`` without the control forecast (a cf hypercube)."""
    kept = [ds for ds in parts if _data_type(ds) != CONTROL]
    if not kept:
        raise EnsmlError(f"GRIB file {path} holds only the control member; drop_control leaves nothing")
    return kept


def prepared(ds: xr.Dataset, expand: tuple[str, ...] = EXPAND) -> xr.Dataset:
    """``ds`` with the scalar coordinates ``expand`` made dimensions and level markers dropped."""
    for dim in expand:
        if dim in ds.coords and dim not in ds.dims:
            ds = ds.expand_dims(dim)
    markers = [c for c in ds.coords if ds[c].ndim == 0 and c not in (*EXPAND, "valid_time")]
    return ds.drop_vars(markers)


def _check_members(parts: list[xr.Dataset], path: str | Path) -> None:
    """Raise if one variable has the same member number in two hypercubes (a duplicated control)."""
    seen: dict[str, dict[int, str]] = {}
    for ds in parts:
        if "number" not in ds.dims:
            continue
        kind = _data_type(ds) or "?"
        for var in ds.data_vars:
            for n in np.atleast_1d(ds["number"].values).tolist():
                where = seen.setdefault(str(var), {})
                if n in where:
                    what = "the control member" if CONTROL in (kind, where[n]) else "a member"
                    raise EnsmlError(
                        f"GRIB file {path}: {what} number {n} of {var!r} appears twice (dataType "
                        f"{where[n]} and {kind}); remove the duplicate (e.g. grib_copy -w dataType=pf)"
                    )
                where[n] = kind


def merge_hypercubes(
    path: str | Path, backend_kwargs: dict, chunks: dict | str | None, drop_control: bool, hint: str
) -> xr.Dataset:
    """All hypercubes of ``path`` merged into one dataset; control first along ``number``."""
    import cfgrib

    try:
        parts = cfgrib.open_datasets(str(path), backend_kwargs=backend_kwargs, chunks=chunks, cache=False)
    except Exception as exc:  # eccodes/cfgrib errors
        raise EnsmlError(f"GRIB file {path} cannot be read ({exception_reason(exc)})") from None
    if drop_control:
        parts = without_control(parts, path)
    parts = [prepared(ds) for ds in parts]
    _check_members(parts, path)
    try:
        merged = xr.merge(parts, compat="no_conflicts", join="outer", combine_attrs="drop_conflicts")
    except Exception as exc:  # no_conflicts compares values: a damaged message's decoding error too
        raise EnsmlError(
            f"GRIB file {path}: its hypercubes do not merge ({exception_reason(exc)}); {hint}"
        ) from None
    return merged.sortby("number") if "number" in merged.dims else merged


__all__ = ["merge_hypercubes", "prepared", "without_control"]
