"""The benchmark's columns for variables bounded below (precipitation, wind speed), and its targets.

For each variable with event thresholds (:func:`ensml.verify.thresholds.thresholds_for`: ``tp``
0.1, 1, 5, 10 and 25 mm, ``si10`` 10, 15 and 20 m s-1) every probabilistic forecast's row gets:

- ``neg_quantile_share``: the share of its quantiles at :data:`QUANTILE_LEVELS` (0.05, 0.10, …,
  0.95) that lie below 0, area-weighted over points and init times: a Gaussian's
  :math:`\\mu + \\sigma\\,\\Phi^{-1}(\\tau)`; an ensemble's empirical quantiles (numpy's linear
  interpolation between the sorted members); a distribution of another family through its cdf,
  since :math:`q_\\tau < 0 \\iff \\tau < P(Y < 0)` (up to a set of τ of measure zero), which
  costs one cdf instead of 19 quantile inversions per point;
- ``reliability_dev``: the largest :math:`|\\bar o - \\bar p|` of its reliability diagrams
  (:func:`ensml.scores.probability.probability_reliability`, :data:`RELIABILITY_BINS` equal bins,
  area-weighted) over the variable's event thresholds and the bins holding at least
  :data:`MIN_CASES` cases; each threshold's diagram and deviation are in
  ``benchmark_reliability.csv`` and ``benchmark.md``.

The probabilities are those of ``evaluate`` (:mod:`ensml.verify.events`): the fraction of members
above the threshold, P(Y > t) of a family (:func:`ensml.scores.predictive.exceedance_family`).

:func:`verdicts` states the issue's targets for a table of such variables, at the last lead:
the best network (highest mean skill over the reference local EMOS) beats it by at least
:data:`SKILL_TARGET` with a 95 % interval above 0 on every variable and level; it closes at least
:data:`GAP_TARGET` of the raw → oracle gap on every variable with an oracle; its reliability at
:data:`HEADLINE` (``tp`` 10 mm) lies within :data:`RELIABILITY_TARGET` of the diagonal in the
bins holding at least :data:`MIN_CASES` cases.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd
import xarray as xr
from scipy import special

from ensml.experiments.benchmark_calibration import FamilyForecast, Forecast
from ensml.names import MEMBER
from ensml.scores.distributions import get_family
from ensml.scores.predictive import exceedance_family
from ensml.scores.probability import THRESHOLD, exceedance_probability, probability_reliability
from ensml.verify.levels import at, levels_of, per_level, table_level
from ensml.verify.thresholds import EventThresholds

#: The quantile levels of ``neg_quantile_share``.
QUANTILE_LEVELS = np.round(np.arange(1, 20) / 20, 2)
#: Reliability bins (equal, over [0, 1]), as ``evaluate``'s.
RELIABILITY_BINS = 10
#: A reliability bin counts towards ``reliability_dev`` when it holds at least this many cases.
MIN_CASES = 100
#: The targets of :func:`verdicts`: skill over local EMOS, gap closed, reliability deviation.
SKILL_TARGET, GAP_TARGET, RELIABILITY_TARGET = 0.03, 0.80, 0.05
#: The (variable, threshold in the data's units: kg m-2 in ensml's data) of the reliability target.
HEADLINE = ("tp", 10.0)
#: The columns this module adds to the table.
EVENT_COLUMNS = ["neg_quantile_share", "reliability_dev"]
#: What the columns mean, for ``benchmark.md``.
EVENTS_NOTE = (
    "Max |observed frequency - forecast probability| of each model's reliability diagram (10 equal "
    f"bins, area-weighted) at each event threshold, over the bins holding >= {MIN_CASES} cases "
    "(empty: no such bin); the diagrams are in benchmark_reliability.csv. In the tables, "
    "neg_quantile_share: the share of the quantiles at 0.05, 0.10, ..., 0.95 below 0 (area-weighted "
    "over points and init times), reliability_dev: the worst of these deviations over the "
    "variable's thresholds."
)
#: The columns of ``benchmark_reliability.csv``.
RELIABILITY_COLUMNS = ["model", "variable", "level_hPa", "lead_h", "threshold", "units", "bin"]
RELIABILITY_COLUMNS += ["bin_lower", "bin_upper", "forecast_probability", "observed_frequency", "count"]


def negative_share(fc: Forecast, weights: xr.DataArray, levels: Sequence[float]) -> dict[float | None, float]:
    """``neg_quantile_share`` of ``fc`` by level (``None``: a surface field); see the module."""
    tau = xr.DataArray(QUANTILE_LEVELS, dims=["quantile"])
    if isinstance(fc, FamilyForecast):
        params = fc.params()
        like = next(iter(params.values()))
        p = {k: np.asarray(v.broadcast_like(like).values, dtype=np.float64) for k, v in params.items()}
        with np.errstate(invalid="ignore"):
            below = fc.family.cdf(p, np.nextafter(0.0, -1.0))  # P(Y < 0)
        share = (tau < like.copy(data=below)).mean("quantile")
    elif isinstance(fc, tuple):
        mu, sigma = fc
        z = xr.DataArray(special.ndtri(QUANTILE_LEVELS), dims=["quantile"])
        share = (mu + sigma * z < 0).mean("quantile")
    else:
        share = (fc.quantile(QUANTILE_LEVELS, dim=MEMBER) < 0).mean("quantile")
    dims = [d for d in share.dims if d not in per_level(share)]
    mean = share.weighted(weights).mean(dims)
    return {lev: float(at(mean, lev)) for lev in levels_of(mean, levels)}


def exceedance(fc: Forecast, events: Sequence[float]) -> xr.DataArray:
    """P(Y > t) of ``fc`` at each of ``events``, with a ``threshold`` dim first."""
    if isinstance(fc, FamilyForecast):
        return exceedance_family(fc.family, fc.params(), events)
    if isinstance(fc, tuple):
        return exceedance_family(get_family("normal"), {"mean": fc[0], "std": fc[1]}, events)
    t = xr.DataArray(np.asarray(events, dtype=np.float64), dims=[THRESHOLD], coords={THRESHOLD: list(events)})
    return exceedance_probability(fc, t).transpose(THRESHOLD, ...)


def reliability_rows(
    forecasts: Mapping[str, Forecast],
    y: xr.DataArray,
    weights: xr.DataArray,
    thresholds: EventThresholds,
    var: str,
    levels: Sequence[float],
    lead_h: int,
) -> list[dict]:
    """The reliability diagrams of every forecast at every event threshold, one row per bin."""
    rows = []
    for name, fc in forecasts.items():
        p = exceedance(fc, list(thresholds.events)).transpose(THRESHOLD, *y.dims)
        keep = per_level(y)
        rel = probability_reliability(p, y, n_bins=RELIABILITY_BINS, preserve_dims=keep, weights=weights)
        for lev in levels_of(rel["count"], levels):
            table = at(rel, lev).to_dataframe().reset_index()
            head = {"model": name, "variable": var, "level_hPa": table_level(lev), "lead_h": lead_h}
            head["units"] = thresholds.units
            for rec in table.to_dict("records"):
                rows.append({**head, **{c: rec[c] for c in RELIABILITY_COLUMNS if c in rec}})
    return rows


def deviations(reliability: pd.DataFrame) -> pd.DataFrame:
    """The largest |observed frequency − forecast probability| over the bins holding at least
    :data:`MIN_CASES` cases, per model, variable, level, lead and threshold (``deviation``,
    NaN where no bin holds that many; ``cases``: the cases in those bins)."""
    keys = ["model", "variable", "level_hPa", "lead_h", "threshold"]
    full = reliability[reliability["count"] >= MIN_CASES]
    dev = (full["observed_frequency"] - full["forecast_probability"]).abs()
    out = reliability[keys].drop_duplicates().set_index(keys)
    grouped = full.assign(dev=dev).groupby(keys, dropna=False)
    out["deviation"] = grouped["dev"].max()
    out["cases"] = grouped["count"].sum()
    return out.reset_index()


def add_reliability_dev(table: pd.DataFrame, reliability: pd.DataFrame) -> pd.DataFrame:
    """``reliability_dev``: the worst of :func:`deviations` over the row's event thresholds."""
    if reliability.empty:
        return table
    keys = ["model", "variable", "level_hPa", "lead_h"]
    worst = deviations(reliability).groupby(keys, dropna=False)["deviation"].max().rename("reliability_dev")
    merged = table.merge(worst.reset_index(), on=keys, how="left")
    merged.index = table.index
    return merged


def reliability_markdown(reliability: pd.DataFrame, lead_h: int) -> pd.DataFrame:
    """One row per model, one column per variable and threshold: the deviation at ``lead_h``."""
    dev = deviations(reliability)
    dev = dev[dev["lead_h"] == lead_h]
    units = reliability.drop_duplicates("variable").set_index("variable")["units"]
    dev = dev.assign(field=[f"{v} > {t:g} {units[v]}" for v, t in zip(dev["variable"], dev["threshold"])])
    wide = dev.pivot_table(index="model", columns="field", values="deviation", sort=False, dropna=False)
    order = list(dict.fromkeys(dev["model"]))
    return wide.reindex(order).reset_index()


def verdicts(
    table: pd.DataFrame, summary: pd.DataFrame, reliability: pd.DataFrame, best: str | None, reference: str
) -> list[str]:
    """The targets' verdict lines (see the module), at the table's last lead."""
    last = int(table["lead_h"].max())
    if best is None:
        return [f"No mixed network and local EMOS to compare: no verdict at {last} h."]
    rows = table[(table["lead_h"] == last) & (table["model"] == best) & table["crps"].notna()]
    lines = []
    skill = rows[["variable", "level_hPa", "skill_vs_local_emos", "emos_skill_low"]]
    if skill["skill_vs_local_emos"].notna().any():
        met = bool(((skill["skill_vs_local_emos"] >= SKILL_TARGET) & (skill["emos_skill_low"] > 0)).all())
        parts = [
            f"{_field(r)} {r.skill_vs_local_emos:+.1%} (low {r.emos_skill_low:+.1%})"
            for r in skill.itertuples()
        ]
        lines.append(
            f"{_word(met)}: {best} beats {reference} by >= {SKILL_TARGET * 100:.0f} points of CRPS skill "
            f"with a 95 % interval above 0 on every variable at {last} h: " + ", ".join(parts)
        )
    if "gap_closed" in rows:
        gap = rows[rows["gap_closed"].notna()]
        met = bool((gap["gap_closed"] >= GAP_TARGET).all()) and len(gap) > 0
        parts = [f"{_field(r)} {r.gap_closed:.1%}" for r in gap.itertuples()]
        lines.append(
            f"{_word(met)}: {best} closes >= {GAP_TARGET:.0%} of the raw -> oracle gap on every variable "
            f"with an oracle at {last} h: " + ", ".join(parts)
        )
    else:
        lines.append("Not assessed: the raw -> oracle gap (no oracle).")
    var, thr = HEADLINE
    if not reliability.empty and var in set(reliability["variable"]):
        dev = deviations(reliability)
        mine = (dev["model"] == best) & (dev["variable"] == var) & (dev["lead_h"] == last)
        hit = dev[mine & np.isclose(dev["threshold"], thr)]
        if len(hit):
            d, cases = float(hit["deviation"].iloc[0]), hit["cases"].iloc[0]
            units = reliability.loc[reliability["variable"] == var, "units"].iloc[0]
            met = bool(np.isfinite(d) and d <= RELIABILITY_TARGET)
            lines.append(
                f"{_word(met)}: {best}'s reliability for {var} > {thr:g} {units} at {last} h lies within "
                f"{RELIABILITY_TARGET} of the diagonal in the bins holding >= {MIN_CASES} cases: "
                f"max deviation {d:.3f} over {int(cases) if pd.notna(cases) else 0} cases"
            )
    return lines


def _field(row: object) -> str:
    lev = row.level_hPa  # type: ignore[attr-defined]
    return str(row.variable) if pd.isna(lev) else f"{row.variable}{lev:g}"  # type: ignore[attr-defined]


def _word(met: bool) -> str:
    return "MET" if met else "NOT MET"


__all__ = [
    "EVENTS_NOTE",
    "EVENT_COLUMNS",
    "GAP_TARGET",
    "HEADLINE",
    "MIN_CASES",
    "QUANTILE_LEVELS",
    "RELIABILITY_BINS",
    "RELIABILITY_COLUMNS",
    "RELIABILITY_TARGET",
    "SKILL_TARGET",
    "add_reliability_dev",
    "deviations",
    "exceedance",
    "negative_share",
    "reliability_markdown",
    "reliability_rows",
    "verdicts",
]
