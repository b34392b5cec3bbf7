"""Scoring of ``ensml benchmark``: every model's test predictions on the ``ensml evaluate`` path.

Raw ensembles are scored with the empirical ensemble CRPS and, for comparison, with the Gaussian
CRPS of their mean and std (ddof 1); EMOS, mixed models and the oracle with the closed-form
Gaussian CRPS. Rows come from :func:`ensml.eval.evaluate.crps_rows` (with the oracle's
``event_mask`` for the extreme-event CRPS) and :func:`~ensml.eval.evaluate.spread_scores`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.io import open_analysis, open_dataset, open_forecast
from ensml.eval.crps import crps_ensemble
from ensml.eval.evaluate import crps_rows, spread_scores
from ensml.eval.gaussian import crps_gaussian_xr
from ensml.eval.tables import to_markdown
from ensml.eval.weights import latitude_weights
from ensml.names import INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER, TIME

FIELD_DIMS = [INIT_TIME, LEVEL, LATITUDE, LONGITUDE]
COLUMNS = [
    "model", "variable", "level_hPa", "lead_h", "estimator", "crps", "units", "skill_vs_raw_ensemble",
    "gap_closed", "crps_events", "events_skill_vs_raw", "spread_rmse", "spread_corr", "params", "train_s",
]  # fmt: skip


def score_all(
    dm: EnsembleDataModule, paths: dict[str, Path], preds: dict[str, dict], info: dict[str, dict]
) -> pd.DataFrame:
    """One table of CRPS and spread scores on the test split for every prediction in ``preds``.

    ``preds[name]`` holds ``index`` (N,) into the test split and ``mean``/``std`` (N, V, D, H, W);
    ``kind == "spread"`` marks spread estimates (``std`` only). ``info[name]`` gives ``params``
    and ``train_s``.
    """
    spec = dm.spec
    variables, levels, k, m = list(spec.variables), list(spec.levels), spec.k, spec.members
    lead, lead_h = spec.target_lead, spec.target_lead_hours
    inits = np.sort(dm.test_set.init_times)
    fc = open_forecast(str(paths["forecast"]), variables)
    fc = fc.sel({INIT_TIME: inits, LEAD_TIME: lead, LEVEL: levels}).load()
    obs = open_analysis(str(paths["analysis"]), variables).sel({TIME: inits + lead, LEVEL: levels}).load()
    obs = obs.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
    orc = open_dataset(str(paths["oracle"]), "oracle").sel({INIT_TIME: inits, LEAD_TIME: lead}).load()
    orc = orc.sel({LEVEL: levels})
    weights = latitude_weights(fc[LATITUDE])

    def field(name: str, key: str, i: int) -> xr.DataArray:
        p = preds[name]
        coords = {INIT_TIME: dm.test_set.init_times[p["index"]], LEVEL: levels}
        coords.update({LATITUDE: fc[LATITUDE].values, LONGITUDE: fc[LONGITUDE].values})
        return xr.DataArray(p[key][:, i], dims=FIELD_DIMS, coords=coords).sel({INIT_TIME: inits})

    raw_key = f"raw ensemble ({m} members)"
    rows, spread_rows = [], []
    for i, var in enumerate(variables):
        y, ens = obs[var], fc[var].transpose(INIT_TIME, MEMBER, *FIELD_DIMS[1:])
        sub = ens.isel({MEMBER: slice(0, k)})
        sources = {
            raw_key: crps_ensemble(ens, y, preserve_dims=FIELD_DIMS),
            f"raw subset ({k} members)": crps_ensemble(sub, y, preserve_dims=FIELD_DIMS),
        }
        for name, e in ((f"raw ensemble ({m} members", ens), (f"raw subset ({k} members", sub)):
            sources[f"{name}, Gaussian of mean/std)"] = crps_gaussian_xr(
                e.mean(MEMBER), e.std(MEMBER, ddof=1), y, preserve_dims=FIELD_DIMS
            )
        for name, p in preds.items():
            if p.get("kind") != "spread":
                mu, sd = field(name, "mean", i), field(name, "std", i)
                sources[f"{name} (Gaussian)"] = crps_gaussian_xr(mu, sd, y, preserve_dims=FIELD_DIMS)
        sources["oracle (Gaussian)"] = crps_gaussian_xr(
            orc[f"{var}_mean"], orc[f"{var}_std"], y, preserve_dims=FIELD_DIMS
        )
        rows += crps_rows(sources, weights, var, levels, lead_h, raw_key, events=orc["event_mask"])
        estimators = {
            f"{k}-member sample std (ddof 1)": sub.std(MEMBER, ddof=1),
            f"{k}-member sample std (ddof 0)": sub.std(MEMBER, ddof=0),
        }
        estimators.update(
            {name: field(name, "std", i) for name, p in preds.items() if p.get("kind") == "spread"}
        )
        spread_rows += spread_scores(estimators, ens.std(MEMBER, ddof=0), weights, var, levels, lead_h, m)

    crps = pd.DataFrame(rows).rename(columns={"forecast": "model"})
    spread = pd.DataFrame(spread_rows).rename(columns={"rmse": "spread_rmse", "correlation": "spread_corr"})
    spread["model"] = spread["estimator"]
    spread["estimator"] = "spread vs " + spread.pop("target")
    table = pd.concat([crps, spread], ignore_index=True)
    base = table["model"].str.replace(" (Gaussian)", "", regex=False)
    table["params"] = [info.get(b, {}).get("params", np.nan) for b in base]
    table["train_s"] = [info.get(b, {}).get("train_s", np.nan) for b in base]
    return table.reindex(columns=COLUMNS)


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """Per model: the mean over variables and levels of skill, gap closed, event skill, spread corr."""
    cols = ["skill_vs_raw_ensemble", "gap_closed", "events_skill_vs_raw", "spread_corr", "params", "train_s"]
    out = table.groupby("model", sort=False)[cols].mean().reset_index()
    return out.rename(columns={c: f"mean_{c}" for c in cols[:4]})


def _format(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    fmts = {
        "spread_rmse": "{:.4g}", "spread_corr": "{:.3f}", "mean_spread_corr": "{:.3f}", "params": "{:,.0f}",
        "train_s": "{:.1f}", "mean_skill_vs_raw_ensemble": "{:+.1%}", "mean_gap_closed": "{:.1%}",
        "mean_events_skill_vs_raw": "{:+.1%}",
    }  # fmt: skip
    for col, fmt in fmts.items():
        if col in out:
            out[col] = [fmt.format(v) if pd.notna(v) else "" for v in out[col]]
    return out


BENCHMARK_NAMES = ("benchmark.csv", "benchmark_summary.csv", "benchmark.md")  # a benchmark folder


def write_tables(out: Path, table: pd.DataFrame, summary: pd.DataFrame, n_inits: int) -> None:
    """``benchmark.csv``, ``benchmark_summary.csv`` and ``benchmark.md`` (both tables) in ``out``."""
    table.to_csv(out / "benchmark.csv", index=False)
    summary.to_csv(out / "benchmark_summary.csv", index=False)
    note = (
        f"Test split: {n_inits} init times; area-weighted means (exact cell area). CRPS estimator per "
        "row: empirical ensemble CRPS for raw ensembles, closed-form Gaussian CRPS for rows marked "
        "Gaussian. skill and gap_closed refer to the raw ensemble (all members, empirical) and the "
        "oracle; crps_events: mean over the oracle's event_mask points. train_s is wall-clock time "
        "(the only column that differs between runs with the same seed).\n\n"
    )
    md = "## Summary (means over variables and levels)\n\n" + to_markdown(_format(summary))
    md += "\n## All scores\n\n" + note + to_markdown(_format(table)).replace("| nan |", "|  |")
    (out / "benchmark.md").write_text(md)
