"""The files of ``ensml predict`` / ``ensml postprocess`` given to a verb, and the lead times scored.

:func:`scan_run` reads (without data) the run metadata of every file given to one option
(:data:`ROLES`: ``predictions``, ``spread predictions``, ``members``, ``station predictions``)
(:meth:`ensml.predictions.RunMeta.from_attrs`; a file without it is refused): the task that made
it must be the one its option scores, and the files of one option must come from one run
(:func:`ensml.predictions.one_run`, naming two checkpoints that differ).
:func:`choose_leads` picks the lead times of a verification from them (see
:mod:`ensml.data.frame`, whose frame builder uses both).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import reduce
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.open import load_dataset
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, MEMBER, VALID_TIME, family_params
from ensml.predictions import RunMeta, one_run
from ensml.times import LEAD_DTYPE, LeadLike, format_leads, parse_leads

Paths = str | Path | Sequence[str | Path]
#: What a lead-by-lead reader does to each piece before loading it (e.g. a region's box).
Select = Callable[[xr.Dataset], xr.Dataset]
#: A check of each loaded piece, named in its errors (e.g. no NaN in what is scored).
Check = Callable[[xr.Dataset, str], None]


@dataclass(frozen=True)
class Role:
    """What the files of one option hold: the task that made them and what is read per variable."""

    task: str | None  # the task whose outputs the option scores; None: any
    suffixes: tuple[str, ...]  # read ``<var><suffix>`` for each scored variable
    option: str  # the command-line option, for messages
    member: bool = False  # what is read has a member dim (calibrated members)
    family: bool = False  # read each variable's predictive family's parameters (``<var>_<param>``)

    def needed(self, variables: Sequence[str], meta: RunMeta) -> list[str]:
        """The variables read from a file of the run ``meta`` for the scored ``variables``."""
        if self.family:
            return [f"{v}_{p}" for v in variables for p in family_params(meta.family_of(v))]
        return [f"{v}{s}" for v in variables for s in self.suffixes]


#: The options that take files of ``ensml predict`` / ``ensml postprocess``.
ROLES = {
    "predictions": Role("MixedTask", (), "--predictions", family=True),
    "spread predictions": Role("SpreadTask", ("_std",), "--spread_predictions"),
    "members": Role(None, ("",), "--members", member=True),
    "station predictions": Role("StationDRN", (), "--predictions", family=True),
}


@dataclass
class RunFiles:
    """One option's files, scanned (no data read): their run, coordinates and lead times."""

    what: str  # a key of ROLES
    paths: Paths
    meta: RunMeta  # the run every file comes from (its leads: those of all files)
    needed: list[str]  # the variables read from each file
    coords: xr.Dataset  # the files' coordinates (init times, grid, levels), combined
    leads: dict[str, np.ndarray]  # each file's lead times (its run metadata), by file name
    missing: list[str] = field(default_factory=list)  # needed variables absent (partial frames)

    def __str__(self) -> str:
        return f"{self.what} {self.paths}"

    def holds(self, lead: np.timedelta64) -> bool:
        """Whether every file holds ``lead``."""
        return all(lead in leads for leads in self.leads.values())

    def read(
        self, lead: np.timedelta64, inits: np.ndarray, levels: dict, where: Select | None, check: Check | None
    ) -> xr.Dataset:
        """The needed variables at ``lead``, ``inits`` and ``levels``, read file by file into memory."""

        def select(ds: xr.Dataset) -> xr.Dataset:
            name = _file(ds, self.what, self.paths)
            have = ds[LEAD_TIME].values if LEAD_TIME in ds.coords else None
            if have is not None and lead not in np.atleast_1d(have):
                raise EnsmlError(
                    f"{name} has no lead time {format_leads(lead)} (found: {format_leads(have)})"
                )
            ds = ds[self.needed]
            ds = without_leads(ds.sel({LEAD_TIME: lead}) if LEAD_TIME in ds.dims else ds)
            ds = (where(ds) if where else ds).load()
            if check:
                check(ds, name)
            return ds

        # the levels are taken in memory, after the files are combined, as ever (same numbers)
        ds = load_dataset(self.paths, self.what, select).sel({INIT_TIME: inits})
        return ds.sel({k: v for k, v in levels.items() if k in ds.dims})


def scan_run(paths: Paths, what: str, variables: Sequence[str], partial: bool = False) -> RunFiles:
    """Read the run metadata, kind, variables and leads of every file of option ``what`` (no data).

    Raises
    ------
    EnsmlError
        One line naming the file: no run metadata, the task of another option, a variable
        missing (recorded in ``missing`` instead for a partial frame), or files of two runs.
    """
    role = ROLES[what]
    needed: list[str] = []  # of the first file: the files of one run hold the same (one_run checks)
    metas: dict[str, RunMeta] = {}
    missing: set[str] = set()

    def select(ds: xr.Dataset) -> xr.Dataset:
        name = _file(ds, what, paths)
        meta = metas[str(ds.encoding.get("source") or paths)] = RunMeta.from_attrs(ds.attrs, name)
        if role.task and meta.task != role.task:
            where = (
                "with --observations, --predictions takes station products (of a station model)"
                if role.task == "StationDRN"
                else _where(meta)
            )
            raise EnsmlError(f"{name} holds {_kind(meta)} (ensml_task {meta.task}): {where}")
        needed[:] = needed or role.needed(variables, meta)
        absent = [n for n in needed if n not in ds.data_vars or (role.member and MEMBER not in ds[n].dims)]
        if absent and not partial:
            found = ", ".join(map(str, ds.data_vars))
            detail = " with a member dim" if role.member else ""
            raise EnsmlError(
                f"{name} has no {', '.join(absent)}{detail} (found: {found}); "
                "pass --variables to score fewer variables"
            )
        missing.update(absent)
        present = [n for n in needed if n not in absent]
        kept = ds[present] if present else ds.drop_vars(list(ds.data_vars))  # nothing asked: the coords
        return without_leads(kept).drop_vars(present)

    coords = load_dataset(paths, what, select)
    leads = {f"{what} file {path}": np.asarray(m.leads, dtype=LEAD_DTYPE) for path, m in metas.items()}
    return RunFiles(what, paths, one_run(metas, what), needed, coords, leads, sorted(missing))


def leads_option(value: LeadLike | Sequence[LeadLike] | None) -> str | np.ndarray | None:
    """A ``leads`` option, checked at once: ``None``, ``"common"`` or lead times (``timedelta64[ns]``).

    Raises
    ------
    EnsmlError
        One line for a value that is not a lead time (:func:`ensml.times.parse_leads`), or none.
    """
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, str) and value.strip().lower() == "common":
        return "common"
    leads = parse_leads(value)
    if leads.size == 0:
        raise EnsmlError("no lead time given: give one or more (24, '24h', 'P1D'), 'common', or none for all")
    return np.unique(leads)


def choose_leads(
    asked: LeadLike | Sequence[LeadLike] | None, runs: Sequence[RunFiles], forecast_leads: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """The lead times to score and those dropped (both ``timedelta64[ns]``, increasing).

    ``asked`` (:func:`leads_option`): ``None`` for the leads of the runs (their files' union;
    every forecast lead but 0 h without a run), ``"common"`` for the leads every file holds (the
    others are returned as dropped), or lead times. Otherwise every file of every run must hold
    every lead: a one-line error names the first that does not.
    """
    asked = leads_option(asked)
    held = {name: leads for run in runs for name, leads in run.leads.items()}
    common = isinstance(asked, str)
    none = np.array([], dtype=LEAD_DTYPE)
    if (asked is None or common) and not held:
        positive = np.sort(forecast_leads[forecast_leads > np.timedelta64(0, "ns")])
        if positive.size == 0:
            # an analysis-like forecast (lead 0 h alone, e.g. an EDA): scored only when asked for
            raise EnsmlError(
                f"the forecast holds no lead time but {format_leads(forecast_leads)}, which is scored "
                "only when asked for: --leads 0h"
            )
        return positive, none
    if common:
        shared = reduce(np.intersect1d, held.values())
        if shared.size == 0:
            found = "; ".join(f"{name} {format_leads(leads)}" for name, leads in held.items())
            raise EnsmlError(f"the inputs have no lead time in common: {found}")
        return shared, np.setdiff1d(reduce(np.union1d, held.values()), shared)
    wanted = reduce(np.union1d, held.values()) if asked is None else asked
    for name, have in held.items():
        lacks = np.setdiff1d(wanted, have)
        if lacks.size:
            hint = "; --leads common scores the leads every file holds" if asked is None else ""
            raise EnsmlError(
                f"{name} has no lead time(s) {format_leads(lacks)} (found: {format_leads(have)}){hint}"
            )
    return wanted, none


def without_leads(ds: xr.Dataset) -> xr.Dataset:
    return ds.drop_vars([c for c in (LEAD_TIME, VALID_TIME) if c in ds.coords])


def _kind(meta: RunMeta) -> str:
    if meta.task == "StationDRN":
        return "station products"
    return "a spread model's predictions" if meta.is_spread else "Gaussian (post-processing) predictions"


def _where(meta: RunMeta) -> str:
    """Where a file of the run ``meta`` is scored."""
    if meta.task == "StationDRN":
        return "score them at their stations with --predictions and --observations"
    if meta.is_spread:
        return "pass it as --spread_predictions"
    return "pass it as --predictions"


def _file(ds: xr.Dataset, what: str, paths: Paths) -> str:
    """How messages name one file (its path; the option's value when the path is unknown)."""
    return f"{what} file {ds.encoding.get('source') or paths}"


__all__ = [
    "ROLES",
    "Check",
    "Paths",
    "Role",
    "RunFiles",
    "Select",
    "choose_leads",
    "leads_option",
    "scan_run",
    "without_leads",
]
