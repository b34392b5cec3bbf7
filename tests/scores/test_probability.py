"""Brier score, reliability and twCRPS against scoringrules / properscoring / hand cases."""

from __future__ import annotations

import numpy as np
import properscoring as ps
import pytest
import scoringrules as sr
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import brier_score, reliability, twcrps_ensemble


@pytest.fixture
def ens():
    rng = np.random.default_rng(21)
    fc = xr.DataArray(rng.normal(size=(12, 400)), dims=("member", "x"))
    obs = xr.DataArray(rng.normal(size=400), dims="x")
    return fc, obs


def test_brier_vs_properscoring(ens):
    fc, obs = ens
    got = brier_score(fc, obs, [0.0, 1.0], preserve_dims="x")
    for j, t in enumerate([0.0, 1.0]):
        p = (fc.values > t).mean(0)
        ref = ps.brier_score((obs.values > t).astype(float), p)
        np.testing.assert_allclose(got.isel(threshold=j), ref)
    assert got.dims == ("x", "threshold") and got.threshold.values.tolist() == [0.0, 1.0]
    np.testing.assert_allclose(brier_score(fc, obs, 0.0), ref_mean := got.isel(threshold=0).mean())
    assert ref_mean > 0


def test_fair_brier_and_nan_members():
    fc = xr.DataArray([[1.0, np.nan], [2.0, np.nan], [-1.0, np.nan], [np.nan, np.nan]], dims=("member", "x"))
    obs = xr.DataArray([0.0, 0.0], dims="x")
    bs = brier_score(fc, obs, 0.0, preserve_dims="x").isel(threshold=0)
    np.testing.assert_allclose(bs[0], (2 / 3) ** 2)  # NaN member dropped: p = 2/3
    assert np.isnan(bs[1])  # all members NaN: NaN, not 0
    fair = brier_score(fc, obs, 0.0, fair=True, preserve_dims="x").isel(threshold=0)
    np.testing.assert_allclose(fair[0], (2 / 3) ** 2 - (2 / 3) * (1 / 3) / 2)


def test_reliability_counts_and_perfect_case():
    rng = np.random.default_rng(3)
    # members and observation exchangeable given a predictable signal: reliable up to the
    # finite-ensemble offset P(y > t | k of M above) = (k + 1)/(M + 2) vs p = k/M (≤ 0.045)
    truth = rng.normal(size=40000) + 0.7 * rng.normal(size=(21, 40000))
    fc = xr.DataArray(truth[:20], dims=("member", "x"))
    obs = xr.DataArray(truth[20], dims="x")
    rel = reliability(fc, obs, 0.5, n_bins=5)
    assert int(rel["count"].sum()) == 40000
    ok = rel["count"] > 500
    np.testing.assert_allclose(rel.observed_frequency[ok], rel.forecast_probability[ok], atol=0.05)
    assert rel.bin_lower.values[0] == 0.0 and rel.bin_upper.values[-1] == 1.0


@pytest.mark.parametrize(
    ("tail", "threshold", "kw"),
    [
        ("upper", 0.5, {"a": 0.5}),
        ("lower", -0.2, {"b": -0.2}),
        ("interval", (-0.5, 0.7), {"a": -0.5, "b": 0.7}),
    ],
)
def test_twcrps_vs_scoringrules(ens, tail, threshold, kw):
    fc, obs = ens
    got = twcrps_ensemble(fc, obs, threshold, tail=tail, preserve_dims="x")
    ref = sr.twcrps_ensemble(obs.values, fc.values, m_axis=0, estimator="nrg", **kw)
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-14)


def test_twcrps_per_point_threshold_and_whole_line(ens):
    fc, obs = ens
    t = xr.DataArray(np.linspace(-0.5, 0.5, 400), dims="x")
    got = twcrps_ensemble(fc, obs, t, preserve_dims="x")
    ref = sr.twcrps_ensemble(obs.values, fc.values, m_axis=0, a=t.values, estimator="nrg")
    np.testing.assert_allclose(got, ref, rtol=1e-10, atol=1e-14)
    # a threshold below all data weights the whole line: twCRPS = CRPS
    from ensml.scores import crps_ensemble

    np.testing.assert_allclose(twcrps_ensemble(fc, obs, -100.0), crps_ensemble(fc, obs))


def test_bad_inputs(ens):
    fc, obs = ens
    with pytest.raises(EnsmlError, match="above the data range"):
        twcrps_ensemble(fc, obs, 1e6)
    with pytest.raises(EnsmlError, match="below the data range"):
        twcrps_ensemble(fc, obs, -1e6, tail="lower")
    with pytest.raises(EnsmlError, match="lower < upper"):
        twcrps_ensemble(fc, obs, (1.0, 0.0), tail="interval")
    with pytest.raises(EnsmlError, match="threshold=\\(lower, upper\\)"):
        twcrps_ensemble(fc, obs, 1.0, tail="interval")
    with pytest.raises(EnsmlError, match="tail must be"):
        twcrps_ensemble(fc, obs, 1.0, tail="middle")
    with pytest.raises(EnsmlError, match="not among the observation dims"):
        twcrps_ensemble(fc, obs, xr.DataArray([0.0], dims="y"))
    with pytest.raises(EnsmlError, match="outside the data range"):
        brier_score(fc, obs, [0.0, 50.0])
    with pytest.raises(EnsmlError, match="thresholds must be finite"):
        brier_score(fc, obs, np.nan)
    with pytest.raises(EnsmlError, match="no member dimension"):
        brier_score(fc.rename(member="m"), obs, 0.0)
    with pytest.raises(EnsmlError, match="n_bins must be a positive integer"):
        reliability(fc, obs, 0.0, n_bins=0)
    with pytest.raises(EnsmlError, match="one threshold at a time"):
        reliability(fc, obs, [0.0, 1.0])


@pytest.mark.parametrize("m", [5, 10, 20, 51])
@pytest.mark.parametrize("tail", ["upper", "lower", "interval"])
def test_twcrps_chained_in_kernel_matches_scoringrules(m, tail):
    """Numeric thresholds are chained inside the CRPS kernel: NaN members (the scalar path),
    float32 values around 5.5e4, members first or last, in blocks large enough to run in parallel."""
    rng = np.random.default_rng(m)
    n = 3000
    fc = (5.5e4 + 300 * rng.standard_normal((m, n))).astype(np.float32)
    obs = (5.5e4 + 300 * rng.standard_normal(n)).astype(np.float32)
    fc[rng.random(fc.shape) < 0.05] = np.nan
    threshold = {"upper": 5.51e4, "lower": 5.49e4, "interval": (5.48e4, 5.52e4)}[tail]
    kw = {"upper": {"a": 5.51e4}, "lower": {"b": 5.49e4}, "interval": {"a": 5.48e4, "b": 5.52e4}}[tail]
    ref = np.array(
        [
            sr.twcrps_ensemble(
                np.float64(obs[k]), fc[:, k][~np.isnan(fc[:, k])].astype(np.float64), estimator="nrg", **kw
            )
            for k in range(n)
        ]
    )
    for da in (
        xr.DataArray(fc, dims=("member", "x")),
        xr.DataArray(np.ascontiguousarray(fc.T), dims=("x", "member")),
    ):
        got = twcrps_ensemble(da, xr.DataArray(obs, dims="x"), threshold, tail=tail, preserve_dims="x")
        assert got.dtype == np.float32
        np.testing.assert_allclose(got.values, ref, rtol=2e-6, atol=1e-3)


def test_twcrps_infinite_member_is_found_before_chaining(ens):
    fc, obs = ens
    fc = fc.copy()
    fc[3, 17] = -np.inf  # chained, max(-inf, t) would be a finite t
    with pytest.raises(EnsmlError, match="twcrps_ensemble: forecast has 1 infinite value"):
        twcrps_ensemble(fc, obs, 0.5)
    with pytest.raises(EnsmlError, match="twcrps_ensemble: observation has 1 infinite value"):
        twcrps_ensemble(fc.where(np.isfinite(fc), 0.0), obs.where(obs.x != 5, np.inf), 0.5, tail="lower")
