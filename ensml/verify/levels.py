"""Pressure levels and surface variables in scores, tables and plots.

A surface variable (``t2m``, ``msl``) has no level dimension. Where scores are per level, it
counts as one level, ``None``; in tables its ``level_hPa`` is NaN (shown as "surface").
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import LEVEL


def levels_of(x: xr.DataArray, levels: Sequence[float]) -> list[float | None]:
    """The levels of ``x`` to report: ``[None]`` for a surface variable (no level dimension)."""
    return list(levels) if LEVEL in x.dims else [None]


def at(x: xr.DataArray, level: float | None) -> xr.DataArray:
    """``x`` at ``level``; a surface field (``None``) as it is."""
    return x if level is None else x.sel({LEVEL: level})


def at_levels(x: xr.DataArray, levels: Sequence[float]) -> xr.DataArray:
    """``x`` at ``levels``; a surface variable as it is."""
    return x.sel({LEVEL: list(levels)}) if LEVEL in x.dims else x


def per_level(x: xr.DataArray) -> list[str]:
    """The dims a score keeps apart: the level, where ``x`` has one."""
    return [LEVEL] if LEVEL in x.dims else []


def is_surface(level: float | None) -> bool:
    """True for the level of a surface variable: ``None``, or NaN in a table."""
    return level is None or bool(np.isnan(level))


def table_level(level: float | None) -> float:
    """The ``level_hPa`` of a table row: NaN for a surface variable."""
    return np.nan if level is None else float(level)


def field_name(variable: str, level: float | None) -> str:
    """A field as titles name it: ``"z500 hPa"``, or ``"t2m (surface)"``."""
    return f"{variable} (surface)" if is_surface(level) else f"{variable}{level:g} hPa"


def rows_of(df: pd.DataFrame, variable: str, level: float | None) -> pd.DataFrame:
    """The rows of ``df`` (columns ``variable``, ``level_hPa``) of one field; NaN matches surface."""
    lev = df["level_hPa"]
    match = lev.isna() if is_surface(level) else lev == level
    return df[(df["variable"] == variable) & match]


__all__ = [
    "at",
    "at_levels",
    "field_name",
    "is_surface",
    "levels_of",
    "per_level",
    "rows_of",
    "table_level",
]
