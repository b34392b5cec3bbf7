"""The one scoring pass of ``ensml evaluate`` against a gridded analysis, and the frame it reads.

:func:`grid_frame` builds what ``evaluate``'s grid verb scores, once: the forecast, analysis,
predictions, spread predictions, calibrated members and oracle opened, checked and aligned by
valid time (:func:`ensml.data.frame.build_frame`: the init times, leads and area weights), the
raw subset beside the full ensemble (:meth:`ensml.data.frame.EnsembleFrame.subset`) and each
distribution's family (:func:`ensml.verify.families.frame_families`), whose parameters the
frame then reads. :func:`score_frame` reads that frame one lead at a time and scores every
variable at it (:mod:`ensml.verify.blocks`: its parts by init time, then its rows): the CRPS
rows, the spread rows, the per-point fields, the CRPS decomposition and the threshold scores of
the bounded variables (:mod:`ensml.verify.events`). With ``evaluate --cluster`` the parts of
each block of init times are scored by dask workers (:mod:`ensml.verify.distributed`) and
:func:`score_frame` computes the same rows from them.

A caller that wants more of each lead than ``evaluate``'s tables (``ensml report``: spread,
RMSE, rank histograms and reliability by lead, :mod:`ensml.report.scores`) passes a
:data:`LeadHook` to :func:`score_frame`: it gets each lead's fields as they were scored, so the
data are read and checked once, and whatever it computes covers the leads, init times and
weights of ``evaluate``'s tables. :func:`ensml.verify.evaluate.evaluate_grid` and the report
both build their frame with :func:`grid_frame` and score it with one call of
:func:`score_frame` (through :func:`ensml.verify.evaluate.score_grid`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame, build_frame
from ensml.data.layouts.options import ReaderOptions, as_reader
from ensml.data.runfiles import leads_option
from ensml.data.subset import Subset
from ensml.names import (
    MEMBER,
    raw_ensemble_name,
    units_of,
)
from ensml.progress import Progress, note, seconds
from ensml.scores.distributions import Family
from ensml.times import format_lead, format_leads, lead_hours
from ensml.verify.blocks import VariableParts, lead_ensembles, parts_rows, variable_parts
from ensml.verify.events import EventTables, crps_as_event_row, event_setups, score_events
from ensml.verify.families import (
    distributions,
    frame_families,
    reading_families,
)
from ensml.verify.inputs import check_complete, check_observed, missing_as_unobserved
from ensml.verify.options import Selection, Sources
from ensml.verify.rows import by_lead, on_grid
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
    blocks: BlockParts | None = None,
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

    ``blocks``: each lead's :class:`~ensml.verify.blocks.VariableParts`, scored elsewhere on
    blocks of init times and joined (``evaluate --cluster``: :mod:`ensml.verify.distributed`),
    instead of reading the leads here; the rows are then the same. Not with event scores or
    ``collect``, which need each lead's fields.
    """
    for lead in frame.leads:  # a lead of no whole hours has no row in the tables: fail before the work
        lead_hours(lead)
    families = frame_families(frame) if families is None else families
    setups = event_setups(frame, families, thresholds)
    events = EventTables() if setups else None
    rows, spread_rows, parts, per_lead = [], [], [], []
    joined = iter(blocks.parts()) if blocks is not None else None
    fields_read = 0 if joined is not None else len(frame.leads) * len(frame.variables)  # 0: silent
    progress = Progress("evaluate", fields_read, "fields")
    for lead in frame.leads:
        at_lead = read_lead(frame, lead, missing_forecast) if joined is None else None
        by_var = next(joined) if joined is not None else {}
        fields: dict[str, xr.DataArray] = {}
        for var in frame.variables:
            if at_lead is not None:
                by_var[var] = variable_parts(frame, at_lead, var, subset, fair, families)
            crps, spread, decomposition = parts_rows(frame, by_var[var], var, lead, subset.k, fields, fair)
            rows += crps
            spread_rows += spread
            parts += decomposition
            if at_lead is not None:
                if events is not None and var in setups:
                    events.rows += [crps_as_event_row(row) for row in crps]
                    _score_events(frame, at_lead, var, subset, fair, families, events, setups[var])
                if collect is not None:
                    collect(at_lead, var)
            progress.advance(f"{var} at +{format_lead(lead)} scored in {seconds(progress.lap)}")
        per_lead.append(xr.Dataset(fields))
    progress.close()
    spread_table = pd.DataFrame(spread_rows) if spread_rows else None
    per_point = on_grid(by_lead(per_lead, frame.leads), frame.forecast)
    return pd.DataFrame(rows), spread_table, per_point, pd.DataFrame(parts), events


class BlockParts(Protocol):
    """Each lead's parts of every variable, scored on blocks of init times and joined."""

    def parts(self) -> Iterator[dict[str, VariableParts]]:
        """``{variable: parts}`` of each lead of the frame, in order."""
        ...


def read_lead(frame: EnsembleFrame, lead: np.timedelta64, missing_forecast: bool) -> LeadFrame:
    """``frame``'s fields at ``lead``, read and checked as ``evaluate`` scores them: complete
    forecasts and predictions, NaN in the analysis (and with ``missing_forecast`` in the
    forecast) as not observed."""
    at_lead = frame.at(
        lead,
        check=check_complete,
        check_analysis=check_observed,
        check_forecast=check_observed if missing_forecast else None,
    )
    return missing_as_unobserved(at_lead) if missing_forecast else at_lead


def _score_events(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    subset: Subset,
    fair: bool,
    families: dict[str, dict[str, Family]],
    events: EventTables,
    setup: tuple[EventThresholds, xr.Dataset | None],
) -> None:
    """The event scores of ``var`` at the lead of ``lf`` (a variable with thresholds), added to
    ``events``."""
    y = lf.analysis[var]
    ensembles = lead_ensembles(frame, lf, var, subset)
    dists = distributions(lf, families, var)
    thr, clim = setup
    units = y.attrs.get("units") or None
    score_events(
        frame,
        y,
        var,
        lf.lead,
        ensembles,
        dists,
        thr,
        raw_ensemble_name(lf.forecast.sizes[MEMBER]),
        events,
        fair=fair,
        climate=clim,
        units=units or units_of(var),
    )


__all__ = ["GridFrame", "LeadHook", "grid_frame", "lead_ensembles", "read_lead", "score_frame"]
