"""Which inputs become which outputs, cut into work units.

A unit's output is a name relative to the output folder, the name its ledger records
(:mod:`ensml.data.outputs`). netCDF output: one unit per input file, written to ``<path
relative to the inputs' common folder>.nc`` (the input folders are mirrored, so equal names in
different folders do not collide); CSV output (station products) the same with ``.csv``.
zarr output: one unit per init time, each a region of ``products.zarr``.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np

from ensml.data.open import expand_paths, open_forecast
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME
from ensml.postprocess.worker import Unit

ZARR_STORE = "products.zarr"


def expand_inputs(patterns: str | Sequence[str], what: str = "forecast") -> list[Path]:
    """Files named by ``patterns`` (paths or globs, :func:`~ensml.data.open.expand_paths`), each once."""
    items = [patterns] if isinstance(patterns, str | Path) else list(patterns)
    if not items:
        raise EnsmlError(f"no {what} files given")
    found: dict[Path, None] = {}
    for item in items:  # each checked by the one reader's rules (a literal name before a glob)
        for p in expand_paths(str(item), what):
            found.setdefault(p.resolve(), None)
    return list(found)


def netcdf_units(inputs: Sequence[Path], out_dir: Path, suffix: str = ".nc") -> list[Unit]:
    """One unit per input; outputs (``suffix``: ``.nc``, or ``.csv`` for station products as
    CSV) mirror the inputs' folders below their common folder."""
    root = Path(os.path.commonpath([p.parent for p in inputs]))
    real = out_dir.resolve()
    units, seen = [], {}
    for p in inputs:
        if p.is_relative_to(real):
            raise EnsmlError(f"forecast file {p} is inside the output folder {out_dir}")
        name = (p.parent.relative_to(root) / (p.name.removesuffix(p.suffix) + suffix)).as_posix()
        if name in seen:
            raise EnsmlError(f"forecast files {seen[name]} and {p} would both be written to {out_dir / name}")
        seen[name] = p
        units.append(Unit(key=str(p), input=str(p), output=name))
    return units


def zarr_units(inputs: Sequence[Path], on_bad: Callable[[Path, str], None]) -> tuple[list[Unit], np.ndarray]:
    """One unit per init time of every readable input (unreadable ones go to ``on_bad``), each
    a region of the store :data:`ZARR_STORE`.

    Returns the units and the store's init times (sorted); an init in two files is an error.
    """
    by_init: dict[np.datetime64, Path] = {}
    for p in inputs:
        try:
            with open_forecast(p) as fc:
                inits = np.atleast_1d(fc[INIT_TIME].values).astype("datetime64[ns]")
        except EnsmlError as exc:
            on_bad(p, str(exc))
            continue
        for init in inits:
            if init in by_init:
                raise EnsmlError(
                    f"init {str(init)[:16]} is in both {by_init[init]} and {p}: "
                    "one zarr store holds each init once"
                )
            by_init[init] = p
    inits = np.array(sorted(by_init), dtype="datetime64[ns]")
    units = [
        Unit(key=f"{by_init[t]}@{str(t)[:16]}", input=str(by_init[t]), output=ZARR_STORE, init=t, region=i)
        for i, t in enumerate(inits)
    ]
    return units, inits
