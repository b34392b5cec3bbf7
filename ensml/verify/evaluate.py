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

This module is the verb: :func:`evaluate` checks which options go together and hands them to
:func:`evaluate_grid` (or to :func:`ensml.verify.stations.evaluate_stations`), which scores the
cases, builds the frame (:func:`ensml.verify.frame_scores.grid_frame`), scores it in one pass
over its leads (:func:`score_grid`, through :func:`ensml.verify.frame_scores.score_frame`) and
writes :class:`Scores`' files.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Literal

import numpy as np
import pandas as pd
import xarray as xr
from jsonargparse.typing import PositiveFloat, PositiveInt

from ensml.cluster.options import ClusterKind, JobQueue
from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.outputs import OutputFolder
from ensml.data.runfiles import leads_option
from ensml.names import as_list
from ensml.progress import note
from ensml.times import LeadLike, format_leads
from ensml.verify.cases import load_cases
from ensml.verify.casestudy import CaseResult, case_files, score_case
from ensml.verify.distributed import FrameSource
from ensml.verify.event_tables import event_files
from ensml.verify.events import EventTables
from ensml.verify.frame_scores import BlockParts, GridFrame, LeadHook, grid_frame, score_frame
from ensml.verify.multivariate import MultivariateScores, multivariate_files
from ensml.verify.on_cluster import (
    INIT_BLOCK,
    EvaluateCluster,
    check_blocks,
    check_options,
    cluster_spec,
    on_cluster,
)
from ensml.verify.options import Selection, Sources
from ensml.verify.stations import StationScores, evaluate_stations, gridded_options, station_options
from ensml.verify.tables import Content, score_files, write_files


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
    multivariate: MultivariateScores | None = None  # energy, variogram, pre-rank, spectra

    def files(self) -> dict[str, Content]:
        """The files of ``evaluate`` by name (``scores.*``, ``spread.*``, ``decomposition.*``,
        ``cases/*``; with bounded variables ``scores_<var>.*``, ``reliability_<var>.csv``,
        ``reliability_<var>_gt<threshold>.png`` and ``pit_<var>.csv``; with multivariate scores
        ``multivariate.*``, ``rank_histograms.csv`` and ``rank_histograms_<var>.png``)."""
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
        if self.multivariate is not None:
            header = " ".join(filter(None, [f"Scores over {self.n_inits} init times.", self.leads_note]))
            files.update(multivariate_files(self.multivariate, header))
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
    multivariate: bool = False,
    cluster: ClusterKind = "none",
    workers: PositiveInt | None = None,
    scheduler_file: str | None = None,
    scheduler_address: str | None = None,
    jobqueue: JobQueue | None = None,
    init_block: PositiveInt = INIT_BLOCK,
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
        from one run (one checkpoint); a spread model's file here is an error. With
        ``observations``: station products of ``ensml postprocess`` (a station model's), scored
        at the stations they share with the observations, on their init times.
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
        each pooled skill has its 95 % interval and Diebold-Mariano test against the raw
        ensemble. ``predictions`` are then station products and ``oracle`` the station oracle
        (``stations_oracle.nc``, with ``gap_closed``); ``spread_predictions``, ``members``,
        ``cases`` and ``analysis_reader`` do not apply. Stations
        outside the forecast's grid are left out, with a note.
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
    multivariate
        Also score every ensemble as whole fields (:mod:`ensml.verify.multivariate`): energy and
        variogram scores over the globe and three latitude bands, rank histograms of area means
        and band depths, and the members' zonal power spectra against the analysis's, with 95 %
        block-bootstrap intervals and Diebold-Mariano tests; written to ``multivariate.csv``/``.md``,
        ``rank_histograms.csv`` and ``rank_histograms_<var>.png``. Against an analysis only.
    cluster
        Where the scoring runs: ``none`` (default: in this process, one lead at a time), or on
        a dask cluster, as ``ensml postprocess`` runs: ``local`` (a LocalCluster of ``workers``
        processes), ``slurm`` or ``pbs`` (dask-jobqueue jobs, see ``jobqueue``). Each worker
        reads and scores blocks of ``init_block`` init times at one lead; the tables are those
        of the single-process run. Against an analysis, without ``multivariate`` and without
        event scores (no ``thresholds``, no variable with a family bounded below).
    workers
        Local worker processes with ``cluster: local`` (default: one per CPU core).
    scheduler_file
        Join a running dask cluster through its scheduler file instead of starting one (start
        its workers with ``--nthreads 1``).
    scheduler_address
        Join a running dask cluster at this address (e.g. ``tcp://10.0.0.5:8786``).
    jobqueue
        SLURM/PBS settings, as ``ensml postprocess``'s: queue, account, cores, memory,
        processes, jobs, walltime, directives, pending_timeout, no_worker_timeout.
    init_block
        Init times per unit of work on a cluster: a worker holds one block of init times at one
        lead (all members), whatever the length of the archive.

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
    spec = cluster_spec(
        "evaluate", cluster, workers, scheduler_file, scheduler_address, jobqueue, out_dir, init_block
    )
    if spec is not None:
        check_options(
            "evaluate",
            stations=observations is not None or analysis is None,
            multivariate=multivariate,
            thresholds=thresholds,
        )
    if observations is not None or analysis is None:  # station observations: ensml.verify.stations
        station_options(
            analysis,
            observations,
            spread_predictions=spread_predictions,
            members=members,
            cases=cases,
            analysis_reader=analysis_reader,
            missing_forecast=missing_forecast,
            thresholds=thresholds,
            multivariate=multivariate,
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
            predictions=predictions,
            oracle=oracle,
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
        multivariate=multivariate,
        out_dir=out_dir,
        reader=reader,
        analysis_reader=analysis_reader,
        cluster=spec,
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
    multivariate: bool = False,
    out_dir: str | None = "runs/eval",
    reader: ReaderOptions | None = None,
    analysis_reader: ReaderOptions | None = None,
    cluster: EvaluateCluster | None = None,
) -> Scores:
    """Score ``forecast`` and ``sources`` against the gridded ``analysis`` at each lead time.

    The options are :func:`evaluate`'s, grouped: ``sources`` the predictions, spread
    predictions, oracle and calibrated members; ``selection`` the variables, levels, leads and
    ``k`` (default: none; all of the forecast's, K of 5); ``cluster`` the dask cluster that
    scores blocks of init times (:func:`cluster_spec`; None: this process). Raises as
    :func:`evaluate`.
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
            *(["multivariate.csv", "multivariate.md", "rank_histograms.csv"] if multivariate else []),
        ]
        names += ["cases/cases.csv", "cases/cases.md"] if cases else []
        OutputFolder.check(out_dir, "evaluate", names=names)  # before the work: fails in seconds
    selection = replace(selection, leads=leads_option(selection.leads))  # a bad lead fails before the cases
    # cases are scored first: a bad case fails before any other work (they are small)
    readers = {"reader": as_reader(reader), "analysis_reader": as_reader(analysis_reader)}
    predictions, oracle, k = sources.predictions, sources.oracle, selection.k
    studies = [
        score_case(c, forecast, analysis, predictions, oracle, k, **readers) for c in load_cases(cases or [])
    ]
    grid = grid_frame(forecast, analysis, sources, selection, **readers)
    if cluster is None:
        fields = MultivariateScores(grid.frame, grid.subset, fair) if multivariate else None
        scores = score_grid(
            grid, fair=fair, missing_forecast=missing_forecast, thresholds=thresholds, collect=fields
        )
    else:
        fields = None
        check_blocks(grid, thresholds)
        source = FrameSource.of(forecast, analysis, sources, selection, **readers)
        scores = on_cluster(
            cluster,
            grid,
            source,
            lambda blocks: score_grid(grid, fair=fair, missing_forecast=missing_forecast, blocks=blocks),
            fair,
            missing_forecast,
        )
    scores.multivariate = fields
    scores.cases = studies
    if out_dir is not None:
        note(f"evaluate: writing the tables and per-point scores to {out_dir}")
        with OutputFolder.open(out_dir, "evaluate", whole=True) as folder:  # one run's results, whole
            write_files(folder, scores.files())
        scores.out_dir = Path(out_dir)
    return scores


def score_grid(
    grid: GridFrame,
    *,
    fair: bool = False,
    missing_forecast: bool = False,
    thresholds: dict[str, list[float]] | None = None,
    collect: LeadHook | None = None,
    blocks: BlockParts | None = None,
) -> Scores:
    """``evaluate``'s scores of ``grid`` (:func:`~ensml.verify.frame_scores.grid_frame`), in one
    pass over its leads (:func:`~ensml.verify.frame_scores.score_frame`); nothing is written.

    ``fair``, ``missing_forecast`` and ``thresholds`` are :func:`evaluate`'s options;
    ``collect`` gets each lead's fields and each variable as they are scored
    (:data:`~ensml.verify.frame_scores.LeadHook`: ``ensml report``'s scores by lead time);
    ``blocks``: each lead's parts scored on a cluster (:class:`~ensml.verify.distributed.ClusterBlocks`).
    """
    frame = grid.frame
    table, spread, per_point, decomposition, events = score_frame(
        frame,
        grid.subset,
        fair,
        missing_forecast,
        families=grid.families,
        thresholds=thresholds,
        collect=collect,
        blocks=blocks,
    )
    return Scores(
        table,
        spread,
        n_inits=frame.inits.size,
        weighting=frame.weights.attrs["weighting"],
        leads=frame.leads,
        dropped=frame.dropped,
        variables=frame.variables,
        levels=frame.levels,
        per_point=per_point,
        decomposition=decomposition,
        events=events,
    )


__all__ = ["Scores", "evaluate", "evaluate_grid", "score_grid"]
