"""Log and Dawid–Sebastiani scores of Gaussians, quantile and interval scores, against references:
scoringrules (logs_normal, quantile_score, interval_score), scores (quantile_score), closed forms
and hand-computed cases; bad inputs are one-line errors."""

from __future__ import annotations

import math

import dask.array as da
import numpy as np
import pytest
import scoringrules as sr
import xarray as xr
from scipy.stats import norm
from scores.continuous import quantile_score as scores_quantile_score

from ensml.errors import EnsmlError
from ensml.scores import (
    crps_gaussian_xr,
    dawid_sebastiani_score,
    interval_score,
    log_score_gaussian,
    quantile_score,
)

RNG = np.random.default_rng(7)
DIMS = ("init_time", "latitude")


def field(values: np.ndarray, dims=DIMS) -> xr.DataArray:
    coords = {d: np.arange(n) for d, n in zip(dims, values.shape)}
    return xr.DataArray(values, dims=dims, coords=coords)


@pytest.fixture
def gaussian() -> tuple[xr.DataArray, xr.DataArray, xr.DataArray]:
    mu, sigma = RNG.normal(size=(6, 5)), RNG.uniform(0.2, 3.0, size=(6, 5))
    obs = mu + sigma * RNG.standard_t(3, size=(6, 5))
    return field(mu), field(sigma), field(obs)


def test_log_score_is_scoringrules_logs_normal(gaussian) -> None:
    mu, sigma, obs = gaussian
    got = log_score_gaussian(mu, sigma, obs, preserve_dims="all")
    want = sr.logs_normal(obs.values, mu.values, sigma.values, backend="numpy")
    np.testing.assert_allclose(got.values, want, rtol=1e-12)
    np.testing.assert_allclose(got.values, -norm.logpdf(obs.values, mu.values, sigma.values), rtol=1e-12)
    assert float(log_score_gaussian(mu, sigma, obs)) == pytest.approx(float(np.mean(want)), rel=1e-12)


def test_dss_is_twice_the_log_score_less_log_2pi_and_hand_computed(gaussian) -> None:
    mu, sigma, obs = gaussian
    dss = dawid_sebastiani_score(mu, sigma, obs, preserve_dims="all")
    logs = log_score_gaussian(mu, sigma, obs, preserve_dims="all")
    np.testing.assert_allclose(dss.values, 2 * logs.values - math.log(2 * math.pi), rtol=1e-12, atol=1e-12)
    one = dawid_sebastiani_score(field(np.array([[1.0]])), field(np.array([[2.0]])), field(np.array([[5.0]])))
    assert float(one) == pytest.approx(4.0 + 2 * math.log(2.0))  # z = 2


def test_weights_nan_and_dask(gaussian) -> None:
    mu, sigma, obs = gaussian
    obs = obs.copy()
    obs[0, 0] = np.nan
    w = xr.DataArray(np.linspace(1, 2, 5), dims="latitude", coords={"latitude": np.arange(5)})
    pointwise = log_score_gaussian(mu, sigma, obs, preserve_dims="all")
    assert np.isnan(pointwise[0, 0]) and np.isfinite(pointwise[1:]).all()
    want = np.nansum(pointwise * w) / float((w * pointwise.notnull()).sum())
    got = log_score_gaussian(mu, sigma, obs, weights=w)
    assert float(got) == pytest.approx(float(want), rel=1e-12)
    lazy = [a.copy(data=da.from_array(a.values, chunks=(3, 5))) for a in (mu, sigma, obs)]
    assert float(log_score_gaussian(*lazy, weights=w)) == pytest.approx(float(got), rel=1e-12)


def quantile_forecast(levels: list[float]) -> tuple[xr.DataArray, xr.DataArray]:
    mu, sigma = RNG.normal(size=(6, 5)), RNG.uniform(0.5, 2.0, size=(6, 5))
    q = np.stack([norm.ppf(t, mu, sigma) for t in levels], axis=-1)
    fcst = xr.DataArray(
        q,
        dims=(*DIMS, "quantile"),
        coords={"init_time": np.arange(6), "latitude": np.arange(5), "quantile": levels},
    )
    return fcst, field(mu + sigma * RNG.normal(size=(6, 5)))


def test_quantile_score_is_scoringrules_and_scores() -> None:
    levels = [0.05, 0.25, 0.5, 0.75, 0.95]
    fcst, obs = quantile_forecast(levels)
    got = quantile_score(fcst, obs, preserve_dims="all").transpose(*DIMS, "quantile")
    want = np.stack(
        [
            sr.quantile_score(obs.values, fcst.values[..., i], t, backend="numpy")
            for i, t in enumerate(levels)
        ],
        axis=-1,
    )
    np.testing.assert_allclose(got.values, want, rtol=1e-12)
    per_level = quantile_score(fcst, obs, preserve_dims="quantile")
    for t in levels:
        ref = scores_quantile_score(fcst.sel(quantile=t, drop=True), obs, alpha=t)
        assert float(per_level.sel(quantile=t)) == pytest.approx(float(ref), rel=1e-12)
    median = fcst.isel(quantile=[2])
    above = median.isel(quantile=0, drop=True) + 1.0  # the observation 1 above the median: τ · 1
    assert quantile_score(median, above).item() == pytest.approx(0.5)


def test_interval_score_is_scoringrules_and_hand_computed() -> None:
    fcst, obs = quantile_forecast([0.05, 0.95])
    lower, upper = fcst.sel(quantile=0.05, drop=True), fcst.sel(quantile=0.95, drop=True)
    got = interval_score(lower, upper, obs, 0.1, preserve_dims="all")
    want = sr.interval_score(obs.values, lower.values, upper.values, 0.1, backend="numpy")
    np.testing.assert_allclose(got.values, want, rtol=1e-12)
    one = field(np.array([[2.0]]))
    score = interval_score(field(np.array([[-1.0]])), field(np.array([[1.0]])), one, 0.1)
    assert float(score) == pytest.approx(2.0 + 20.0 * 1.0)  # width 2, 1 above the upper bound


def _ones(n: int = 3) -> xr.DataArray:
    return field(np.ones((n, 2)))


BAD = [
    (
        lambda: log_score_gaussian(_ones(), _ones() * 0, _ones()),
        "log_score_gaussian: sigma must be > 0 (6 values are not; min 0)",
    ),
    (
        lambda: dawid_sebastiani_score(_ones(), _ones(), _ones() * np.inf),
        "dawid_sebastiani_score: obs has 6 infinite values",
    ),
    (
        lambda: log_score_gaussian(_ones().values, _ones(), _ones()),
        "log_score_gaussian: mu must be an xarray.DataArray, got ndarray",
    ),
    (
        lambda: interval_score(_ones(), _ones(), _ones(), 1.5),
        "interval_score: alpha must be in (0, 1), got 1.5",
    ),
    (
        lambda: interval_score(_ones() * 2, _ones(), _ones(), 0.1),
        "interval_score: lower is above upper at 6 points",
    ),
    (
        lambda: quantile_score(_ones().expand_dims(quantile=[1.5], axis=-1), _ones()),
        "quantile_score: quantile levels must be in (0, 1), got [1.5]",
    ),
    (
        lambda: quantile_score(_ones().expand_dims("quantile", axis=-1), _ones()),
        "quantile_score: forecast has no coordinate 'quantile' giving the quantile levels",
    ),
    (
        lambda: quantile_score(_ones(), _ones()),
        "quantile_score: forecast has no quantile dimension 'quantile' (dims: init_time, latitude); "
        "pass quantile_dim=...",
    ),
    (
        lambda: log_score_gaussian(_ones(), _ones(), _ones().isel(init_time=[0, 1])),
        "log_score_gaussian: mu, sigma, obs overlap only partly along 'init_time' (mu 3, sigma 3, obs 2, "
        "common 2); select the common points first",
    ),
    (
        lambda: crps_gaussian_xr(_ones(), _ones(), _ones().isel(latitude=[1])),
        "crps_gaussian_xr: mu, sigma, obs overlap only partly along 'latitude' (mu 2, sigma 2, obs 1, "
        "common 1)",
    ),
]


@pytest.mark.parametrize(("call", "message"), BAD, ids=[m.split(":")[1][:40] for _, m in BAD])
def test_bad_inputs_are_one_line(call, message: str) -> None:
    with pytest.raises(EnsmlError) as info:
        call()
    assert str(info.value).startswith(message), str(info.value)
    assert "\n" not in str(info.value)
