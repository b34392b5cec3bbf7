"""Scores of the report by lead time: CRPS, spread, RMSE, SSR, rank histograms and reliability.

The report reads and scores its data once. :func:`scores_by_lead` runs ``evaluate``'s one pass
over the leads of its frame (:func:`ensml.verify.evaluate.score_grid` on the frame of
:func:`ensml.verify.frame_scores.grid_frame`), and :class:`LeadScores`, the pass's hook, computes
what the report shows beyond ``evaluate``'s tables from the same fields of each lead. The CRPS
of each row by lead is that of ``evaluate``'s table (the same area-weighted mean); the rows
cover the leads, init times and weights of the global scores: the leads ``evaluate`` scores
(those every file holds), not every lead of the forecast (a 0 h that the predictions lack has no
point in the charts by lead).

Ensembles are scored with the empirical ensemble CRPS; the predictive distributions (the
post-processed predictions, the oracle) each in its own family, through the functions
``evaluate`` uses (:mod:`ensml.verify.families`: the family from the predictions' run metadata
or the oracle's ``ensml_distribution``, the CRPS of the family, the closed form for the normal,
whose rows keep their names, ``post-processed (Gaussian)``, while the others say their family,
``post-processed (csg0)``). A distribution's spread and the error of its mean are those of its
mean and standard deviation (:func:`ensml.verify.families.family_moments`: the normal's
parameters; another family's by quadrature of its quantile function).

Reliability: of the event "analysis above its monthly climatological mean + 1 std" at each
point (distributions through 100 quantiles, :func:`ensml.verify.families.family_members`); for
a variable that gets ``evaluate``'s event scores (a family bounded below, or the name of
precipitation or wind speed: :func:`ensml.verify.thresholds.bounded_variables`), of the events
``y > t`` at evaluate's thresholds (:func:`ensml.verify.thresholds.thresholds_for`) instead:
the rows of ``evaluate``'s ``reliability_<var>.csv`` of the raw ensemble (the fraction of its
members above ``t``) and of each distribution (P(Y > t) from its family), in evaluate's bins
(:data:`ensml.verify.events.RELIABILITY_BINS`).
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.subset import Subset
from ensml.names import INIT_TIME, raw_subset_name
from ensml.report.climate import monthly_climate
from ensml.report.lead_sums import LeadSums, lead_sums
from ensml.scores.distributions import Family
from ensml.times import lead_hours
from ensml.verify.distributed import FrameSource
from ensml.verify.evaluate import Scores, score_grid
from ensml.verify.families import distributions
from ensml.verify.frame_scores import GridFrame, lead_ensembles
from ensml.verify.on_cluster import EvaluateCluster, check_blocks, on_cluster
from ensml.verify.thresholds import EventThresholds, bounded_variables, thresholds_for

Families = dict[str, dict[str, Family]]
#: The columns that name a row by lead: what ``evaluate``'s table and the report's rows share.
KEYS = ["variable", "level_hPa", "lead_h", "forecast"]


class ByLead(NamedTuple):
    """The report's scores by lead time (:func:`scores_by_lead`)."""

    #: ``crps``, ``spread``, ``rmse``, ``ssr`` of each ensemble and distribution: a row per
    #: variable, level, lead and forecast, variable by variable, each at every lead; a surface
    #: variable (no level dimension) has one level, ``None`` (``level_hPa`` NaN)
    table: pd.DataFrame
    #: the raw ensemble's rank histograms, ``{lead: {(var, level): counts}}``
    hists: dict
    #: the reliability of the climatological event, ``{(lead, var, level): {forecast: table}}``
    rel: dict
    #: the reliability of the threshold events of the bounded variables (the rows of ``evaluate``'s
    #: ``reliability_<var>.csv`` of the raw ensemble and each distribution; empty without them)
    events: pd.DataFrame


def scores_by_lead(
    grid: GridFrame, cluster: EvaluateCluster | None = None, source: FrameSource | None = None
) -> tuple[Scores, ByLead]:
    """``evaluate``'s global scores of ``grid`` and the report's scores by lead time, in one pass.

    ``grid`` (:func:`ensml.verify.frame_scores.grid_frame`) is read one lead at a time, once:
    :func:`ensml.verify.evaluate.score_grid` scores each lead's fields for ``evaluate``'s tables
    and hands them to :class:`LeadScores`. Means are weighted by the frame's area weights over
    the init times and the horizontal dims; the raw subset is scored beside the raw ensemble.
    With ``cluster`` (and the ``source`` its workers open the frame from), each block of init
    times of each lead is read and scored by a dask worker, :class:`LeadScores` included, and the
    client puts the blocks' scores together in order (:func:`ensml.verify.distributed.on_cluster`;
    the report's as sums per init time, :mod:`ensml.report.lead_sums`): the same numbers.

    Returns
    -------
    tuple
        ``evaluate``'s :class:`~ensml.verify.evaluate.Scores` (nothing written) and the
        report's :class:`ByLead`, whose CRPS is that of the scores' table.
    """
    extra = LeadScores.of_grid(grid)
    if cluster is None or source is None:
        scores = score_grid(grid, collect=extra)
    else:
        check_blocks(grid, None, "report")
        scores = on_cluster(
            cluster,
            grid,
            source,
            lambda blocks: score_grid(grid, blocks=blocks),
            hook=LeadScores.on_worker,
            receive=extra,
        )
    return scores, extra.result(scores)


class LeadScores:
    """The report's scores of each lead beyond ``evaluate``'s tables: spread, RMSE and SSR of
    each ensemble and distribution, the raw ensemble's rank histograms and the reliability of the
    climatological event, from the fields ``evaluate``'s pass has just scored.

    A :data:`~ensml.verify.frame_scores.LeadHook`: ``score_grid(grid, collect=LeadScores(...))``
    calls it with each lead's fields (all its init times, or a block of them on a cluster's
    worker) and each variable, and it keeps their sums per init time
    (:func:`ensml.report.lead_sums.lead_sums`); :meth:`result` adds them over the init times and
    adds the CRPS and the threshold reliability of ``evaluate``'s scores. ``frame``, ``subset``
    and ``families``: those of the :class:`~ensml.verify.frame_scores.GridFrame` scored.
    """

    def __init__(self, frame: EnsembleFrame, subset: Subset, families: Families) -> None:
        self.frame, self.subset, self.families = frame, subset, families
        self._climates: dict[str, tuple[xr.DataArray, xr.DataArray]] | None = None
        self.sums: dict[tuple[np.timedelta64, str], list[LeadSums]] = {}  # (lead, var) → blocks, in order
        self.drawn: dict[str, set[str]] = {}  # each variable's forecasts: the raw ensemble, the distributions

    @classmethod
    def of_grid(cls, grid: GridFrame) -> LeadScores:
        """The scores of ``grid``'s frame, subset and families (its climatology read when first
        needed: a cluster's client, whose workers score, never reads it)."""
        return cls(grid.frame, grid.subset, grid.families)

    @classmethod
    def on_worker(cls, grid: GridFrame) -> LeadScores:
        """:meth:`of_grid` with its climatology read now: a cluster worker makes it once, while it
        reads nothing else (:func:`ensml.verify.distributed.score_block`)."""
        scores = cls.of_grid(grid)
        _ = scores.climates
        return scores

    @property
    def climates(self) -> dict[str, tuple[xr.DataArray, xr.DataArray]]:
        """The monthly climatology of each variable without event thresholds."""
        if self._climates is None:
            frame = self.frame
            events = event_thresholds(frame, self.families)  # their reliability is evaluate's
            kept = [v for v in frame.variables if v not in events]
            self._climates = {v: monthly_climate(frame.analysis[v]) for v in kept}
        return self._climates

    def take(self) -> tuple[dict, dict]:
        """What was collected so far (the sums, the forecasts drawn), forgotten here: a cluster
        worker's scores of one block, for the client's :meth:`put`."""
        piece = (self.sums, self.drawn)
        self.sums, self.drawn = {}, {}
        return piece

    def put(self, piece: tuple[dict, dict]) -> None:
        """Add a worker's :meth:`take` (block by block, in init order within each lead)."""
        sums, drawn = piece
        for key, blocks in sums.items():
            self.sums.setdefault(key, []).extend(blocks)
        self.drawn.update(drawn)

    def __call__(self, lf: LeadFrame, var: str) -> None:
        """Score ``var`` at the lead of ``lf`` (the fields ``evaluate`` scored)."""
        dists = distributions(lf, self.families, var)
        ensembles = lead_ensembles(self.frame, lf, var, self.subset)
        climate = self._climate(var, lf) if var in self.climates else None
        block = lead_sums(self.frame, lf, var, ensembles, dists, climate)
        self.sums.setdefault((lf.lead, var), []).append(block)
        self.drawn[var] = {*ensembles, *dists} - {raw_subset_name(self.subset.k)}

    def _climate(self, var: str, lf: LeadFrame) -> tuple[xr.DataArray, xr.DataArray]:
        """The monthly mean and std of ``var`` at the valid time of each init time of ``lf``."""
        inits = lf.analysis[INIT_TIME].values
        month = xr.DataArray(pd.DatetimeIndex(inits + lf.lead).month, dims=[INIT_TIME])
        mean, std = (
            c.sel(month=month).drop_vars("month").assign_coords({INIT_TIME: inits})
            for c in self.climates[var]
        )
        return mean, std

    def result(self, scores: Scores) -> ByLead:
        """What was collected, added over the init times, with the CRPS of ``scores.table``
        (``evaluate``'s, of the same pass) and the threshold reliability of ``scores.events``."""
        rows, hists, rel = [], {}, {}
        for var in self.frame.variables:
            for lead in self.frame.leads:
                blocks = self.sums.get((lead, var))
                if not blocks:
                    continue
                sums = LeadSums.join(blocks)
                rows += sums.rows(lead_hours(lead))
                hists.setdefault(lead, {}).update(sums.histograms())
                for name, by_level in sums.reliability().items():
                    for lev, table in by_level.items():
                        rel.setdefault((lead, var, lev), {})[name] = table
        table = _merge(pd.DataFrame(rows), scores.table[[*KEYS, "crps"]], KEYS)
        table = table[[*KEYS, "crps", "spread", "rmse", "ssr"]]
        reliable = scores.events.reliability if scores.events is not None else []
        events = [row for row in reliable if row["forecast"] in self.drawn.get(row["variable"], ())]
        return ByLead(table, hists, rel, pd.DataFrame(events))


def event_thresholds(frame: EnsembleFrame, families: Families) -> dict[str, EventThresholds]:
    """The thresholds of ``evaluate``'s event scores (:mod:`ensml.verify.thresholds`) of each
    variable that gets them and has them: their reliability replaces the climatological event's."""
    out = {}
    for var in bounded_variables(frame, families, None):
        thr = thresholds_for(var, frame.analysis[var].attrs)
        if thr is not None:
            out[var] = thr
    return out


def skill_by_lead(by_lead: pd.DataFrame) -> pd.DataFrame:
    """``by_lead`` (rows of :func:`scores_by_lead`) with ``skill_vs_raw_ensemble`` = 1 − CRPS / CRPS_raw.

    CRPS_raw is the raw ensemble's (the forecast named ``raw ensemble (M members)``) of the same
    variable, level and lead, so the raw ensemble's skill is 0 at every lead; a lead without a
    raw-ensemble row gets NaN.
    """
    keys = ["variable", "level_hPa", "lead_h"]
    raw = by_lead[by_lead["forecast"].str.startswith("raw ensemble")][[*keys, "crps"]]
    merged = _merge(by_lead, raw.rename(columns={"crps": "crps_raw"}), keys)
    skill = 1.0 - merged["crps"].to_numpy() / merged["crps_raw"].to_numpy()
    return by_lead.assign(skill_vs_raw_ensemble=skill)


def _merge(left: pd.DataFrame, right: pd.DataFrame, on: list[str]) -> pd.DataFrame:
    """``left`` with the columns of ``right`` whose ``on`` columns match (a left join, one row of
    ``right`` at most per row of ``left``); ``level_hPa`` is NaN for a surface variable, so it is
    matched on a key that matches NaN with NaN."""

    def keyed(df: pd.DataFrame) -> pd.DataFrame:
        return df.assign(_lev=df["level_hPa"].fillna(-1.0))

    keys = ["_lev" if c == "level_hPa" else c for c in on]
    merged = keyed(left).merge(
        keyed(right).drop(columns="level_hPa"), on=keys, how="left", validate="many_to_one"
    )
    return merged.drop(columns="_lev").set_axis(left.index)


__all__ = ["ByLead", "LeadScores", "event_thresholds", "scores_by_lead", "skill_by_lead"]
