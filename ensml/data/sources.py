"""How an ensemble is laid out on disk, beyond one file: reader options, members in separate
files, and files split by date in any order (the ENS-10 layout).

- :class:`ReaderOptions`: GRIB message filters, dropping the control member, variable renames;
  settable in the data YAML (``reader:``) and passed to every open of the files.
- Members in separate files: a ``{member}`` placeholder in a path (``run/mem{member}/fc.nc``);
  every file matching it with an integer there is that member.
- Files split by date: ENS-10 keeps one GRIB file per calendar date holding that date of every
  year (20 years of reforecasts), so the files' init times interleave. They are concatenated
  along ``init_time`` and sorted (lazily); every file must then hold the same years.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import xarray as xr

from ensml.errors import EnsmlError, exception_reason
from ensml.names import FORECAST_DIMS, INIT_TIME, LATITUDE, LONGITUDE, MEMBER, TIME

MEMBER_FIELD = "{member}"


@dataclass(frozen=True)
class ReaderOptions:
    """How to read the files of one source (forecast or analysis).

    Parameters
    ----------
    filter_by_keys
        GRIB only: keep the messages with these key values (cfgrib's ``filter_by_keys``), e.g.
        ``{dataType: pf}``, ``{typeOfLevel: isobaricInhPa}``, ``{shortName: t}``.
    drop_control
        GRIB only: leave out the control forecast (``dataType=cf``), keeping the perturbed
        members.
    rename
        Variable renames applied on open, ``{name in the file: name in ensml}``, e.g.
        ``{2t: t2m}`` or ``{temperature: t}``.
    """

    filter_by_keys: dict[str, Any] = field(default_factory=dict)
    drop_control: bool = False
    rename: dict[str, str] = field(default_factory=dict)

    def apply_rename(self, ds: xr.Dataset, path: object, what: str) -> xr.Dataset:
        """``ds`` with the renames applied; a source name missing from ``ds`` is an error."""
        if not self.rename:
            return ds
        missing = [k for k in self.rename if k not in ds.variables]
        if missing:
            found = ", ".join(map(str, ds.data_vars)) or "none"
            raise EnsmlError(
                f"{what} file {path}: reader.rename names {missing[0]!r}, which it lacks (found: {found})"
            )
        return ds.rename(self.rename)


def as_reader(options: ReaderOptions | dict | None) -> ReaderOptions:
    """``options`` as :class:`ReaderOptions` (a mapping from YAML, or None for the defaults)."""
    if options is None:
        return ReaderOptions()
    if isinstance(options, ReaderOptions):
        return options
    try:
        return ReaderOptions(**dict(options))
    except TypeError as exc:
        raise EnsmlError(
            f"reader options must be filter_by_keys, drop_control, rename ({exception_reason(exc)})"
        ) from None


# -- members in separate files ------------------------------------------------------------------
def has_member_field(paths: Sequence[str | Path] | str | Path) -> bool:
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    return any(MEMBER_FIELD in str(p) for p in items)


def member_files(pattern: str, glob_paths: Callable[[str], list[Path]]) -> dict[int, list[Path]]:
    """``{member: files}`` of the files matching ``pattern`` with an integer at ``{member}``."""
    if pattern.count(MEMBER_FIELD) != 1:
        raise EnsmlError(f"forecast path {pattern!r} must hold {MEMBER_FIELD} once")
    head, tail = pattern.split(MEMBER_FIELD)
    regex = re.compile(_glob_regex(head) + r"(\d+)" + _glob_regex(tail) + r"$")
    out: dict[int, list[Path]] = {}
    for path in glob_paths(pattern.replace(MEMBER_FIELD, "*")):
        match = regex.search(str(path))
        if match:
            out.setdefault(int(match.group(1)), []).append(path)
    if not out:
        raise EnsmlError(f"no member files match {pattern!r} (an integer where {MEMBER_FIELD} is)")
    return dict(sorted(out.items()))


def _glob_regex(text: str) -> str:
    parts = re.split(r"(\*|\?)", text)
    return "".join({"*": r"[^/]*", "?": r"[^/]"}.get(p, re.escape(p)) for p in parts)


def stack_members(parts: dict[int, xr.Dataset], files: dict[int, list[Path]], what: str) -> xr.Dataset:
    """Member datasets concatenated along a new ``member`` dimension, after checking they agree."""
    from ensml.data.io import check_same_grid  # io opens through this module

    numbers = list(parts)
    first = parts[numbers[0]]
    for n, ds in parts.items():
        name = f"{what} member file {files[n][0]}"
        if MEMBER in ds.dims:
            raise EnsmlError(f"{name} already has a {MEMBER} dimension; one file should hold one member")
        if sorted(ds.data_vars) != sorted(first.data_vars):
            raise EnsmlError(
                f"{name} holds {', '.join(sorted(map(str, ds.data_vars)))} but member {numbers[0]} "
                f"holds {', '.join(sorted(map(str, first.data_vars)))}"
            )
        check_same_grid(ds, first, name, f"member {numbers[0]} ({files[numbers[0]][0]})")
        for dim in ds.dims:
            if (
                dim in first.dims
                and dim not in (LATITUDE, LONGITUDE)
                and not ds.indexes[dim].equals(first.indexes[dim])
            ):
                raise EnsmlError(f"{name}: its {dim} values differ from member {numbers[0]}'s")
    member = xr.DataArray(np.asarray(numbers, dtype=np.int64), dims=MEMBER)
    out = xr.concat([lazy(ds) for ds in parts.values()], dim=member, combine_attrs="drop_conflicts")
    order = [d for d in FORECAST_DIMS if d in out.dims]
    return out.transpose(*order, ...)


def lazy(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` as dask arrays of one time step per chunk, so combining files reads nothing.

    A file opened without dask (netCDF, GRIB) would be loaded whole by ``xr.concat``; one
    chunk per init (or valid) time makes a training sample read one chunk per variable.
    """
    if any(var.chunks for var in ds.data_vars.values()):
        return ds
    return ds.chunk({d: 1 for d in (INIT_TIME, TIME) if d in ds.dims})


# -- files split by date --------------------------------------------------------------------------
def combine_files(parts: list[xr.Dataset], paths: list[Path], what: str) -> xr.Dataset:
    """Normalised per-file datasets combined: by coordinates, else concatenated by init date.

    The second route serves files split by date in any order (ENS-10: one file per calendar
    date holding all years): files with the same variables are concatenated along
    ``init_time`` and sorted, then the variable groups (e.g. pressure-level and surface files)
    are merged.
    """
    parts = [lazy(ds) for ds in parts]
    try:
        return xr.combine_by_coords(parts, combine_attrs="drop_conflicts")
    except Exception as exc:
        first_error = exception_reason(exc)
    if not all(INIT_TIME in ds.dims for ds in parts):
        raise EnsmlError(f"{what} files {paths[0]} … {paths[-1]} do not combine ({first_error})")
    groups: dict[tuple[str, ...], list[int]] = {}
    for i, ds in enumerate(parts):
        groups.setdefault(tuple(sorted(map(str, ds.data_vars))), []).append(i)
    merged = []
    for members in groups.values():
        check_same_years([parts[i] for i in members], [paths[i] for i in members], what)
        try:
            cat = xr.concat([parts[i] for i in members], INIT_TIME, combine_attrs="drop_conflicts")
        except Exception as exc:
            raise EnsmlError(
                f"{what} files {paths[members[0]]} … {paths[members[-1]]} do not combine "
                f"({exception_reason(exc)})"
            ) from None
        merged.append(cat.sortby(INIT_TIME))
    try:
        return xr.merge(merged, join="exact", combine_attrs="drop_conflicts")
    except Exception as exc:
        raise EnsmlError(
            f"{what} files {paths[0]} … {paths[-1]} do not combine ({exception_reason(exc)})"
        ) from None


def check_same_years(parts: list[xr.Dataset], paths: list[Path], what: str) -> None:
    """ENS-10 layout: when every file holds one calendar date, every file holds the same years."""
    if len(parts) < 2:
        return
    stamps = [pd.DatetimeIndex(ds[INIT_TIME].values) for ds in parts]
    if any(len(set(zip(s.month, s.day, strict=True))) != 1 for s in stamps):
        return  # not one calendar date per file
    years = [set(s.year) for s in stamps]
    every = set().union(*years)
    for path, have, s in zip(paths, years, stamps, strict=True):
        lacking = sorted(every - have)
        if lacking:
            day = f"{lacking[0]}-{s.month[0]:02d}-{s.day[0]:02d}"
            raise EnsmlError(
                f"{what} file {path} lacks {len(lacking)} of the {len(every)} years the other files "
                f"hold, e.g. the init date {day} (each file of the ENS-10 layout holds one calendar "
                "date of every year)"
            )


__all__ = ["ReaderOptions", "as_reader", "combine_files", "member_files", "stack_members"]
