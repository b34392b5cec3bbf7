"""Ensemble CRPS against scoringrules / properscoring / scores, edge cases, properties, errors."""

from __future__ import annotations

import numpy as np
import properscoring as ps
import pytest
import scores.probability
import scoringrules as sr
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError
from ensml.scores.crps import crps_ensemble, crps_ensemble_array, crps_pointwise


def _pairwise(x: np.ndarray, y: float, fair: bool) -> float:
    """Textbook O(M²) estimator in float64 (NaN members dropped)."""
    x = np.asarray(x, dtype=np.float64)
    x = x[~np.isnan(x)]
    m = x.size
    spread = np.abs(x[:, None] - x[None, :]).sum()
    return np.abs(x - y).mean() - spread / (2 * m * (m - 1) if fair else 2 * m * m)


@pytest.mark.parametrize("m", [1, 2, 3, 10, 17, 50])
def test_random_vs_properscoring_and_scoringrules(m):
    rng = np.random.default_rng(m)
    fc = rng.normal(size=(m, 3000))
    obs = rng.normal(size=3000) * 1.5
    got = crps_ensemble_array(fc, obs, axis=0)
    np.testing.assert_allclose(got, ps.crps_ensemble(obs, fc.T), rtol=1e-10, atol=1e-13)
    np.testing.assert_allclose(got, sr.crps_ensemble(obs, fc, m_axis=0, estimator="nrg"), rtol=1e-10)
    if m > 1:
        fair = crps_ensemble_array(fc, obs, axis=0, fair=True)
        np.testing.assert_allclose(
            fair, sr.crps_ensemble(obs, fc, m_axis=0, estimator="fair"), rtol=1e-10, atol=1e-12
        )


def test_xarray_vs_scores_both_estimators():
    rng = np.random.default_rng(3)
    dims = ("init_time", "member", "latitude", "longitude")
    fc = xr.DataArray(rng.normal(size=(4, 10, 5, 6)), dims=dims)
    obs = xr.DataArray(rng.normal(size=(4, 5, 6)), dims=("init_time", "latitude", "longitude"))
    for fair, method in ((False, "ecdf"), (True, "fair")):
        ref = scores.probability.crps_for_ensemble(
            fc, obs, "member", method=method, preserve_dims=["latitude"]
        )
        got = crps_ensemble(fc, obs, fair=fair, preserve_dims="latitude")
        xr.testing.assert_allclose(got.drop_attrs(), ref.rename("crps").drop_attrs())


def test_issue_nan_member_fair_case():
    members = np.array([0.3, -1.2, 0.8, 2.0, np.nan, 0.1, -0.4])
    got = crps_ensemble_array(members, np.array(0.5), fair=True)
    np.testing.assert_allclose(got, 0.17333333333333334, rtol=1e-12)
    np.testing.assert_allclose(got, _pairwise(members, 0.5, fair=True))
    np.testing.assert_allclose(crps_ensemble_array(members, np.array(0.5)), _pairwise(members, 0.5, False))


@pytest.mark.parametrize(
    ("members", "obs"),
    [
        ([1.0, 1.0, 2.0, 2.0, 2.0], 1.5),  # ties
        ([3.0, 3.0, 3.0, 3.0], 3.0),  # constant ensemble hitting the observation
        ([3.0, 3.0, 3.0, 3.0], -1.0),  # constant ensemble missing it
        ([0.0, 1.0, 2.0], 10.0),  # observation above the ensemble
        ([0.0, 1.0, 2.0], -10.0),  # observation below the ensemble
        ([np.nan, 1.0, np.nan, 4.0], 2.0),  # NaN members dropped
    ],
)
def test_edge_cases(members, obs):
    x = np.array(members)
    for fair in (False, True):
        np.testing.assert_allclose(crps_ensemble_array(x, np.array(obs), fair=fair), _pairwise(x, obs, fair))


def test_constant_and_outside_closed_forms():
    # constant ensemble = point forecast: CRPS = |c − y| for both estimators
    np.testing.assert_allclose(crps_ensemble_array(np.full(6, 3.0), np.array(-1.0), fair=True), 4.0)
    # obs above all members: CRPS = y − mean(x) − ½ E|X − X'|
    x = np.array([0.0, 1.0, 2.0])
    np.testing.assert_allclose(crps_ensemble_array(x, np.array(10.0)), 9.0 - 0.5 * 8 / 9)


def test_nan_policy():
    fc = np.array([[np.nan, 1.0, np.nan], [np.nan, 2.0, 5.0]])  # (M=2, N=3)
    got = crps_ensemble_array(fc, np.array([0.0, np.nan, 5.0]), fair=False)
    assert np.isnan(got[0]) and np.isnan(got[1])  # all-NaN point, NaN observation
    assert got[2] == 0.0  # one valid member: absolute error
    fair = crps_ensemble_array(fc, np.array([0.0, 0.0, 5.0]), fair=True)
    assert np.isnan(fair[2])  # fair CRPS of one valid member is undefined, not 0
    np.testing.assert_allclose(fair[1], _pairwise(np.array([1.0, 2.0]), 0.0, fair=True))


def test_nan_inside_large_blocks_matches_reference():
    rng = np.random.default_rng(5)
    fc = rng.normal(size=(10, 5000))
    fc[rng.random(fc.shape) < 0.05] = np.nan
    obs = rng.normal(size=5000)
    got = crps_ensemble_array(fc, obs, fair=True)
    ref = np.array([_pairwise(fc[:, i], obs[i], True) for i in range(200)])
    np.testing.assert_allclose(got[:200], ref, rtol=1e-12)


def test_float32_geopotential_accuracy():
    rng = np.random.default_rng(7)
    fc = (5.5e4 + 300 * rng.normal(size=(10, 20000))).astype(np.float32)
    obs = (5.5e4 + 300 * rng.normal(size=20000)).astype(np.float32)
    for fair in (False, True):
        got = crps_ensemble_array(fc, obs, fair=fair)
        assert got.dtype == np.float32
        # exact values: float32 inputs are exact in float64, centred before summing
        f64, o64 = fc.astype(np.float64) - obs.astype(np.float64), np.zeros(20000)
        ref = sr.crps_ensemble(o64, f64, m_axis=0, estimator="fair" if fair else "nrg")
        np.testing.assert_allclose(got, ref, rtol=1e-6)


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_member_axis_and_layouts(axis):
    rng = np.random.default_rng(11)
    base = rng.normal(size=(7, 30, 40))
    fc = np.moveaxis(base, 0, axis)
    obs = rng.normal(size=(30, 40))
    ref = ps.crps_ensemble(obs, np.moveaxis(base, 0, -1))
    np.testing.assert_allclose(crps_ensemble_array(fc, obs, axis=axis), ref, rtol=1e-12)
    strided = base[:, :, ::3]
    np.testing.assert_allclose(
        crps_ensemble_array(strided, obs[:, ::3]), ps.crps_ensemble(obs[:, ::3], np.moveaxis(strided, 0, -1))
    )


@settings(max_examples=40, deadline=None)
@given(
    fc=hnp.arrays(
        np.float64, st.tuples(st.integers(1, 12), st.integers(1, 5)), elements=st.floats(-1e3, 1e3)
    ),
    y=st.floats(-1e3, 1e3),
)
def test_properties(fc, y):
    obs = np.full(fc.shape[1], y)
    std = crps_ensemble_array(fc, obs)
    assert np.all(std >= -1e-9 * (1 + np.abs(fc).max()))
    if fc.shape[0] == 1:
        np.testing.assert_allclose(std, np.abs(fc[0] - y), rtol=1e-12)
    else:
        fair = crps_ensemble_array(fc, obs, fair=True)
        assert np.all(fair <= std + 1e-9 * (1 + np.abs(fc).max()))
        ref = np.array([_pairwise(fc[:, i], y, True) for i in range(fc.shape[1])])
        np.testing.assert_allclose(fair, ref, rtol=1e-9, atol=1e-9)


def _xr_case(rng, chunked=False):
    lat = np.array([60.0, 20.0, -20.0, -60.0])
    fc = xr.DataArray(
        rng.normal(size=(3, 8, 4, 5)).astype(np.float32),
        dims=("init_time", "member", "latitude", "longitude"),
        coords={"latitude": lat},
    )
    obs = xr.DataArray(
        rng.normal(size=(4, 5, 3)).astype(np.float32),  # other dim order on purpose
        dims=("latitude", "longitude", "init_time"),
        coords={"latitude": lat},
        attrs={"units": "K"},
    )
    return (fc.chunk(init_time=1, latitude=2) if chunked else fc), obs


def test_xarray_api_reductions_and_weights():
    rng = np.random.default_rng(13)
    fc, obs = _xr_case(rng)
    pointwise = crps_ensemble(fc, obs, preserve_dims="all")
    assert set(pointwise.dims) == {"init_time", "latitude", "longitude"}
    assert pointwise.attrs["units"] == "K" and pointwise.name == "crps"
    ref = ps.crps_ensemble(
        obs.transpose("init_time", "latitude", "longitude").values, fc.values.transpose(0, 2, 3, 1)
    )
    np.testing.assert_allclose(pointwise.transpose("init_time", "latitude", "longitude"), ref, rtol=1e-6)
    np.testing.assert_allclose(crps_ensemble(fc, obs), ref.mean(), rtol=1e-6)
    np.testing.assert_allclose(
        crps_ensemble(fc, obs, reduce_dims=["longitude"]).transpose("init_time", "latitude"),
        ref.mean(-1),
        rtol=1e-6,
    )
    w = latitude_weights(obs)
    weighted = crps_ensemble(fc, obs, weights=w, preserve_dims="init_time")
    expect = (ref.mean(-1) * w.values).sum(-1) / w.values.sum()
    np.testing.assert_allclose(weighted, expect, rtol=1e-6)


def test_dask_matches_eager_and_is_lazy():
    rng = np.random.default_rng(17)
    fc, obs = _xr_case(rng, chunked=True)
    fc = fc.chunk(member=3)  # split members: must be rechunked, not mis-scored
    lazy = crps_ensemble(fc, obs, fair=True, preserve_dims=["init_time", "latitude"])
    assert lazy.chunks is not None
    eager = crps_ensemble(fc.compute(), obs, fair=True, preserve_dims=["init_time", "latitude"])
    xr.testing.assert_allclose(lazy.compute(), eager)


def test_in_memory_result_is_what_apply_ufunc_gives():
    """numpy inputs skip xr.apply_ufunc; dims, coordinates, name and attrs must not change."""
    rng = np.random.default_rng(3)
    fc = xr.DataArray(
        rng.standard_normal((4, 3, 5)),
        dims=("lat", "member", "lon"),
        coords={
            "lat": [10.0, 20.0, 30.0, 40.0],
            "lon": np.arange(5.0),
            "member": [1, 2, 3],
            "height": 2.0,  # scalar, agrees
            "level": 500,  # scalar, disagrees: dropped
            "mask": (("lat", "lon"), rng.random((4, 5)) > 0.5),
            "number": ("member", [7, 8, 9]),  # on the member dim: dropped
        },
        name="t2m",
        attrs={"units": "K"},
    )
    obs = xr.DataArray(
        rng.standard_normal((5, 4)),
        dims=("lon", "lat"),
        coords={"lon": np.arange(5.0), "lat": [10.0, 20.0, 30.0, 40.0], "height": 2.0, "level": 850},
        name="t2m",
        attrs={"units": "K"},
    )
    for bounds in ((-np.inf, np.inf), (0.0, np.inf)):
        eager = crps_pointwise(fc, obs, bounds=bounds)
        lazy = crps_pointwise(fc.chunk(lat=2), obs, bounds=bounds).compute()
        xr.testing.assert_identical(eager, lazy)
        assert eager.dims == ("lat", "lon") and "level" not in eager.coords and "number" not in eager.coords
        assert eager.name == "t2m" and eager.attrs == {"units": "K"}
    assert crps_pointwise(fc, obs.rename("obs")).name is None


def test_all_nan_point_is_nan_not_zero():
    fc = xr.DataArray([[np.nan, 1.0], [np.nan, 2.0]], dims=("member", "x"))
    obs = xr.DataArray([0.0, 0.0], dims="x")
    out = crps_ensemble(fc, obs, preserve_dims="x")
    assert np.isnan(out[0]) and out[1] > 0
    assert np.isnan(crps_ensemble(fc.isel(x=[0]), obs.isel(x=[0])))


def test_coordinates_are_aligned_and_a_partial_overlap_is_refused():
    fc = xr.DataArray(np.ones((2, 3)), dims=("member", "x"), coords={"x": [0, 1, 2]})
    obs = xr.DataArray([0.0, 1.0, 1.0], dims="x", coords={"x": [2, 1, 0]})  # the same points, reordered
    out = crps_ensemble(fc, obs, preserve_dims="x")
    assert [float(out.sel(x=x)) for x in (0, 1, 2)] == [0.0, 0.0, 1.0]
    with pytest.raises(EnsmlError) as info:  # scoring the common points only would be silent
        crps_ensemble(fc, obs.isel(x=[0, 1]), preserve_dims="x")
    assert str(info.value) == (
        "crps_ensemble: forecast and observation overlap only partly along 'x' (forecast 3, "
        "observation 2, common 2); select the common points first, e.g. xr.align(fcst, obs, join='inner')"
    )


def test_bad_inputs():
    fc = xr.DataArray(np.zeros((3, 4)), dims=("member", "x"))
    obs = xr.DataArray(np.zeros(4), dims="x")
    with pytest.raises(EnsmlError, match="no member dimension 'member'"):
        crps_ensemble(fc.rename(member="number"), obs)
    with pytest.raises(EnsmlError, match="do not match observation dims"):
        crps_ensemble(fc, obs.rename(x="y"))
    with pytest.raises(EnsmlError, match="sizes differ along 'x'"):
        crps_ensemble(fc, obs.isel(x=[0, 1]))
    with pytest.raises(EnsmlError, match="share no coordinates along 'x'"):
        crps_ensemble(fc.assign_coords(x=[0, 1, 2, 3]), obs.assign_coords(x=[5, 6, 7, 8]))
    with pytest.raises(EnsmlError, match="weights have size 3 along 'x'"):
        crps_ensemble(fc, obs, weights=xr.DataArray(np.ones(3), dims="x"))
    with pytest.raises(EnsmlError, match="weights dims"):
        crps_ensemble(fc, obs, weights=xr.DataArray(np.ones(3), dims="latitude"))
    with pytest.raises(EnsmlError, match="not both"):
        crps_ensemble(fc, obs, reduce_dims="x", preserve_dims="x")
    with pytest.raises(EnsmlError, match="not among the score dims"):
        crps_ensemble(fc, obs, reduce_dims="latitude")
    with pytest.raises(EnsmlError, match="at least 2 members"):
        crps_ensemble(fc.isel(member=[0]), obs, fair=True)
    with pytest.raises(EnsmlError, match="must be an xarray"):
        crps_ensemble(fc.values, obs)
    with pytest.raises(EnsmlError, match="observation shape"):
        crps_ensemble_array(np.zeros((3, 4)), np.zeros(5))
    with pytest.raises(EnsmlError, match="out of range"):
        crps_ensemble_array(np.zeros((3, 4)), np.zeros(4), axis=2)
    with pytest.raises(EnsmlError, match="no members"):
        crps_ensemble_array(np.zeros((0, 4)), np.zeros(4))
    with pytest.raises(EnsmlError, match="must be numeric"):
        crps_ensemble_array(np.array([["a"]]), np.array(["b"]))
