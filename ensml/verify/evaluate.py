"""``ensml evaluate``: score raw ensembles, post-processed and spread predictions, and the oracle.

Estimators, stated in every table: raw ensembles get the empirical (standard) ensemble CRPS
(the fair CRPS with ``fair``); predictive distributions (post-processing model, oracle) the
CRPS of their family (:mod:`ensml.verify.families`: the predictions' run metadata, the oracle's
``ensml_distribution``), the closed-form Gaussian CRPS for the normal family, whose rows keep
their names (``post-processed (Gaussian)``) while the others say their family
(``post-processed (csg0)``). Variables with a family bounded below (precipitation, wind speed)
get Brier scores, reliability, the threshold-weighted CRPS, PIT histograms and, for
precipitation, SEEPS and the fractions skill score at event thresholds
(:mod:`ensml.verify.events`, :mod:`ensml.verify.thresholds`), in tables of their own. All means
are weighted by cell area (:func:`ensml.data.weights.area_weights`: exact over latitude on a
regular grid, from the 2-D latitude/longitude on a projected grid, uniform with a note where
the coordinates define no cells) and averaged over the test init times.

The forecast, analysis and every other input are opened, checked and aligned by valid time by
the one frame builder (:func:`ensml.data.frame.build_frame`): each predictions, spread
predictions and members file's run metadata is read back (the kind of model, ``k``, the
leads), the files of one option must come from one run, and every scored variable and lead
must be present. The leads are those of the runs given (every forecast lead but 0 h without
one), scored one lead at a time on one set of init times: those of every input whose valid time
the analysis holds at every scored lead. Skill and gap closed refer to the raw ensemble and the
oracle at the same lead; each skill has its 95 % moving-block bootstrap interval over init times
and a Diebold-Mariano test against the raw ensemble (:mod:`ensml.scores.significance`). No NaN
or infinite value in a forecast or prediction is accepted, which NaN-skipping means would
silently drop; NaN in the analysis means "not observed": those init times and points are left
out of every forecast's score alike, and the tables' ``n_scored`` say how many values were
scored (:mod:`ensml.verify.inputs`). Nothing is written before everything is scored.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr
from jsonargparse.typing import PositiveFloat, PositiveInt

from ensml.data.frame import EnsembleFrame, LeadFrame, build_frame
from ensml.data.grid import horizontal_dims
from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.outputs import OutputFolder
from ensml.data.runfiles import leads_option
from ensml.data.subset import Subset
from ensml.names import INIT_TIME, LEVEL, MEMBER, as_list, raw_ensemble_name, raw_subset_name, units_of
from ensml.progress import Progress, note, seconds
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.hersbach import crps_decomposition
from ensml.scores.significance import skill_tests
from ensml.times import LeadLike, format_lead, format_leads, lead_hours
from ensml.verify.cases import load_cases
from ensml.verify.casestudy import CaseResult, case_files, score_case
from ensml.verify.event_tables import event_files
from ensml.verify.events import EventTables, crps_as_event_row, event_setups, score_events
from ensml.verify.families import (
    distribution_crps,
    distributions,
    estimator,
    frame_families,
    reading_families,
)
from ensml.verify.inputs import check_complete, check_observed, count_observed, missing_as_unobserved
from ensml.verify.options import Selection, Sources
from ensml.verify.rows import by_lead, crps_rows, decomposition_rows, on_grid, slug, spread_scores
from ensml.verify.stations import StationScores, evaluate_stations, gridded_options, station_options
from ensml.verify.tables import Content, score_files, write_files
from ensml.verify.thresholds import EventThresholds


@dataclass
class Scores:
    """What :func:`evaluate` scored and wrote (the tables as in ``scores.csv`` and ``spread.csv``)."""

    table: pd.DataFrame  # CRPS: a row per lead, variable, level and forecast
    spread: pd.DataFrame | None  # spread estimation, with spread predictions
    n_inits: int
    weighting: str  # how means are weighted (``weighting`` of ``area_weights``)
    leads: np.ndarray  # the leads scored, timedelta64[ns]
    dropped: np.ndarray  # leads some file lacks, left out under ``leads="common"``
    variables: list[str]
    levels: list[float]
    per_point: xr.Dataset  # the per-point scores (``scores.nc``)
    cases: list[CaseResult] = field(default_factory=list)
    out_dir: Path | None = None  # where :func:`evaluate` wrote them
    decomposition: pd.DataFrame | None = None  # Hersbach's terms of each ensemble's CRPS
    events: EventTables | None = None  # the threshold scores of the bounded variables

    def files(self) -> dict[str, Content]:
        """The files of ``evaluate`` by name (``scores.*``, ``spread.*``, ``decomposition.*``,
        ``cases/*``; with bounded variables ``scores_<var>.*``, ``reliability_<var>.csv``,
        ``reliability_<var>_gt<threshold>.png`` and ``pit_<var>.csv``)."""
        files = score_files(
            self.table,
            self.spread,
            self.per_point,
            self.n_inits,
            self.weighting,
            self.leads_note,
            decomposition=self.decomposition,
        )
        if self.events is not None:
            files.update(event_files(self.events, self.n_inits, self.weighting, self.leads_note))
        if self.cases:
            files.update({f"cases/{name}": data for name, data in case_files(self.cases).items()})
        return files

    @property
    def leads_note(self) -> str:
        """What was left out of the tables, for their headers ("" when nothing)."""
        if not self.dropped.size:
            return ""
        return f"Leads every file holds: {format_leads(self.leads)}; dropped {format_leads(self.dropped)}."


def evaluate(
    forecast: str | list[str],
    analysis: str | list[str] | None = None,
    predictions: str | list[str] | None = None,
    spread_predictions: str | list[str] | None = None,
    oracle: str | None = None,
    members: str | list[str] | None = None,
    k: PositiveInt | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    variables: str | list[str] | None = None,
    levels: PositiveFloat | list[PositiveFloat] | None = None,
    out_dir: str | None = "runs/eval",
    cases: str | list[str] | None = None,
    fair: bool = False,
    reader: ReaderOptions | None = None,
    analysis_reader: ReaderOptions | None = None,
    observations: str | None = None,
    extraction: Literal["nearest", "bilinear"] = "nearest",
    model_height: str | None = None,
    lapse_rate: float = STANDARD_LAPSE_RATE,
    missing_forecast: bool = False,
    thresholds: dict[str, list[float]] | None = None,
) -> Scores | StationScores:
    """Score forecasts at each lead time on the init times of the predictions (or all forecast inits).

    Parameters
    ----------
    forecast
        The raw ensemble forecast (paths or globs).
    analysis
        The verifying analysis (paths or globs). Give it or ``observations``, not both.
    predictions
        netCDF written by ``ensml predict`` with a post-processing model, or ``ensml postprocess``
        outputs of a mixed model (files or a glob): each variable's predictive distribution, its
        family named by the run metadata (``ensml_distribution``; Gaussian without it) and its
        parameters ``<var>_<param>`` (``<var>_mean``, ``<var>_std`` for a normal;
        ``tp_shape``, ``tp_scale``, ``tp_shift`` for a censored shifted gamma), scored with the
        family's CRPS. Every file must hold ensml's run metadata (``ensml_*`` attributes), all
        from one run (one checkpoint); a spread model's file here is an error.
    spread_predictions
        The same from a spread model (``<var>_std``): scored by RMSE and correlation against the
        M-member spread (std, ddof 0), beside the K-member sample std. A post-processing
        model's file here is an error.
    oracle
        The generator's true predictive distribution by init and lead, from ``ensml data
        synth``: the best CRPS any forecast could reach. Its family per variable is its
        ``ensml_distribution`` attribute (``"z:normal tp:csg0"``; Gaussian without it), its
        parameters ``<var>_<param>`` as in predictions.
    members
        Calibrated members, e.g. the ECC members of ``ensml postprocess`` outputs (files or a
        glob, with run metadata; variables named as in the forecast, with a member dim): scored
        with the empirical ensemble CRPS.
    k
        Size of the raw subset scored beside the full ensemble (members 0 … k-1). Taken from the
        run metadata of the predictions, spread predictions and members; give it only without
        them (default 5), or it must agree with them.
    leads
        Lead times scored: hours (``24``) or durations (``24h``, ``P1D``), one or a list;
        ``common`` for the leads every given file holds (the others are dropped, and the tables
        say so); or unset (default) for the leads of the given predictions, spread predictions
        and members, each of which must then hold every one (else an error names the file and
        the lead), or, with none of them, every lead of the forecast but 0 h. Leads are scored
        one at a time, so memory holds one lead's fields.
    variables
        Score these variables, one name (``tp``) or a list (``[z, t]``; default: all of the
        forecast's). Every predictions, members and oracle file given must hold each one: a file
        without one is an error, not a table without its rows; pass ``variables`` to score fewer.
    levels
        Score these pressure levels in hPa, one (``500``) or a list (default: all of the
        forecast's).
    out_dir
        Where ``scores.csv``, ``scores.md``, ``spread.csv``, ``spread.md`` (one block of rows per
        lead, column ``lead_h``) and the per-point ``scores.nc`` are written, all together at the
        end. New, empty, or a folder whose ledger (``.ensml/``) records ensml's outputs: a rerun
        replaces only the files that ledger records as evaluate's; any other non-empty folder is
        refused before any work. ``scores.nc`` has a ``lead_time`` dim when more than one lead
        is scored; with one, its fields have none (a scalar ``lead_time``). ``null`` (``None``
        from Python): score, print and return the tables, write nothing.
    cases
        Case-study YAML files, folders or globs (see :mod:`ensml.verify.cases`): scored per case
        (at each case's own ``lead``) and forecast into ``<out_dir>/cases/`` (``cases.csv``,
        ``cases.md``, one map figure per case), computed before anything is written.
    fair
        Score the ensembles (raw, subset, calibrated members) with the fair CRPS (Ferro 2014:
        the score an ensemble of the same distribution would get with infinitely many members),
        so that ensembles of different sizes compare fairly; the tables' ``estimator`` column
        says ``fair ensemble``. Default: the standard (empirical) ensemble CRPS.
    reader
        How to read the forecast files, as ``fit``'s data ``reader``: GRIB filters
        (``{filter_by_keys: {dataType: pf}}``), ``drop_control``, variable renames
        (``{rename: {2t: t2m}}``); e.g. ``--reader.rename '{tp: precip}'``.
    analysis_reader
        The same for the analysis files (e.g. ``--analysis_reader.filter_by_keys
        '{shortName: tp}'``).
    observations
        Score against station (point) observations instead of an analysis: a CSV file
        (columns station id, ``lat``/``latitude``, ``lon``/``longitude``, the valid ``time``,
        optional ``elevation`` in m and ``level`` in hPa, and a column per variable, e.g.
        ``t2m``, or ``variable`` and ``value``; an empty cell is a value not observed) or a
        netCDF file with a ``station`` dim (:mod:`ensml.data.stations`). The forecast is taken
        at each station (``extraction``) at the observation's valid time; a pair is scored
        where the station observed. Writes ``scores.csv``, ``scores.md`` (pooled over
        stations: unweighted means over the station-times, with the pairs counted),
        ``stations.csv`` (per station) and ``stations.nc`` (the CRPS of every station-time);
        ``predictions``, ``spread_predictions``, ``oracle``, ``members``, ``cases`` and
        ``analysis_reader`` do not apply. Stations outside the forecast's grid are left out,
        with a note.
    extraction
        How the forecast is taken at a station (with ``observations``): ``nearest``, the grid
        point nearest on the great circle, or ``bilinear`` between the four around it (in
        latitude/longitude, or in projection x/y on a projected grid with a CF grid mapping).
    model_height
        With ``observations`` of 2 m temperature (``t2m``/``2t``) and station elevations: a file
        of the model's surface geopotential (``z``, m2 s-2, divided by g) or orography (m) on the
        forecast's grid. The forecast's 2 m temperature is moved to each station's height:
        ``t2m + lapse_rate * (model height - station elevation)``; other variables are not
        corrected.
    lapse_rate
        Γ of that correction, K/m (default 0.0065, the standard atmosphere's).

    missing_forecast
        Treat NaN in the raw forecast as missing (a member that did not run, a masked point)
        instead of refusing it: an init time and point where any member is NaN is left out of
        every forecast's score alike, as an unobserved analysis value is, and counted out of
        ``n_scored``. NaN in predictions, calibrated members or the oracle is still an error.
    thresholds
        Event thresholds of variables, in the analysis' units, e.g. ``{tp: [1, 10, 50]}``: the
        Brier scores, reliability diagrams, fractions skill scores and threshold-weighted CRPS of
        those variables are at these. Default: precipitation (``tp``) 0.1, 1, 5, 10 and 25 mm
        (twCRPS at 10 and 25 mm), 10 m wind speed (``si10``) 10, 15 and 20 m s-1 (twCRPS at 15
        and 20), converted to the analysis' units (:mod:`ensml.verify.thresholds`). A variable named
        here gets these scores even with a Gaussian family. Written, per variable ``<var>``
        with a family bounded below or thresholds, to ``scores_<var>.csv``/``.md`` (CRPS, Brier
        score per threshold, twCRPS, PIT flatness, SEEPS and FSS for precipitation: one row per
        lead, forecast, score and threshold, with skill, interval and Diebold-Mariano test as
        the CRPS rows), ``reliability_<var>.csv`` and one ``reliability_<var>_gt<t>.png`` per
        threshold, and ``pit_<var>.csv`` (PIT and rank histograms).

    Returns
    -------
    Scores or StationScores
        The CRPS table (one row per lead, variable, level and forecast; skill and gap closed
        relative to the raw ensemble and the oracle at the same lead), the spread table, and
        what they cover; with ``observations``, :class:`ensml.verify.stations.StationScores`.

    Raises
    ------
    EnsmlError
        Before anything is written, naming the file: predictions of the wrong kind or without
        run metadata, files of two runs in one option, a ``k`` that disagrees with the runs, a
        missing variable, level or lead time, no lead time in common, a NaN or infinite
        value in a forecast or prediction, or an infinite one in the analysis; an ``out_dir``
        that ensml may not write (a non-empty folder without its ledger, a file, the current
        folder, read-only), checked before any work. While writing: a full disk and the like,
        naming the path; the folder is then as it was. Only files that ``evaluate``'s ledger
        records are replaced or removed (:mod:`ensml.data.outputs`).
    """
    variables, levels = as_list(variables, "variables"), as_list(levels, "levels")
    selection = Selection(variables, levels, leads, k)
    if observations is not None or analysis is None:  # station observations: ensml.verify.stations
        station_options(
            analysis,
            observations,
            predictions=predictions,
            spread_predictions=spread_predictions,
            oracle=oracle,
            members=members,
            cases=cases,
            analysis_reader=analysis_reader,
            missing_forecast=missing_forecast,
            thresholds=thresholds,
        )
        return evaluate_stations(
            forecast,
            observations,
            selection,
            fair=fair,
            extraction=extraction,
            model_height=model_height,
            lapse_rate=lapse_rate,
            out_dir=out_dir,
            reader=as_reader(reader),
        )
    gridded_options(extraction=extraction, model_height=model_height, lapse_rate=lapse_rate)
    return evaluate_grid(
        forecast,
        analysis,
        Sources(predictions, spread_predictions, oracle, members),
        selection,
        cases=cases,
        fair=fair,
        missing_forecast=missing_forecast,
        thresholds=thresholds,
        out_dir=out_dir,
        reader=reader,
        analysis_reader=analysis_reader,
    )


def evaluate_grid(
    forecast: str | list[str],
    analysis: str | list[str],
    sources: Sources | None = None,
    selection: Selection | None = None,
    *,
    cases: str | list[str] | None = None,
    fair: bool = False,
    missing_forecast: bool = False,
    thresholds: dict[str, list[float]] | None = None,
    out_dir: str | None = "runs/eval",
    reader: ReaderOptions | None = None,
    analysis_reader: ReaderOptions | None = None,
) -> Scores:
    """Score ``forecast`` and ``sources`` against the gridded ``analysis`` at each lead time.

    The options are :func:`evaluate`'s, grouped: ``sources`` the predictions, spread
    predictions, oracle and calibrated members; ``selection`` the variables, levels, leads and
    ``k`` (default: none; all of the forecast's, K of 5). Raises as :func:`evaluate`.
    """
    sources, selection = sources or Sources(), selection or Selection()
    if out_dir is not None:
        names = [
            "scores.csv",
            "scores.md",
            "scores.nc",
            "decomposition.csv",
            "decomposition.md",
            *(["spread.csv", "spread.md"] if sources.spread_predictions else []),
        ]
        names += ["cases/cases.csv", "cases/cases.md"] if cases else []
        OutputFolder.check(out_dir, "evaluate", names=names)  # before the work: fails in seconds
    leads = leads_option(selection.leads)  # a bad lead fails before the cases
    # cases are scored first: a bad case fails before any other work (they are small)
    readers = {"reader": as_reader(reader), "analysis_reader": as_reader(analysis_reader)}
    predictions, oracle, k = sources.predictions, sources.oracle, selection.k
    studies = [
        score_case(c, forecast, analysis, predictions, oracle, k, **readers) for c in load_cases(cases or [])
    ]
    frame = build_frame(
        forecast,
        analysis,
        variables=selection.variables,
        levels=selection.levels,
        leads=leads,
        predictions=predictions,
        spread_predictions=sources.spread_predictions,
        members=sources.members,
        oracle=oracle,
        **readers,
    )
    subset = frame.subset(k)
    families = frame_families(frame)
    frame = reading_families(frame, families)  # each distribution's parameter variables
    if frame.dropped.size:
        note(
            f"evaluate: scoring {format_leads(frame.leads)}, the leads every file holds; dropped "
            f"{format_leads(frame.dropped)}"
        )
    table, spread, per_point, decomposition, events = score_frame(
        frame, subset, fair, missing_forecast, families=families, thresholds=thresholds
    )
    scores = Scores(
        table,
        spread,
        n_inits=frame.inits.size,
        weighting=frame.weights.attrs["weighting"],
        leads=frame.leads,
        dropped=frame.dropped,
        variables=frame.variables,
        levels=frame.levels,
        per_point=per_point,
        cases=studies,
        decomposition=decomposition,
        events=events,
    )
    if out_dir is not None:
        note(f"evaluate: writing the tables and per-point scores to {out_dir}")
        with OutputFolder.open(out_dir, "evaluate", whole=True) as folder:  # one run's results, whole
            write_files(folder, scores.files())
        scores.out_dir = Path(out_dir)
    return scores


def score_frame(
    frame: EnsembleFrame,
    subset: Subset,
    fair: bool = False,
    missing_forecast: bool = False,
    *,
    families: dict[str, dict[str, Family]] | None = None,
    thresholds: dict[str, list[float]] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, xr.Dataset, pd.DataFrame, EventTables | None]:
    """The CRPS table, the spread table (or ``None``), the per-point scores of ``frame``, the
    CRPS decomposition of its ensembles and the event scores of its bounded variables (``None``
    without any).

    Reads one lead at a time (each value checked complete); the raw ``subset``
    (:func:`ensml.data.subset.raw_subset`) is scored beside the full ensemble; ``fair``:
    ensembles with the fair CRPS; ``missing_forecast``: NaN in the raw forecast is "not
    observed" (see :func:`evaluate`); ``families``: of each distribution source
    (:func:`ensml.verify.families.frame_families`, whose parameters ``frame`` reads:
    :func:`~ensml.verify.families.reading_families`);
    ``thresholds``: as :func:`evaluate`'s.
    """
    for lead in frame.leads:  # a lead of no whole hours has no row in the tables: fail before the work
        lead_hours(lead)
    families = frame_families(frame) if families is None else families
    setups = event_setups(frame, families, thresholds)
    events = EventTables() if setups else None
    rows, spread_rows, parts, per_lead = [], [], [], []
    progress = Progress("evaluate", len(frame.leads) * len(frame.variables), "fields")
    for lead in frame.leads:
        at_lead = frame.at(
            lead,
            check=check_complete,
            check_analysis=check_observed,
            check_forecast=check_observed if missing_forecast else None,
        )
        if missing_forecast:
            at_lead = missing_as_unobserved(at_lead)
        fields: dict[str, xr.DataArray] = {}
        for var in frame.variables:
            crps, spread, decomposition = score_variable(
                frame,
                at_lead,
                var,
                subset,
                fields,
                fair,
                families=families,
                events=events,
                setup=setups.get(var),
            )
            rows += crps
            spread_rows += spread
            parts += decomposition
            progress.advance(f"{var} at +{format_lead(lead)} scored in {seconds(progress.lap)}")
        per_lead.append(xr.Dataset(fields))
    progress.close()
    spread_table = pd.DataFrame(spread_rows) if spread_rows else None
    per_point = on_grid(by_lead(per_lead, frame.leads), frame.forecast)
    return pd.DataFrame(rows), spread_table, per_point, pd.DataFrame(parts), events


def score_variable(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    subset: Subset,
    fields: dict[str, xr.DataArray],
    fair: bool = False,
    *,
    families: dict[str, dict[str, Family]] | None = None,
    events: EventTables | None = None,
    setup: tuple[EventThresholds, xr.Dataset | None] | None = None,
) -> tuple[list[dict], list[dict], list[dict]]:
    """CRPS rows, spread rows and CRPS decomposition rows of ``var`` at one lead; its per-point
    fields are added to ``fields``; with ``setup`` (its thresholds and climatology), its event
    scores are added to ``events``."""
    x, y, m = lf.forecast[var], lf.analysis[var], lf.forecast.sizes[MEMBER]
    raw_key, k = raw_ensemble_name(m), subset.k
    ensembles = subset.ensembles(x)
    if "members" in lf.runs:
        calibrated = lf.runs["members"][var]
        ensembles[f"post-processed members ({calibrated.sizes[MEMBER]})"] = calibrated
    dists = distributions(lf, families if families is not None else frame_families(frame), var)
    sources = _crps_fields(frame, lf, var, ensembles, fair, dists)
    for name, crps in sources.items():  # the mean over the init times that observe each point
        fields[f"crps_{slug(name)}_{var}"] = crps.mean(INIT_TIME)
    count_observed(y, var, lf.lead, fields)
    h, weights, levels = lead_hours(lf.lead), frame.weights, frame.levels
    units = y.attrs.get("units") or None  # the data's own units, else ensml's table (names.py)
    ensemble = "fair ensemble" if fair else "empirical ensemble"
    tests = skill_tests(sources, weights, raw_key, lf.lead)
    oracle = next((name for name in dists if name.startswith("oracle")), "oracle (Gaussian)")
    estimators = {name: estimator(family) for name, (_, family) in dists.items()}
    rows = crps_rows(
        sources,
        weights,
        var,
        levels,
        h,
        raw_key,
        units=units,
        ensemble=ensemble,
        init_first=True,
        tests=tests,
        oracle_key=oracle,
        estimators=estimators,
    )
    if events is not None and setup is not None:
        events.rows += [crps_as_event_row(row) for row in rows]
        thr, clim = setup
        score_events(
            frame,
            y,
            var,
            lf.lead,
            ensembles,
            dists,
            thr,
            raw_key,
            events,
            fair=fair,
            climate=clim,
            units=units or units_of(var),
        )
    parts = decomposition_rows(_decomposed(ensembles, y, weights), var, levels, h, units=units)
    if "spread predictions" not in lf.runs:
        return rows, [], parts
    target = x.std(MEMBER, ddof=0)
    estimators = {
        f"{k}-member sample std (ddof 1)": ensembles[raw_subset_name(k)].std(MEMBER, ddof=1),
        "spread model": lf.runs["spread predictions"][f"{var}_std"],
    }
    for name, est in estimators.items():
        fields[f"spread_rmse_{slug(name)}_{var}"] = np.sqrt(((est - target) ** 2).mean(INIT_TIME))
    return rows, spread_scores(estimators, target, weights, var, levels, h, m, units=units), parts


def _crps_fields(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    ensembles: dict[str, xr.DataArray],
    fair: bool,
    dists: dict[str, tuple[xr.Dataset, Family]],
) -> dict[str, xr.DataArray]:
    """The CRPS of every ensemble and predictive distribution of ``var`` by init time and point
    (NaN where the analysis is not observed): the intervals of the tables resample init times."""
    y = lf.analysis[var]
    dims = [d for d in [INIT_TIME, LEVEL, *horizontal_dims(frame.forecast)] if d in y.dims]
    sources = {name: crps_ensemble(x, y, preserve_dims=dims, fair=fair) for name, x in ensembles.items()}
    for name, (ds, family) in dists.items():
        sources[name] = distribution_crps(ds, var, family, y, dims, source=f"{name} {var}")
    post = [name for name in dists if name.startswith("post-processed")]
    oracle = [name for name in dists if name.startswith("oracle")]
    order = [*list(ensembles)[:2], *post, *list(ensembles)[2:], *oracle]
    return {name: sources[name] for name in order if name in sources}  # the tables' row order


def _decomposed(
    ensembles: dict[str, xr.DataArray], y: xr.DataArray, weights: xr.DataArray
) -> dict[str, xr.Dataset]:
    """The Hersbach decomposition of each ensemble's area-weighted mean CRPS, per level, over the
    init times and points where ``y`` is observed (a NaN gets weight 0, as in the CRPS table);
    an ensemble of one member (a deterministic run) has none: its bins are only the outliers."""
    observed = y.notnull()
    if not bool(observed.all()):  # weight 0: the values there are never used
        weights, y = weights * observed, y.where(observed, 0.0)
        ensembles = {name: x.where(observed, 0.0) for name, x in ensembles.items()}  # missing_forecast
    keep = [LEVEL] if LEVEL in y.dims else []
    return {
        name: crps_decomposition(x, y, preserve_dims=keep, weights=weights)
        for name, x in ensembles.items()
        if x.sizes[MEMBER] > 1
    }


__all__ = ["Scores", "evaluate", "evaluate_grid"]
