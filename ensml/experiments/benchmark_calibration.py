r"""The benchmark's scores that need no oracle: skill against local EMOS, spread/skill, flatness.

Each comes with its 95 % moving-block bootstrap interval over the test split's init times
(:mod:`ensml.scores.significance`), computed from per-init-time series of area means
(cell-area weights, :func:`ensml.data.weights.area_weights`) at each variable, level and lead:

- ``skill_vs_local_emos`` = 1 − CRPS / CRPS of local EMOS (area and init means, as
  ``skill_vs_raw_ensemble``); ``emos_skill_low``/``emos_skill_high`` from
  :func:`~ensml.scores.significance.skill_tests` with local EMOS as the reference.
- ``spread_skill_ratio`` = :math:`\sqrt{\overline{v} / \overline{(\mu - y)^2}}`, the bars means
  over init times of area means: for an ensemble (empirical rows) μ is the member mean and
  :math:`v = \frac{M+1}{M} s^2` its ddof-1 variance with the finite-ensemble correction
  (:func:`~ensml.scores.calibration.spread_skill_terms`); for a Gaussian prediction μ and
  :math:`v = \sigma^2`. 1: spread matches the error; < 1: under-dispersive.
  ``ssr_low``/``ssr_high``: the moving-block bootstrap of the two series
  (:func:`~ensml.scores.significance.block_bootstraps`).
- ``flatness`` = :func:`~ensml.scores.calibration.histogram_flatness` (the pruning benchmark's
  "PIT flatness", mean over the B bins of :math:`|h_r / \bar h - 1|`, 0 flat) of the
  area-weighted histogram pooled over init times: the rank histogram of an ensemble (its
  members + 1 bins), the PIT histogram in M + 1 bins of a Gaussian (M the full ensemble's
  members), the randomised PIT histogram (:func:`~ensml.scores.predictive.pit_family`) of a
  forecast in another family (:class:`FamilyForecast`: precipitation, wind speed), whose
  spread/skill ratio is left out (NaN: its variance has no closed form here).
  ``flatness_low``/``flatness_high``: the bootstrap of the per-init histograms (the
  same resampled init times as the spread/skill ratio's, one block length for both). A
  finite sample is never exactly flat, so the flatness of a calibrated forecast is above 0 (see
  the function) and its percentile interval, biased the same way, may lie above the value.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
import xarray as xr

from ensml.names import INIT_TIME
from ensml.scores.calibration import (
    RANK,
    histogram_flatness,
    pit_histogram,
    pit_value_histogram,
    rank_histogram,
    spread_skill_terms,
)
from ensml.scores.distributions import Family
from ensml.scores.predictive import pit_family
from ensml.scores.reduce import reduce_score
from ensml.scores.significance import block_bootstrap, block_bootstraps, skill_tests
from ensml.verify.families import family_params
from ensml.verify.levels import at, levels_of, per_level

#: The reference of ``skill_vs_local_emos``.
LOCAL_EMOS = "local EMOS (Gaussian)"
EMOS_COLUMNS = ["skill_vs_local_emos", "emos_skill_low", "emos_skill_high"]
CALIBRATION_COLUMNS = [
    "spread_skill_ratio",
    "ssr_low",
    "ssr_high",
    "flatness",
    "flatness_low",
    "flatness_high",
]

#: What the columns mean, for the note of ``benchmark.md``.
CALIBRATION_NOTE = (
    "skill_vs_local_emos: 1 - CRPS / CRPS of local EMOS. spread_skill_ratio: sqrt(mean predicted "
    "variance / mean squared error of the mean): the ensembles' ddof-1 variance times (M+1)/M, "
    "the Gaussians' sigma^2 (1: spread matches the error). flatness: mean over the bins of "
    "|count / mean count - 1| of the rank histogram (ensembles, members + 1 bins) or the PIT "
    "histogram (Gaussians, M + 1 bins; the randomised PIT of the other families, whose "
    "spread_skill_ratio is left empty), 0 flat. Every *_low/*_high pair is the 95 % "
    "moving-block bootstrap interval over init times."
)
#: The seed of the randomised PIT (the same inputs give the same histogram).
PIT_SEED = 0


@dataclass(frozen=True)
class FamilyForecast:
    """A predictive distribution of ``var`` in a family other than the normal: its parameter
    fields ``{var}_{param}`` in ``ds`` (init_time, [level,] lat, lon)."""

    ds: xr.Dataset
    var: str
    family: Family

    def params(self) -> dict[str, xr.DataArray]:
        return family_params(self.ds, self.var, self.family)


#: A forecast of the table: members (init_time, member, [level,] lat, lon), a Gaussian
#: (mu, sigma) or a distribution of another family.
Forecast = xr.DataArray | tuple[xr.DataArray, xr.DataArray] | FamilyForecast


def calibration_columns(
    forecasts: dict[str, Forecast], obs: xr.DataArray, weights: xr.DataArray, levels: list[float], bins: int
) -> dict[tuple[str, float | None], dict[str, float]]:
    """:data:`CALIBRATION_COLUMNS` of every forecast at every level, by (name, level).

    ``obs`` (init_time, [level,] lat, lon) is the analysis; ``bins`` the PIT histogram's
    (M + 1). Keys as :func:`~ensml.scores.significance.skill_tests`' (level ``None``: a surface
    field).
    """
    out = {}
    for name, fc in forecasts.items():
        if isinstance(fc, FamilyForecast):
            out.update(_family_columns(name, fc, obs, weights, levels, bins))
            continue
        spread, mse, hist = _per_init(fc, obs, weights, bins)
        for lev in levels_of(mse, levels):
            series = (
                at(spread, lev).values,
                at(mse, lev).values,
                at(hist, lev).transpose(INIT_TIME, RANK).values,
            )
            ssr, flat = block_bootstraps(_statistics, *series)  # one bootstrap, the same resamples
            out[name, lev] = {
                "spread_skill_ratio": ssr.value,
                "ssr_low": ssr.low,
                "ssr_high": ssr.high,
                "flatness": flat.value,
                "flatness_low": flat.low,
                "flatness_high": flat.high,
            }
    return out


def _family_columns(
    name: str, fc: FamilyForecast, obs: xr.DataArray, weights: xr.DataArray, levels: list[float], bins: int
) -> dict[tuple[str, float | None], dict[str, float]]:
    """The flatness of ``fc``'s randomised PIT histogram (per-init histograms bootstrapped), and
    no spread/skill ratio (NaN)."""
    pit = pit_family(fc.family, fc.params(), obs, seed=PIT_SEED)
    hist = pit_value_histogram(pit, bins=bins, preserve_dims=[INIT_TIME, *per_level(obs)], weights=weights)
    out = {}
    for lev in levels_of(hist, levels):
        values = at(hist, lev).transpose(INIT_TIME, RANK).values
        flat = block_bootstrap(lambda v: float(histogram_flatness(v.sum(0))), values)
        no_ratio = dict.fromkeys(["spread_skill_ratio", "ssr_low", "ssr_high"], np.nan)
        out[name, lev] = no_ratio | {
            "flatness": flat.value,
            "flatness_low": flat.low,
            "flatness_high": flat.high,
        }
    return out


def _per_init(
    fc: Forecast, obs: xr.DataArray, weights: xr.DataArray, bins: int
) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray]:
    """Area means per init time (and level) of the spread term and the squared error of the
    mean, and the area-weighted rank or PIT histogram per init time."""
    keep = [INIT_TIME, *per_level(obs)]
    kw = {"preserve_dims": keep, "weights": weights}
    if isinstance(fc, tuple):
        mu, sigma = fc
        se = (mu - obs) ** 2
        var = (sigma**2).where(se.notnull())
        spread = reduce_score(var, **kw, func="spread/skill")
        mse = reduce_score(se.where(var.notnull()), **kw, func="spread/skill")
        return spread, mse, pit_histogram(mu, sigma, obs, bins=bins, **kw)
    spread, mse = spread_skill_terms(fc, obs, finite_ensemble_correction=True, **kw)
    return spread, mse, rank_histogram(fc, obs, **kw)


def _statistics(spread: np.ndarray, mse: np.ndarray, hist: np.ndarray) -> tuple[float, float]:
    """The spread/skill ratio and the flatness of the pooled histogram, from per-init series."""
    return float(np.sqrt(spread.sum() / mse.sum())), float(histogram_flatness(hist.sum(0)))


def emos_intervals(
    sources: dict[str, xr.DataArray],
    weights: xr.DataArray,
    levels: list[float],
    lead: np.timedelta64,
    reference: str = LOCAL_EMOS,
) -> dict[tuple[str, float | None], dict[str, float]]:
    """The 95 % intervals of every source's skill over local EMOS (``reference``, its row label:
    ``emos_skill_low``, ``emos_skill_high``), by (name, level), from the per-point CRPS
    ``sources``; none (empty) without local EMOS, NaN for local EMOS itself."""
    if reference not in sources:
        return {}
    tests = skill_tests(sources, weights, reference, lead)
    out = {key: {"emos_skill_low": t.low, "emos_skill_high": t.high} for key, t in tests.items()}
    for lev in levels_of(sources[reference], levels):
        out[reference, lev] = {"emos_skill_low": np.nan, "emos_skill_high": np.nan}
    return out


def add_emos_skill(table: pd.DataFrame, reference: str = LOCAL_EMOS) -> pd.DataFrame:
    """``skill_vs_local_emos`` = 1 − crps / crps of local EMOS (``reference``, its row label) at
    the row's variable, level and lead (NaN where the table has no local EMOS, and in rows
    without a CRPS)."""
    keys = [table["variable"], table["level_hPa"].fillna(-1.0), table["lead_h"]]
    ref = table["crps"].where(table["model"] == reference).groupby(keys).transform("max")
    return table.assign(skill_vs_local_emos=1.0 - table["crps"] / ref)


def row_level(row: dict) -> float | None:
    """The level key (as :func:`calibration_columns`') of a table row: ``None`` for surface."""
    lev = row["level_hPa"]
    return None if pd.isna(lev) else float(lev)


__all__ = [
    "CALIBRATION_COLUMNS",
    "CALIBRATION_NOTE",
    "EMOS_COLUMNS",
    "LOCAL_EMOS",
    "PIT_SEED",
    "FamilyForecast",
    "Forecast",
    "add_emos_skill",
    "calibration_columns",
    "emos_intervals",
    "row_level",
]
