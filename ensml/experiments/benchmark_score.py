"""Scoring of ``ensml benchmark``: every model's test predictions on the ``ensml evaluate`` path.

The forecast, analysis and oracle of the test split are read through the one frame builder
(:func:`ensml.data.frame.build_frame`), so the benchmark weighs by cell area
(:func:`ensml.data.weights.area_weights`) and aligns by valid time as ``ensml evaluate`` does.
Raw ensembles are scored with the empirical ensemble CRPS and, for comparison, with the Gaussian
CRPS of their mean and std (ddof 1); EMOS, mixed models and the oracle with the closed-form
Gaussian CRPS. Rows come from :func:`ensml.verify.rows.crps_rows` (with the oracle's
``event_mask`` for the extreme-event CRPS, and each skill's 95 % interval and DM test against the
raw ensemble, :func:`ensml.scores.significance.skill_tests`) and
:func:`~ensml.verify.rows.spread_scores`; every probabilistic forecast's row also gets its skill
against local EMOS, spread/skill ratio and histogram flatness with their intervals
(:mod:`ensml.experiments.benchmark_calibration`). Without an oracle (the physics testbed) there
are no oracle rows and no :data:`ORACLE_COLUMNS`.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.frame import EnsembleFrame, LeadFrame, build_frame
from ensml.data.subset import Subset
from ensml.experiments.benchmark_calibration import (
    CALIBRATION_COLUMNS,
    EMOS_COLUMNS,
    LOCAL_EMOS,
    FamilyForecast,
    Forecast,
    add_emos_skill,
    calibration_columns,
    emos_intervals,
    row_level,
)
from ensml.experiments.benchmark_events import (
    EVENT_COLUMNS,
    RELIABILITY_COLUMNS,
    add_reliability_dev,
    negative_share,
    reliability_rows,
)
from ensml.experiments.benchmark_predictions import model_label
from ensml.names import INIT_TIME, LATITUDE, LEVEL, LONGITUDE, MEMBER, raw_ensemble_name, raw_subset_name
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import Family
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.significance import skill_tests
from ensml.times import lead_hours
from ensml.verify.families import distribution_crps, estimator, oracle_families
from ensml.verify.rows import SKILL_COLUMNS, crps_rows, spread_scores
from ensml.verify.thresholds import thresholds_for

FIELD_DIMS = [INIT_TIME, LEVEL, LATITUDE, LONGITUDE]
#: Per-model columns (from ``info``): size, training time, and time to the baseline's quality.
INFO_COLUMNS = [
    "params",
    "train_s",
    "epochs",
    "best_epoch",
    "val_score",
    "baseline_val_score",
    "time_to_baseline_s",
    "samples_to_baseline",
]
#: Columns that need the generator's oracle: absent from a table scored without one.
ORACLE_COLUMNS = ["gap_closed", "crps_events", "events_skill_vs_raw"]
COLUMNS = [
    "model",
    "variable",
    "level_hPa",
    "lead_h",
    "estimator",
    "crps",
    "units",
    *SKILL_COLUMNS,
    "gap_closed",
    "crps_events",
    "events_skill_vs_raw",
    "spread_rmse",
    "spread_corr",
    *INFO_COLUMNS,
    *EMOS_COLUMNS,
    *CALIBRATION_COLUMNS,
    *EVENT_COLUMNS,
]


@dataclass(frozen=True)
class Scored:
    """The benchmark's table, and the per-point CRPS (init_time, level, latitude, longitude) at
    the last lead of the sources asked to keep, by variable and name (for the maps)."""

    table: pd.DataFrame
    fields: dict[str, dict[str, xr.DataArray]]
    lead_h: int
    #: The reliability diagrams of the variables with event thresholds, one row per bin
    #: (:data:`~ensml.experiments.benchmark_events.RELIABILITY_COLUMNS`; empty without such variables).
    reliability: pd.DataFrame


def score_all(
    dm: EnsembleDataModule,
    paths: dict[str, Path],
    preds: dict[str, dict],
    info: dict[str, dict],
    keep: Collection[str] = (),
    reference: str = LOCAL_EMOS,
) -> Scored:
    """One table of CRPS, calibration and spread scores on the test split for every prediction.

    ``preds[label]`` is a prediction (:mod:`ensml.experiments.benchmark_predictions`) by its row
    label: ``index`` (N,) into the test split and each variable's family parameters
    ``{var}_{param}`` (N, T, D, H, W) over the T target leads (``families`` says which family);
    ``kind == "spread"`` marks spread estimates (``{var}_std`` only). ``info[label]`` gives
    ``params``, ``train_s`` and the time-to-quality columns. Every target lead is scored (rows per
    lead, ``lead_h``). With ``paths["oracle"]`` the oracle is scored too, in the families its
    ``ensml_distribution`` names, and the :data:`ORACLE_COLUMNS` filled; without one they are
    left out. Variables with event thresholds (``tp``, ``si10``) add the
    :data:`~ensml.experiments.benchmark_events.EVENT_COLUMNS` and the reliability diagrams; a
    table without them has neither. ``keep``: sources (table names) whose per-point CRPS at the
    last lead is returned; ``reference``: the local EMOS of ``skill_vs_local_emos``.
    """
    spec, oracle = dm.spec, paths.get("oracle")
    frame = build_frame(
        str(paths["forecast"]),
        str(paths["analysis"]),
        variables=list(spec.variables),
        levels=list(spec.levels),
        leads=list(spec.target_leads),
        oracle=str(oracle) if oracle else None,
        oracle_vars=["event_mask"] if oracle else [],
        inits=dm.test_set.init_times,
    )
    rows, fields, reliability = [], {}, []
    for t, lead in enumerate(spec.target_leads):
        last = t == len(spec.target_leads) - 1
        part, fields, rel = _score_lead(dm, frame, preds, t, lead, keep if last else (), reference)
        rows.append(part)
        reliability += rel
    rel_table = pd.DataFrame(reliability, columns=RELIABILITY_COLUMNS)
    table = add_reliability_dev(add_emos_skill(pd.concat(rows, ignore_index=True), reference), rel_table)
    for col in INFO_COLUMNS:
        table[col] = [info.get(name, {}).get(col, np.nan) for name in table["model"]]
    columns = [
        c for c in COLUMNS if (oracle or c not in ORACLE_COLUMNS) and (c not in EVENT_COLUMNS or c in table)
    ]
    return Scored(table.reindex(columns=columns), fields, lead_hours(spec.target_leads[-1]), rel_table)


def oracle_label(frame: EnsembleFrame) -> str | None:
    """The oracle's row label (``oracle (Gaussian)`` for z and t); None without an oracle."""
    if frame.oracle is None:
        return None
    return model_label("oracle", _oracle_families(frame).values())


def _oracle_families(frame: EnsembleFrame) -> dict:
    assert frame.oracle is not None
    return oracle_families(frame.oracle.attrs, frame.variables, frame.names["oracle"])


def _forecasts(
    dm: EnsembleDataModule, frame: EnsembleFrame, lf: LeadFrame, preds: dict[str, dict], t: int, var: str
) -> tuple[dict[str, Forecast], dict[str, xr.DataArray]]:
    """Every probabilistic forecast of ``var`` at lead ``t`` by its table name, in table order:
    members (raw ensemble, raw subset), Gaussian (mean, std) or another family's distribution
    (the rest, each in its family for ``var``); and the spread models' std fields. A surface
    variable's fields have no level (its D equal levels taken once)."""
    spec, fc, orc = dm.spec, lf.forecast, lf.oracle
    k, m = spec.k, spec.members
    dims = [d for d in FIELD_DIMS if d in lf.analysis[var].dims]

    def field(p: dict, key: str) -> xr.DataArray:
        coords = {INIT_TIME: dm.test_set.init_times[p["index"]], LEVEL: frame.levels}
        coords.update({LATITUDE: fc[LATITUDE].values, LONGITUDE: fc[LONGITUDE].values})
        values = p[key][:, t]  # (N, D, H, W)
        if LEVEL not in dims:
            values, coords = values[:, 0], {d: c for d, c in coords.items() if d != LEVEL}
        return xr.DataArray(values, dims=dims, coords=coords).sel({INIT_TIME: frame.inits})

    def distribution(p: dict, family: Family) -> Forecast:
        return _as_forecast(
            xr.Dataset({f"{var}_{q}": field(p, f"{var}_{q}") for q in family.params}), var, family
        )

    ens = fc[var].transpose(INIT_TIME, MEMBER, *dims[1:])
    out: dict[str, Forecast] = dict(Subset.first(k).ensembles(ens))
    sub = out[raw_subset_name(k)]
    for name, e in ((f"raw ensemble ({m} members", ens), (f"raw subset ({k} members", sub)):
        out[f"{name}, Gaussian of mean/std)"] = (e.mean(MEMBER), e.std(MEMBER, ddof=1))
    for name, p in preds.items():
        if p["kind"] == "mixed" and var in p["families"]:
            out[name] = distribution(p, p["families"][var])
    if orc is not None:
        out[str(oracle_label(frame))] = _as_forecast(orc, var, _oracle_families(frame)[var])
    spread = {
        name: field(p, f"{var}_std")
        for name, p in preds.items()
        if p["kind"] == "spread" and f"{var}_std" in p
    }
    return out, spread


def _as_forecast(ds: xr.Dataset, var: str, family: Family) -> Forecast:
    """``var``'s distribution in ``ds``: Gaussian (mean, std) for the normal family (scored as
    always), else a :class:`FamilyForecast`."""
    if family.name == "normal":
        return ds[f"{var}_mean"], ds[f"{var}_std"]
    return FamilyForecast(ds, var, family)


def _crps(fc: Forecast, y: xr.DataArray) -> xr.DataArray:
    dims = [d for d in FIELD_DIMS if d in y.dims]
    if isinstance(fc, FamilyForecast):
        return distribution_crps(fc.ds, fc.var, fc.family, y, preserve_dims=dims)
    if isinstance(fc, tuple):
        return crps_gaussian_xr(fc[0], fc[1], y, preserve_dims=dims)
    return crps_ensemble(fc, y, preserve_dims=dims)


def _estimators(forecasts: dict[str, Forecast]) -> dict[str, str]:
    """The ``estimator`` of every distribution's rows: its family's CRPS (ensembles: empirical)."""
    out = {}
    for name, fc in forecasts.items():
        if isinstance(fc, FamilyForecast):
            out[name] = estimator(fc.family)
        elif isinstance(fc, tuple):
            out[name] = "Gaussian closed form"
    return out


def _score_lead(
    dm: EnsembleDataModule,
    frame: EnsembleFrame,
    preds: dict[str, dict],
    t: int,
    lead: np.timedelta64,
    keep: Collection[str],
    reference: str,
) -> tuple[pd.DataFrame, dict[str, dict[str, xr.DataArray]], list[dict]]:
    """The rows of target lead ``t`` (``lead``): CRPS and calibration of every source, spread
    scores of the spread models; the per-point CRPS of the sources in ``keep``, by variable; and
    the reliability rows of the variables with event thresholds."""
    spec = dm.spec
    levels, k, m, weights, lead_h = frame.levels, spec.k, spec.members, frame.weights, lead_hours(lead)
    lf = frame.at(lead)
    raw_key, orc_key = raw_ensemble_name(m), oracle_label(frame)
    rows, spread_rows, kept, reliability = [], [], {}, []
    for var in frame.variables:
        y = lf.analysis[var]
        forecasts, spread_models = _forecasts(dm, frame, lf, preds, t, var)
        sources = {name: _crps(fc, y) for name, fc in forecasts.items()}
        kept[var] = {name: sources[name] for name in keep if name in sources}
        tests = skill_tests(sources, weights, raw_key, lead)
        extra = calibration_columns(forecasts, y, weights, levels, bins=m + 1)
        for key, cols in emos_intervals(sources, weights, levels, lead, reference).items():
            extra[key].update(cols)
        thresholds = thresholds_for(var, y.attrs)
        if thresholds is not None:
            for name, fc in forecasts.items():
                for lev, share in negative_share(fc, weights, levels).items():
                    extra[name, lev]["neg_quantile_share"] = share
            reliability += reliability_rows(forecasts, y, weights, thresholds, var, levels, lead_h)
        events = lf.oracle["event_mask"] if lf.oracle is not None else None
        keys = {"oracle_key": orc_key or "oracle (Gaussian)", "estimators": _estimators(forecasts)}
        var_rows = crps_rows(
            sources, weights, var, levels, lead_h, raw_key, events=events, tests=tests, **keys
        )
        rows += [{**row, **extra[row["forecast"], row_level(row)]} for row in var_rows]
        ens = forecasts[raw_key]
        sub = forecasts[raw_subset_name(k)]
        estimators = {
            f"{k}-member sample std (ddof 1)": sub.std(MEMBER, ddof=1),
            f"{k}-member sample std (ddof 0)": sub.std(MEMBER, ddof=0),
        }
        estimators.update(spread_models)
        spread_rows += spread_scores(estimators, ens.std(MEMBER, ddof=0), weights, var, levels, lead_h, m)

    crps = pd.DataFrame(rows).rename(columns={"forecast": "model"})
    spread = pd.DataFrame(spread_rows).rename(columns={"rmse": "spread_rmse", "correlation": "spread_corr"})
    spread["model"] = spread["estimator"]
    spread["estimator"] = "spread vs " + spread.pop("target")
    return pd.concat([crps, spread], ignore_index=True), kept, reliability


def summarise(table: pd.DataFrame) -> pd.DataFrame:
    """One row per model: means over variables and levels at the last lead, skill at every lead.

    Columns: ``mean_skill_vs_raw_ensemble``, ``mean_gap_closed``, ``mean_events_skill_vs_raw`` and
    ``mean_spread_corr`` at the last (furthest) lead; ``skill_<h>h`` at every lead; ``better_95``:
    in how many variables and levels the skill's 95 % interval lies above 0 at the last lead; for spread
    estimates ``spread_rmse_reduction`` (1 − RMSE / RMSE of the K-member sample std, ddof 1, at the
    last lead); the per-model :data:`INFO_COLUMNS`; then, at the last lead,
    ``mean_skill_vs_local_emos``, ``better_than_emos_95`` (as ``better_95``, against local EMOS),
    ``mean_spread_skill_ratio`` and ``mean_flatness``; with variables that have event thresholds,
    ``neg_quantile_share`` (mean over them) and ``reliability_dev`` (the worst of them) at the last
    lead. A table without the oracle's columns has no ``mean_gap_closed`` or
    ``mean_events_skill_vs_raw``.
    """
    last = table["lead_h"].max()
    at_last = table[table["lead_h"] == last]
    cols = ["skill_vs_raw_ensemble", "gap_closed", "events_skill_vs_raw", "spread_corr"]
    cols = [c for c in cols if c in table]  # no oracle: no gap_closed, no events
    out = at_last.groupby("model", sort=False)[cols].mean()
    out = out.rename(columns={c: f"mean_{c}" for c in cols})
    for lead, part in table.groupby("lead_h"):
        out[f"skill_{int(lead)}h"] = part.groupby("model", sort=False)["skill_vs_raw_ensemble"].mean()
    if (above := _above(at_last, "skill_low")) is not None:
        out["better_95"] = above
    sp = at_last.loc[at_last["spread_rmse"].notna(), ["model", "variable", "level_hPa", "spread_rmse"]]
    ref = sp[sp["model"].str.contains("(ddof 1)", regex=False)].drop(columns="model")
    if len(ref):
        sp = sp.merge(ref.rename(columns={"spread_rmse": "ref"}), on=["variable", "level_hPa"])
        out["spread_rmse_reduction"] = (
            (1 - sp["spread_rmse"] / sp["ref"]).groupby(sp["model"], sort=False).mean()
        )
    out = out.join(table.groupby("model", sort=False)[INFO_COLUMNS].first())
    return _calibration_summary(out, at_last).reset_index()


def _above(at_last: pd.DataFrame, low: str) -> pd.Series | None:
    """Per model, how many (variable, level) skills have a 95 % interval (lower end ``low``)
    above 0, as "n/total"; None when no row has an interval."""
    tested = at_last[at_last[low].notna()] if low in at_last else at_last.iloc[:0]
    if not len(tested):
        return None
    above = (tested[low] > 0).groupby(tested["model"], sort=False)
    return above.sum().astype(int).astype(str) + "/" + above.size().astype(str)


def _calibration_summary(out: pd.DataFrame, at_last: pd.DataFrame) -> pd.DataFrame:
    """The summary's columns of :mod:`~ensml.experiments.benchmark_calibration` (after the others):
    ``mean_skill_vs_local_emos``, ``better_than_emos_95``, ``mean_spread_skill_ratio``,
    ``mean_flatness``."""
    by_model = at_last.groupby("model", sort=False)
    if "skill_vs_local_emos" in at_last:
        out["mean_skill_vs_local_emos"] = by_model["skill_vs_local_emos"].mean()
        if (above := _above(at_last, "emos_skill_low")) is not None:
            out["better_than_emos_95"] = above
    for col in ("spread_skill_ratio", "flatness"):
        if col in at_last:
            out[f"mean_{col}"] = by_model[col].mean()
    if "neg_quantile_share" in at_last:
        out["neg_quantile_share"] = by_model["neg_quantile_share"].mean()
    if "reliability_dev" in at_last:
        out["reliability_dev"] = by_model["reliability_dev"].max()
    return out
