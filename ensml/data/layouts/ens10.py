"""Files split by date in any order (the ENS-10 layout), combined into one dataset.

ENS-10 keeps one GRIB file per calendar date holding that date of every year (20 years of
reforecasts), so the files' init times interleave. They are concatenated along ``init_time``
and sorted (lazily); every file must then hold the same years.
"""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import xarray as xr

from ensml.data.normalise import lazy
from ensml.errors import EnsmlError, exception_reason
from ensml.names import INIT_TIME


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
    except Exception as exc:  # lazy parts: comparing them may decode damaged data too
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
        except Exception as exc:  # lazy parts, as above
            raise EnsmlError(
                f"{what} files {paths[members[0]]} … {paths[members[-1]]} do not combine "
                f"({exception_reason(exc)})"
            ) from None
        merged.append(cat.sortby(INIT_TIME))
    try:
        return xr.merge(merged, join="exact", combine_attrs="drop_conflicts")
    except Exception as exc:  # lazy parts, as above
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


__all__ = ["check_same_years", "combine_files"]
