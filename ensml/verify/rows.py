"""The rows of the score tables from per-point scores already computed, and the per-point fields.

Area-weighted means of the CRPS of every forecast into the rows of ``scores.csv`` (with skill
and gap closed), the spread model's scores into those of ``spread.csv``, and the per-point
fields of ``scores.nc`` gathered by lead on the forecast's grid. Used by
:func:`ensml.verify.evaluate.evaluate` and the benchmark (:mod:`ensml.experiments.benchmark_score`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import grid_mapping
from ensml.names import (
    COORD_ATTRS,
    INIT_TIME,
    LEAD_TIME,
    LEVEL,
    VALID_TIME,
    units_of,
)
from ensml.scores.significance import SkillTest
from ensml.verify.levels import at, levels_of, table_level


def _area_mean(x: xr.DataArray, weights: xr.DataArray) -> xr.DataArray:
    dims = [d for d in x.dims if d != LEVEL]
    return x.weighted(weights).mean(dims)


def _pooled_mean(x: xr.DataArray, weights: xr.DataArray) -> xr.DataArray:
    """The area-weighted mean of ``x`` over init times and points, taken as ``scores.nc``'s fields
    are: first the mean over the init times that observe each point (in ``x``'s dtype), then the
    area mean weighted by how many init times observe each point (by area alone when all do)."""
    per_point = x.mean(INIT_TIME)
    observed = x.notnull().sum(INIT_TIME)
    if bool((observed < x.sizes[INIT_TIME]).any()):
        weights = weights * observed
    return _area_mean(per_point, weights)


def _weighted_corr(a: xr.DataArray, b: xr.DataArray, weights: xr.DataArray) -> xr.DataArray:
    dims = [d for d in a.dims if d != LEVEL]
    w = weights.broadcast_like(a)
    ma, mb = a.weighted(w).mean(dims), b.weighted(w).mean(dims)
    cov = ((a - ma) * (b - mb)).weighted(w).mean(dims)
    return cov / np.sqrt(((a - ma) ** 2).weighted(w).mean(dims) * ((b - mb) ** 2).weighted(w).mean(dims))


def crps_rows(
    sources: dict[str, xr.DataArray],
    weights: xr.DataArray,
    var: str,
    levels: Sequence[float],
    lead_h: int,
    raw_key: str,
    events: xr.DataArray | None = None,
    oracle_key: str = "oracle (Gaussian)",
    units: str | None = None,
    ensemble: str = "empirical ensemble",
    init_first: bool = False,
    tests: dict[tuple[str, float | None], SkillTest] | None = None,
    estimators: dict[str, str] | None = None,
) -> list[dict]:
    """Table rows of area-weighted mean CRPS, one per source and level.

    Every row says how many values were scored (``n_scored``: init times × points where the
    analysis is observed). With ``tests`` (:func:`ensml.scores.significance.skill_tests` of the
    same sources), each source's skill over ``raw_key`` gets its 95 % interval and the
    Diebold-Mariano test against ``raw_key`` (``skill_low``, ``skill_high``, ``dm_stat``,
    ``dm_p``, ``block_length``); the reference's own row has none (NaN).

    Parameters
    ----------
    sources
        Per-point CRPS fields (level, latitude, longitude, optionally init_time) by forecast
        name; a name with "Gaussian" in it is labelled as scored by the closed form, others as
        empirical. NaN (not observed) is left out of the means, which are then over the values
        observed.
    weights
        Area weights (:func:`ensml.data.weights.area_weights`).
    lead_h
        The lead time of the rows, hours (the ``lead_h`` column).
    raw_key, oracle_key
        Sources that skill (``1 - crps / crps_raw``) and ``gap_closed``
        (``(crps_raw - crps) / (crps_raw - crps_oracle)``) refer to; no gap without an oracle.
    events
        Optional 0/1 mask (init_time, latitude, longitude) of extreme events (the fields must then
        keep init_time): adds the mean CRPS over event points (``crps_events``) and its skill vs
        ``raw_key`` (``events_skill_vs_raw``).
    init_first
        Average the (init_time, …) fields over init times first, as the per-point fields of
        ``scores.nc`` are, then over the area (``evaluate``); else one weighted mean over both
        (the benchmark). The same number but for rounding.
    ensemble
        The ``estimator`` of the sources that are not Gaussian (``fair ensemble`` when scored
        with the fair CRPS).
    estimators
        The ``estimator`` of sources by name, where given (a predictive family's CRPS:
        ``csg0 closed form``); the others as above.
    units
        The units column: the data's own (its ``units`` attribute) where it has them, else those
        ensml knows for ``var`` (:func:`ensml.names.units_of`).
    """
    mean = _pooled_mean if init_first else _area_mean
    means = {name: mean(field, weights) for name, field in sources.items()}
    counts = {name: f.notnull().sum([d for d in f.dims if d != LEVEL]) for name, f in sources.items()}
    ev = None
    if events is not None:
        w = (weights * events.astype("float64")).broadcast_like(next(iter(sources.values())))
        ev = {
            name: field.weighted(w).mean([d for d in field.dims if d != LEVEL])
            for name, field in sources.items()
        }
    rows = []
    for name, mean in means.items():
        for lev in levels_of(mean, levels):
            value = float(at(mean, lev))
            raw = float(at(means[raw_key], lev))
            row = {
                "variable": var,
                "level_hPa": table_level(lev),
                "lead_h": lead_h,
                "forecast": name,
                "estimator": _estimator(name, ensemble, estimators),
                "crps": value,
                "units": units or units_of(var),
                "skill_vs_raw_ensemble": 1.0 - value / raw,
            }
            if tests is not None:
                row.update(NO_TEST if name == raw_key else skill_test_columns(tests[name, lev]))
            if oracle_key in means:
                best = float(at(means[oracle_key], lev))
                row["gap_closed"] = (raw - value) / (raw - best) if raw != best else np.nan
            if ev is not None:
                value_ev, raw_ev = (float(at(ev[key], lev)) for key in (name, raw_key))
                row["crps_events"] = value_ev
                row["events_skill_vs_raw"] = 1.0 - value_ev / raw_ev
            row["n_scored"] = int(at(counts[name], lev))
            rows.append(row)
    return rows


def _estimator(name: str, ensemble: str, estimators: dict[str, str] | None) -> str:
    if estimators and name in estimators:
        return estimators[name]
    return "Gaussian closed form" if "Gaussian" in name else ensemble


def score_rows(
    sources: dict[str, xr.DataArray],
    weights: xr.DataArray,
    *,
    var: str,
    levels: Sequence[float],
    lead_h: int,
    raw_key: str,
    score: str,
    threshold: float | None,
    units: str,
    estimators: dict[str, str],
    oracle_key: str | None = None,
    tests: dict[tuple[str, float | None], SkillTest] | None = None,
    event_frequency: xr.DataArray | None = None,
) -> list[dict]:
    """Rows of any negatively oriented per-point score (a Brier score, a twCRPS, SEEPS), as
    :func:`crps_rows` makes those of the CRPS: one per source and level, the area-weighted mean
    over init times and points (init times first) in ``value``, the skill over ``raw_key``
    (NaN where its score is 0), the interval and Diebold-Mariano test of ``tests``, the gap
    closed towards ``oracle_key`` and ``n_scored``; ``score`` and ``threshold`` (NaN: none)
    say what is scored, ``event_frequency`` (0/1 events, NaN not observed) how often the
    event was observed (area-weighted, as the scores)."""
    means = {name: _pooled_mean(field, weights) for name, field in sources.items()}
    counts = {name: f.notnull().sum([d for d in f.dims if d != LEVEL]) for name, f in sources.items()}
    freq = None if event_frequency is None else _pooled_mean(event_frequency, weights)
    rows = []
    for name, mean in means.items():
        for lev in levels_of(mean, levels):
            value, raw = float(at(mean, lev)), float(at(means[raw_key], lev))
            row = {
                "variable": var,
                "level_hPa": table_level(lev),
                "lead_h": lead_h,
                "forecast": name,
                "score": score,
                "threshold": np.nan if threshold is None else float(threshold),
                "value": value,
                "units": units,
                "estimator": estimators.get(name, ""),
                "skill_vs_raw_ensemble": 1.0 - value / raw if raw > 0 else np.nan,
            }
            test = None if tests is None or name == raw_key else tests.get((name, lev))
            row.update(NO_TEST if test is None else skill_test_columns(test))
            if oracle_key is not None and oracle_key in means:
                best = float(at(means[oracle_key], lev))
                row["gap_closed"] = (raw - value) / (raw - best) if raw != best else np.nan
            if freq is not None:
                row["event_frequency"] = float(at(freq, lev))
            row["n_scored"] = int(at(counts[name], lev))
            rows.append(row)
    return rows


#: The columns of a skill against the raw ensemble and its test: the skill, its 95 % interval, the
#: Diebold-Mariano statistic and p-value, and the bootstrap's block length.
SKILL_COLUMNS = ["skill_vs_raw_ensemble", "skill_low", "skill_high", "dm_stat", "dm_p", "block_length"]
NO_TEST = dict.fromkeys(SKILL_COLUMNS[1:], np.nan)


def skill_test_columns(t: SkillTest) -> dict[str, float]:
    """The table columns of a skill test (the reference's own row: :data:`NO_TEST`)."""
    block = t.block_length if t.block_length else np.nan  # 0: no bootstrap was run (too few inits)
    return {
        "skill_low": t.low,
        "skill_high": t.high,
        "dm_stat": t.dm_stat,
        "dm_p": t.p_value,
        "block_length": block,
    }


#: The Hersbach terms in the decomposition table, in its column order.
DECOMPOSITION = ("crps", "reliability", "resolution", "uncertainty", "crps_potential")


def decomposition_rows(
    parts: dict[str, xr.Dataset], var: str, levels: Sequence[float], lead_h: int, units: str | None = None
) -> list[dict]:
    """Rows of the Hersbach (2000) decomposition of each ensemble's mean CRPS, one per ensemble
    and level, from :func:`ensml.scores.hersbach.crps_decomposition` by ensemble name: ``crps``
    = ``reliability`` + ``crps_potential`` = ``reliability`` - ``resolution`` + ``uncertainty``."""
    rows = []
    for name, terms in parts.items():
        for lev in levels_of(terms["crps"], levels):
            row = {"variable": var, "level_hPa": table_level(lev), "lead_h": lead_h, "forecast": name}
            row.update({term: float(at(terms[term], lev)) for term in DECOMPOSITION})
            rows.append({**row, "units": units or units_of(var)})
    return rows


def spread_scores(
    estimators: dict[str, xr.DataArray],
    target: xr.DataArray,
    weights: xr.DataArray,
    var: str,
    levels: Sequence[float],
    lead_h: int,
    members: int,
    units: str | None = None,
) -> list[dict]:
    """Rows of area-weighted RMSE and correlation of spread estimates against ``target``.

    ``target`` is the ``members``-member std (ddof 0); all fields (init_time, level, lat, lon).
    """
    rows = []
    for name, est in estimators.items():
        rmse = np.sqrt(_area_mean((est - target) ** 2, weights))
        corr = _weighted_corr(est, target, weights)
        for lev in levels_of(rmse, levels):
            rows.append(
                {
                    "variable": var,
                    "level_hPa": table_level(lev),
                    "lead_h": lead_h,
                    "estimator": name,
                    "target": f"{members}-member std (ddof 0)",
                    "rmse": float(at(rmse, lev)),
                    "correlation": float(at(corr, lev)),
                    "units": units or units_of(var),
                }
            )
    return rows


def by_lead(per_lead: list[xr.Dataset], leads: np.ndarray) -> xr.Dataset:
    """The per-point fields of each lead: as they are for one lead (a scalar ``lead_time``, the
    layout of a one-lead run), else stacked along a ``lead_time`` dim (timedelta64, CF attrs)."""
    if len(per_lead) == 1:
        return per_lead[0]
    drop = [LEAD_TIME, VALID_TIME]
    stacked = xr.concat(
        [ds.drop_vars(drop, errors="ignore") for ds in per_lead],
        dim=pd.Index(leads.astype("timedelta64[ns]"), name=LEAD_TIME),
        join="exact",
    )
    stacked[LEAD_TIME].attrs.update(COORD_ATTRS[LEAD_TIME])
    return stacked


def on_grid(fields: xr.Dataset, fc: xr.Dataset) -> xr.Dataset:
    """The per-point scores with the forecast's CF grid mapping (projected grids), for other tools' maps."""
    gm = grid_mapping(fc)
    if gm is None:
        return fields
    fields = fields.assign_coords({gm.name: gm.variable})
    for var in fields.data_vars.values():
        var.attrs["grid_mapping"] = str(gm.name)
    return fields


def slug(name: str) -> str:
    return name.split(" (")[0].replace(" ", "_").replace("-", "_")


__all__ = [
    "DECOMPOSITION",
    "by_lead",
    "crps_rows",
    "decomposition_rows",
    "on_grid",
    "score_rows",
    "slug",
    "spread_scores",
]
