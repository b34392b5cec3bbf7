"""The one NaN/Inf policy of ``ensml.scores`` (see its module docstring), score by score and case by case.

Every ensemble score runs on the same 4 points (members along ``member``), each scored with
``preserve_dims="x"`` and checked against an independent reference (properscoring,
scoringrules or a hand computation) on the valid members:

* x=0: 4 valid members;  x=1: one NaN member;  x=2: every member NaN;  x=3: NaN observation.

Cases: a NaN member is dropped (or, for the rank histogram, makes the point missing); an
all-NaN point and a NaN observation give NaN, and the mean over x is that of the valid points;
an infinite member or observation is a one-line EnsmlError naming the argument and the count.
"""

from __future__ import annotations

from collections.abc import Callable

import dask.array as da
import numpy as np
import properscoring as ps
import pytest
import scoringrules as sr
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import (
    bootstrap_ci,
    brier_score,
    crps_ensemble,
    crps_ensemble_array,
    crps_gaussian,
    crps_gaussian_xr,
    ensemble_mean_bias,
    ensemble_mean_rmse,
    exceedance_probability,
    rank_histogram,
    reduce_score,
    reliability,
    skill_score,
    spread_skill_ratio,
    twcrps_ensemble,
)
from ensml.scores.crps import crps_pointwise

NAN = np.nan
MEMBERS = np.array(
    [
        [0.0, 1.0, NAN, 2.0],
        [1.0, NAN, NAN, 3.0],
        [2.0, 2.0, NAN, 4.0],
        [4.0, 3.0, NAN, 5.0],
    ]
)  # (member, x)
OBS = np.array([1.5, 2.5, 0.0, NAN])
T = 1.75  # threshold of the probability scores
VALID = [0, 1]  # points with a score


def _data() -> tuple[xr.DataArray, xr.DataArray]:
    return xr.DataArray(MEMBERS.copy(), dims=("member", "x")), xr.DataArray(OBS.copy(), dims="x")


def _valid(k: int) -> np.ndarray:
    x = MEMBERS[:, k]
    return x[~np.isnan(x)]


def _pointwise_ref(f: Callable[[np.ndarray, float], float]) -> np.ndarray:
    """Reference per point: ``f(valid members, obs)`` at the valid points, NaN elsewhere."""
    out = np.full(OBS.size, NAN)
    for k in VALID:
        out[k] = f(_valid(k), OBS[k])
    return out


def _ssr(x: np.ndarray, y: float) -> float:
    return float(np.sqrt(np.var(x, ddof=1)) / abs(x.mean() - y))


# score name -> (pointwise score with preserve_dims="x", reference per point)
SCORES: dict[str, tuple[Callable, np.ndarray]] = {
    "crps_ensemble": (
        lambda f, o: crps_ensemble(f, o, preserve_dims="x"),
        _pointwise_ref(lambda x, y: ps.crps_ensemble(y, x)),
    ),
    "crps_ensemble_fair": (
        lambda f, o: crps_ensemble(f, o, fair=True, preserve_dims="x"),
        _pointwise_ref(lambda x, y: float(sr.crps_ensemble(y, x, estimator="fair"))),
    ),
    "crps_pointwise": (
        lambda f, o: crps_pointwise(f, o),
        _pointwise_ref(lambda x, y: ps.crps_ensemble(y, x)),
    ),
    "crps_ensemble_array": (
        lambda f, o: xr.DataArray(crps_ensemble_array(f.values, o.values, axis=0), dims="x"),
        _pointwise_ref(lambda x, y: ps.crps_ensemble(y, x)),
    ),
    "twcrps_ensemble": (
        lambda f, o: twcrps_ensemble(f, o, T, preserve_dims="x"),
        _pointwise_ref(lambda x, y: float(sr.twcrps_ensemble(y, x, a=T, estimator="nrg"))),
    ),
    "brier_score": (
        lambda f, o: brier_score(f, o, T, preserve_dims="x").isel(threshold=0),
        _pointwise_ref(lambda x, y: ps.brier_score(float(y > T), (x > T).mean())),
    ),
    "exceedance_probability": (  # takes no observation: no observation cases
        lambda f, o: exceedance_probability(f, T),
        _pointwise_ref(lambda x, y: (x > T).mean()),
    ),
    "ensemble_mean_bias": (
        lambda f, o: ensemble_mean_bias(f, o, preserve_dims="x"),
        _pointwise_ref(lambda x, y: x.mean() - y),
    ),
    "ensemble_mean_rmse": (
        lambda f, o: ensemble_mean_rmse(f, o, preserve_dims="x"),
        _pointwise_ref(lambda x, y: abs(x.mean() - y)),
    ),
    "spread_skill_ratio": (
        lambda f, o: spread_skill_ratio(f, o, preserve_dims="x"),
        _pointwise_ref(_ssr),
    ),
}


@pytest.mark.parametrize("score", SCORES)
def test_nan_member_is_dropped(score):
    run, ref = SCORES[score]
    got = run(*_data())
    np.testing.assert_allclose(got[:2], ref[:2], rtol=1e-12)


@pytest.mark.parametrize("score", SCORES)
def test_all_nan_point_is_nan(score):
    run, _ = SCORES[score]
    assert np.isnan(run(*_data())[2])


@pytest.mark.parametrize("score", [s for s in SCORES if s != "exceedance_probability"])
def test_nan_observation_is_nan(score):
    run, _ = SCORES[score]
    assert np.isnan(run(*_data())[3])


@pytest.mark.parametrize("score", SCORES)
def test_inf_member_is_an_error(score):
    run, _ = SCORES[score]
    fc, obs = _data()
    fc[1, 0] = np.inf
    fc[0, 3] = -np.inf
    with pytest.raises(EnsmlError, match=r"forecast has 2 infinite values.*±Inf is refused$"):
        run(fc, obs)


@pytest.mark.parametrize("score", [s for s in SCORES if s != "exceedance_probability"])
def test_inf_observation_is_an_error(score):
    run, _ = SCORES[score]
    fc, obs = _data()
    obs[0] = -np.inf
    with pytest.raises(EnsmlError, match=r"observation has 1 infinite value\b"):
        run(fc, obs)


REDUCED = {
    "crps_ensemble": lambda fc, obs: crps_ensemble(fc, obs),
    "twcrps_ensemble": lambda fc, obs: twcrps_ensemble(fc, obs, T),
    "brier_score": lambda fc, obs: brier_score(fc, obs, T).isel(threshold=0),
    "ensemble_mean_bias": lambda fc, obs: ensemble_mean_bias(fc, obs),
    "ensemble_mean_rmse": lambda fc, obs: ensemble_mean_rmse(fc, obs) ** 2,
}


@pytest.mark.parametrize("score", REDUCED)
def test_reduction_is_the_mean_of_the_valid_points(score):
    ref = SCORES[score][1]
    expected = np.mean(ref[VALID] ** 2) if score == "ensemble_mean_rmse" else np.mean(ref[VALID])
    np.testing.assert_allclose(REDUCED[score](*_data()), expected, rtol=1e-12)
    fc, obs = _data()
    nothing = {"x": [2, 3]}  # a slice without a valid point: NaN, never 0
    assert np.isnan(REDUCED[score](fc.isel(nothing), obs.isel(nothing)))


# --- rank histogram: ranks among all M members, so any NaN member makes the point missing


def test_rank_histogram_nan_member_makes_the_point_missing():
    h = rank_histogram(*_data(), preserve_dims="x")
    assert h.dtype == np.float64
    assert h.sel(x=0).values.tolist() == [0, 0, 1, 0, 0]  # 1.5 above 0 and 1, below 2 and 4
    assert h.sel(x=1).isnull().all()


def test_rank_histogram_all_nan_point_is_nan_not_zeros():
    h = rank_histogram(*_data(), preserve_dims="x")
    assert h.sel(x=2).isnull().all()
    fc, obs = _data()
    assert rank_histogram(fc.isel(x=[1, 2, 3]), obs.isel(x=[1, 2, 3])).isnull().all()
    assert rank_histogram(fc, obs).values.tolist() == [0, 0, 1, 0, 0]


def test_rank_histogram_nan_observation_is_nan():
    h = rank_histogram(*_data(), preserve_dims="x")
    assert h.sel(x=3).isnull().all()


def test_rank_histogram_inf_member_is_an_error():
    fc, obs = _data()
    fc[3, 0] = np.inf
    with pytest.raises(
        EnsmlError, match=r"rank_histogram: forecast has 1 infinite value \(first at member=3, x=0\)"
    ):
        rank_histogram(fc, obs)


def test_rank_histogram_inf_observation_is_an_error():
    fc, obs = _data()
    obs[1] = np.inf
    with pytest.raises(EnsmlError, match="rank_histogram: observation has 1 infinite value"):
        rank_histogram(fc, obs)


# --- reliability: p over the valid members; counts NaN only where a slice has no valid point


def test_reliability_nan_member_is_dropped():
    rel = reliability(*_data(), T, n_bins=4, preserve_dims="x")
    # x=1: members 1, 2, 3 -> p = 2/3 (bin 2), observed 1 (2.5 > 1.75)
    np.testing.assert_allclose(rel.forecast_probability.sel(x=1, bin=2), 2 / 3)
    assert rel["count"].sel(x=1).values.tolist() == [0, 0, 1, 0]
    # x=0: members 0, 1, 2, 4 -> p = 1/2 (bin 2), observed 0
    assert rel.observed_frequency.sel(x=0, bin=2) == 0


def test_reliability_all_nan_point_is_nan():
    rel = reliability(*_data(), T, n_bins=4, preserve_dims="x")
    assert rel["count"].sel(x=2).isnull().all() and rel.forecast_probability.sel(x=2).isnull().all()
    pooled = reliability(*_data(), T, n_bins=4)
    assert pooled["count"].values.tolist() == [0, 0, 2, 0]


def test_reliability_nan_observation_is_nan():
    rel = reliability(*_data(), T, n_bins=4, preserve_dims="x")
    assert rel["count"].sel(x=3).isnull().all() and rel.observed_frequency.sel(x=3).isnull().all()


def test_reliability_inf_member_is_an_error():
    fc, obs = _data()
    fc[0, 1] = -np.inf
    with pytest.raises(EnsmlError, match="reliability: forecast has 1 infinite value"):
        reliability(fc, obs, T)


def test_reliability_inf_observation_is_an_error():
    fc, obs = _data()
    obs[0] = np.inf
    with pytest.raises(EnsmlError, match="reliability: observation has 1 infinite value"):
        reliability(fc, obs, T)


# --- Gaussian CRPS: the "members" are mu and sigma; NaN in any input is a missing point

MU, SIGMA, Y = np.array([0.0, 1.0, 2.0]), np.array([1.0, 0.5, 2.0]), np.array([0.3, -1.0, 2.5])
GAUSS_REF = ps.crps_gaussian(Y, MU, SIGMA)


def _gauss(case: str, value: float) -> tuple[np.ndarray, ...]:
    mu, sigma, y = MU.copy(), SIGMA.copy(), Y.copy()
    {"mu": mu, "sigma": sigma, "obs": y}[case][1] = value
    return mu, sigma, y


def _as_xr(*a: np.ndarray) -> list[xr.DataArray]:
    return [xr.DataArray(v, dims="x") for v in a]


def _torch_crps(*a: np.ndarray) -> np.ndarray:
    torch = pytest.importorskip("torch")
    return crps_gaussian(*(torch.as_tensor(v) for v in a)).numpy()


GAUSSIAN = {
    "crps_gaussian": lambda mu, s, y: crps_gaussian(mu, s, y),
    "crps_gaussian_xr": lambda mu, s, y: crps_gaussian_xr(*_as_xr(mu, s, y), preserve_dims="x").values,
    "crps_gaussian_torch": _torch_crps,
}


@pytest.mark.parametrize("score", GAUSSIAN)
@pytest.mark.parametrize("case", ["mu", "sigma", "obs"])
def test_gaussian_nan_input_is_a_missing_point(score, case):
    got = GAUSSIAN[score](*_gauss(case, NAN))
    assert np.isnan(got[1])
    np.testing.assert_allclose(got[[0, 2]], GAUSS_REF[[0, 2]], rtol=1e-12)
    if score == "crps_gaussian_xr":
        mean = crps_gaussian_xr(*_as_xr(*_gauss(case, NAN)))
        np.testing.assert_allclose(mean, GAUSS_REF[[0, 2]].mean(), rtol=1e-12)


@pytest.mark.parametrize("score", GAUSSIAN)
@pytest.mark.parametrize("case", ["mu", "sigma", "obs"])
def test_gaussian_inf_input_is_an_error(score, case):
    with pytest.raises(EnsmlError, match=rf"crps_gaussian\w*: {case} has 1 infinite value"):
        GAUSSIAN[score](*_gauss(case, np.inf if case != "mu" else -np.inf))


def test_gaussian_unchecked_loss_path_does_not_check():
    torch = pytest.importorskip("torch")
    mu, s, y = (torch.as_tensor(v) for v in _gauss("obs", np.inf))
    assert not torch.isfinite(crps_gaussian(mu, s, y, check=False)[1])  # the training loss: no sync


# --- scores of scores: skill_score, bootstrap_ci, reduce_score


def test_skill_score_nan_is_nan_and_inf_is_an_error():
    s = xr.DataArray([[1.0, NAN], [2.0, 4.0]], dims=("model", "level"), coords={"model": ["ml", "raw"]})
    ss = skill_score(s, "raw")
    np.testing.assert_allclose(ss.sel(model="ml").values, [0.5, NAN])
    with pytest.raises(
        EnsmlError, match=r"skill_score: score has 1 infinite value \(first at model=ml, level=1\)"
    ):
        skill_score(s.where(s.notnull(), np.inf), "raw")
    with pytest.raises(EnsmlError, match="skill_score: reference has 1 infinite value"):
        skill_score(s.sel(model="ml"), xr.DataArray([np.inf, 1.0], dims="level"))


def test_bootstrap_ci_skips_nan_and_refuses_inf():
    score = xr.DataArray([1.0, NAN, 3.0, 2.0], dims="init_time")
    ci = bootstrap_ci(score, n_resamples=200)
    np.testing.assert_allclose(ci.estimate, 2.0)
    with pytest.raises(EnsmlError, match="bootstrap_ci: score has 1 infinite value"):
        bootstrap_ci(score.fillna(np.inf))


def test_reduce_score_refuses_an_infinite_pointwise_score():
    with pytest.raises(EnsmlError, match="mine: the pointwise score has 1 infinite value"):
        reduce_score(xr.DataArray([1.0, np.inf]), func="mine")
    assert np.isnan(reduce_score(xr.DataArray([NAN, NAN], dims="x")))


# --- dask: the check is fused into the chunks and raises when computed


@pytest.mark.parametrize(
    "score", ["crps_ensemble", "ensemble_mean_rmse", "rank_histogram", "crps_gaussian_xr"]
)
def test_dask_inf_raises_at_compute(score):
    fc, obs = _data()
    fc[2, 1] = np.inf
    lazy_fc, lazy_obs = fc.chunk(x=2), obs.chunk(x=2)
    run = {
        "crps_ensemble": lambda: crps_ensemble(lazy_fc, lazy_obs),
        "ensemble_mean_rmse": lambda: ensemble_mean_rmse(lazy_fc, lazy_obs),
        "rank_histogram": lambda: rank_histogram(lazy_fc, lazy_obs),
        "crps_gaussian_xr": lambda: crps_gaussian_xr(
            lazy_fc.isel(member=2), xr.ones_like(lazy_obs), lazy_obs
        ),
    }[score]
    out = run()  # lazy: nothing raised yet
    assert isinstance(out.data, da.Array)
    with pytest.raises(EnsmlError, match=r"infinite value in one dask chunk"):
        out.compute()
    fc[2, 1] = NAN  # NaN is fine lazily too
    assert np.isfinite(crps_ensemble(fc.chunk(x=2), obs.chunk(x=2)).compute())


# --- the CRPS kernel finds an Inf in big blocks on every path without a pass over the input


@pytest.mark.parametrize("m", [3, 10, 20, 50, 100])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("fair", [False, True])
@pytest.mark.slow  # 20 cases of big blocks
def test_crps_kernel_inf_in_big_blocks(m, dtype, fair):
    rng = np.random.default_rng(m)
    fc = (5.5e4 + 300 * rng.standard_normal((5000, m))).astype(dtype)
    obs = (5.5e4 + 300 * rng.standard_normal(5000)).astype(dtype)
    fc[rng.random(fc.shape) < 0.02] = NAN
    fc[4001, m - 1] = np.inf
    fc[4321, 0] = -np.inf
    for parallel in (True, False):
        with pytest.raises(
            EnsmlError, match=rf"forecast has 2 infinite values \(first at index \(4001, {m - 1}\)\)"
        ):
            crps_ensemble_array(fc, obs, axis=-1, fair=fair, parallel=parallel)
        with pytest.raises(
            EnsmlError, match=rf"forecast has 2 infinite values \(first at index \({m - 1}, 4001\)\)"
        ):
            crps_ensemble_array(np.ascontiguousarray(fc.T), obs, axis=0, fair=fair, parallel=parallel)
    fc[[4001, 4321]] = 0.0
    obs[17] = -np.inf
    with pytest.raises(EnsmlError, match=r"observation has 1 infinite value \(first at index \(17,\)\)"):
        crps_ensemble_array(fc, obs, axis=-1, fair=fair)
