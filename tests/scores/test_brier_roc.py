"""Brier decomposition and ROC: hand-computed cases, exactness, scores' ROC, NaN, dask, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import scores.probability as sp
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import brier_score, exceedance_probability, reliability
from ensml.scores.brier_roc import brier_decomposition, roc_curve


def _ensemble_with(p: np.ndarray, m: int) -> xr.DataArray:
    """Members 1.0 (above 0.5) or 0.0 so that the exceedance probability of 0.5 is ``p``."""
    k = np.rint(np.asarray(p) * m).astype(int)
    return xr.DataArray(np.array([[1.0] * kk + [0.0] * (m - kk) for kk in k]).T, dims=("member", "x"))


@pytest.fixture
def hand():
    p = np.array([0, 0, 0.25, 0.25, 0.5, 0.5, 1, 1])
    o = np.array([0, 0, 0, 1, 1, 0, 1, 1.0])
    return _ensemble_with(p, 4), xr.DataArray(o, dims="x")


@pytest.fixture
def ens():
    """(member 10, a 6, b 300) with a predictable signal, ~5 % NaN members and a few NaN obs."""
    rng = np.random.default_rng(11)
    signal = rng.normal(size=(6, 300))
    f = signal + 0.8 * rng.normal(size=(10, 6, 300))
    y = signal + 0.8 * rng.normal(size=(6, 300))
    f[rng.uniform(size=f.shape) < 0.05] = np.nan
    y[rng.uniform(size=y.shape) < 0.01] = np.nan
    coords = {"a": np.arange(6) * 10.0, "b": np.arange(300)}
    return xr.DataArray(f, dims=("member", "a", "b"), coords=coords), xr.DataArray(
        y, dims=("a", "b"), coords=coords
    )


def test_hand_computed_decomposition(hand):
    # bins p = 0, 1/4, 1/2, 1 of two points each; observed frequencies 0, 1/2, 1/2, 1; o-bar = 1/2
    d = brier_decomposition(*hand, 0.5).isel(threshold=0)
    np.testing.assert_allclose(d.reliability, 2 * (0.25 - 0.5) ** 2 / 8, rtol=1e-15)  # 0.015625
    np.testing.assert_allclose(d.resolution, (2 * 0.25 + 2 * 0.25) / 8, rtol=1e-15)  # 0.125
    np.testing.assert_allclose(d.uncertainty, 0.25, rtol=1e-15)
    np.testing.assert_allclose(d.brier_score, (0.0625 + 0.5625 + 0.25 + 0.25) / 8, rtol=1e-15)  # 0.140625
    np.testing.assert_allclose(d.reliability - d.resolution + d.uncertainty, d.brier_score, rtol=1e-15)


def test_hand_computed_roc(hand):
    r = roc_curve(*hand, 0.5).isel(threshold=0)
    assert r.probability_threshold.values.tolist() == [0.0, 0.25, 0.5, 1.0, np.inf]
    np.testing.assert_allclose(r.hit_rate, [1, 1, 0.75, 0.5, 0])
    np.testing.assert_allclose(r.false_alarm_rate, [1, 0.5, 0.25, 0, 0])
    # trapezoids 0.5 + 0.21875 + 0.15625 = 0.875; Mann-Whitney: 14 of 16 pairs (ties 1/2)
    np.testing.assert_allclose(r.area, 0.875, rtol=1e-15)
    ref = sp.roc_curve_data(
        xr.DataArray([0, 0, 0.25, 0.25, 0.5, 0.5, 1, 1], dims="x"), hand[1], thresholds=[0, 0.25, 0.5, 1]
    )
    np.testing.assert_allclose(r.hit_rate, ref.POD)
    np.testing.assert_allclose(r.false_alarm_rate, ref.POFD)
    np.testing.assert_allclose(r.area, ref.AUC)


def test_decomposition_exact_with_nan_members_and_weights(ens):
    fc, obs = ens
    w = xr.DataArray(np.linspace(0.2, 1.0, 6), dims="a", coords={"a": obs.a})
    for kw in ({}, {"preserve_dims": "a"}, {"reduce_dims": "a", "weights": w}, {"weights": w}):
        d = brier_decomposition(fc, obs, [-0.5, 0.0, 1.0], **kw)
        np.testing.assert_allclose(
            d.reliability - d.resolution + d.uncertainty, d.brier_score, rtol=0, atol=1e-14
        )
        xr.testing.assert_identical(d.brier_score, brier_score(fc, obs, [-0.5, 0.0, 1.0], **kw))
        assert (d.reliability >= 0).all() and (d.resolution >= 0).all()
    assert d.attrs["binning"] == "one bin per distinct forecast probability"


def test_equal_bins_match_reliability_diagram(ens):
    fc, obs = ens
    d = brier_decomposition(fc, obs, 0.5, bins=5).isel(threshold=0)
    rel = reliability(fc, obs, 0.5, n_bins=5)
    n = rel["count"]
    ok = n > 0
    ref_rel = float((n * (rel.forecast_probability - rel.observed_frequency) ** 2)[ok].sum() / n.sum())
    obar = float((n * rel.observed_frequency)[ok].sum() / n.sum())
    ref_res = float((n * (rel.observed_frequency - obar) ** 2)[ok].sum() / n.sum())
    np.testing.assert_allclose(
        [d.reliability, d.resolution, d.uncertainty], [ref_rel, ref_res, obar * (1 - obar)]
    )
    # coarse bins: the within-bin terms make the identity approximate
    gap = float(d.reliability - d.resolution + d.uncertainty - d.brier_score)
    assert 1e-6 < abs(gap) < 0.02


def test_perfect_and_climatological_forecasts():
    o = np.array([0.0, 1, 1, 0, 1, 0, 0, 1, 1, 0])
    obs = xr.DataArray(o, dims="x")
    perfect = _ensemble_with(o, 5)
    d = brier_decomposition(perfect, obs, 0.5).isel(threshold=0)
    np.testing.assert_allclose([d.reliability, d.brier_score], [0, 0], atol=1e-15)
    np.testing.assert_allclose(d.resolution, d.uncertainty, rtol=1e-15)
    np.testing.assert_allclose(roc_curve(perfect, obs, 0.5).area, 1.0)
    clim = _ensemble_with(np.full(10, 0.5), 4)  # p = o-bar = 1/2 everywhere
    d = brier_decomposition(clim, obs, 0.5).isel(threshold=0)
    np.testing.assert_allclose([d.reliability, d.resolution], [0, 0], atol=1e-15)
    np.testing.assert_allclose(d.brier_score, d.uncertainty, rtol=1e-15)
    np.testing.assert_allclose(roc_curve(clim, obs, 0.5).area, 0.5)


def test_roc_area_vs_scores(ens):
    fc, obs = ens
    t = xr.DataArray([-0.5, 0.7], dims="threshold", coords={"threshold": [-0.5, 0.7]})
    p = exceedance_probability(fc, t)
    o = (obs > t).astype(float).where(obs.notnull())
    got = roc_curve(fc, obs, [-0.5, 0.7], preserve_dims="a")
    ref = sp.roc_auc(p, o, preserve_dims=["a", "threshold"])
    np.testing.assert_allclose(got.area, ref.transpose(*got.area.dims), rtol=1e-12)
    w = xr.DataArray(np.linspace(1.0, 3.0, 300), dims="b", coords={"b": obs.b})
    got_w = roc_curve(fc, obs, [-0.5, 0.7], preserve_dims="a", weights=w)
    ref_w = sp.roc_auc(p, o, preserve_dims=["a", "threshold"], weights=w.broadcast_like(o))
    np.testing.assert_allclose(got_w.area, ref_w.transpose(*got_w.area.dims), rtol=1e-12)
    assert not np.allclose(got_w.area, got.area)
    # user thresholds: the same curve points as scores', a lower (coarser) area
    q = [0.1, 0.5, 0.9]
    coarse = roc_curve(fc, obs, 0.7, probability_thresholds=q).isel(threshold=0)
    ref_c = sp.roc_curve_data(p.sel(threshold=0.7), o.sel(threshold=0.7), thresholds=q)
    np.testing.assert_allclose(coarse.hit_rate, ref_c.POD.values)
    np.testing.assert_allclose(coarse.false_alarm_rate, ref_c.POFD.values)
    np.testing.assert_allclose(coarse.area, ref_c.AUC)
    assert coarse.area < roc_curve(fc, obs, 0.7).area.isel(threshold=0)


def test_missing_slices_are_nan_not_zero(ens):
    fc, obs = ens
    ob = obs.copy(deep=True)
    ob[0] = np.nan  # a = 0: nothing valid
    ob[1] = -5.0  # a = 10: no event above 0
    d = brier_decomposition(fc, ob, 0.0, preserve_dims="a").isel(threshold=0)
    assert np.isnan(d.to_array().isel(a=0)).all() and np.isfinite(d.to_array().isel(a=1)).all()
    np.testing.assert_allclose(d.uncertainty.isel(a=1), 0.0)
    r = roc_curve(fc, ob, 0.0, preserve_dims="a").isel(threshold=0)
    assert np.isnan(r.area[:2]).all() and np.isfinite(r.area[2:]).all()
    assert np.isnan(r.hit_rate[1]).all() and np.isfinite(r.false_alarm_rate[1]).all()


@pytest.mark.slow  # a dask graph per score
def test_dask_equals_numpy(ens):
    fc, obs = ens
    lazy_f, lazy_o = fc.chunk({"b": 100}), obs.chunk({"a": 3})
    for fn in (brier_decomposition, roc_curve):
        ref = fn(fc, obs, [0.0, 0.5], preserve_dims="a")
        lazy = fn(lazy_f, lazy_o, [0.0, 0.5], preserve_dims="a")
        assert all(v.chunks is not None for v in lazy.data_vars.values())
        xr.testing.assert_allclose(lazy.compute(), ref)


@pytest.mark.parametrize("fn", [brier_decomposition, roc_curve])
@pytest.mark.parametrize(
    ("change", "kw", "needle"),
    [
        ("no_member", {}, "no member dimension 'member'"),
        ("extra_dim", {}, "do not match observation dims"),
        ("inf", {}, "forecast has 1 infinite value"),
        (None, {"thresholds": 50.0}, "outside the data range"),
        (None, {"reduce_dims": "c"}, r"reduce_dims \['c'\] not among"),
        ("weights", {}, "weights have size 2 along 'a'"),
    ],
)
def test_bad_inputs(ens, fn, change, kw, needle):
    fc, obs = ens
    kw = {"thresholds": 0.0, **kw}
    if change == "no_member":
        fc = fc.rename(member="number")
    elif change == "extra_dim":
        obs = obs.expand_dims(level=[850.0])
    elif change == "inf":
        fc = fc.copy(deep=True)
        fc[0, 0, 0] = np.inf
    elif change == "weights":
        kw["weights"] = xr.DataArray([1.0, 2.0], dims="a")
    with pytest.raises(EnsmlError, match=needle) as exc:
        fn(fc, obs, **kw)
    msg = str(exc.value)
    assert msg.startswith(f"{fn.__name__}: ") and "\n" not in msg


@pytest.mark.parametrize(
    ("fn", "kw", "needle"),
    [
        (brier_decomposition, {"bins": 0}, "bins must be None"),
        (brier_decomposition, {"bins": 2.5}, "bins must be None"),
        (roc_curve, {"probability_thresholds": [0.2, 1.5]}, r"must lie in \[0, 1\]"),
        (roc_curve, {"probability_thresholds": [np.nan]}, r"must lie in \[0, 1\]"),
        (roc_curve, {"probability_thresholds": []}, "1-D list"),
    ],
)
def test_bad_options(ens, fn, kw, needle):
    with pytest.raises(EnsmlError, match=needle) as exc:
        fn(*ens, 0.0, **kw)
    assert str(exc.value).startswith(f"{fn.__name__}: ")
