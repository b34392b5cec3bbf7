"""The one frame builder: a forecast, its analysis and ensml's outputs aligned by valid time.

``ensml evaluate``, ``ensml report`` (its scores by lead time), the case studies and the
benchmark's scoring all score a forecast of ``init_time`` at ``lead_time`` against the analysis
valid at ``init_time + lead_time``. :func:`build_frame` opens (lazily) and checks what they
score, once:

* the forecast and the analysis (:mod:`ensml.data.open`) on one grid, with the variables,
  levels and lead times asked for;
* optionally the files of ``ensml predict`` / ``ensml postprocess`` given to an option
  (:data:`ROLES`: ``predictions``, ``spread predictions``, ``members``). Each file's run metadata
  is read back (:meth:`ensml.predictions.RunMeta.from_attrs`; a file without it is refused), the
  task that made it must be the one its option scores, and the files of one option must come
  from one run (:func:`ensml.predictions.one_run`, naming two checkpoints that differ);
* optionally the generator's oracle (``<var>_mean``/``<var>_std`` by init and lead);
* the init times that every source holds and whose valid time the analysis holds at every lead;
* the area weights of the grid (:func:`ensml.data.weights.area_weights`, the one weighting).

:meth:`EnsembleFrame.at` then reads one lead at a time, so memory holds one lead's fields.

Lead times (:func:`choose_leads`): by default the leads of the runs given (every forecast lead
but 0 h without one); a lead that one of their files lacks is an error naming the file and the
lead, unless the leads asked for are ``"common"``: the leads every file holds, the others
reported as dropped. A *partial* frame (case studies, the report's charts by lead) instead
leaves a source out where it lacks a lead or a variable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import reduce
from pathlib import Path

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid
from ensml.data.open import (
    check_lead_times,
    check_levels,
    check_members,
    load_dataset,
    open_analysis,
    open_dataset,
    open_forecast,
)
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import (
    INIT_TIME,
    LEAD_DTYPE,
    LEAD_TIME,
    LEVEL,
    MEMBER,
    TIME,
    VALID_TIME,
    LeadLike,
    format_leads,
    parse_lead,
    parse_leads,
)
from ensml.predictions import RunMeta, check_k, one_run

Paths = str | Path | Sequence[str | Path]
#: What a lead-by-lead reader does to each piece before loading it (e.g. a region's box).
Select = Callable[[xr.Dataset], xr.Dataset]
#: A check of each loaded piece, named in its errors (e.g. no NaN in what is scored).
Check = Callable[[xr.Dataset, str], None]
#: The subset size when neither a run nor the user gives one.
DEFAULT_K = 5


@dataclass(frozen=True)
class Role:
    """What the files of one option hold: the task that made them and what is read per variable."""

    task: str | None  # the task whose outputs the option scores; None: any
    suffixes: tuple[str, ...]  # read ``<var><suffix>`` for each scored variable
    option: str  # the command-line option, for messages
    member: bool = False  # what is read has a member dim (calibrated members)


#: The options that take files of ``ensml predict`` / ``ensml postprocess``.
ROLES = {
    "predictions": Role("MixedTask", ("_mean", "_std"), "--predictions"),
    "spread predictions": Role("SpreadTask", ("_std",), "--spread_predictions"),
    "members": Role(None, ("",), "--members", member=True),
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

    def read(self, lead: np.timedelta64, inits: np.ndarray, levels: dict, where: Select | None,
             check: Check | None) -> xr.Dataset:  # fmt: skip
        """The needed variables at ``lead``, ``inits`` and ``levels``, read file by file into memory."""

        def select(ds: xr.Dataset) -> xr.Dataset:
            name = _file(ds, self.what, self.paths)
            have = ds[LEAD_TIME].values if LEAD_TIME in ds.coords else None
            if have is not None and lead not in np.atleast_1d(have):
                raise EnsmlError(
                    f"{name} has no lead time {format_leads(lead)} (found: {format_leads(have)})"
                )
            ds = ds[self.needed]
            ds = _without_leads(ds.sel({LEAD_TIME: lead}) if LEAD_TIME in ds.dims else ds)
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
    needed = [f"{v}{s}" for v in variables for s in role.suffixes]
    metas: dict[str, RunMeta] = {}
    missing: set[str] = set()

    def select(ds: xr.Dataset) -> xr.Dataset:
        name = _file(ds, what, paths)
        meta = metas[str(ds.encoding.get("source") or paths)] = RunMeta.from_attrs(ds.attrs, name)
        if role.task and meta.task != role.task:
            kind, other = ("a spread model's", "spread predictions") if meta.is_spread else (
                "Gaussian (post-processing)", "predictions")  # fmt: skip
            raise EnsmlError(
                f"{name} holds {kind} predictions (ensml_task {meta.task}): pass it as {ROLES[other].option}"
            )
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
        return _without_leads(ds[present]).drop_vars(present)

    coords = load_dataset(paths, what, select)
    leads = {f"{what} file {path}": np.asarray(m.leads, dtype=LEAD_DTYPE) for path, m in metas.items()}
    return RunFiles(what, paths, one_run(metas, what), needed, coords, leads, sorted(missing))


def leads_option(value: LeadLike | Sequence[LeadLike] | None) -> str | np.ndarray | None:
    """A ``leads`` option, checked at once: ``None``, ``"common"`` or lead times (``timedelta64[ns]``).

    Raises
    ------
    EnsmlError
        One line for a value that is not a lead time (:func:`ensml.names.parse_leads`), or none.
    """
    if value is None or isinstance(value, np.ndarray):
        return value
    if isinstance(value, str) and value.strip().lower() == "common":
        return "common"
    leads = parse_leads(value)
    if leads.size == 0:
        raise EnsmlError("no lead time given: give one or more (24, '24h', 'P1D'), 'common', or none for all")
    return np.unique(leads)


def choose_leads(asked: LeadLike | Sequence[LeadLike] | None, runs: Sequence[RunFiles],
                 forecast_leads: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
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
        return np.sort(forecast_leads[forecast_leads > np.timedelta64(0, "ns")]), none
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


@dataclass(frozen=True)
class LeadFrame:
    """The frame's fields at one lead, in memory, indexed by the frame's init times.

    ``forecast`` (init_time, member, level, grid) keeps a scalar ``lead_time``; ``analysis``
    is the analysis valid at ``init_time + lead`` with ``init_time`` for its time dim; ``runs``
    the options' fields (without lead coordinates) and ``oracle`` the oracle's, of the sources
    that hold the lead.
    """

    lead: np.timedelta64
    forecast: xr.Dataset
    analysis: xr.Dataset
    runs: dict[str, xr.Dataset]
    oracle: xr.Dataset | None


@dataclass(frozen=True)
class EnsembleFrame:
    """Forecast, analysis and other sources, opened lazily and aligned (see :func:`build_frame`)."""

    forecast: xr.Dataset  # lazy, the frame's variables
    analysis: xr.Dataset  # lazy, every analysis time
    variables: list[str]
    levels: list[float]  # hPa; of the variables with a level dim
    leads: np.ndarray  # timedelta64[ns], increasing
    inits: np.ndarray  # datetime64[ns], increasing
    weights: xr.DataArray  # area weights of the grid (mean 1; ``weighting`` attribute)
    names: dict[str, str]  # how messages name the forecast, analysis and oracle
    runs: dict[str, RunFiles] = field(default_factory=dict)  # the runs read at some lead, by option
    scanned: dict[str, RunFiles] = field(default_factory=dict)  # every run given (partial frames)
    oracle: xr.Dataset | None = None  # lazy, every variable of the file
    oracle_vars: list[str] = field(default_factory=list)  # what :meth:`at` reads of it
    dropped: np.ndarray = field(default_factory=lambda: np.array([], dtype=LEAD_DTYPE))

    def subset_size(self, k: int | None) -> int:
        """K of the raw subset: the runs' ``k`` (a ``k`` given must agree), else ``k`` or 5.

        Raises
        ------
        EnsmlError
            The runs were made from different ``k``, ``k`` disagrees with them, or the forecast
            has fewer than K members.
        """
        runs = list(self.scanned.values())
        for run in runs[1:]:
            if run.meta.k != runs[0].meta.k:
                raise EnsmlError(
                    f"{runs[0]} was made from k={runs[0].meta.k} members and {run} from k={run.meta.k}; "
                    "score one k at a time"
                )
        if runs:
            k = check_k(runs[0].meta, k, str(runs[0]))
        k = DEFAULT_K if k is None else int(k)
        check_members(self.forecast, k, self.names["forecast"])
        return k

    def within(self, start: np.datetime64, end: np.datetime64) -> EnsembleFrame:
        """The frame restricted to the init times valid in ``[start, end]`` at its first lead."""
        valid = self.inits + self.leads[0]
        return replace(self, inits=self.inits[(valid >= start) & (valid <= end)])

    def at(self, lead: LeadLike, *, where: Select | None = None, check: Check | None = None) -> LeadFrame:
        """Every source at ``lead``, read into memory (``where`` applied first, then ``check``)."""
        lead = parse_lead(lead)
        inits, levels = self.inits, {LEVEL: self.levels} if LEVEL in self.forecast.dims else {}

        def load(ds: xr.Dataset, name: str) -> xr.Dataset:
            ds = (where(ds) if where else ds).load()
            if check:
                check(ds, name)
            return ds

        fc = load(self.forecast.sel({INIT_TIME: inits, LEAD_TIME: lead, **levels}), self.names["forecast"])
        an = load(self.analysis.sel({TIME: inits + lead, **levels}), self.names["analysis"])
        an = an.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
        runs = {w: r.read(lead, inits, levels, where, check) for w, r in self.runs.items() if r.holds(lead)}
        orc = None
        if self.oracle is not None and lead in self.oracle[LEAD_TIME].values:
            sel = {INIT_TIME: inits, LEAD_TIME: lead, **levels}
            orc = load(self.oracle[self.oracle_vars].sel(sel), self.names["oracle"])
        return LeadFrame(lead, fc, an, runs, orc)


def build_frame(
    forecast: Paths,
    analysis: Paths,
    *,
    variables: Sequence[str] | None = None,
    levels: Sequence[float] | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    predictions: Paths | None = None,
    spread_predictions: Paths | None = None,
    members: Paths | None = None,
    oracle: Paths | None = None,
    oracle_vars: Sequence[str] = (),
    inits: np.ndarray | None = None,
    partial: bool = False,
    context: str = "",
    note: bool = True,
) -> EnsembleFrame:
    """Open and check the sources of a verification and align them by valid time.

    Parameters
    ----------
    forecast, analysis
        The raw ensemble and the verifying analysis (paths or globs, :mod:`ensml.data.open`).
    variables, levels
        What is scored (default: every forecast variable, every forecast level in hPa). Levels
        apply to the variables with a level dimension; surface variables are taken whole.
    leads
        Lead times (hours or durations), ``"common"`` or ``None``: see :func:`choose_leads`.
        A partial frame takes the leads given, or every lead of the forecast.
    predictions, spread_predictions, members
        Files of ``ensml predict`` / ``ensml postprocess`` (:data:`ROLES`), checked by
        :func:`scan_run`; their init times bound the frame's.
    oracle
        The generator's oracle; ``<var>_mean``/``<var>_std`` and ``oracle_vars`` are read.
    inits
        Score at most these init times (e.g. a test split).
    partial
        Leave out a run or the oracle that lacks a variable or every lead of the frame (a case
        of a field the model does not predict); :meth:`EnsembleFrame.at` then gives the sources
        that hold each lead. Otherwise each is an error.
    context
        Added to the names of the forecast and analysis in messages (``" (case 'storm')"``).
    note
        Say so on stderr when the grid defines no cell areas (uniform weights).

    Raises
    ------
    EnsmlError
        One line naming the file: a missing variable, level or lead, another grid, run metadata
        that is absent or of two runs, predictions of the wrong kind, no init time in common.
    """
    fc_name, an_name = f"forecast {forecast}{context}", f"analysis {analysis}{context}"
    fc = open_forecast(forecast, variables)
    variables = list(variables) if variables else [str(v) for v in fc.data_vars]
    given = {"predictions": predictions, "spread predictions": spread_predictions, "members": members}
    scanned = {what: scan_run(paths, what, variables, partial) for what, paths in given.items() if paths}
    an = open_analysis(analysis, variables)
    check_same_grid(fc, an, fc_name, an_name)
    if partial:
        lead_list = parse_leads(leads) if leads is not None else np.sort(fc[LEAD_TIME].values)
        dropped = np.array([], dtype=LEAD_DTYPE)
    else:
        lead_list, dropped = choose_leads(leads, list(scanned.values()), fc[LEAD_TIME].values)
    check_lead_times(fc, lead_list, fc_name)
    all_levels = [float(x) for x in np.atleast_1d(fc[LEVEL].values)] if LEVEL in fc.coords else []
    levels = [float(x) for x in levels] if levels is not None else all_levels
    on_levels = any(LEVEL in fc[v].dims for v in variables)
    for ds, name in ((fc, fc_name), (an, an_name)) if on_levels else ():
        check_levels(ds, levels, name)
    runs = {w: r for w, r in scanned.items() if not r.missing and any(r.holds(x) for x in lead_list)}
    candidates = fc[INIT_TIME].values
    for run in runs.values():
        check_same_grid(fc, run.coords, fc_name, str(run))
        if on_levels:
            check_levels(run.coords, levels, str(run))
        candidates = np.intersect1d(candidates, run.coords[INIT_TIME].values)
    orc, names = None, {"forecast": fc_name, "analysis": an_name, "oracle": f"oracle {oracle}"}
    needed = [f"{v}_{s}" for v in variables for s in ("mean", "std")] + list(oracle_vars)
    if oracle:
        orc = _open_oracle(oracle, needed, lead_list, partial, fc, fc_name)
        if orc is not None:
            candidates = np.intersect1d(candidates, orc[INIT_TIME].values)
    if inits is not None:
        candidates = np.intersect1d(candidates, inits)
    for lead in lead_list:  # one set of init times for every lead: the curves by lead compare alike
        candidates = candidates[np.isin(candidates + lead, an[TIME].values)]
    if candidates.size == 0:
        at = format_leads(lead_list)
        raise EnsmlError(f"{fc_name}, {an_name} and the predictions have no init dates in common at {at}")
    return EnsembleFrame(
        forecast=fc, analysis=an, variables=variables, levels=levels, leads=lead_list, inits=candidates,
        weights=area_weights(fc, what=fc_name, note=note), names=names, runs=runs,
        scanned=scanned, oracle=orc, oracle_vars=needed, dropped=dropped,
    )  # fmt: skip


def _open_oracle(path: Paths, needed: list[str], leads: np.ndarray, partial: bool, fc: xr.Dataset,
                 fc_name: str) -> xr.Dataset | None:  # fmt: skip
    """The oracle, lazily; ``None`` for a partial frame when it lacks a variable or every lead."""
    orc = open_dataset(path, "oracle")
    absent = [v for v in needed if v not in orc.data_vars]
    if absent and not partial:
        found = ", ".join(map(str, orc.data_vars))
        raise EnsmlError(f"oracle file {path} has no variable {absent[0]!r} (found: {found})")
    if LEAD_TIME not in orc.dims:
        raise EnsmlError(f"oracle {path} has no lead_time dim (found dims: {', '.join(map(str, orc.dims))})")
    if partial and (absent or not np.isin(leads, orc[LEAD_TIME].values).any()):
        return None
    if not partial:
        check_lead_times(orc, leads, f"oracle {path}")
    check_same_grid(fc, orc, fc_name, f"oracle {path}")
    return orc


def _without_leads(ds: xr.Dataset) -> xr.Dataset:
    return ds.drop_vars([c for c in (LEAD_TIME, VALID_TIME) if c in ds.coords])


def _file(ds: xr.Dataset, what: str, paths: Paths) -> str:
    """How messages name one file (its path; the option's value when the path is unknown)."""
    return f"{what} file {ds.encoding.get('source') or paths}"


__all__ = [
    "ROLES",
    "EnsembleFrame",
    "LeadFrame",
    "RunFiles",
    "build_frame",
    "choose_leads",
    "leads_option",
    "scan_run",
]
