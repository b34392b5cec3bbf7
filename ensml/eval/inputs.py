"""What ``ensml evaluate`` reads, checked file by file before anything is scored or written.

Predictions must be of the kind their option scores (``ensml_task`` of ``ensml postprocess``
files, else a spread model's files have no ``<var>_mean``), hold every scored variable, and be
complete: a NaN or infinite value, which NaN-skipping means would silently drop, is a one-line
error naming the file and the first position.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.io import load_dataset
from ensml.errors import EnsmlError
from ensml.eval.reduce import describe_position
from ensml.names import LEAD_TIME


def need(ds: xr.Dataset, var: str, path: str | Path, what: str) -> xr.DataArray:
    """``ds[var]``, or a one-line error naming the file and what it holds."""
    if var not in ds:
        raise EnsmlError(
            f"{what} file {path} has no variable {var!r} (found: {', '.join(map(str, ds.data_vars))})"
        )
    return ds[var]


def check_complete(ds: xr.Dataset, name: str) -> None:
    """Raise if a variable of ``ds`` (in memory) holds NaN or ±Inf, naming the first position."""
    for var in ds.data_vars:
        values = np.asarray(ds[var].values)
        if not np.issubdtype(values.dtype, np.floating):
            continue
        bad = ~np.isfinite(values)
        if bad.any():
            n_nan = int(np.count_nonzero(np.isnan(values)))
            counts = [(n_nan, "NaN"), (int(np.count_nonzero(bad)) - n_nan, "infinite")]
            what = " and ".join(f"{n} {kind} value{'s' if n != 1 else ''}" for n, kind in counts if n)
            where = describe_position(ds[var], int(np.argmax(bad.ravel())))
            raise EnsmlError(
                f"{name}: {what} in {var!r} (first at {where}); evaluate scores complete fields only"
            )


def check_kind(ds: xr.Dataset, name: str, spread: bool) -> None:
    """Raise unless ``ds`` holds the predictions its option scores (Gaussian, or a spread model's)."""
    names = [str(v) for v in ds.data_vars if str(v).endswith(("_mean", "_std"))]
    if not names:
        found = ", ".join(map(str, ds.data_vars)) or "none"
        raise EnsmlError(
            f"{name} has no <var>_mean/<var>_std of ensml predict or postprocess (found: {found})"
        )
    task = ds.attrs.get("ensml_task")  # ensml postprocess; ensml predict: mixed files have means
    is_spread = task == "SpreadTask" if task else not any(n.endswith("_mean") for n in names)
    why = f"ensml_task {task}" if task else f"variables {', '.join(names)}"
    if spread != is_spread:
        have, option = ("a spread model's", "spread_") if is_spread else ("Gaussian (post-processing)", "")
        raise EnsmlError(f"{name} holds {have} predictions ({why}): pass it as --{option}predictions")


def open_predictions(
    paths: str | list[str], what: str, lead: np.timedelta64, variables: Sequence[str], *, spread: bool
) -> xr.Dataset:
    """``<var>_mean``/``<var>_std`` (spread: ``<var>_std``) of ``ensml predict`` or ``postprocess`` output.

    ``ensml predict`` writes one lead without a ``lead_time`` dim; ``ensml postprocess`` writes
    every lead its checkpoints cover, one file per input (pass a glob). Each file is checked
    (kind, every variable present, complete at ``lead``) and the error names it.
    """
    suffixes = ("_std",) if spread else ("_mean", "_std")

    def select(ds: xr.Dataset) -> xr.Dataset:
        name = f"{what} file {ds.encoding.get('source') or paths}"
        check_kind(ds, name, spread)
        needed = [f"{v}{s}" for v in variables for s in suffixes]
        missing = [n for n in needed if n not in ds.data_vars]
        if missing:
            raise EnsmlError(
                f"{name} has no {', '.join(missing)} (found: {', '.join(map(str, ds.data_vars))}); "
                "pass --variables to score fewer variables"
            )
        ds = at_lead(ds[needed], lead, name).load()
        check_complete(ds, name)
        return ds

    return load_dataset(paths, what, select)


def at_lead(ds: xr.Dataset, lead: np.timedelta64, what: str) -> xr.Dataset:
    """``ds`` at ``lead`` when it has a ``lead_time`` dim (a one-lead file has none)."""
    if LEAD_TIME in ds.dims:
        if lead not in ds[LEAD_TIME].values:
            have = [int(h / np.timedelta64(1, "h")) for h in ds[LEAD_TIME].values]
            raise EnsmlError(
                f"{what} has no lead time {int(lead / np.timedelta64(1, 'h'))} h (found: {have} h)"
            )
        ds = ds.sel({LEAD_TIME: lead})
    return ds.drop_vars([c for c in (LEAD_TIME, "valid_time") if c in ds.coords])


__all__ = ["at_lead", "check_complete", "check_kind", "need", "open_predictions"]
