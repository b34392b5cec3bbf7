"""The one frame builder: a forecast, its analysis and ensml's outputs aligned by valid time.

``ensml evaluate``, ``ensml report`` (its scores by lead time), the case studies and the
benchmark's scoring all score a forecast of ``init_time`` at ``lead_time`` against the analysis
valid at ``init_time + lead_time``. :func:`build_frame` opens (lazily) and checks what they
score, once:

* the forecast and the analysis on one grid, with the variables, levels and lead times asked
  for (:func:`ensml.data.open.open_inputs`, the reader-and-check path every verb shares);
* optionally the files of ``ensml predict`` / ``ensml postprocess`` given to an option
  (:data:`ensml.data.runfiles.ROLES`: ``predictions``, ``spread predictions``, ``members``).
  Each file's run metadata is read back (:meth:`ensml.predictions.RunMeta.from_attrs`; a file
  without it is refused), the task that made it must be the one its option scores, and the
  files of one option must come from one run (:func:`ensml.predictions.one_run`, naming two
  checkpoints that differ);
* optionally the generator's oracle (each variable's family parameters by init and lead:
  ``<var>_mean``/``<var>_std`` for the normal, ``tp_shape``, … as its ``ensml_distribution`` says);
* the init times that every source holds and whose valid time the analysis holds at every lead;
* the area weights of the grid (:func:`ensml.data.weights.area_weights`, the one weighting).

:meth:`EnsembleFrame.at` then reads one lead at a time, so memory holds one lead's fields.

Lead times (:func:`ensml.data.runfiles.choose_leads`): by default the leads of the runs given
(every forecast lead but 0 h without one); a lead that one of their files lacks is an error
naming the file and the lead, unless the leads asked for are ``"common"``: the leads every file
holds, the others reported as dropped. A *partial* frame (case studies) instead leaves a source
out where it lacks a lead or a variable.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid
from ensml.data.layouts.options import ReaderOptions
from ensml.data.open import check_lead_times, check_levels, open_dataset, open_inputs
from ensml.data.runfiles import Check, Paths, RunFiles, Select, choose_leads, scan_run
from ensml.data.subset import Subset, raw_subset
from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LEAD_TIME, LEVEL, TIME, family_params
from ensml.predictions import distribution_of
from ensml.times import LEAD_DTYPE, LeadLike, format_leads, parse_lead, parse_leads


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

    def subset(self, k: int | None) -> Subset:
        """The raw subset scored beside the forecast (:func:`ensml.data.subset.raw_subset`)."""
        return raw_subset(self.scanned.values(), k, self.forecast, self.names["forecast"])

    def within(self, start: np.datetime64, end: np.datetime64) -> EnsembleFrame:
        """The frame restricted to the init times valid in ``[start, end]`` at its first lead."""
        valid = self.inits + self.leads[0]
        return replace(self, inits=self.inits[(valid >= start) & (valid <= end)])

    def at(
        self,
        lead: LeadLike,
        *,
        where: Select | None = None,
        check: Check | None = None,
        check_analysis: Check | None = None,
        check_forecast: Check | None = None,
    ) -> LeadFrame:
        """Every source at ``lead``, read into memory (``where`` applied first, then ``check``;
        the analysis and the forecast are checked by ``check_analysis`` and ``check_forecast``
        where given, e.g. to let NaN mean "not observed")."""
        lead = parse_lead(lead)
        inits, levels = self.inits, {LEVEL: self.levels} if LEVEL in self.forecast.dims else {}

        def load(ds: xr.Dataset, name: str, check: Check | None = check) -> xr.Dataset:
            ds = (where(ds) if where else ds).load()
            if check:
                check(ds, name)
            return ds

        fc = self.forecast.sel({INIT_TIME: inits, LEAD_TIME: lead, **levels})
        fc = load(fc, self.names["forecast"], check_forecast or check)
        an_check = check_analysis or check
        an = load(self.analysis.sel({TIME: inits + lead, **levels}), self.names["analysis"], an_check)
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
    reader: ReaderOptions | None = None,
    analysis_reader: ReaderOptions | None = None,
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
        The generator's oracle; each variable's family parameters and ``oracle_vars`` are read.
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
    reader, analysis_reader
        How to read the forecast and the analysis files (GRIB filters, the control member,
        renames: :class:`~ensml.data.layouts.options.ReaderOptions`).

    Raises
    ------
    EnsmlError
        One line naming the file: a missing variable, level or lead, another grid, run metadata
        that is absent or of two runs, predictions of the wrong kind, no init time in common.
    """
    fc_name, an_name = f"forecast {forecast}{context}", f"analysis {analysis}{context}"
    inputs = open_inputs(
        forecast,
        analysis,
        variables=variables,
        levels=[float(x) for x in levels] if levels is not None else None,
        names=(fc_name, an_name),
        reader=reader,
        analysis_reader=analysis_reader,
        align_levels=True,
    )
    fc, an, variables, levels = inputs.forecast, inputs.analysis, inputs.variables, inputs.levels
    given = {"predictions": predictions, "spread predictions": spread_predictions, "members": members}
    scanned = {what: scan_run(paths, what, variables, partial) for what, paths in given.items() if paths}
    if partial:
        lead_list = parse_leads(leads) if leads is not None else np.sort(fc[LEAD_TIME].values)
        dropped = np.array([], dtype=LEAD_DTYPE)
    else:
        lead_list, dropped = choose_leads(leads, list(scanned.values()), fc[LEAD_TIME].values)
    check_lead_times(fc, lead_list, fc_name)
    runs = {w: r for w, r in scanned.items() if not r.missing and any(r.holds(x) for x in lead_list)}
    candidates = fc[INIT_TIME].values
    for run in runs.values():
        check_same_grid(fc, run.coords, fc_name, str(run))
        if inputs.on_levels:
            check_levels(run.coords, levels, str(run))
        candidates = np.intersect1d(candidates, run.coords[INIT_TIME].values)
    orc, names = None, {"forecast": fc_name, "analysis": an_name, "oracle": f"oracle {oracle}"}
    needed = list(oracle_vars)
    if oracle:
        orc, needed = _open_oracle(oracle, variables, oracle_vars, lead_list, partial, fc, fc_name)
        if orc is not None:
            candidates = np.intersect1d(candidates, orc[INIT_TIME].values)
    if inits is not None:
        candidates = np.intersect1d(candidates, inits)
    candidates = inputs.verified(candidates, lead_list)  # one set for every lead: the curves compare alike
    if candidates.size == 0:
        at = format_leads(lead_list)
        raise EnsmlError(f"{fc_name}, {an_name} and the predictions have no init dates in common at {at}")
    return EnsembleFrame(
        forecast=fc,
        analysis=an,
        variables=variables,
        levels=levels,
        leads=lead_list,
        inits=candidates,
        weights=area_weights(fc, what=fc_name, note=note),
        names=names,
        runs=runs,
        scanned=scanned,
        oracle=orc,
        oracle_vars=needed,
        dropped=dropped,
    )


def _open_oracle(
    path: Paths,
    variables: Sequence[str],
    extra: Sequence[str],
    leads: np.ndarray,
    partial: bool,
    fc: xr.Dataset,
    fc_name: str,
) -> tuple[xr.Dataset | None, list[str]]:
    """The oracle, lazily, and what is read of it: each variable's family parameters (the
    family its ``ensml_distribution`` names; normal without it) and ``extra``. The oracle is
    ``None`` for a partial frame when it lacks a variable or every lead."""
    orc = open_dataset(path, "oracle")
    families = distribution_of(orc.attrs, variables, f"oracle {path}")
    needed = [f"{v}_{p}" for v, name in families.items() for p in family_params(name)] + list(extra)
    absent = [v for v in needed if v not in orc.data_vars]
    if absent and not partial:
        found = ", ".join(map(str, orc.data_vars))
        raise EnsmlError(f"oracle file {path} has no variable {absent[0]!r} (found: {found})")
    if LEAD_TIME not in orc.dims:
        raise EnsmlError(f"oracle {path} has no lead_time dim (found dims: {', '.join(map(str, orc.dims))})")
    if partial and (absent or not np.isin(leads, orc[LEAD_TIME].values).any()):
        return None, needed
    if not partial:
        check_lead_times(orc, leads, f"oracle {path}")
    check_same_grid(fc, orc, fc_name, f"oracle {path}")
    return orc, needed


__all__ = [
    "EnsembleFrame",
    "LeadFrame",
    "build_frame",
]
