"""What ``ensml evaluate`` reads, checked file by file before anything is scored or written.

Predictions must be of the kind their option scores (``ensml_task`` of ``ensml postprocess``
files, else a spread model's files have no ``<var>_mean``), hold every scored variable and
every scored lead time, and be complete: a NaN or infinite value, which NaN-skipping means
would silently drop, is a one-line error naming the file and the first position.

Lead times: ``ensml predict`` writes one lead as a scalar ``lead_time`` coordinate (or, for a
model of several target leads, a ``lead_time`` dim); ``ensml postprocess`` a ``lead_time`` dim.
:func:`scan` reads each file's leads (not its data); :func:`scored_leads` picks the leads to
score; :func:`read_at` then reads one lead at a time, so memory holds one lead's fields.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.open import load_dataset
from ensml.errors import EnsmlError
from ensml.names import LEAD_TIME, MEMBER, VALID_TIME
from ensml.scores.reduce import describe_position

HOUR = np.timedelta64(1, "h")


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


def hours(leads: Sequence[np.timedelta64] | np.ndarray) -> list[int]:
    """Lead times in whole hours, for tables and messages."""
    return [int(lead / HOUR) for lead in np.atleast_1d(leads)]


def leads_of(ds: xr.Dataset) -> np.ndarray | None:
    """The lead times (timedelta64[ns]) ``ds`` holds: its ``lead_time`` dim, a one-lead file's
    scalar ``lead_time``, or ``None`` when it has no ``lead_time`` coordinate."""
    if LEAD_TIME not in ds.coords:
        return None
    return np.atleast_1d(ds[LEAD_TIME].values).astype("timedelta64[ns]")


@dataclass
class Input:
    """One evaluate option's files, scanned: names, variables, and each file's lead times."""

    what: str  # "predictions", "spread predictions" or "members"
    paths: str | list[str]
    needed: list[str]  # the variables read from each file
    coords: xr.Dataset  # the files' coordinates (init times, grid, levels), combined; no data
    leads: dict[str, np.ndarray | None] = field(default_factory=dict)  # by file name

    def __str__(self) -> str:
        return f"{self.what} {self.paths}"


def scan(paths: str | list[str], what: str, variables: Sequence[str]) -> Input:
    """Check the kind and variables of each file of ``what`` and note its lead times (no data read).

    ``what`` is ``"predictions"`` (``<var>_mean``, ``<var>_std``), ``"spread predictions"``
    (``<var>_std``) or ``"members"`` (the variables, with a member dim).
    """
    inp = Input(what, paths, [], xr.Dataset())
    if what == "members":
        inp.needed = list(variables)
    else:
        suffixes = ("_std",) if what == "spread predictions" else ("_mean", "_std")
        inp.needed = [f"{v}{s}" for v in variables for s in suffixes]

    def select(ds: xr.Dataset) -> xr.Dataset:
        name = _file(ds, what, paths)
        if what == "members":
            bad = [v for v in variables if v not in ds.data_vars or MEMBER not in ds[v].dims]
            if bad:
                raise EnsmlError(f"{name} has no {', '.join(bad)} with a member dim")
        else:
            check_kind(ds, name, what == "spread predictions")
            missing = [n for n in inp.needed if n not in ds.data_vars]
            if missing:
                raise EnsmlError(
                    f"{name} has no {', '.join(missing)} (found: {', '.join(map(str, ds.data_vars))}); "
                    "pass --variables to score fewer variables"
                )
        inp.leads[name] = leads_of(ds)
        return _without_leads(ds[inp.needed]).drop_vars(inp.needed)

    inp.coords = load_dataset(paths, what, select)
    return inp


def scored_leads(
    lead_hours: int | Sequence[int] | None, inputs: Sequence[Input], forecast_leads: np.ndarray
) -> np.ndarray:
    """The lead times to score (timedelta64[ns], increasing), or a one-line error naming a file.

    ``None``: every lead all ``inputs`` hold (the intersection over their files), else every lead
    of the forecast except 0 h. An int or a list: those leads, each of which every file must hold.
    A file without a ``lead_time`` coordinate is taken to hold the one lead asked for.
    """
    if lead_hours is None:
        if not inputs:
            return np.sort(forecast_leads[forecast_leads > np.timedelta64(0, "ns")])
        common, held = None, []
        for inp in inputs:
            for name, leads in inp.leads.items():
                if leads is None:
                    raise EnsmlError(
                        f"{name} has no lead_time coordinate: pass --lead_hours to say which lead it holds"
                    )
                common = leads if common is None else np.intersect1d(common, leads)
                held.append(f"{name} {hours(leads)} h")
        if common is None or common.size == 0:
            raise EnsmlError(f"the inputs have no lead time in common: {'; '.join(held)}")
        return np.sort(common)
    asked = [lead_hours] if isinstance(lead_hours, (int, np.integer)) else list(lead_hours)
    if not asked or any(isinstance(h, bool) or not isinstance(h, (int, np.integer)) or h < 0 for h in asked):
        raise EnsmlError(f"lead_hours must be hours >= 0, one or a list (got {lead_hours!r})")
    leads = np.unique(np.asarray(asked, dtype="int64").astype("timedelta64[h]").astype("timedelta64[ns]"))
    for inp in inputs:
        for name, have in inp.leads.items():
            if have is None and leads.size > 1:
                raise EnsmlError(
                    f"{name} has no lead_time coordinate, so it holds one lead: pass one lead_hours"
                )
            missing = [] if have is None else [h for h in hours(leads) if h not in hours(have)]
            if missing:
                raise EnsmlError(f"{name} has no lead time(s) {missing} h (found: {hours(have)} h)")
    return leads


def read_at(inp: Input, lead: np.timedelta64) -> xr.Dataset:
    """The needed variables of every file of ``inp`` at ``lead``, in memory and checked complete."""

    def select(ds: xr.Dataset) -> xr.Dataset:
        name = _file(ds, inp.what, inp.paths)
        ds = at_lead(ds[inp.needed], lead, name).load()
        check_complete(ds, name)
        return ds

    return load_dataset(inp.paths, inp.what, select)


def at_lead(ds: xr.Dataset, lead: np.timedelta64, what: str) -> xr.Dataset:
    """``ds`` at ``lead``: its ``lead_time`` dim or scalar coordinate must hold it (one without
    a ``lead_time`` coordinate is taken as it is)."""
    have = leads_of(ds)
    if have is not None and lead not in have:
        raise EnsmlError(f"{what} has no lead time {int(lead / HOUR)} h (found: {hours(have)} h)")
    if LEAD_TIME in ds.dims:
        ds = ds.sel({LEAD_TIME: lead})
    return _without_leads(ds)


def _without_leads(ds: xr.Dataset) -> xr.Dataset:
    return ds.drop_vars([c for c in (LEAD_TIME, VALID_TIME) if c in ds.coords])


def _file(ds: xr.Dataset, what: str, paths: str | list[str]) -> str:
    """How messages name one file (its path; the option's value when the path is unknown)."""
    source = ds.encoding.get("source") or paths
    return f"{what} file {source}"


__all__ = [
    "Input",
    "at_lead",
    "check_complete",
    "check_kind",
    "hours",
    "leads_of",
    "need",
    "read_at",
    "scan",
    "scored_leads",
]
