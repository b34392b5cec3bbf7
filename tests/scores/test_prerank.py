"""Pre-rank (multivariate) rank histograms: hand-worked cases, calibration and miscalibration
that the univariate histograms see or miss, ties, seeds, NaN cases, dask, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy.sparse.csgraph import minimum_spanning_tree
from scipy.spatial.distance import cdist
from scipy.stats import chisquare

from ensml.errors import EnsmlError
from ensml.scores.calibration import histogram_flatness, rank_histogram
from ensml.scores.prerank import PRERANK_METHODS, _mst_lengths, prerank_histogram, prerank_ranks

OVER = ("latitude", "longitude")

# Members x1 = (0, 3), x2 = (2, 0) and four observations, worked by hand (M = 2, D = 2).
# rank_l = #{values <= x^l} among the 3 in component l; average pre-rank = sum_l rank_l (D times
# the mean); band depth = sum_l [rank_l (3 - rank_l) + (rank_l - 1)], i.e. 2, 3, 2 for rank 1, 2, 3;
# MST of 2 points = their distance, so rho(y) = |x1 - x2| = sqrt(13) = 3.606, rho(x1) = |y - x2|,
# rho(x2) = |y - x1|. The observation's rank is 1 + #{members below} (+ a random share of ties).
MEMBERS = [[0.0, 3.0], [2.0, 0.0]]
HAND = [
    # y = (1, 2.5): means y 1.75, x1 1.5, x2 1.0 -> 3. Component ranks (x1, y, x2) = (1, 2, 3) and
    # (x2, y, x1) = (1, 2, 3): sums y 4, x1 4, x2 4 -> all tie -> {1, 2, 3}. Band depth y 3+3 = 6,
    # x1 2+2 = 4, x2 2+2 = 4 -> 3. MST: rho(x1) = |(1,2.5)-(2,0)| = sqrt(7.25) = 2.69,
    # rho(x2) = |(1,2.5)-(0,3)| = sqrt(1.25) = 1.12 < 3.606 -> 3.
    ([1.0, 2.5], {"area_mean": {3}, "average": {1, 2, 3}, "band_depth": {3}, "mst": {3}}),
    # y = (5, 5): means y 5 -> 3. Ranks (x1, x2, y) = (1, 2, 3), (x2, x1, y) = (1, 2, 3): sums y 6,
    # x1 3, x2 3 -> 3. Band depth y 2+2 = 4, x1 2+3 = 5, x2 3+2 = 5 -> 1. MST: rho(x1) =
    # |(5,5)-(2,0)| = sqrt(34) = 5.83, rho(x2) = |(5,5)-(0,3)| = sqrt(29) = 5.39, both > 3.606 -> 1.
    ([5.0, 5.0], {"area_mean": {3}, "average": {3}, "band_depth": {1}, "mst": {1}}),
    # y = (-0.5, 4): means y 1.75 -> 3. Ranks (y, x1, x2) = (1, 2, 3), (x2, x1, y) = (1, 2, 3):
    # sums 4, 4, 4 -> {1, 2, 3}. Band depth y 2+2 = 4, x1 3+3 = 6, x2 2+2 = 4 -> y ties x2 -> {1, 2}.
    # MST: rho(x1) = |(-0.5,4)-(2,0)| = sqrt(22.25) = 4.72, rho(x2) = |(-0.5,4)-(0,3)| = 1.12 -> 2.
    ([-0.5, 4.0], {"area_mean": {3}, "average": {1, 2, 3}, "band_depth": {1, 2}, "mst": {2}}),
    # y = (-1, -1): mean -1 -> 1. Ranks (y, x1, x2) = (1, 2, 3), (y, x2, x1) = (1, 2, 3): sums y 2,
    # x1 5, x2 5 -> 1. Band depth y 2+2 = 4, x1 3+2 = 5, x2 2+3 = 5 -> 1. MST: rho(x1) =
    # |(-1,-1)-(2,0)| = sqrt(10) = 3.16 < 3.606 < rho(x2) = |(-1,-1)-(0,3)| = sqrt(17) = 4.12 -> 2.
    ([-1.0, -1.0], {"area_mean": {1}, "average": {1}, "band_depth": {1}, "mst": {2}}),
]


@pytest.mark.parametrize("method", PRERANK_METHODS)
def test_hand_worked_m2_d2(method):
    obs = np.array([y for y, _ in HAND])
    fcst = np.broadcast_to(np.array(MEMBERS), (len(HAND), 2, 2))
    for seed in range(20):  # the tied cases may land anywhere among their allowed ranks
        ranks = prerank_ranks(fcst, obs, method, seed=seed)
        assert ranks.dtype == np.int64
        for rank, (_, want) in zip(ranks, HAND):
            assert int(rank) in want[method], (method, seed, rank)


def test_ties_are_split_uniformly_and_seeded():
    # observation 0 of HAND repeated: its average pre-rank ties with both members
    n = 6000
    obs = np.tile(HAND[0][0], (n, 1))
    fcst = np.broadcast_to(np.array(MEMBERS), (n, 2, 2))
    a = prerank_ranks(fcst, obs, "average", seed=3)
    np.testing.assert_array_equal(a, prerank_ranks(fcst, obs, "average", seed=3))
    assert not np.array_equal(a, prerank_ranks(fcst, obs, "average", seed=4))
    counts = np.bincount(a, minlength=4)[1:]
    assert counts.sum() == n and np.all(np.abs(counts - n / 3) < 150)
    # the xarray form is seeded alike
    fx = xr.DataArray(fcst, dims=("case", "member", "x"))
    ox = xr.DataArray(obs, dims=("case", "x"))
    h1 = prerank_histogram(fx, ox, over="x", method="average", seed=5)
    h2 = prerank_histogram(fx, ox, over="x", method="average", seed=5)
    xr.testing.assert_identical(h1, h2)


def test_mst_with_repeated_points_and_against_scipy():
    # y = x1 = (0, 0), x2 = (3, 0), x3 = (3, 4): rho(y) = MST{x1, x2, x3} = 3 + 4 = 7 = rho(x1);
    # rho(x2) = MST{y, x1, x3} = 0 + 5 = 5; rho(x3) = MST{y, x1, x2} = 0 + 3 = 3. The zero edge
    # y-x1 counts (scipy's csgraph would read it as "no edge"): the observation ties x1 at the
    # top -> rank 3 or 4, each about half the time.
    n = 2000
    fcst = np.broadcast_to(np.array([[0.0, 0.0], [3.0, 0.0], [3.0, 4.0]]), (n, 3, 2))
    obs = np.zeros((n, 2))
    ranks = prerank_ranks(fcst, obs, "mst", seed=0)
    assert set(np.unique(ranks)) == {3, 4} and abs(np.mean(ranks == 3) - 0.5) < 0.05
    # tie-free points: Prim's lengths match scipy's minimum_spanning_tree
    rng = np.random.default_rng(1)
    pts = rng.normal(size=(20, 7, 3))
    dist = np.stack([cdist(p, p) for p in pts])
    ref = [minimum_spanning_tree(d).sum() for d in dist]
    np.testing.assert_allclose(_mst_lengths(dist), ref, rtol=1e-12)
    np.testing.assert_array_equal(_mst_lengths(dist[:, :1, :1]), 0.0)


def _field(n: int, m: int, seed: int, corr_obs: float, corr_mem: float, spread: float = 1.0):
    """(init_time n, member m, latitude 2, longitude 3) members and observation: a common random
    mean per case plus N(0, C) noise on the D = 6 components, C_ij = corr^|i - j| (the members
    with ``corr_mem`` and scaled by ``spread``, the observation with ``corr_obs``)."""
    rng = np.random.default_rng(seed)
    d = 6
    lag = np.abs(np.arange(d)[:, None] - np.arange(d))
    chol_obs = np.linalg.cholesky(corr_obs**lag)
    chol_mem = np.linalg.cholesky(corr_mem**lag)
    mu = rng.normal(scale=2.0, size=(n, 1, 1))
    mem = mu + spread * rng.normal(size=(n, m, d)) @ chol_mem.T
    y = mu[:, 0] + rng.normal(size=(n, d)) @ chol_obs.T
    coords = {"init_time": np.arange(n), "latitude": [10.0, 0.0], "longitude": [0.0, 1.0, 2.0]}
    fcst = xr.DataArray(
        mem.reshape(n, m, 2, 3),
        dims=("init_time", "member", *OVER),
        coords={**coords, "member": np.arange(m)},
    )
    obs = xr.DataArray(y.reshape(n, 2, 3), dims=("init_time", *OVER), coords=coords)
    return fcst, obs


def _p(h: xr.DataArray) -> float:
    return float(chisquare(h.values).pvalue)


def _u_shaped(h: xr.DataArray) -> bool:
    v = h.values
    middle = v[1:-1].mean()
    return bool(v[0] > 2 * middle and v[-1] > 2 * middle)


@pytest.mark.parametrize("method", PRERANK_METHODS)
def test_calibrated_correlated_ensemble_is_flat(method):
    fcst, obs = _field(2000, 9, seed=11, corr_obs=0.8, corr_mem=0.8)
    h = prerank_histogram(fcst, obs, over=OVER, method=method, seed=2)
    assert h.dims == ("rank",) and h["rank"].values.tolist() == list(range(10))
    assert float(h.sum()) == 2000 and h.name == "prerank_histogram" and h.attrs["units"] == "1"
    assert _p(h) > 0.001, h.values
    # expected flatness of a calibrated histogram: about sqrt(2 (B - 1) / (pi N)) = 0.048
    assert float(histogram_flatness(h)) < 2 * np.sqrt(2 * 9 / (np.pi * 2000))


@pytest.mark.parametrize("method", ["area_mean", "average"])
def test_under_dispersed_ensemble_is_u_shaped(method):
    fcst, obs = _field(2000, 9, seed=12, corr_obs=0.8, corr_mem=0.8, spread=0.5)
    h = prerank_histogram(fcst, obs, over=OVER, method=method)
    assert _u_shaped(h), h.values


def test_under_dispersed_ensemble_band_depth_and_mst_fill_low_ranks():
    # an outlying observation has a low band depth and leaves the shortest tree behind
    fcst, obs = _field(2000, 9, seed=12, corr_obs=0.8, corr_mem=0.8, spread=0.5)
    for method in ("band_depth", "mst"):
        h = prerank_histogram(fcst, obs, over=OVER, method=method).values
        assert h[0] > 3 * h[1:].mean(), (method, h)


def test_over_dispersed_ensemble_shapes():
    # a central observation: a ∩ shape for the mean and average rank, high depth, a long tree left
    fcst, obs = _field(2000, 9, seed=12, corr_obs=0.8, corr_mem=0.8, spread=1.5)
    for method in ("area_mean", "average"):
        h = prerank_histogram(fcst, obs, over=OVER, method=method).values
        assert h[0] < 0.6 * h[4:6].mean() and h[-1] < 0.6 * h[4:6].mean(), (method, h)
    for method in ("band_depth", "mst"):
        h = prerank_histogram(fcst, obs, over=OVER, method=method).values
        assert h[-1] > 3 * h[0] and np.all(np.diff(h[::3]) > 0), (method, h)


def test_wrong_correlation_is_seen_only_by_multivariate_ranks():
    # right margins (N(mu, 1) for members and truth), but independent members and a strongly
    # correlated truth: every univariate histogram is flat, the multivariate ones are not.
    fcst, obs = _field(3000, 9, seed=13, corr_obs=0.95, corr_mem=0.0)
    for lat in obs.latitude.values:
        for lon in obs.longitude.values:
            point = {"latitude": lat, "longitude": lon}
            assert _p(rank_histogram(fcst.sel(point), obs.sel(point))) > 0.001, point
    for method in PRERANK_METHODS:
        h = prerank_histogram(fcst, obs, over=OVER, method=method)
        assert _p(h) < 1e-6, (method, h.values)
    # the truth's area mean varies more than the members': a ∪ shape, as is the average rank's
    assert _u_shaped(prerank_histogram(fcst, obs, over=OVER, method="area_mean"))
    assert _u_shaped(prerank_histogram(fcst, obs, over=OVER, method="average"))


@pytest.mark.parametrize("method", ["average", "area_mean"])
def test_one_component_is_the_univariate_rank_histogram(method):
    rng = np.random.default_rng(4)
    fcst = xr.DataArray(rng.normal(size=(500, 7, 1)), dims=("x", "member", "level"))
    obs = xr.DataArray(rng.normal(size=(500, 1)) * 1.3, dims=("x", "level"))
    h = prerank_histogram(fcst, obs, over="level", method=method, preserve_dims=None)
    ref = rank_histogram(fcst.isel(level=0), obs.isel(level=0))
    np.testing.assert_array_equal(h.values, ref.values)
    xr.testing.assert_equal(h["rank"], ref["rank"])
    ranks = prerank_ranks(fcst.values, obs.values, method)
    below = (fcst.values[:, :, 0] < obs.values).sum(axis=1)
    np.testing.assert_array_equal(ranks, below + 1)


def test_area_mean_weights_change_the_rank():
    # members x1 = (2, 0), x2 = (0, 2) over latitude; y = (1.2, 1.2). Equal weights: means 1, 1 and
    # 1.2 -> rank 3 (r = 2). Latitude weights (3, 1): x1 (6 + 0) / 4 = 1.5, x2 (0 + 2) / 4 = 0.5,
    # y 1.2 -> rank 2 (r = 1).
    fcst = xr.DataArray(
        [[[2.0], [0.0]], [[0.0], [2.0]]],
        dims=("member", "latitude", "longitude"),
        coords={"latitude": [45, 0]},
    )
    obs = xr.DataArray([[1.2], [1.2]], dims=("latitude", "longitude"), coords={"latitude": [45, 0]})
    plain = prerank_histogram(fcst, obs, over=OVER, method="area_mean")
    assert plain.values.tolist() == [0, 0, 1]
    w = xr.DataArray([3.0, 1.0], dims="latitude", coords={"latitude": [45, 0]})
    weighted = prerank_histogram(fcst, obs, over=OVER, method="area_mean", component_weights=w)
    assert weighted.values.tolist() == [0, 1, 0]
    f, o = fcst.transpose("member", *OVER).values.reshape(1, 2, 2), obs.values.reshape(1, 2)
    assert prerank_ranks(f, o, "area_mean", component_weights=np.array([3.0, 1.0])).tolist() == [2]


def test_nan_cases_left_out_and_preserve_dims():
    fcst, obs = _field(6, 4, seed=5, corr_obs=0.5, corr_mem=0.5)
    fcst = fcst.expand_dims(lead_time=[0, 1]).copy()
    obs = obs.expand_dims(lead_time=[0, 1]).copy()
    fcst[0, 0, 1, 0, 2] = np.nan  # lead 0, case 0, one member's component
    obs[0, 1, 1, 1] = np.nan  # lead 0, case 1, one observed component
    obs[1] = np.nan  # lead 1: no valid case
    for method in PRERANK_METHODS:
        h = prerank_histogram(fcst, obs, over=OVER, method=method, preserve_dims="lead_time")
        assert h.dims == ("lead_time", "rank")
        assert float(h.sel(lead_time=0).sum()) == 4
        assert h.sel(lead_time=1).isnull().all()  # NaN, not zeros
    f = fcst.isel(lead_time=0).transpose("init_time", "member", *OVER).values.reshape(6, 4, 6)
    ranks = prerank_ranks(f, obs.isel(lead_time=0).values.reshape(6, 6), "band_depth")
    assert ranks[0] == 0 and ranks[1] == 0 and np.all((ranks[2:] >= 1) & (ranks[2:] <= 5))


def test_dask_matches_numpy_without_ties():
    fcst, obs = _field(300, 5, seed=6, corr_obs=0.7, corr_mem=0.7)
    for method in ("area_mean", "mst"):  # continuous pre-ranks: no ties, so the draws do not matter
        eager = prerank_histogram(fcst, obs, over=OVER, method=method)
        lazy = prerank_histogram(
            fcst.chunk(init_time=100, latitude=1), obs.chunk(init_time=70), over=OVER, method=method
        )
        assert lazy.chunks is not None
        xr.testing.assert_equal(eager, lazy.compute())


def test_one_member_and_one_case():
    fcst, obs = _field(1, 1, seed=7, corr_obs=0.5, corr_mem=0.5)
    for method in PRERANK_METHODS:
        h = prerank_histogram(fcst.isel(init_time=0), obs.isel(init_time=0), over=OVER, method=method)
        assert h.dims == ("rank",) and h.sizes["rank"] == 2 and float(h.sum()) == 1


def test_bad_inputs():
    fcst, obs = _field(4, 3, seed=8, corr_obs=0.5, corr_mem=0.5)
    with pytest.raises(
        EnsmlError, match=r"unknown method 'energy' \(known: area_mean, average, band_depth, mst\)"
    ):
        prerank_histogram(fcst, obs, over=OVER, method="energy")
    with pytest.raises(EnsmlError, match="over names level, not dims of the observation"):
        prerank_histogram(fcst, obs, over=("latitude", "level"), method="mst")
    with pytest.raises(EnsmlError, match="over must not contain the member dim 'member'"):
        prerank_histogram(fcst, obs, over=("member", "latitude"), method="mst")
    with pytest.raises(EnsmlError, match="over must name the dims"):
        prerank_histogram(fcst, obs, over=(), method="mst")
    with pytest.raises(EnsmlError, match="forecast has no members"):
        prerank_histogram(fcst.isel(member=slice(0, 0)), obs, over=OVER, method="average")
    with pytest.raises(EnsmlError, match="infinite"):
        prerank_histogram(fcst, obs.where(obs.init_time != 2, np.inf), over=OVER, method="average")
    w = xr.DataArray([1.0, 2.0], dims="latitude", coords={"latitude": [10.0, 0.0]})
    with pytest.raises(EnsmlError, match="component_weights apply to method 'area_mean' only"):
        prerank_histogram(fcst, obs, over=OVER, method="mst", component_weights=w)
    with pytest.raises(EnsmlError, match="weights are over the components"):
        prerank_histogram(
            fcst, obs, over=OVER, method="area_mean", component_weights=w.expand_dims(init_time=obs.init_time)
        )
    with pytest.raises(EnsmlError, match="weights are all 0"):
        prerank_histogram(fcst, obs, over=OVER, method="area_mean", component_weights=w * 0)
    with pytest.raises(EnsmlError, match="at least 1 member"):
        prerank_ranks(np.zeros((3, 0, 2)), np.zeros((3, 2)), "average")
    with pytest.raises(EnsmlError, match=r"expected fcst of shape \(N, M, D\)"):
        prerank_ranks(np.zeros((3, 2)), np.zeros((3, 2)), "average")
    with pytest.raises(EnsmlError, match="differ in N or D"):
        prerank_ranks(np.zeros((3, 2, 2)), np.zeros((3, 4)), "average")
    with pytest.raises(EnsmlError, match="unknown method"):
        prerank_ranks(np.zeros((3, 2, 2)), np.zeros((3, 2)), "depth")
    with pytest.raises(EnsmlError, match=r"weights have shape \(3,\), expected \(2,\)"):
        prerank_ranks(np.zeros((3, 2, 2)), np.zeros((3, 2)), "area_mean", component_weights=np.ones(3))
