"""Scores of the report by lead time: CRPS, spread, RMSE, SSR, rank histograms and reliability.

Ensembles are scored with the empirical ensemble CRPS, Gaussian forecasts with the closed form;
reliability is of the event "analysis above its monthly climatological mean + 1 std" at each
point (Gaussians through 100 quantiles, :func:`ensml.verify.casestudy.gaussian_members`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.frame import EnsembleFrame, LeadFrame
from ensml.data.grid import horizontal_dims
from ensml.names import (
    INIT_TIME,
    LEAD_TIME,
    MEMBER,
    TIME,
    VALID_TIME,
    lead_hours,
    raw_ensemble_name,
    raw_subset_name,
)
from ensml.scores.calibration import ensemble_mean_rmse, rank_histogram, spread_skill_ratio
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.probability import reliability
from ensml.verify.casestudy import gaussian_members
from ensml.verify.levels import at, levels_of, per_level, table_level


def scores_by_lead(frame: EnsembleFrame, k: int) -> tuple[pd.DataFrame, dict, dict]:
    """CRPS / spread / RMSE / SSR rows by lead, rank histograms and reliability at each lead.

    ``frame`` (:func:`ensml.data.frame.build_frame`, a partial frame: the Gaussian sources, the
    post-processed predictions and the oracle, where they hold a lead) is read one lead at a
    time; means are weighted by its area weights over the init times and the horizontal dims.
    Rows come variable by variable, each at every lead. A surface variable (no level dimension)
    has one level, ``None`` (``level_hPa`` NaN).

    Returns
    -------
    tuple
        The rows (a DataFrame), the rank histograms ``{lead: {(var, level): counts}}`` and the
        reliability ``{(lead, var, level): {forecast: table}}``.
    """
    climates = {var: _monthly_climate(frame.analysis[var]) for var in frame.variables}
    rows: dict[str, list[dict]] = {var: [] for var in frame.variables}
    hists: dict = {}
    rel: dict = {}
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
            rows[var] += _rows_at(frame, lf, var, climate[var], k, hists, rel)
    return pd.DataFrame([row for var in frame.variables for row in rows[var]]), hists, rel


def _monthly_climate(an: xr.DataArray) -> tuple[xr.DataArray, xr.DataArray]:
    """The monthly mean and std of the analysis at each point (dims month, level, grid).

    Where the analysis does not vary in a month (std 0: no rain all month, one sample) the std is
    NaN: those points have no standardised anomaly and are left out of the reliability
    diagrams, rather than giving an infinite anomaly.
    """
    clim = an.groupby(f"{TIME}.month")
    std = clim.std(TIME)
    return clim.mean(TIME), std.where(std > 0)


def _rows_at(
    frame: EnsembleFrame, lf: LeadFrame, var: str, climate, k: int, hists: dict, rel: dict
) -> list[dict]:
    """The rows of ``var`` at one lead; its rank histograms and reliability go into ``hists``, ``rel``."""
    lead, w = lf.lead, frame.weights
    over = [INIT_TIME, *horizontal_dims(frame.forecast)]
    levels = levels_of(frame.forecast[var], frame.levels)  # [None] for a surface variable
    x = lf.forecast[var].drop_vars([LEAD_TIME, VALID_TIME], errors="ignore")
    y = lf.analysis[var]
    m0, s0 = climate
    ystd = (y - m0) / s0  # standardised anomaly w.r.t. the monthly climatology
    m = x.sizes[MEMBER]
    h = lead_hours(lead)
    rows = []
    sources = {raw_ensemble_name(m): x, raw_subset_name(k): x.isel({MEMBER: slice(0, k)})}
    for name, ens in sources.items():
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
    gaussians = (("post-processed (Gaussian)", lf.runs.get("predictions")), ("oracle (Gaussian)", lf.oracle))
    for name, ds in gaussians:
        if ds is None or f"{var}_mean" not in ds:
            continue
        mu, sd = (
            ds[f"{var}_{p}"].drop_vars([LEAD_TIME, VALID_TIME], errors="ignore") for p in ("mean", "std")
        )
        crps = crps_gaussian_xr(mu, sd, y, preserve_dims=per_level(y), weights=w)
        spread = np.sqrt((sd**2).weighted(w).mean(over))
        rmse = np.sqrt(((mu - y) ** 2).weighted(w).mean(over))
        for lev in levels:
            s_, r_ = float(at(spread, lev)), float(at(rmse, lev))
            rows.append(_row(var, lev, h, name, {"crps": float(at(crps, lev)), "spread": s_, "rmse": r_,
                                                 "ssr": s_ / r_}))  # fmt: skip
        for lev in levels:
            q = gaussian_members(at((mu - m0) / s0, lev), at(sd / s0, lev))
            rel.setdefault((lead, var, lev), {})[name] = reliability(q, at(ystd, lev), 1.0, weights=w)
    hists.setdefault(lead, {}).update(
        {(var, lev): rank_histogram(at(x, lev), at(y, lev), weights=w) for lev in levels}
    )
    for lev in levels:
        xs = at((x - m0) / s0, lev)
        rel.setdefault((lead, var, lev), {})[raw_ensemble_name(m)] = reliability(
            xs, at(ystd, lev), 1.0, weights=w
        )
    return rows


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


__all__ = ["scores_by_lead", "skill_by_lead"]
