"""Hersbach (2000) CRPS decomposition: against properscoring, closed forms, a hand case, dask."""

from __future__ import annotations

import collections
import os
import threading

import dask
import dask.array as da
import numpy as np
import properscoring as ps
import pytest
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra.numpy import arrays

from ensml.errors import EnsmlError
from ensml.scores import crps_decomposition

DIMS = ("init_time", "lead_time", "latitude", "longitude")


def _case(seed: int = 0, m: int = 8, shape=(6, 3, 5, 4), bias: float = 0.0):
    rng = np.random.default_rng(seed)
    lat = np.linspace(80.0, -80.0, shape[2])
    coords = {"latitude": lat, "lead_time": np.arange(shape[1])}
    signal = rng.normal(size=shape)
    fc = xr.DataArray(
        signal[None] + bias + rng.normal(size=(m, *shape)), dims=("member", *DIMS), coords=coords
    )
    obs = xr.DataArray(signal + 1.3 * rng.normal(size=shape), dims=DIMS, coords=coords, attrs={"units": "K"})
    return fc, obs


def _pointwise(fc: xr.DataArray, obs: xr.DataArray) -> np.ndarray:
    """properscoring's CRPS per case, obs dims order."""
    return ps.crps_ensemble(obs.values, fc.transpose(*obs.dims, "member").values)


def _unc_brute(y: np.ndarray, w: np.ndarray) -> float:
    """Σ_kl w_k w_l |y_k - y_l| / (2 W²) by brute force."""
    y, w = y.ravel(), w.ravel()
    return float((w[:, None] * w[None, :] * np.abs(y[:, None] - y[None, :])).sum() / (2 * w.sum() ** 2))


def test_crps_matches_properscoring_and_the_identities():
    fc, obs = _case()
    d = crps_decomposition(fc, obs)
    ref = _pointwise(fc, obs)
    np.testing.assert_allclose(float(d.crps), ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(float(d.reliability + d.crps_potential), float(d.crps), rtol=1e-12)
    np.testing.assert_allclose(float(d.resolution), float(d.uncertainty - d.crps_potential), rtol=1e-12)
    assert float(d.reliability) >= 0 and float(d.crps_potential) >= 0
    np.testing.assert_allclose(float(d.uncertainty), _unc_brute(obs.values, np.ones(obs.shape)), rtol=1e-12)
    # Unc is the CRPS of the climatological ensemble (every observation a member), averaged
    y = obs.values.ravel()
    climo = ps.crps_ensemble(y, np.broadcast_to(y, (y.size, y.size)))
    np.testing.assert_allclose(float(d.uncertainty), climo.mean(), rtol=1e-12)
    assert d.crps.attrs["units"] == "K" and d.o.attrs["units"] == "1"
    assert dict(d.sizes) == {"bin": 9} and np.allclose(d.probability, np.arange(9) / 8)
    # the per-bin means rebuild the CRPS (eq 29) and g = α + β in the interior bins
    p = d.probability
    np.testing.assert_allclose(float((d.alpha * p**2 + d.beta * (1 - p) ** 2).sum()), ref.mean(), rtol=1e-12)
    np.testing.assert_allclose(d.g[1:-1], (d.alpha + d.beta)[1:-1], rtol=1e-12)


def test_weighted_and_preserved_dims():
    fc, obs = _case(1)
    w = xr.DataArray(
        np.cos(np.deg2rad(obs.latitude.values)), dims="latitude", coords={"latitude": obs.latitude}
    )
    d = crps_decomposition(fc, obs, weights=w, preserve_dims="lead_time")
    assert d.crps.dims == ("lead_time",) and d.alpha.dims == ("lead_time", "bin")
    ref = _pointwise(fc, obs)  # (init, lead, lat, lon)
    wb = np.broadcast_to(w.values[None, None, :, None], ref.shape)
    expect = (ref * wb).sum((0, 2, 3)) / wb.sum((0, 2, 3))
    np.testing.assert_allclose(d.crps, expect, rtol=1e-12)
    for j in range(obs.sizes["lead_time"]):
        unc = _unc_brute(obs.values[:, j], wb[:, j])
        np.testing.assert_allclose(float(d.uncertainty[j]), unc, rtol=1e-12)
        y = obs.values[:, j].ravel()  # weighted climatological ensemble, weighted mean over the cases
        wj = np.broadcast_to(wb[:, j].ravel(), (y.size, y.size))
        climo = ps.crps_ensemble(y, np.broadcast_to(y, (y.size, y.size)), weights=wj)
        np.testing.assert_allclose(float(d.uncertainty[j]), np.average(climo, weights=wb[:, j].ravel()))
        one = crps_decomposition(fc.isel(lead_time=j), obs.isel(lead_time=j), weights=w)
        xr.testing.assert_allclose(d.isel(lead_time=j), one)  # both keep lead_time as a scalar
    np.testing.assert_allclose(d.reliability + d.crps_potential, d.crps, rtol=1e-12)
    pointwise = crps_decomposition(fc, obs, preserve_dims="all")
    np.testing.assert_allclose(pointwise.crps.transpose(*DIMS), ref, rtol=1e-12)
    assert float(pointwise.uncertainty.max()) == 0.0  # one case: its climatology is exact


@pytest.mark.parametrize("preserve", [None, "init_time", "latitude", "all"])
def test_small_batches_and_slabs_give_the_same(monkeypatch, preserve):
    from ensml.scores import hersbach

    fc, obs = _case(6)
    w = xr.DataArray(np.linspace(0.2, 1, 5), dims="latitude", coords={"latitude": obs.latitude})
    ref = crps_decomposition(fc, obs, weights=w, preserve_dims=preserve)
    monkeypatch.setattr(hersbach, "_BATCH", 7)  # batches of 1 case, slabs of 1 init in memory
    xr.testing.assert_allclose(
        crps_decomposition(fc, obs, weights=w, preserve_dims=preserve), ref, rtol=1e-13
    )
    lazy = crps_decomposition(fc.chunk(init_time=4), obs, weights=w, preserve_dims=preserve)
    xr.testing.assert_allclose(lazy, ref, rtol=1e-13)


def test_a_single_case():
    fc, obs = _case(7)
    one = crps_decomposition(fc[:, 0, 0, 0, 0], obs[0, 0, 0, 0])
    np.testing.assert_allclose(float(one.crps), _pointwise(fc, obs)[0, 0, 0, 0], rtol=1e-13)
    assert float(one.uncertainty) == 0.0 and one.crps.dims == ()


def test_zero_weight_group_is_nan():
    fc, obs = _case(2)
    w = xr.DataArray([0.0, 1, 1, 1, 1], dims="latitude", coords={"latitude": obs.latitude})
    d = crps_decomposition(fc, obs, weights=w, preserve_dims="latitude")
    assert np.isnan(d.crps[0]) and np.isnan(d.uncertainty[0]) and bool(d.g[0].isnull().all())
    assert bool(np.isfinite(d.crps[1:]).all())


def test_hand_computed_two_members_three_cases():
    # N = 2 members, p = (0, 1/2, 1); bins 0: (-inf, x1), 1: (x1, x2), 2: (x2, inf).
    # case 1: x = (0, 2),  y = 1: α1 = 1 - 0 = 1, β1 = 2 - 1 = 1, no outlier.
    # case 2: x = (1, 3),  y = 4: α1 = 3 - 1 = 2, β1 = 0; above the ensemble: α2 = 4 - 3 = 1.
    # case 3: x = (2.5, 2) sorted (2, 2.5), y = 0: α1 = 0, β1 = 0.5; below: β0 = 2 - 0 = 2.
    # means over 3 cases: α = (0, 3/3, 1/3), β = (2/3, 1.5/3, 0).
    # CRPS = α1/4 + α2 + β0 + β1/4 = 1/4 + 1/3 + 2/3 + 1/8 = 1.375 (per case 0.5, 1.5, 2.125).
    # g1 = 1.5, o1 = 0.5/1.5 = 1/3; o0 = 1/3 (one case below), g0 = β0/o0 = 2;
    # 1 - o2 = 1/3 (one case above), o2 = 2/3, g2 = α2/(1 - o2) = 1.
    # Reli = 2 (1/3)² + 1.5 (1/3 - 1/2)² + 1 (2/3 - 1)² = 2/9 + 1/24 + 1/9 = 0.375
    # CRPS_pot = (2 + 1.5 + 1) (1/3)(2/3) = 1.0; Reli + CRPS_pot = 1.375.
    # Unc = (|1-4| + |1-0| + |4-0|) * 2 / (2 * 3²) = 8/9; Resol = 8/9 - 1 = -1/9.
    fc = xr.DataArray([[0.0, 2.0], [1.0, 3.0], [2.5, 2.0]], dims=("case", "member"))
    obs = xr.DataArray([1.0, 4.0, 0.0], dims="case")
    d = crps_decomposition(fc, obs)
    np.testing.assert_allclose(d.alpha, [0, 1, 1 / 3], rtol=1e-15)
    np.testing.assert_allclose(d.beta, [2 / 3, 0.5, 0], rtol=1e-15)
    np.testing.assert_allclose(d.g, [2, 1.5, 1], rtol=1e-15)
    np.testing.assert_allclose(d.o, [1 / 3, 1 / 3, 2 / 3], rtol=1e-15)
    for name, value in [
        ("crps", 1.375),
        ("reliability", 0.375),
        ("crps_potential", 1.0),
        ("uncertainty", 8 / 9),
        ("resolution", -1 / 9),
    ]:
        np.testing.assert_allclose(float(d[name]), value, rtol=1e-14, err_msg=name)
    np.testing.assert_allclose(float(d.crps), _pointwise(fc, obs).mean(), rtol=1e-14)


def test_reliable_ensemble_has_small_reliability_and_a_biased_one_more():
    # Obs and N = 20 members i.i.d. given a case mean, K = 20000 cases. Reli is not 0 for a
    # perfect finite ensemble: y falls below x_1 (above x_N) with frequency 1/(N + 1) while
    # p_0 = 0 (p_N = 1), so the outlier bins add ~β_0/(N+1) + α_N/(N+1) (measured ~0.4% of the
    # CRPS at N = 20; 1.5% at N = 10, 5% at N = 5). Hence: o_0 within 4 binomial standard
    # errors of 1/(N+1), interior bins reliable to < 0.1% of the CRPS, all bins < 1%; a bias
    # of 0.3 standard deviations makes Reli over 5x larger.
    m, k = 20, 20_000
    rng = np.random.default_rng(5)
    mu = rng.normal(size=k)
    fc = xr.DataArray(mu + rng.normal(size=(m, k)), dims=("member", "case"))
    obs = xr.DataArray(mu + rng.normal(size=k), dims="case")
    d = crps_decomposition(fc, obs)
    q = 1 / (m + 1)
    se = np.sqrt(q * (1 - q) / k)
    assert abs(float(d.o[0]) - q) < 4 * se and abs(1 - float(d.o[-1]) - q) < 4 * se
    interior = (d.g * (d.o - d.probability) ** 2)[1:-1].sum()
    assert float(interior) < 1e-3 * float(d.crps)
    assert float(d.reliability) < 1e-2 * float(d.crps)
    biased = crps_decomposition(fc + 0.3, obs)
    assert float(biased.reliability) > 5 * float(d.reliability)
    np.testing.assert_allclose(float(biased.uncertainty), float(d.uncertainty), rtol=1e-15)


class _Reads:
    """Counts the calls per block of a wrapped dask array (thread-safe)."""

    def __init__(self) -> None:
        self.calls: collections.Counter = collections.Counter()
        self.lock = threading.Lock()

    def wrap(self, x: np.ndarray, chunks) -> da.Array:
        def read(block: np.ndarray, block_info=None) -> np.ndarray:
            if block_info is not None:
                with self.lock:
                    self.calls[tuple(block_info[None]["chunk-location"])] += 1
            return block

        return da.from_array(x, chunks=chunks).map_blocks(read, dtype=x.dtype, meta=np.empty((0,) * x.ndim))


def test_dask_is_one_pass_and_equals_numpy():
    fc, obs = _case(3, shape=(12, 3, 5, 4))
    fcst_reads, obs_reads = _Reads(), _Reads()
    fchunks = (8, 3, 3, 5, 4)  # cases split along init_time: 4 chunks (members in one)
    lazy_f = fc.copy(data=fcst_reads.wrap(fc.values, fchunks))
    lazy_o = obs.copy(data=obs_reads.wrap(obs.values, fchunks[1:]))
    computes = []

    def scheduler(dsk, keys, **kwargs):
        computes.append(keys)
        return dask.threaded.get(dsk, keys, **kwargs)

    with dask.config.set(scheduler=scheduler):
        got = crps_decomposition(lazy_f, lazy_o, preserve_dims="lead_time")
    assert len(computes) == 1  # a single dask.compute
    assert fcst_reads.calls == {(0, i, 0, 0, 0): 1 for i in range(4)}  # each forecast chunk read once
    assert obs_reads.calls == {(i, 0, 0, 0): 1 for i in range(4)}
    xr.testing.assert_allclose(got, crps_decomposition(fc, obs, preserve_dims="lead_time"), rtol=1e-13)
    # numpy observation with a chunked forecast split along members: rechunked, same result
    mixed = crps_decomposition(fc.chunk(member=3, latitude=2), obs, reduce_dims=["init_time", "latitude"])
    xr.testing.assert_allclose(mixed, crps_decomposition(fc, obs, reduce_dims=["init_time", "latitude"]))
    w = xr.DataArray(np.linspace(0.5, 1, 5), dims="latitude", coords={"latitude": obs.latitude})
    chunked_w = crps_decomposition(fc, obs.chunk(latitude=2), weights=w.chunk(latitude=3))
    xr.testing.assert_allclose(chunked_w, crps_decomposition(fc, obs, weights=w), rtol=1e-13)


@pytest.mark.realdata
def test_real_eda_leave_one_member_out(real_data):
    path = real_data / "cfgrib" / "era5-levels-members.grib"
    if not path.exists():
        if os.environ.get("ENSML_REQUIRE_REAL_DATA"):
            pytest.fail(f"ENSML_REQUIRE_REAL_DATA is set but {path} is missing")
        pytest.skip(f"{path} not found")
    pytest.importorskip("cfgrib")
    ds = xr.open_dataset(path, engine="cfgrib", backend_kwargs={"indexpath": ""})
    z = ds.z.load()
    obs = z.sel(number=0, drop=True)  # member 0 plays the observation, members 1-9 the ensemble
    fc = z.sel(number=slice(1, 9))
    d = crps_decomposition(fc, obs, member_dim="number", preserve_dims="isobaricInhPa")
    ref = ps.crps_ensemble(obs.values, np.moveaxis(fc.values, 0, -1)).mean(axis=(0, 2, 3))
    np.testing.assert_allclose(d.crps.values, ref, rtol=1e-10)
    np.testing.assert_allclose(d.reliability + d.crps_potential, d.crps, rtol=1e-12)
    assert float(d.reliability.min()) >= 0 and dict(d.sizes) == {"isobaricInhPa": 2, "bin": 10}
    lazy = crps_decomposition(
        fc.chunk(time=1), obs.chunk(time=1), member_dim="number", preserve_dims="isobaricInhPa"
    )
    xr.testing.assert_allclose(lazy, d, rtol=1e-12)


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda f, o: (f.rename(member="ens"), o), "forecast has no member dimension 'member'"),
        (lambda f, o: (f.isel(member=[0]), o), "needs at least 2 members along 'member', got 1"),
        (lambda f, o: (f, o.assign_coords(latitude=o.latitude + 1)), "share no coordinates along 'latitude'"),
        (lambda f, o: (f, o.isel(latitude=slice(1, None))), "overlap only partly along 'latitude'"),
        (lambda f, o: (f, o.isel(lead_time=0)), "do not match observation dims"),
        (lambda f, o: (f.where(f.member != 2), o), "forecast has 360 NaN or infinite values"),
        (lambda f, o: (f.chunk(init_time=2).where(f.member != 2), o), "forecast has 360 NaN or infinite"),
        (lambda f, o: (f, o.where(o.init_time != 0)), "observation has 60 NaN or infinite values"),
        (lambda f, o: (f, o * np.inf), "observation has 360 NaN or infinite values"),
        (lambda f, o: (f.astype(str), o), "forecast must be numeric"),
    ],
)
def test_bad_input(change, message):
    fc, obs = _case(4)
    f, o = change(fc, obs)
    with pytest.raises(EnsmlError, match=message) as err:
        crps_decomposition(f, o)
    assert "\n" not in str(err.value) and str(err.value).startswith("crps_decomposition: ")


@pytest.mark.parametrize(
    "weights, message",
    [
        ([1.0, -1, 1, 1, 1], "weights must be >= 0"),
        ([0.0, 0, 0, 0, 0], "weights are all zero"),
        ([1.0, np.nan, 1, 1, 1], "weights contain NaN"),
    ],
)
def test_bad_weights(weights, message):
    fc, obs = _case(4)
    w = xr.DataArray(weights, dims="latitude", coords={"latitude": obs.latitude})
    with pytest.raises(EnsmlError, match=message) as err:
        crps_decomposition(fc, obs, weights=w)
    assert "\n" not in str(err.value)
    with pytest.raises(EnsmlError, match="pass reduce_dims or preserve_dims, not both"):
        crps_decomposition(fc, obs, reduce_dims="latitude", preserve_dims="longitude")


def test_the_pooled_uncertainty_is_crps_decompositions_and_the_closed_form():
    """The uncertainty of the float32 observations pooled over init times and points (sorted as
    64-bit keys) is, to the last bit, the one crps_decomposition finds from the same values in
    float64 (numpy's stable argsort), and the weighted mean absolute difference of the
    observations (module docstring), with ties (values on a coarse grid), -0.0 and 0.0, and
    weights that vary by point and are 0 where unobserved. (evaluate --cluster's blocks against
    one process: tests/verify/test_evaluate_cluster.py, on the tables.)"""
    from ensml.scores.uncertainty import pooled_uncertainty

    rng = np.random.default_rng(11)
    dims = ["init_time", "level", "latitude", "longitude"]
    values = np.round(rng.normal(0.0, 3.0, (9, 2, 7, 5)), 1).astype(np.float32)  # many ties
    values[0, :, 0, :2], values[3, :, 1, :2] = -0.0, 0.0
    y = xr.DataArray(values, dims=dims)
    area = xr.DataArray(rng.random((7, 5)), dims=["latitude", "longitude"])
    observed = xr.DataArray(rng.random((9, 2, 7, 5)) > 0.1, dims=dims)
    for w in (area, area * observed):
        whole = pooled_uncertainty(y, keep=["level"], weights=w)
        y64 = y.astype(np.float64)  # float64: sorted by numpy's stable argsort
        fcst = y64.expand_dims(member=2).copy(data=np.stack([y64.values, y64.values + 1.0]))
        ref = crps_decomposition(fcst, y64, preserve_dims="level", weights=w)["uncertainty"]
        np.testing.assert_array_equal(whole.values, ref.values)  # the same stable order, the same sums
        for lev in range(2):
            yy = y.isel(level=lev).values.ravel().astype(np.float64)
            ww = w.broadcast_like(y).isel(level=lev).values.ravel()
            gini = (ww[:, None] * ww[None, :] * np.abs(yy[:, None] - yy[None, :])).sum() / (2 * ww.sum() ** 2)
            np.testing.assert_allclose(whole.values[lev], gini, rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(
    arrays(
        np.float32,
        st.tuples(st.integers(1, 4), st.integers(1, 60)),
        elements=st.floats(width=32, allow_nan=True, allow_infinity=True)
        | st.sampled_from([0.0, -0.0, 1.5, -1.5, np.float32(1e-45), -np.inf]),
    )
)
def test_the_stable_order_is_numpys_stable_argsort(y):
    """float32 rows sorted as 64-bit keys come out in numpy's stable argsort order, ties,
    signed zeros, subnormals, infinities and NaN included (float64: argsort itself)."""
    from ensml.scores.uncertainty import stable_order

    np.testing.assert_array_equal(stable_order(y), np.argsort(y, axis=1, kind="stable"))
    y64 = y.astype(np.float64)
    np.testing.assert_array_equal(stable_order(y64), np.argsort(y64, axis=1, kind="stable"))
