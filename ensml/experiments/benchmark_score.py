"""Scoring of ``ensml benchmark``: every model's test predictions on the ``ensml evaluate`` path.

The forecast, analysis and oracle of the test split are read through the one frame builder
(:func:`ensml.data.frame.build_frame`), so the benchmark weighs by cell area
(:func:`ensml.data.weights.area_weights`) and aligns by valid time as ``ensml evaluate`` does.
Raw ensembles are scored with the empirical ensemble CRPS and, for comparison, with the Gaussian
CRPS of their mean and std (ddof 1); EMOS, mixed models and the oracle with the closed-form
Gaussian CRPS. Rows come from :func:`ensml.verify.rows.crps_rows` (with the oracle's
``event_mask`` for the extreme-event CRPS, and each skill's 95 % interval and DM test against the
raw ensemble, :func:`ensml.scores.significance.skill_tests`) and
:func:`~ensml.verify.rows.spread_scores`.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.frame import EnsembleFrame, build_frame
from ensml.names import (
    INIT_TIME,
    LATITUDE,
    LEVEL,
    LONGITUDE,
    MEMBER,
    lead_hours,
    raw_ensemble_name,
    raw_subset_name,
)
from ensml.scores.crps import crps_ensemble
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.significance import skill_tests
from ensml.verify.rows import crps_rows, spread_scores
from ensml.verify.tables import to_markdown

FIELD_DIMS = [INIT_TIME, LEVEL, LATITUDE, LONGITUDE]
#: Per-model columns (from ``info``): size, training time, and time to the baseline's quality.
INFO_COLUMNS = [
    "params", "train_s", "epochs", "best_epoch", "val_score", "baseline_val_score", "time_to_baseline_s",
    "samples_to_baseline",
]  # fmt: skip
COLUMNS = [
    "model", "variable", "level_hPa", "lead_h", "estimator", "crps", "units", "skill_vs_raw_ensemble",
    "skill_low", "skill_high", "dm_stat", "dm_p", "block_length",
    "gap_closed", "crps_events", "events_skill_vs_raw", "spread_rmse", "spread_corr", *INFO_COLUMNS,
]  # fmt: skip


def score_all(
    dm: EnsembleDataModule, paths: dict[str, Path], preds: dict[str, dict], info: dict[str, dict]
) -> pd.DataFrame:
    """One table of CRPS and spread scores on the test split for every prediction in ``preds``.

    ``preds[name]`` holds ``index`` (N,) into the test split and ``mean``/``std`` (N, T·V, D, H, W),
    fields lead-major over the T target leads; ``kind == "spread"`` marks spread estimates
    (``std`` only). ``info[name]`` gives ``params``, ``train_s`` and the time-to-quality columns.
    Every target lead is scored (rows per lead, ``lead_h``).
    """
    spec = dm.spec
    frame = build_frame(
        str(paths["forecast"]), str(paths["analysis"]), variables=list(spec.variables),
        levels=list(spec.levels), leads=list(spec.target_leads), oracle=str(paths["oracle"]),
        oracle_vars=["event_mask"], inits=dm.test_set.init_times,
    )  # fmt: skip
    rows = [_score_lead(dm, frame, preds, t, lead) for t, lead in enumerate(spec.target_leads)]
    table = pd.concat(rows, ignore_index=True)
    base = table["model"].str.replace(" (Gaussian)", "", regex=False)
    for col in INFO_COLUMNS:
        table[col] = [info.get(b, {}).get(col, np.nan) for b in base]
    return table.reindex(columns=COLUMNS)


def _score_lead(
    dm: EnsembleDataModule, frame: EnsembleFrame, preds: dict[str, dict], t: int, lead: np.timedelta64
) -> pd.DataFrame:
    """The rows of target lead ``t`` (``lead``): CRPS of every source, spread scores of the spread models."""
    spec = dm.spec
    variables, levels, k, m, inits = frame.variables, frame.levels, spec.k, spec.members, frame.inits
    n_var, lead_h, weights = len(variables), lead_hours(lead), frame.weights
    at_lead = frame.at(lead)
    fc, obs, orc = at_lead.forecast, at_lead.analysis, at_lead.oracle

    def field(name: str, key: str, i: int) -> xr.DataArray:
        p = preds[name]
        coords = {INIT_TIME: dm.test_set.init_times[p["index"]], LEVEL: levels}
        coords.update({LATITUDE: fc[LATITUDE].values, LONGITUDE: fc[LONGITUDE].values})
        values = p[key][:, t * n_var + i]
        return xr.DataArray(values, dims=FIELD_DIMS, coords=coords).sel({INIT_TIME: inits})

    raw_key = raw_ensemble_name(m)
    rows, spread_rows = [], []
    for i, var in enumerate(variables):
        y, ens = obs[var], fc[var].transpose(INIT_TIME, MEMBER, *FIELD_DIMS[1:])
        sub = ens.isel({MEMBER: slice(0, k)})
        sources = {
            raw_key: crps_ensemble(ens, y, preserve_dims=FIELD_DIMS),
            raw_subset_name(k): crps_ensemble(sub, y, preserve_dims=FIELD_DIMS),
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
        tests = skill_tests(sources, weights, raw_key, lead)
        events = orc["event_mask"]
        rows += crps_rows(sources, weights, var, levels, lead_h, raw_key, events=events, tests=tests)
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
    return pd.concat([crps, spread], ignore_index=True)


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model: means over variables and levels at the last lead, skill at every lead.

    Columns: ``mean_skill_vs_raw_ensemble``, ``mean_gap_closed``, ``mean_events_skill_vs_raw`` and
    ``mean_spread_corr`` at the last (furthest) lead; ``skill_<h>h`` at every lead; ``better_95``:
    in how many variables and levels the skill's 95 % interval lies above 0 at the last lead; for spread
    estimates ``spread_rmse_reduction`` (1 − RMSE / RMSE of the K-member sample std, ddof 1, at the
    last lead); and the per-model :data:`INFO_COLUMNS`.
    """
    last = table["lead_h"].max()
    at_last = table[table["lead_h"] == last]
    cols = ["skill_vs_raw_ensemble", "gap_closed", "events_skill_vs_raw", "spread_corr"]
    out = at_last.groupby("model", sort=False)[cols].mean()
    out = out.rename(columns={c: f"mean_{c}" for c in cols})
    for lead, part in table.groupby("lead_h"):
        out[f"skill_{int(lead)}h"] = part.groupby("model", sort=False)["skill_vs_raw_ensemble"].mean()
    tested = at_last[at_last["skill_low"].notna()]
    if len(tested):  # how many (variable, level) skills have a 95 % interval above 0
        above = (tested["skill_low"] > 0).groupby(tested["model"], sort=False)
        out["better_95"] = above.sum().astype(int).astype(str) + "/" + above.size().astype(str)
    sp = at_last.loc[at_last["spread_rmse"].notna(), ["model", "variable", "level_hPa", "spread_rmse"]]
    ref = sp[sp["model"].str.contains("(ddof 1)", regex=False)].drop(columns="model")
    if len(ref):
        sp = sp.merge(ref.rename(columns={"spread_rmse": "ref"}), on=["variable", "level_hPa"])
        out["spread_rmse_reduction"] = (
            (1 - sp["spread_rmse"] / sp["ref"]).groupby(sp["model"], sort=False).mean()
        )
    info = table.groupby("model", sort=False)[INFO_COLUMNS].first()
    return out.join(info).reset_index()


def _format(df: pd.DataFrame) -> pd.DataFrame:
    out = df.copy()
    fmts = {
        "spread_rmse": "{:.4g}", "spread_corr": "{:.3f}", "mean_spread_corr": "{:.3f}", "params": "{:,.0f}",
        "train_s": "{:.0f}", "mean_skill_vs_raw_ensemble": "{:+.1%}", "mean_gap_closed": "{:.1%}",
        "mean_events_skill_vs_raw": "{:+.1%}", "spread_rmse_reduction": "{:+.1%}", "val_score": "{:.4g}",
        "baseline_val_score": "{:.4g}", "time_to_baseline_s": "{:.0f}", "samples_to_baseline": "{:,.0f}",
        "epochs": "{:.0f}", "best_epoch": "{:.0f}",
    }  # fmt: skip
    fmts.update({c: "{:+.1%}" for c in out.columns if re.fullmatch(r"skill_\d+h", str(c))})
    for col, fmt in fmts.items():
        if col in out:
            out[col] = [fmt.format(v) if pd.notna(v) else "" for v in out[col]]
    return out


#: The files of a benchmark folder.
BENCHMARK_NAMES = ("benchmark.csv", "benchmark_summary.csv", "benchmark.md")


def benchmark_files(table: pd.DataFrame, summary: pd.DataFrame, n_inits: int) -> dict[str, str]:
    """``benchmark.csv``, ``benchmark_summary.csv`` and ``benchmark.md`` (both tables) by name."""
    note = (
        f"Test split: {n_inits} init times; area-weighted means (exact cell area). CRPS estimator per "
        "row: empirical ensemble CRPS for raw ensembles, closed-form Gaussian CRPS for rows marked "
        "Gaussian. skill and gap_closed refer to the raw ensemble (all members, empirical) and the "
        "oracle; crps_events: mean over the oracle's event_mask points. train_s is wall-clock time "
        "(with time_to_baseline_s, the only columns that differ between runs with the same seed). "
        "Time to quality: the first validation epoch whose score (val_score: the normalised CRPS of "
        "a mixed model, the normalised squared spread error of a spread model) reaches the baseline's "
        "(local EMOS for mixed models, the K-member sample std for spread models), its wall time "
        "from the start of training and the training samples seen by then.\n\n"
    )
    md = "## Summary (means over variables and levels; skill columns per lead)\n\n" + to_markdown(
        _format(summary)
    )
    md += "\n## All scores\n\n" + note + to_markdown(_format(table)).replace("| nan |", "|  |")
    return {
        "benchmark.csv": table.to_csv(index=False),
        "benchmark_summary.csv": summary.to_csv(index=False),
        "benchmark.md": md,
    }
