"""Surface (single-level) variables beside pressure-level ones.

A surface variable (``t2m``, ``msl``, ``tp`` …) has every dimension of its file but ``level``.
ensml's networks see a sample as V variables × D pressure levels (level is the third
convolution axis, as in the research, which stacked variables as channels), so a surface
variable enters as one more channel that is **constant along the level axis**: it is read once
and repeated over the D levels of the sample. The tasks tie the network's outputs for such a
channel across levels (their level mean), so a prediction of ``t2m`` is one field, written
without a level dimension (:mod:`ensml.train.writer`, :mod:`ensml.postprocess`). In the loss a
surface variable weighs as much as one pressure-level variable over all its levels.

Repeating costs D-fold memory for that channel in a sample (D is small: 2 to 13 levels) and
no disk reads: files are read once per variable, and lazily broadcast arrays are views.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import LEVEL


def is_surface(da: xr.DataArray) -> bool:
    """Whether ``da`` is a single-level field (it has no ``level`` dimension)."""
    return LEVEL not in da.dims


def surface_variables(ds: xr.Dataset, variables: Sequence[str]) -> list[str]:
    """The ``variables`` of ``ds`` that have no level dimension, in the given order."""
    return [v for v in variables if is_surface(ds[v])]


def surface_mask(ds: xr.Dataset, variables: Sequence[str]) -> np.ndarray:
    """(V,) float32: 1 for a surface variable, 0 for a pressure-level one."""
    return np.array([float(is_surface(ds[v])) for v in variables], dtype=np.float32)


def broadcast_levels(ds: xr.Dataset) -> xr.Dataset:
    """``ds`` with every surface variable repeated along ``ds``'s levels (lazily for dask arrays).

    Pressure-level variables are untouched; ``level`` is placed where pressure-level variables
    have it (before the horizontal dimensions).
    """
    surface = [v for v in ds.data_vars if is_surface(ds[v])]
    if not surface:
        return ds
    if LEVEL not in ds.coords or ds[LEVEL].size == 0:
        raise EnsmlError(
            f"surface variable(s) {', '.join(map(str, surface))} need at least one pressure-level "
            "variable beside them: ensml stacks variables over pressure levels"
        )
    levels = np.atleast_1d(ds[LEVEL].values)
    out = ds.copy()
    for var in surface:
        da = ds[var]
        out[var] = da.expand_dims({LEVEL: levels}, axis=_level_axis(da.dims)).assign_coords(
            {LEVEL: ds[LEVEL]}
        )
    return out


def _level_axis(dims: Sequence[str]) -> int:
    """Where ``level`` goes in a surface variable's dims: before latitude/longitude (or y/x)."""
    return max(0, len(dims) - 2)


def read_levels(values: np.ndarray, n_levels: int, level_axis: int) -> np.ndarray:
    """A surface field read without levels, repeated ``n_levels`` times at ``level_axis``."""
    return np.repeat(np.expand_dims(values, level_axis), n_levels, axis=level_axis)


def check_not_at_level(da: xr.DataArray, level: float | None, name: str) -> None:
    """Raise if a surface variable is asked for at a pressure level (one-line error naming ``name``)."""
    if level is not None and is_surface(da):
        raise EnsmlError(
            f"{name}: variable {da.name!r} is a surface (single-level) variable and has no "
            f"level {level:g} hPa; leave the level out for it"
        )


def check_same_surface(
    a: xr.Dataset, b: xr.Dataset, variables: Sequence[str], name_a: str, name_b: str
) -> None:
    """Raise if a variable is a surface variable in one dataset and has levels in the other."""
    for var in variables:
        if var in a.data_vars and var in b.data_vars and is_surface(a[var]) != is_surface(b[var]):
            flat, other = (name_a, name_b) if is_surface(a[var]) else (name_b, name_a)
            raise EnsmlError(
                f"variable {var!r} has no level dimension in {flat} (a surface variable) but has "
                f"levels in {other}; use the same kind of field in both"
            )


__all__ = [
    "broadcast_levels",
    "check_not_at_level",
    "check_same_surface",
    "is_surface",
    "read_levels",
    "surface_mask",
    "surface_variables",
]
