"""Scores of the report by lead time: CRPS, spread, RMSE, SSR, rank histograms and reliability.

Ensembles are scored with the empirical ensemble CRPS, Gaussian forecasts with the closed form;
reliability is of the event "analysis above its monthly climatological mean + 1 std" at each
point (Gaussians through 100 quantiles, :func:`ensml.verify.casestudy.gaussian_members`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import horizontal_dims
from ensml.names import INIT_TIME, LEAD_TIME, MEMBER, TIME
from ensml.scores.calibration import ensemble_mean_rmse, rank_histogram, spread_skill_ratio
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.probability import reliability
from ensml.verify.casestudy import gaussian_members
from ensml.verify.levels import at, at_levels, levels_of, per_level, table_level


def gaussians(preds: xr.Dataset | None, orc: xr.Dataset | None) -> dict[str, xr.Dataset]:
    return {
        n: d for n, d in (("post-processed (Gaussian)", preds), ("oracle (Gaussian)", orc)) if d is not None
    }


def scores_by_lead(fc, an, gauss, var, levels, inits, w, k) -> tuple[pd.DataFrame, dict, dict]:
    """CRPS / spread / RMSE rows by lead, rank histograms and reliability at each lead.

    ``w`` are the area weights of the grid (:func:`ensml.data.weights.area_weights`); means are
    over the init times and the horizontal dims (latitude/longitude, or a projected grid's y/x).
    A surface variable (no level dimension) has one level, ``None`` (``level_hPa`` NaN).
    """
    rows, hists, rel = [], {}, {}
    over = [INIT_TIME, *horizontal_dims(fc)]
    levels = levels_of(fc[var], levels)  # [None] for a surface variable
    clim = an[var].groupby(f"{TIME}.month")
    mean, std = clim.mean(TIME), clim.std(TIME)
    for lead in fc[LEAD_TIME].values:
        h = int(lead / np.timedelta64(1, "h"))
        x = at_levels(fc[var].sel({INIT_TIME: inits, LEAD_TIME: lead}), levels).load()
        x = x.drop_vars([LEAD_TIME, "valid_time"], errors="ignore")
        y = at_levels(an[var].sel({TIME: inits + lead}), levels).load()
        month = xr.DataArray(pd.DatetimeIndex(y[TIME].values).month, dims=[TIME])
        m0, s0 = (
            c.sel(month=month).drop_vars("month").rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
            for c in (mean, std)
        )
        y = y.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
        ystd = (y - m0) / s0  # standardised anomaly w.r.t. the monthly climatology
        m = x.sizes[MEMBER]
        sources = {
            f"raw ensemble ({m} members)": x,
            f"raw subset ({k} members)": x.isel({MEMBER: slice(0, k)}),
        }
        for name, ens in sources.items():
            kw = {"preserve_dims": per_level(x), "weights": w}
            crps = crps_ensemble(ens, y, **kw)
            ssr = spread_skill_ratio(ens, y, finite_ensemble_correction=True, **kw)
            rmse = ensemble_mean_rmse(ens, y, **kw)
            spread = np.sqrt((ens.var(MEMBER, ddof=1)).weighted(w).mean(over))
            for lev in levels:
                rows.append(
                    {
                        "variable": var,
                        "level_hPa": table_level(lev),
                        "lead_h": h,
                        "forecast": name,
                        "crps": float(at(crps, lev)),
                        "spread": float(at(spread, lev)),
                        "rmse": float(at(rmse, lev)),
                        "ssr": float(at(ssr, lev)),
                    }
                )
        for name, ds in gauss.items():
            leads = np.atleast_1d(ds[LEAD_TIME].values)
            if lead not in leads or f"{var}_mean" not in ds:
                continue
            sel = {INIT_TIME: inits, **({LEAD_TIME: lead} if LEAD_TIME in ds.dims else {})}
            mu, sd = (
                at_levels(ds[f"{var}_{p}"].sel(sel), levels)
                .drop_vars([LEAD_TIME, "valid_time"], errors="ignore")
                .load()
                for p in ("mean", "std")
            )
            crps = crps_gaussian_xr(mu, sd, y, preserve_dims=per_level(y), weights=w)
            spread = np.sqrt((sd**2).weighted(w).mean(over))
            rmse = np.sqrt(((mu - y) ** 2).weighted(w).mean(over))
            for lev in levels:
                s_, r_ = float(at(spread, lev)), float(at(rmse, lev))
                rows.append(
                    {
                        "variable": var,
                        "level_hPa": table_level(lev),
                        "lead_h": h,
                        "forecast": name,
                        "crps": float(at(crps, lev)),
                        "spread": s_,
                        "rmse": r_,
                        "ssr": s_ / r_,
                    }
                )
            for lev in levels:
                q = gaussian_members(at((mu - m0) / s0, lev), at(sd / s0, lev))
                rel.setdefault((lead, var, lev), {})[name] = reliability(q, at(ystd, lev), 1.0, weights=w)
        hists[lead] = {(var, lev): rank_histogram(at(x, lev), at(y, lev), weights=w) for lev in levels}
        for lev in levels:
            xs = at((x - m0) / s0, lev)
            rel.setdefault((lead, var, lev), {})[f"raw ensemble ({m} members)"] = reliability(
                xs, at(ystd, lev), 1.0, weights=w
            )
    return pd.DataFrame(rows), hists, rel


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


__all__ = ["gaussians", "scores_by_lead", "skill_by_lead"]
