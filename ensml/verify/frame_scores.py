"""The one scoring pass of ``ensml evaluate`` against a gridded analysis, and the frame it reads.

:func:`grid_frame` builds what ``evaluate``'s grid verb scores, once: the forecast, analysis,
predictions, spread predictions, calibrated members and oracle opened, checked and aligned by
valid time (:func:`ensml.data.frame.build_frame`: the init times, leads and area weights), the
raw subset beside the full ensemble (:meth:`ensml.data.frame.EnsembleFrame.subset`) and each
distribution's family (:func:`ensml.verify.families.frame_families`), whose parameters the
frame then reads. :func:`score_frame` reads that frame one lead at a time and scores every
variable at it: the CRPS rows, the spread rows, the per-point fields, the CRPS decomposition
and the threshold scores of the bounded variables (:mod:`ensml.verify.events`).

A caller that wants more of each lead than ``evaluate``'s tables (``ensml report``: spread,
RMSE, rank histograms and reliability by lead, :mod:`ensml.report.scores`) passes a
:data:`LeadHook` to :func:`score_frame`: it gets each lead's fields as they were scored, so the
data are read and checked once, and whatever it computes covers the leads, init times and
weights of ``evaluate``'s tables. :func:`ensml.verify.evaluate.evaluate_grid` and the report
both build their frame with :func:`grid_frame` and score it with one call of
:func:`score_frame` (through :func:`ensml.verify.evaluate.score_grid`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame, build_frame
from ensml.data.grid import horizontal_dims
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.runfiles import leads_option
from ensml.data.subset import Subset
from ensml.names import (
    INIT_TIME,
    LEVEL,
    MEMBER,
    members_name,
    raw_ensemble_name,
    raw_subset_name,
    units_of,
)
from ensml.progress import Progress, note, seconds
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.hersbach import crps_decomposition
from ensml.scores.significance import skill_tests
from ensml.times import format_lead, format_leads, lead_hours
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
from ensml.verify.thresholds import EventThresholds

#: Called by :func:`score_frame` with a lead's fields (as scored: read, checked and, with
#: ``missing_forecast``, with the forecast's NaN as not observed) and a variable, once that
#: variable is scored at that lead; every variable at every lead of the frame, in order.
LeadHook = Callable[[LeadFrame, str], None]


@dataclass(frozen=True)
class GridFrame:
    """What ``evaluate``'s grid verb scores (built by :func:`grid_frame`)."""

    frame: EnsembleFrame  # reading each distribution's parameters
    subset: Subset  # the raw subset scored beside the full ensemble
    families: dict[str, dict[str, Family]]  # of each distribution source, by variable


def grid_frame(
    forecast: str | list[str],
    analysis: str | list[str],
    sources: Sources | None = None,
    selection: Selection | None = None,
    *,
    reader: ReaderOptions | None = None,
    analysis_reader: ReaderOptions | None = None,
) -> GridFrame:
    """The frame of ``forecast``, ``analysis`` and ``sources`` that ``evaluate`` scores, with its
    raw subset and each distribution's family; notes the leads dropped under ``leads="common"``.

    The options are :func:`ensml.verify.evaluate.evaluate_grid`'s. Raises as
    :func:`ensml.verify.evaluate.evaluate` (a missing variable, level or lead, files of two runs,
    a ``k`` that disagrees with them, …), before any lead is read.
    """
    sources, selection = sources or Sources(), selection or Selection()
    frame = build_frame(
        forecast,
        analysis,
        variables=selection.variables,
        levels=selection.levels,
        leads=leads_option(selection.leads),
        predictions=sources.predictions,
        spread_predictions=sources.spread_predictions,
        members=sources.members,
        oracle=sources.oracle,
        reader=as_reader(reader),
        analysis_reader=as_reader(analysis_reader),
    )
    subset = frame.subset(selection.k)
    families = frame_families(frame)
    frame = reading_families(frame, families)  # each distribution's parameter variables
    if frame.dropped.size:
        note(
            f"evaluate: scoring {format_leads(frame.leads)}, the leads every file holds; dropped "
            f"{format_leads(frame.dropped)}"
        )
    return GridFrame(frame, subset, families)


def score_frame(
    frame: EnsembleFrame,
    subset: Subset,
    fair: bool = False,
    missing_forecast: bool = False,
    *,
    families: dict[str, dict[str, Family]] | None = None,
    thresholds: dict[str, list[float]] | None = None,
    collect: LeadHook | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame | None, xr.Dataset, pd.DataFrame, EventTables | None]:
    """The CRPS table, the spread table (or ``None``), the per-point scores of ``frame``, the
    CRPS decomposition of its ensembles and the event scores of its bounded variables (``None``
    without any).

    Reads one lead at a time (each value checked complete); the raw ``subset``
    (:func:`ensml.data.subset.raw_subset`) is scored beside the full ensemble; ``fair``:
    ensembles with the fair CRPS; ``missing_forecast``: NaN in the raw forecast is "not
    observed" (see :func:`ensml.verify.evaluate.evaluate`); ``families``: of each distribution
    source (:func:`ensml.verify.families.frame_families`, whose parameters ``frame`` reads:
    :func:`~ensml.verify.families.reading_families`); ``thresholds``: as
    :func:`~ensml.verify.evaluate.evaluate`'s; ``collect``: called with each lead's fields and
    each variable once it is scored (:data:`LeadHook`), so a caller scores more of the same
    fields without reading them again.
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
            if collect is not None:
                collect(at_lead, var)
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
    ensembles = lead_ensembles(frame, lf, var, subset)
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


def lead_ensembles(frame: EnsembleFrame, lf: LeadFrame, var: str, subset: Subset) -> dict[str, xr.DataArray]:
    """The ensembles of ``var`` at one lead, by name: the raw ensemble, the raw subset and the
    members given (``--members``: ECC's post-processed members or generated ones)."""
    ensembles = subset.ensembles(lf.forecast[var])
    if "members" in lf.runs:
        members = lf.runs["members"][var]
        ensembles[members_name(frame.runs["members"].meta.task, members.sizes[MEMBER])] = members
    return ensembles


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


__all__ = ["GridFrame", "LeadHook", "grid_frame", "lead_ensembles", "score_frame", "score_variable"]
