"""Rank and PIT histograms' flatness and the spread/skill terms (:mod:`ensml.scores.calibration`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
import xarray as xr
from scipy import stats

from ensml.errors import EnsmlError
from ensml.scores.calibration import (
    histogram_flatness,
    pit_histogram,
    rank_histogram,
    spread_skill_ratio,
    spread_skill_terms,
)


@pytest.mark.parametrize(
    ("counts", "flatness"),
    [([1, 1, 1, 1], 0.0), ([4, 0, 0, 0], 1.5), ([2, 0, 1, 1], 0.5), ([3, 1], 0.5), ([0, 5, 0], 4 / 3)],
)
def test_flatness_by_hand(counts: list[float], flatness: float) -> None:
    """mean_r |h_r / mean(h) - 1|: all in one of B bins gives 2 (B - 1) / B."""
    assert histogram_flatness(np.array(counts, dtype=float)) == pytest.approx(flatness, rel=1e-15)
    da = xr.DataArray([counts, counts[::-1]], dims=("x", "rank"))
    np.testing.assert_allclose(histogram_flatness(da).values, [flatness, flatness], rtol=1e-15)
    assert histogram_flatness(np.array([counts, counts])).tolist() == pytest.approx([flatness] * 2)


def test_flatness_of_a_calibrated_sample_is_its_sampling_noise() -> None:
    rng = np.random.default_rng(0)
    n, bins = 20000, 11
    counts = np.bincount(rng.integers(0, bins, n), minlength=bins)
    expected = math.sqrt(2 * (bins - 1) / (math.pi * n))  # E|h/mean - 1| of multinomial counts
    assert histogram_flatness(counts.astype(float)) == pytest.approx(expected, rel=0.5)


def test_pit_histogram_by_hand() -> None:
    """Observations at known PIT values of N(mu, sigma^2) fall in bins floor(PIT B)."""
    mu, sigma = 10.0, 2.0
    pit = np.array([0.05, 0.15, 0.3, 0.45, 0.55, 0.65, 0.95, 0.99])  # none on a bin edge
    y = xr.DataArray(mu + sigma * stats.norm.ppf(pit), dims="x")
    h = pit_histogram(xr.full_like(y, mu), xr.full_like(y, sigma), y, bins=4)
    assert h.dims == ("rank",) and h.values.tolist() == [2.0, 2.0, 2.0, 2.0]
    h = pit_histogram(xr.full_like(y, mu), xr.full_like(y, sigma), y, bins=5)  # bins of 0.2
    assert h.values.tolist() == [2.0, 1.0, 2.0, 1.0, 2.0]


def test_pit_histogram_matches_scipy_and_the_rank_histogram_of_quantiles() -> None:
    rng = np.random.default_rng(1)
    mu, sigma = rng.normal(size=(40, 30)), 0.5 + rng.random((40, 30))
    y = mu + sigma * rng.standard_normal((40, 30)) * 1.3  # under-dispersive: not flat
    w = xr.DataArray(rng.random(30), dims="x")
    da = [xr.DataArray(a, dims=("t", "x")) for a in (mu, sigma, y)]
    h = pit_histogram(*da, bins=7, weights=w, preserve_dims="t")
    assert h.dims == ("t", "rank") and h.sizes["rank"] == 7
    b = np.minimum((stats.norm.cdf(y, mu, sigma) * 7).astype(int), 6)
    by_hand = np.stack([(w.values * (b == r)).sum(1) for r in range(7)], axis=1)
    np.testing.assert_allclose(h.values, by_hand, rtol=1e-12)
    assert float(histogram_flatness(h.sum("t"))) > 0.1
    with pytest.raises(EnsmlError, match="at least 2 bins"):
        pit_histogram(*da, bins=1)


def test_spread_skill_terms_by_hand() -> None:
    fc = xr.DataArray([[1.0, 2.0, 3.0], [0.0, 0.0, 6.0]], dims=("x", "member"))
    obs = xr.DataArray([4.0, 1.0], dims="x")
    # variances (ddof 1) 1 and 12, means 2 and 2: squared errors 4 and 1; (M+1)/M = 4/3
    spread, mse = spread_skill_terms(fc, obs, finite_ensemble_correction=True)
    assert float(spread) == pytest.approx(4 / 3 * 6.5) and float(mse) == pytest.approx(2.5)
    ratio = spread_skill_ratio(fc, obs, finite_ensemble_correction=True)
    assert float(ratio) == pytest.approx(math.sqrt(4 / 3 * 6.5 / 2.5), rel=1e-15)
    ranks = rank_histogram(fc, obs)
    assert ranks.values.tolist() == [0.0, 0.0, 1.0, 1.0]
