"""Brier score, reliability and PIT histograms of probability forecasts, against hand counts.

``probability_brier_score`` and ``probability_reliability`` score any probability of the events
``y > t`` (a predictive distribution's exceedance); given an ensemble's member fraction they
are ``brier_score`` and ``reliability`` of the ensemble. ``pit_value_histogram`` bins PIT values.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.calibration import pit_value_histogram
from ensml.scores.probability import (
    brier_score,
    exceedance_probability,
    probability_brier_score,
    probability_reliability,
    reliability,
)


def _prob(values: list[list[float]], thresholds: list[float]) -> xr.DataArray:
    return xr.DataArray(np.array(values), dims=("threshold", "x"), coords={"threshold": thresholds})


def test_brier_score_by_hand() -> None:
    obs = xr.DataArray([0.0, 2.0, 7.0, np.nan], dims="x")
    prob = _prob([[0.2, 0.9, 1.0, 0.5], [0.0, 0.4, 0.8, 0.5]], [1.0, 5.0])
    bs = probability_brier_score(prob, obs)
    # t = 1: events 0, 1, 1 -> (0.04 + 0.01 + 0) / 3; t = 5: events 0, 0, 1 -> (0 + 0.16 + 0.04) / 3
    np.testing.assert_allclose(bs.sel(threshold=1.0), 0.05 / 3)
    np.testing.assert_allclose(bs.sel(threshold=5.0), 0.20 / 3)
    w = xr.DataArray([1.0, 1.0, 2.0, 1.0], dims="x")
    np.testing.assert_allclose(probability_brier_score(prob, obs, weights=w).sel(threshold=5.0), 0.24 / 4)


def test_reliability_by_hand() -> None:
    obs = xr.DataArray([0.0, 2.0, 3.0, 0.0, 6.0], dims="x")
    prob = _prob([[0.05, 0.15, 0.12, 0.95, 1.0]], [1.0])
    rel = probability_reliability(prob, obs, n_bins=10).sel(threshold=1.0)
    np.testing.assert_array_equal(rel["count"], [1, 2, 0, 0, 0, 0, 0, 0, 0, 2])
    np.testing.assert_allclose(rel["forecast_probability"][[0, 1, 9]], [0.05, 0.135, 0.975])
    np.testing.assert_allclose(rel["observed_frequency"][[0, 1, 9]], [0.0, 1.0, 0.5])
    assert np.isnan(rel["forecast_probability"][4])


def test_member_fractions_give_the_ensemble_scores() -> None:
    rng = np.random.default_rng(0)
    fcst = xr.DataArray(rng.gamma(0.7, 4.0, (30, 8)), dims=("x", "member"))
    obs = xr.DataArray(rng.gamma(0.7, 4.0, 30), dims="x")
    t = xr.DataArray([1.0, 3.0], dims="threshold", coords={"threshold": [1.0, 3.0]})
    p = exceedance_probability(fcst, t)
    np.testing.assert_allclose(probability_brier_score(p, obs), brier_score(fcst, obs, [1.0, 3.0]))
    a = probability_reliability(p, obs).sel(threshold=3.0)
    b = reliability(fcst, obs, 3.0)
    for name in ("forecast_probability", "observed_frequency", "count"):
        np.testing.assert_allclose(a[name], b[name])


def test_probabilities_are_checked() -> None:
    obs = xr.DataArray([0.0, 1.0], dims="x")
    with pytest.raises(EnsmlError, match="must lie in"):
        probability_brier_score(_prob([[0.5, 1.5]], [0.5]), obs)
    with pytest.raises(EnsmlError, match="'threshold' dim"):
        probability_brier_score(xr.DataArray([0.5, 0.5], dims="x"), obs)


def test_pit_value_histogram_by_hand() -> None:
    pit = xr.DataArray([[0.0, 0.1, 0.24, 0.25, 0.5], [0.74, 0.99, 1.0, np.nan, 0.6]], dims=("t", "x"))
    counts = pit_value_histogram(pit, bins=4)
    np.testing.assert_array_equal(counts, [3, 1, 3, 2])
    per_t = pit_value_histogram(pit, bins=4, preserve_dims="t")
    np.testing.assert_array_equal(per_t.sel(t=0), [3, 1, 1, 0])
    w = xr.DataArray([1.0, 2.0, 1.0, 1.0, 1.0], dims="x")
    np.testing.assert_array_equal(pit_value_histogram(pit, bins=4, weights=w), [4, 1, 3, 3])
    with pytest.raises(EnsmlError, match="bins >= 2"):
        pit_value_histogram(pit, bins=1)
