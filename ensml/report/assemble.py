"""``ensml report``: one self-contained verification report (Markdown + PNG, and HTML).

The report holds the global scores of ``ensml evaluate`` at every lead time the predictions
hold, CRPS, CRPS skill and spread-skill by lead time, rank histograms, reliability diagrams and
maps of the per-point CRPS skill at the report's lead (by default the last lead scored), and the
case studies (from YAML files, the stored storms of the synthetic data and/or found
automatically). The data are read and scored once: the frame of ``evaluate``'s grid verb
(:func:`ensml.verify.frame_scores.grid_frame`) is scored in ``evaluate``'s one pass over its
leads, which also hands each lead's fields to the report's scores by lead time
(:func:`ensml.report.scores.scores_by_lead`). So the charts by lead time cover the leads, init
times and weights of the global scores: the leads ``evaluate`` scores (those every file holds;
not a 0 h that the predictions lack), and their CRPS is that of the global table. Each
predictive distribution (post-processed, oracle) is scored and drawn in its own family, through
the functions of ``evaluate`` (:mod:`ensml.verify.families`); precipitation and wind speed get
reliability diagrams at ``evaluate``'s event thresholds. ``out_dir`` is checked before any work
(:class:`ensml.data.outputs.OutputFolder`: new, empty or a folder whose ledger ensml keeps);
everything is computed in memory, then written through the folder's staging and committed
whole: a failure leaves the folder as it was, and only files that an earlier report's ledger
records are replaced or removed (a user's own ``figures/`` or notes beside them are never
touched).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import xarray as xr
from jsonargparse.typing import NonNegativeInt, PositiveFloat, PositiveInt

from ensml.cluster.options import ClusterKind, JobQueue
from ensml.data.frame import EnsembleFrame
from ensml.data.grid import describe, is_projected
from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.open import check_lead_times, open_forecast
from ensml.data.outputs import OutputFolder
from ensml.data.runfiles import leads_option
from ensml.errors import EnsmlError
from ensml.names import LEVEL, as_list
from ensml.progress import Progress, note, seconds
from ensml.report.page import Content, blocks
from ensml.report.render import render
from ensml.report.scores import scores_by_lead, skill_by_lead
from ensml.report.stations import products_of, station_blocks
from ensml.times import LeadLike, format_lead, format_leads, lead_hours, parse_lead
from ensml.verify.casefind import find_extreme_cases, storm_cases
from ensml.verify.cases import Case, load_cases
from ensml.verify.casestudy import score_case
from ensml.verify.distributed import FrameSource
from ensml.verify.evaluate import Scores
from ensml.verify.frame_scores import grid_frame
from ensml.verify.on_cluster import INIT_BLOCK, check_options, cluster_spec
from ensml.verify.options import Selection, Sources
from ensml.verify.stations import (
    StationScores,
    evaluate_stations,
    gridded_options,
    station_options,
)
from ensml.verify.tables import write_files


@dataclass
class Report:
    """A report written by :func:`report`: its folder and the global scores it shows."""

    path: Path
    scores: Scores | StationScores

    @property
    def pages(self) -> tuple[Path, Path]:
        """``report.md`` and ``report.html``."""
        return self.path / "report.md", self.path / "report.html"


def report(
    forecast: str | list[str],
    analysis: str | list[str] | None = None,
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    cases: str | list[str] | None = None,
    n_storm_cases: NonNegativeInt = 0,
    n_extreme_cases: NonNegativeInt = 0,
    k: PositiveInt | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    lead: LeadLike | None = None,
    variables: str | list[str] | None = None,
    levels: PositiveFloat | list[PositiveFloat] | None = None,
    out_dir: str = "runs/report",
    title: str = "ensml verification report",
    case_variable: str | None = None,
    case_level: PositiveFloat | None = None,
    observations: str | None = None,
    extraction: Literal["nearest", "bilinear"] = "nearest",
    model_height: str | None = None,
    cluster: ClusterKind = "none",
    workers: PositiveInt | None = None,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    init_block: PositiveInt = INIT_BLOCK,
) -> Report:
    """Write the verification report (``report.md`` + ``figures/``, and ``report.html``).

    Parameters
    ----------
    forecast
        The raw ensemble forecast (paths or globs).
    analysis
        The verifying analysis (paths or globs): a report on the grid.
    predictions
        Mixed-model predictions or products (each variable's predictive distribution, its family
        named by the run metadata, its parameters ``<var>_<param>``: ``<var>_mean``,
        ``<var>_std`` for a normal, ``tp_shape``, ``tp_scale``, ``tp_shift`` for a censored
        shifted gamma), as for ``ensml evaluate``: scored and drawn in their family.
    spread_predictions
        Spread-model predictions (``<var>_std``), as for ``ensml evaluate``.
    oracle
        The generator's true predictive distribution (``ensml data synth``'s ``oracle.nc``), in
        the family its ``ensml_distribution`` names (Gaussian without it).
    members
        Calibrated or generated members (the ``v`` of ``ensml postprocess`` products or of a
        generative ``ensml predict``), as for ``ensml evaluate``: scored and drawn as an ensemble
        beside the raw one.
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1), as for
        ``ensml evaluate``: the predictions' run metadata gives it.
    leads
        Lead times of the global score table and of the charts by lead, as for ``ensml evaluate``
        (default: every lead the predictions hold, every forecast lead but 0 h without them;
        ``common`` for those all given files hold).
    lead
        Lead time of the skill maps, rank histograms, reliability diagrams and automatic case
        studies: hours (``48``) or a duration (``48h``, ``P2D``), one of the leads scored;
        default: the last lead of the global score table.
    variables
        Variables to report, one name (``tp``) or a list (default: all of the forecast's).
    levels
        Pressure levels to report, hPa, one or a list (default: all of the forecast's).
    cases
        Case-study YAML files, folders or globs (:mod:`ensml.verify.cases`).
    n_storm_cases
        Also study this many stored storms of the synthetic ``oracle`` (strongest first).
    n_extreme_cases
        Also study this many dates/boxes found automatically where the analysis exceeds its
        monthly climatological 99% quantile over the largest area.
    out_dir
        The report folder (``report.md``, ``report.html``, ``figures/``, ``tables/``), written
        together at the end: new, empty, or an earlier report's, whose files its ledger
        (``.ensml/``) records; a user's files beside them are kept, any other non-empty folder
        is refused before any work.
    title
        The report's title.
    case_variable
        Variable of the automatic cases (default ``z`` when present, else the first).
    case_level
        Level (hPa) of the automatic cases (default 500 when present, else the first).
    observations
        Instead of ``analysis``: station observations (CSV or netCDF, as ``ensml evaluate
        --observations`` reads them), for a report at the stations: the raw ensemble, station
        products (``predictions`` of a station model) and the station ``oracle``, pooled with
        intervals and Diebold-Mariano tests, by lead time, skill maps by station and one
        station's forecast plume. Cases do not apply.
    extraction
        With ``observations``: how the grid is read at a station (``nearest`` or ``bilinear``).
    model_height
        With ``observations``: the model's surface height or geopotential on the forecast's
        grid; 2 m temperature is moved to each station's elevation.
    cluster
        Where the global scores and those by lead time are computed: ``none`` (default: in this
        process), or on a dask cluster as ``ensml evaluate --cluster`` (``local``, ``slurm``,
        ``pbs``): each worker reads and scores blocks of ``init_block`` init times at one lead
        (the report's scores by lead as sums per init time, which the client adds in init
        order); the numbers are those of one process. Against an analysis, without variables
        that get event scores (a family bounded below).
    workers
        Local worker processes with ``cluster: local`` (default: one per CPU core).
    scheduler_file
        Join a running dask cluster through its scheduler file instead of starting one (start
        its workers with ``--nthreads 1``).
    scheduler_address
        Join a running dask cluster at this address (e.g. ``tcp://10.0.0.5:8786``).
    jobqueue
        SLURM/PBS settings with ``cluster: slurm|pbs`` (queue, account, cores, memory, walltime,
        jobs, …), as for ``ensml postprocess``.
    init_block
        Init times per unit of work on a cluster, as ``ensml evaluate``'s: a worker holds one
        block of init times at one lead (all members), whatever the length of the archive.

    Returns
    -------
    Report
        The report's folder and its global scores.
    """
    OutputFolder.check(out_dir, "report", names=["report.md", "report.html"])  # before hours of work
    on = cluster_spec(
        "report", cluster, workers, scheduler_file, scheduler_address, jobqueue, out_dir, init_block
    )
    if on is not None:
        check_options("report", stations=observations is not None or analysis is None)
    leads, lead = leads_option(leads), (parse_lead(lead) if lead is not None else None)  # fail at once
    variables, levels = as_list(variables, "variables"), as_list(levels, "levels")
    if observations is not None or analysis is None:
        given = {"spread_predictions": spread_predictions, "members": members, "cases": cases}
        given |= {"n_storm_cases": n_storm_cases}
        given |= {
            "n_extreme_cases": n_extreme_cases,
            "case_variable": case_variable,
            "case_level": case_level,
        }
        station_options(analysis, observations, verb="report", **given)
        selection = Selection(variables, levels, leads, k)
        sources = {
            "forecast": forecast,
            "observations": observations,
            "predictions": predictions,
            "oracle": oracle,
        }
        scored = {role: str(path) for role, path in sources.items() if path is not None}
        return _station_report(scored, selection, lead, out_dir, title, extraction, model_height)
    gridded_options(
        extraction=extraction, model_height=model_height, lapse_rate=STANDARD_LAPSE_RATE, verb="report"
    )
    _check_grid(forecast, variables, lead, n_storm_cases, n_extreme_cases, case_variable)
    case_list = load_cases(cases) if cases else []
    # the YAML cases first: a bad case fails in seconds, before the global scores
    studies = [score_case(c, forecast, analysis, predictions, oracle, k) for c in case_list]
    progress = Progress("report", 3, "stages")

    def stage(what: str) -> None:
        progress.advance(f"{what} in {seconds(progress.lap)}")

    sources = Sources(predictions, spread_predictions, oracle, members)
    grid = grid_frame(forecast, analysis, sources, Selection(variables, levels, leads, k))
    frame = grid.frame
    lead = _report_lead(lead, frame.leads)
    source = FrameSource.of(forecast, analysis, sources, Selection(variables, levels, leads, k))
    scores, by_lead = scores_by_lead(grid, on, source)  # one pass: the global scores and those by lead
    reliable = {(v, lev): s for (at, v, lev), s in by_lead.rel.items() if at == lead}
    events = by_lead.events
    if len(events):
        events = events[events["lead_h"] == lead_hours(lead)]
    stage("global scores, scores by lead time, rank histograms and reliability")
    found = _automatic_cases(frame, lead, n_storm_cases, n_extreme_cases, case_variable, case_level)
    for c in _new_cases(found, case_list, n_storm_cases):
        studies.append(score_case(c, forecast, analysis, predictions, oracle, k))
    stage(f"{len(studies)} case studies")
    content = Content(
        title,
        str(forecast),
        str(analysis),
        scores,
        frame,
        lead,
        skill_by_lead(by_lead.table),
        by_lead.hists[lead],
        reliable,
        studies,
        families=grid.families,
        events=events,
    )
    pages = render(blocks(content), title)
    with OutputFolder.open(out_dir, "report", whole=True) as folder:  # committed whole at the end
        write_files(folder, scores.files(), prefix="tables/")
        write_files(folder, pages)
    stage("maps, charts and pages")
    progress.close()
    return Report(Path(out_dir), scores)


def _station_report(
    sources: dict[str, str],
    selection: Selection,
    lead: np.timedelta64 | None,
    out_dir: str,
    title: str,
    extraction: str,
    model_height: str | None,
) -> Report:
    """The report at stations (:mod:`ensml.report.stations`), written whole to ``out_dir``."""
    scores = evaluate_stations(
        sources["forecast"],
        sources["observations"],
        selection,
        extraction=extraction,
        model_height=model_height,
        out_dir=None,
        predictions=sources.get("predictions"),
        oracle=sources.get("oracle"),
    )
    lead = _report_lead(lead, np.asarray(scores.leads, dtype="timedelta64[ns]"))
    products = products_of(sources.get("predictions"))
    files = scores.files()  # the tables and the skill maps, drawn once
    maps = {name: data for name, data in files.items() if name.startswith("figures/")}
    tables = {name: data for name, data in files.items() if name not in maps}
    pages = render(station_blocks(title, scores, sources, lead, maps, products), title)
    with OutputFolder.open(out_dir, "report", whole=True) as folder:  # committed whole at the end
        write_files(folder, tables, prefix="tables/")
        write_files(folder, pages)
    return Report(Path(out_dir), scores)


def _report_lead(lead: np.timedelta64 | None, scored: np.ndarray) -> np.timedelta64:
    """The lead of the maps, histograms and reliability: ``lead``, which must be scored, or the
    last lead scored."""
    if lead is None:
        return scored[-1]
    if lead not in scored:
        raise EnsmlError(
            f"report: lead +{format_lead(lead)} is not among the leads scored ({format_leads(scored)}); "
            "give it in --leads too, or another --lead"
        )
    return lead


def _check_grid(
    forecast, variables, lead: np.timedelta64 | None, n_storm: int, n_extreme: int, case_variable: str | None
) -> None:
    """The forecast holds the report's ``lead`` and the automatic cases' variable, and automatic
    cases have a regular grid to search."""
    if lead is None and not (n_storm or n_extreme) and case_variable is None:
        return
    grid = open_forecast(forecast, variables)
    if lead is not None:
        check_lead_times(grid, lead, f"forecast {forecast}")  # of the maps and histograms
    if case_variable is not None and case_variable not in grid.data_vars:
        held = ", ".join(map(str, grid.data_vars))
        raise EnsmlError(
            f"report: case_variable {case_variable!r} is not a variable of the report (it has {held})"
        )
    if (n_storm or n_extreme) and is_projected(grid):
        option = "n_extreme_cases" if n_extreme else "n_storm_cases"
        raise EnsmlError(
            f"report: {option} searches latitude/longitude boxes of a regular grid, and forecast "
            f"{forecast} is on a {describe(grid)}; give the cases as YAML files (--cases)"
        )


def _automatic_cases(
    frame: EnsembleFrame,
    lead: np.timedelta64,
    n_storm: int,
    n_extreme: int,
    variable: str | None,
    level: float | None,
) -> list[Case]:
    """The stored storms of the synthetic oracle and the extremes of the analysis at ``lead``."""
    on_levels = [v for v in frame.variables if LEVEL in frame.forecast[v].dims]  # the others: surface
    if (n_storm or n_extreme) and not (on_levels or variable):
        note("report: no automatic case studies (they search a pressure level; all are surface)")
        return []
    var0 = variable or ("z" if "z" in on_levels else (on_levels or frame.variables)[0])
    default_level = 500.0 if 500.0 in frame.levels else (frame.levels[0] if frame.levels else None)
    lev0 = level if level is not None else default_level
    found: list[Case] = []
    orc = frame.oracle
    if n_storm and orc is not None and "event_mask" in orc:
        found += storm_cases(orc, lead=lead, variable=var0, level=lev0, init_times=frame.inits)
    if n_extreme:
        analysis: xr.DataArray = frame.analysis[var0].sel({LEVEL: lev0})
        found += find_extreme_cases(
            analysis, variable=var0, level=lev0, lead=lead, n=n_extreme, valid_times=frame.inits + lead
        )
    return found


def _new_cases(found: list[Case], given: list[Case], n_storm: int) -> list[Case]:
    """The automatic cases that repeat no case before them (YAML cases first); ``n_storm`` storms at most."""
    out: list[Case] = []
    storms = 0
    for c in found:
        is_storm = c.name.startswith("storm")
        if any(_same_event(c, d) for d in [*given, *out]) or (is_storm and storms >= n_storm):
            continue
        storms += is_storm
        out.append(c)
    return out


def _same_event(a: Case, b: Case) -> bool:
    """Two cases of one field whose windows and boxes overlap (an automatic repeat of a YAML case)."""
    if (a.variable, a.level, a.lead) != (b.variable, b.level, b.lead):
        return False
    if a.end < b.start or b.end < a.start:
        return False
    if a.region.lat[1] < b.region.lat[0] or b.region.lat[1] < a.region.lat[0]:
        return False
    lon = np.arange(0.0, 360.0, 1.0)
    return bool(np.intersect1d(a.region.lon_indices(lon), b.region.lon_indices(lon)).size)


__all__ = ["Report", "report"]
