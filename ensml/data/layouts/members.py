"""Members in separate files: a ``{member}`` placeholder in a path (``run/mem{member}/fc.nc``).

Every file matching the path with an integer where the placeholder is holds that member; the
members' datasets are checked to agree and stacked along ``member``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid
from ensml.data.normalise import lazy
from ensml.errors import EnsmlError
from ensml.names import FORECAST_DIMS, LATITUDE, LONGITUDE, MEMBER

MEMBER_FIELD = "{member}"


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


__all__ = ["MEMBER_FIELD", "has_member_field", "member_files", "stack_members"]
