"""Spread-skill ratio, rank histogram, ensemble-mean bias and RMSE."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.scores import (
    ensemble_mean_bias,
    ensemble_mean_rmse,
    rank_histogram,
    spread_skill_ratio,
)


def _perfect(m=5, n=60000, seed=0):
    truth = np.random.default_rng(seed).normal(size=(m + 1, n))
    return xr.DataArray(truth[:m], dims=("member", "x")), xr.DataArray(truth[m], dims="x")


def test_spread_skill_ratio_finite_ensemble_correction():
    fc, obs = _perfect()
    raw = float(spread_skill_ratio(fc, obs))
    corrected = float(spread_skill_ratio(fc, obs, finite_ensemble_correction=True))
    # perfect 5-member ensemble: spread/RMSE = sqrt(M/(M+1)); corrected ≈ 1
    np.testing.assert_allclose(raw, np.sqrt(5 / 6), rtol=0.02)
    np.testing.assert_allclose(corrected, 1.0, rtol=0.02)


def test_rank_histogram_flat_and_seeded_ties():
    fc, obs = _perfect(m=9, n=20000)
    h = rank_histogram(fc, obs)
    assert h.dims == ("rank",) and h.sizes["rank"] == 10 and int(h.sum()) == 20000
    assert np.all(np.abs(h.values - 2000) < 200)
    # all members tied with the observation: ranks spread uniformly over 0..M, reproducibly
    tied = xr.DataArray(np.zeros((4, 5000)), dims=("member", "x"))
    zero = xr.DataArray(np.zeros(5000), dims="x")
    a, b = rank_histogram(tied, zero, seed=1), rank_histogram(tied, zero, seed=1)
    assert a.values.tolist() == b.values.tolist() and np.all(np.abs(a.values - 1000) < 120)
    lazy = rank_histogram(tied.chunk(x=1000), zero.chunk(x=1000), seed=1)
    assert int(lazy.sum()) == 5000


def test_rank_histogram_excludes_nan_points_and_preserves_dims():
    fc = xr.DataArray([[0.0, np.nan, 0.0], [2.0, 2.0, 2.0]], dims=("member", "x"))
    obs = xr.DataArray([1.0, 1.0, np.nan], dims="x")
    h = rank_histogram(fc, obs, preserve_dims="x")
    assert h.sel(x=0).values.tolist() == [0, 1, 0]
    assert h.sel(x=1).isnull().all() and h.sel(x=2).isnull().all()  # no valid point: NaN, not zeros


def test_bias_and_rmse():
    fc = xr.DataArray([[1.0, 2.0], [3.0, np.nan]], dims=("member", "x"))
    obs = xr.DataArray([1.0, 4.0], dims="x")
    # ensemble means 2 and 2: errors 1 and -2
    np.testing.assert_allclose(ensemble_mean_bias(fc, obs), -0.5)
    np.testing.assert_allclose(ensemble_mean_rmse(fc, obs), np.sqrt(2.5))
    np.testing.assert_allclose(ensemble_mean_rmse(fc, obs, preserve_dims="x"), [1.0, 2.0])


def test_weighted_rmse_uses_latitude_weights():
    lat = np.array([80.0, 0.0])
    fc = xr.DataArray([[[1.0, 0.0]]], dims=("member", "x", "latitude"), coords={"latitude": lat})
    obs = xr.DataArray([[0.0, 0.0]], dims=("x", "latitude"), coords={"latitude": lat})
    w = latitude_weights(lat)
    np.testing.assert_allclose(ensemble_mean_rmse(fc, obs, weights=w), np.sqrt(w[0] / w.sum()))


def test_bad_inputs():
    fc, obs = _perfect(n=10)
    with pytest.raises(EnsmlError, match="at least 2 members"):
        spread_skill_ratio(fc.isel(member=[0]), obs)
    with pytest.raises(EnsmlError, match="do not match observation dims"):
        ensemble_mean_rmse(fc, obs.expand_dims(y=2))
    with pytest.raises(EnsmlError, match="weights have size"):
        rank_histogram(fc, obs, weights=xr.DataArray(np.ones(3), dims="x"))
