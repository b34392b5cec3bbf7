"""Scores of the report by lead time: CRPS, spread, RMSE, SSR, rank histograms and reliability.

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
``y > t`` at evaluate's thresholds (:func:`ensml.verify.thresholds.thresholds_for`) instead,
with P(Y > t) of each distribution from its family and the fraction of members above ``t`` of
the raw ensemble, in evaluate's bins (:data:`ensml.verify.events.RELIABILITY_BINS`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.grid import horizontal_dims
from ensml.data.subset import Subset
from ensml.names import INIT_TIME, LEAD_TIME, MEMBER, TIME, VALID_TIME, raw_ensemble_name
from ensml.scores.calibration import ensemble_mean_rmse, rank_histogram, spread_skill_ratio
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.predictive import exceedance_family
from ensml.scores.probability import THRESHOLD, exceedance_probability, probability_reliability, reliability
from ensml.scores.reduce import reduce_score
from ensml.times import lead_hours
from ensml.verify.events import RELIABILITY_BINS, reliability_rows
from ensml.verify.families import (
    distribution_crps,
    distributions,
    family_members,
    family_moments,
    family_params,
    frame_families,
    reading_families,
)
from ensml.verify.levels import at, levels_of, per_level, table_level
from ensml.verify.thresholds import EventThresholds, bounded_variables, thresholds_for

Families = dict[str, dict[str, Family]]


def scores_by_lead(
    frame: EnsembleFrame, subset: Subset | int, families: Families | None = None
) -> tuple[pd.DataFrame, dict, dict, pd.DataFrame]:
    """CRPS / spread / RMSE / SSR rows by lead, rank histograms and reliability at each lead.

    ``frame`` (:func:`ensml.data.frame.build_frame`, a partial frame: the post-processed
    predictions and the oracle, where they hold a lead) is read one lead at a time; means are
    weighted by its area weights over the init times and the horizontal dims; the raw ``subset``
    (:meth:`ensml.data.frame.EnsembleFrame.subset`, or K for the first K members) is scored
    beside the raw ensemble. Rows come
    variable by variable, each at every lead. A surface variable (no level dimension) has one
    level, ``None`` (``level_hPa`` NaN). ``families``: of each distribution source
    (:func:`ensml.verify.families.frame_families`, computed here when not given).

    Returns
    -------
    tuple
        The rows (a DataFrame), the rank histograms ``{lead: {(var, level): counts}}``, the
        reliability of the climatological event ``{(lead, var, level): {forecast: table}}`` and
        that of the threshold events of the bounded variables (a DataFrame: the columns of
        ``evaluate``'s ``reliability_<var>.csv``; empty without such variables).
    """
    subset = subset if isinstance(subset, Subset) else Subset.first(subset)
    families = frame_families(frame) if families is None else families
    frame = reading_families(frame, families)  # each distribution's parameter variables
    events = event_thresholds(frame, families)
    climates = {var: _monthly_climate(frame.analysis[var]) for var in frame.variables if var not in events}
    rows: dict[str, list[dict]] = {var: [] for var in frame.variables}
    hists: dict = {}
    rel: dict = {}
    event_rel: list[dict] = []
    for lead in frame.leads:
        lf = frame.at(lead)
        month = xr.DataArray(pd.DatetimeIndex(frame.inits + lead).month, dims=[INIT_TIME])
        climate = {
            var: tuple(
                c.sel(month=month).drop_vars("month").assign_coords({INIT_TIME: frame.inits}) for c in cs
            )
            for var, cs in climates.items()
        }
        for var in frame.variables:
            dists = distributions(lf, families, var)
            rows[var] += _rows_at(frame, lf, var, dists, subset, hists)
            if var in events:
                event_rel += _event_reliability(frame, lf, var, dists, events[var])
            else:
                _climate_reliability(frame, lf, var, dists, climate[var], rel)
    by_lead = pd.DataFrame([row for var in frame.variables for row in rows[var]])
    return by_lead, hists, rel, pd.DataFrame(event_rel)


def event_thresholds(frame: EnsembleFrame, families: Families) -> dict[str, EventThresholds]:
    """The thresholds of ``evaluate``'s event scores (:mod:`ensml.verify.thresholds`) of each
    variable that gets them and has them: their reliability replaces the climatological event's."""
    out = {}
    for var in bounded_variables(frame, families, None):
        thr = thresholds_for(var, frame.analysis[var].attrs)
        if thr is not None:
            out[var] = thr
    return out


def _monthly_climate(an: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
    """The monthly mean and std of the analysis at each point (dims month, level, grid).

    Where the analysis does not vary in a month (std 0: no rain all month, one sample) the std is
    NaN: those points have no standardised anomaly and are left out of the reliability
    diagrams, rather than giving an infinite anomaly.
    """
    clim = an.groupby(f"{TIME}.month")
    std = clim.std(TIME)
    return clim.mean(TIME), std.where(std > 0)


def _fields(ds: xr.Dataset) -> xr.Dataset:
    """A source's fields at one lead without their lead-time coordinates."""
    return ds.drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")


def _rows_at(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    dists: dict[str, tuple[xr.Dataset, Family]],
    subset: Subset,
    hists: dict,
) -> list[dict]:
    """The rows of ``var`` at one lead (``dists``: its distributions, by label); its rank
    histograms go into ``hists``."""
    lead, w = lf.lead, frame.weights
    over = [INIT_TIME, *horizontal_dims(frame.forecast)]
    levels = levels_of(frame.forecast[var], frame.levels)  # [None] for a surface variable
    x = lf.forecast[var].drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
    y = lf.analysis[var]
    h = lead_hours(lead)
    rows = []
    for name, ens in subset.ensembles(x).items():
        kw = {"preserve_dims": per_level(x), "weights": w}
        scores = {
            "crps": crps_ensemble(ens, y, **kw),
            "spread": np.sqrt((ens.var(MEMBER, ddof=1)).weighted(w).mean(over)),
            "rmse": ensemble_mean_rmse(ens, y, **kw),
            "ssr": spread_skill_ratio(ens, y, finite_ensemble_correction=True, **kw),
        }
        rows += [
            _row(var, lev, h, name, {key: float(at(v, lev)) for key, v in scores.items()}) for lev in levels
        ]
    for name, (ds, family) in dists.items():
        ds = _fields(ds)
        source = f"{name} {var}"
        per_point = distribution_crps(ds, var, family, y, list(y.dims), source=source)
        crps = reduce_score(per_point, preserve_dims=per_level(y), weights=w)
        mu, sd = family_moments(family, family_params(ds, var, family, source))
        spread = np.sqrt((sd**2).weighted(w).mean(over))
        rmse = np.sqrt(((mu - y) ** 2).weighted(w).mean(over))
        for lev in levels:
            s_, r_ = float(at(spread, lev)), float(at(rmse, lev))
            scores = {"crps": float(at(crps, lev)), "spread": s_, "rmse": r_, "ssr": s_ / r_}
            rows.append(_row(var, lev, h, name, scores))
    hists.setdefault(lead, {}).update(
        {(var, lev): rank_histogram(at(x, lev), at(y, lev), weights=w) for lev in levels}
    )
    return rows


def _climate_reliability(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    dists: dict[str, tuple[xr.Dataset, Family]],
    climate,
    rel: dict,
) -> None:
    """The reliability of "analysis > monthly mean + 1 std" of the raw ensemble and of each
    distribution (its 100 quantiles) of ``var`` at one lead, into ``rel``."""
    lead, w = lf.lead, frame.weights
    levels = levels_of(frame.forecast[var], frame.levels)
    x = lf.forecast[var].drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
    m0, s0 = climate
    ystd = (lf.analysis[var] - m0) / s0  # standardised anomaly w.r.t. the monthly climatology
    for name, (ds, family) in dists.items():
        params = family_params(_fields(ds), var, family, f"{name} {var}")
        for lev in levels:
            q = _standardised_members(
                family, {p: at(f, lev) for p, f in params.items()}, at(m0, lev), at(s0, lev)
            )
            rel.setdefault((lead, var, lev), {})[name] = reliability(q, at(ystd, lev), 1.0, weights=w)
    for lev in levels:
        xs = at((x - m0) / s0, lev)
        rel.setdefault((lead, var, lev), {})[raw_ensemble_name(x.sizes[MEMBER])] = reliability(
            xs, at(ystd, lev), 1.0, weights=w
        )


def _standardised_members(
    family: Family, params: dict[str, xr.DataArray], m0: xr.DataArray, s0: xr.DataArray
) -> xr.DataArray:
    """The 100 quantiles of ``family(params)`` as anomalies ``(Q − m0)/s0``: for a normal, the
    quantiles of N((mean − m0)/s0, (std/s0)²), as the report drew them before the families."""
    if family.name == "normal":
        return family_members(family, {"mean": (params["mean"] - m0) / s0, "std": params["std"] / s0})
    return (family_members(family, params) - m0) / s0


def _event_reliability(
    frame: EnsembleFrame,
    lf: LeadFrame,
    var: str,
    dists: dict[str, tuple[xr.Dataset, Family]],
    thresholds: EventThresholds,
) -> list[dict]:
    """Reliability rows of the events ``y > t`` at ``thresholds.events`` for the raw ensemble
    (fraction of members above t) and each distribution (its family's P(Y > t)) at one lead."""
    x = lf.forecast[var].drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
    y = lf.analysis[var]
    events = list(thresholds.events)
    t = xr.DataArray(np.asarray(events, dtype=np.float64), dims=[THRESHOLD], coords={THRESHOLD: events})
    probs = {raw_ensemble_name(x.sizes[MEMBER]): exceedance_probability(x, t)}
    for name, (ds, family) in dists.items():
        params = family_params(_fields(ds), var, family, f"{name} {var}")
        probs[name] = exceedance_family(family, params, events)
    units = y.attrs.get("units") or thresholds.units
    out = []
    for name, p in probs.items():
        table = probability_reliability(
            p.transpose(THRESHOLD, *y.dims),
            y,
            n_bins=RELIABILITY_BINS,
            preserve_dims=per_level(y),
            weights=frame.weights,
        )
        out += reliability_rows(table, var, frame.levels, lead_hours(lf.lead), name, units)
    return out


def _row(var: str, level: float | None, lead_h: int, forecast: str, scores: dict[str, float]) -> dict:
    return {
        "variable": var,
        "level_hPa": table_level(level),
        "lead_h": lead_h,
        "forecast": forecast,
        **scores,
    }


def skill_by_lead(by_lead: pd.DataFrame) -> pd.DataFrame:
    """``by_lead`` (rows of :func:`scores_by_lead`) with ``skill_vs_raw_ensemble`` = 1 − CRPS / CRPS_raw.

    CRPS_raw is the raw ensemble's (the forecast named ``raw ensemble (M members)``) of the same
    variable, level and lead, so the raw ensemble's skill is 0 at every lead; a lead without a
    raw-ensemble row gets NaN.
    """
    keys = ["variable", "level_hPa", "lead_h"]
    raw = by_lead[by_lead["forecast"].str.startswith("raw ensemble")][[*keys, "crps"]]
    raw = raw.rename(columns={"crps": "crps_raw"})
    # level_hPa is NaN for a surface variable: merge on a key that matches NaN with NaN
    merged = by_lead.assign(_lev=by_lead["level_hPa"].fillna(-1.0)).merge(
        raw.assign(_lev=raw["level_hPa"].fillna(-1.0)).drop(columns="level_hPa"),
        on=["variable", "_lev", "lead_h"],
        how="left",
    )
    skill = 1.0 - merged["crps"].to_numpy() / merged["crps_raw"].to_numpy()
    return by_lead.assign(skill_vs_raw_ensemble=skill)


__all__ = ["event_thresholds", "scores_by_lead", "skill_by_lead"]
