"""Members in separate files: a ``{member}`` placeholder in a path (``run/mem{member}/fc.nc``).

Every file matching the path holds the member named by what stands where the placeholder is: an
integer (``mem03`` → 3) or any name without a slash (``arw-fer-gep1``, ``pf03``, ``mem_a``). The
``member`` coordinate holds the integers when every name is one, else the names, in natural order
(``pf2`` before ``pf10``). The members' datasets are checked to agree and stacked along ``member``.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid, horizontal_dims
from ensml.data.normalise import lazy
from ensml.errors import EnsmlError
from ensml.names import FORECAST_DIMS, LATITUDE, LONGITUDE, MEMBER

MEMBER_FIELD = "{member}"


def has_member_field(paths: Sequence[str | Path] | str | Path) -> bool:
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    return any(MEMBER_FIELD in str(p) for p in items)


def member_files(pattern: str, glob_paths: Callable[[str], list[Path]]) -> dict[int | str, list[Path]]:
    """``{member: files}`` of the files matching ``pattern``, by the name at ``{member}``."""
    if pattern.count(MEMBER_FIELD) != 1:
        raise EnsmlError(f"forecast path {pattern!r} must hold {MEMBER_FIELD} once")
    head, tail = pattern.split(MEMBER_FIELD)
    regex = re.compile(_glob_regex(head) + r"([^/]+?)" + _glob_regex(tail) + r"$")
    found: dict[str, list[Path]] = {}
    for path in glob_paths(pattern.replace(MEMBER_FIELD, "*")):
        match = regex.search(str(path))
        if match:
            found.setdefault(match.group(1), []).append(path)
    if not found:
        raise EnsmlError(f"no member files match {pattern!r} (a member name where {MEMBER_FIELD} is)")
    if all(name.isdigit() for name in found):
        numbers = {int(name): paths for name, paths in found.items()}
        if len(numbers) < len(found):  # mem1 and mem01
            raise EnsmlError(f"member files {pattern!r}: two names give one member number ({sorted(found)})")
        return dict(sorted(numbers.items()))
    return {name: found[name] for name in sorted(found, key=_natural)}


def _natural(name: str) -> list:
    """Sort key: the digit runs of ``name`` as numbers (``pf2`` before ``pf10``)."""
    return [
        (0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name) if part
    ]


def _glob_regex(text: str) -> str:
    parts = re.split(r"(\*|\?)", text)
    return "".join({"*": r"[^/]*", "?": r"[^/]"}.get(p, re.escape(p)) for p in parts)


def stack_members(
    parts: dict[int | str, xr.Dataset], files: dict[int | str, list[Path]], what: str
) -> xr.Dataset:
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
        for dim in ds.dims:  # the grid is checked above; a dim without coordinate has no values
            if (
                dim in first.indexes
                and dim in ds.indexes
                and dim not in (LATITUDE, LONGITUDE, *(horizontal_dims(ds) or ()))
                and not ds.indexes[dim].equals(first.indexes[dim])
            ):
                raise EnsmlError(f"{name}: its {dim} values differ from member {numbers[0]}'s")
    named = any(isinstance(n, str) for n in numbers)
    member = xr.DataArray(np.asarray(numbers, dtype=str if named else np.int64), dims=MEMBER)
    out = xr.concat([lazy(ds) for ds in parts.values()], dim=member, combine_attrs="drop_conflicts")
    order = [d for d in FORECAST_DIMS if d in out.dims]
    return out.transpose(*order, ...)


__all__ = ["MEMBER_FIELD", "has_member_field", "member_files", "stack_members"]
