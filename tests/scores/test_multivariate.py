"""Energy and variogram scores against scoringrules, the NaN policy, dask, reductions, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import scoringrules as sr
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import crps_ensemble
from ensml.scores import multivariate as mv
from ensml.scores.multivariate import energy_score, variogram_score

OVER = ("latitude", "longitude")
# scoringrules >= 0.8 names them es_ensemble / vs_ensemble (the old names warn)
SR_ES = getattr(sr, "es_ensemble", None) or sr.energy_score
SR_VS = getattr(sr, "vs_ensemble", None) or sr.variogram_score


@pytest.fixture
def field():
    """(init_time 3, lead_time 4, member 9, latitude 3, longitude 4) with correlated members."""
    rng = np.random.default_rng(7)
    shape = (3, 4, 9, 3, 4)
    fc = rng.normal(size=shape) + rng.normal(size=(*shape[:3], 1, 1))
    coords = {
        "init_time": np.array(["2020-01-01", "2020-01-02", "2020-01-03"], dtype="datetime64[ns]"),
        "lead_time": np.arange(4) * np.timedelta64(6, "h"),
        "member": np.arange(9),
        "latitude": [50.0, 49.0, 48.0],
        "longitude": [0.0, 1.0, 2.0, 3.0],
    }
    dims = ("init_time", "lead_time", "member", "latitude", "longitude")
    fcst = xr.DataArray(fc, dims=dims, coords=coords, attrs={"units": "K"})
    obs = xr.DataArray(
        rng.normal(size=(3, 4, 3, 4)),
        dims=("init_time", "lead_time", "latitude", "longitude"),
        coords={k: v for k, v in coords.items() if k != "member"},
        attrs={"units": "K"},
    )
    return fcst, obs


def _sr_layout(fcst: xr.DataArray, obs: xr.DataArray, over: tuple[str, ...]):
    """(cases..., M, D) forecast and (cases..., D) observation for scoringrules' default axes."""
    cases = [d for d in obs.dims if d not in over]
    f = fcst.transpose(*cases, "member", *over).values
    o = obs.transpose(*cases, *over).values
    d = int(np.prod([obs.sizes[x] for x in over]))
    return f.reshape((*f.shape[: len(cases) + 1], d)), o.reshape((*o.shape[: len(cases)], d)), cases


@pytest.mark.parametrize("fair", [False, True])
@pytest.mark.parametrize("over", [OVER, ("lead_time",)])
def test_energy_vs_scoringrules(field, fair, over):
    fcst, obs = field
    got = energy_score(fcst, obs, over=over, fair=fair, preserve_dims="all")
    f, o, cases = _sr_layout(fcst, obs, over)
    ref = SR_ES(o, f, estimator="fair" if fair else "nrg")
    assert got.dims == tuple(cases)
    np.testing.assert_allclose(got.values, ref, rtol=1e-12, atol=0)
    assert got.name == "energy_score" and got.attrs["units"] == "K"


@pytest.mark.parametrize("p", [0.5, 1.0, 1.5])
@pytest.mark.parametrize("with_weights", [False, True])
@pytest.mark.parametrize("fair", [False, True])
def test_variogram_vs_scoringrules(field, p, with_weights, fair):
    fcst, obs = field
    d = 12
    # inverse-distance pair weights, deliberately not symmetric: only w_ij + w_ji matters
    lat, lon = np.meshgrid(obs.latitude.values, obs.longitude.values, indexing="ij")
    dist = np.hypot(lat.ravel()[:, None] - lat.ravel(), lon.ravel()[:, None] - lon.ravel())
    w = (1.0 / (1.0 + dist)) * np.linspace(0.5, 1.5, d)[:, None] if with_weights else None
    got = variogram_score(fcst, obs, over=OVER, p=p, pair_weights=w, fair=fair, preserve_dims="all")
    f, o, _ = _sr_layout(fcst, obs, OVER)
    ref = SR_VS(o, f, w, p=p, estimator="fair" if fair else "nrg")
    np.testing.assert_allclose(got.values, ref, rtol=1e-12, atol=0)
    assert got.attrs["units"] == ("K" if p == 0.5 else f"K^{2 * p:g}")


def test_vector_order_and_layout_do_not_matter(field):
    fcst, obs = field
    a = variogram_score(fcst, obs, over=OVER, p=1.0, preserve_dims="all")
    b = variogram_score(
        fcst.transpose("longitude", "member", "lead_time", "latitude", "init_time"),
        obs.transpose("latitude", "init_time", "longitude", "lead_time"),
        over=("longitude", "latitude"),
        p=1.0,
        preserve_dims="all",
    )
    xr.testing.assert_allclose(a, b.transpose(*a.dims), rtol=1e-12)


def test_one_component_energy_is_crps(field):
    fcst, obs = field
    es = energy_score(fcst, obs, over="lead_time", preserve_dims="all")
    one = energy_score(
        fcst.isel(lead_time=[1]), obs.isel(lead_time=[1]), over="lead_time", preserve_dims="all"
    )
    crps = crps_ensemble(fcst.isel(lead_time=1), obs.isel(lead_time=1), preserve_dims="all")
    np.testing.assert_allclose(one.values, crps.transpose(*one.dims).values, rtol=1e-12)
    assert es.shape == one.shape


def test_float32_geopotential_accuracy():
    rng = np.random.default_rng(1)
    f64 = 5.5e4 + 50 * rng.normal(size=(20, 11, 16)) + 200 * rng.normal(size=(20, 1, 1))
    o64 = 5.5e4 + 50 * rng.normal(size=(20, 16))
    f32, o32 = f64.astype(np.float32), o64.astype(np.float32)
    fc = xr.DataArray(f32, dims=("case", "member", "x"))
    ob = xr.DataArray(o32, dims=("case", "x"))
    f_ref, o_ref = f32.astype(np.float64), o32.astype(np.float64)  # same values, exact reference
    es = energy_score(fc, ob, over="x", preserve_dims="all")
    np.testing.assert_allclose(es, SR_ES(o_ref, f_ref), rtol=1e-12)
    vs = variogram_score(fc, ob, over="x", preserve_dims="all")
    np.testing.assert_allclose(vs, SR_VS(o_ref, f_ref), rtol=1e-12)
    assert es.dtype == np.float64


def test_nan_member_and_nan_observation_component(field):
    fcst, obs = field
    fc = fcst.copy(deep=True)
    ob = obs.copy(deep=True)
    fc[0, 0, 2, 1, 1] = np.nan  # member 2 of case (0, 0) has one NaN component: dropped
    ob[0, 1, 2, 3] = np.nan  # case (0, 1): component (2, 3) leaves the vector
    fc[0, 1, 4, 2, 3] = np.nan  # ... so member 4's NaN there does not drop member 4
    fc[1, 0] = np.nan  # case (1, 0): no valid member
    ob[2, 2] = np.nan  # case (2, 2): nothing observed
    f, o, _ = _sr_layout(fcst, obs, OVER)  # clean arrays (cases..., M, D)
    for score, ref_fn in (
        (energy_score, lambda o_, f_: SR_ES(o_, f_)),
        (lambda *a, **k: variogram_score(*a, p=1.0, **k), lambda o_, f_: SR_VS(o_, f_, p=1.0)),
    ):
        got = score(fc, ob, over=OVER, preserve_dims="all").values
        np.testing.assert_allclose(got[0, 0], ref_fn(o[0, 0], np.delete(f[0, 0], 2, axis=0)), rtol=1e-12)
        keep = np.arange(12) != 2 * 4 + 3
        np.testing.assert_allclose(got[0, 1], ref_fn(o[0, 1, keep], f[0, 1][:, keep]), rtol=1e-12)
        assert np.isnan(got[1, 0]) and np.isnan(got[2, 2])
        np.testing.assert_allclose(got[0, 2], ref_fn(o[0, 2], f[0, 2]), rtol=1e-12)
        # reductions leave missing cases out of the mean
        mean = score(fc, ob, over=OVER)
        np.testing.assert_allclose(mean, np.nanmean(got), rtol=1e-12)


def test_too_few_valid_members_or_components():
    fc = xr.DataArray([[[1.0, 2.0], [np.nan, 0.0]], [[1.0, 2.0], [3.0, 1.0]]], dims=("case", "member", "x"))
    ob = xr.DataArray([[0.0, 1.0], [np.nan, 1.0]], dims=("case", "x"))
    fair = energy_score(fc, ob, over="x", fair=True, preserve_dims="all").values
    assert np.isnan(fair[0])  # one valid member: no pair for the fair estimator
    assert np.isfinite(energy_score(fc, ob, over="x", preserve_dims="all").values).all()
    vs = variogram_score(fc, ob, over="x", preserve_dims="all").values
    assert np.isfinite(vs[0]) and np.isnan(vs[1])  # one observed component: no pair


def test_dask_equals_numpy_and_stays_lazy(field):
    fcst, obs = field
    chunked_f = fcst.chunk({"init_time": 1, "latitude": 2, "member": 4})  # vector/member dims rechunked
    for kw, fn in (
        ({}, energy_score),
        ({"p": 0.5}, variogram_score),
        ({"fair": True, "p": 1.0}, variogram_score),
    ):
        ref = fn(fcst, obs, over=OVER, preserve_dims="lead_time", **kw)
        for f, o in ((chunked_f, obs), (chunked_f, obs.chunk({"lead_time": 2})), (fcst, obs.chunk())):
            lazy = fn(f, o, over=OVER, preserve_dims="lead_time", **kw)
            assert lazy.chunks is not None
            xr.testing.assert_allclose(lazy.compute(), ref, rtol=1e-12)


def test_dask_inf_raises_when_computed(field):
    fcst, obs = field
    fc = fcst.copy(deep=True)
    fc[1, 1, 1, 1, 1] = np.inf
    lazy = energy_score(fc.chunk({"init_time": 1}), obs, over=OVER)
    with pytest.raises(EnsmlError, match=r"^energy_score: forecast has 1 infinite value in one dask chunk"):
        lazy.compute()


def test_reduce_preserve_and_weights(field):
    fcst, obs = field
    point = energy_score(fcst, obs, over=OVER, preserve_dims="all")
    xr.testing.assert_allclose(
        energy_score(fcst, obs, over=OVER, reduce_dims="init_time"), point.mean("init_time")
    )
    xr.testing.assert_allclose(
        energy_score(fcst, obs, over=OVER, preserve_dims="init_time"), point.mean("lead_time")
    )
    w = xr.DataArray([1.0, 0.0, 2.0, 1.0], dims="lead_time", coords={"lead_time": obs.lead_time})
    got = variogram_score(fcst, obs, over=OVER, weights=w)
    pv = variogram_score(fcst, obs, over=OVER, preserve_dims="all")
    np.testing.assert_allclose(got, float((pv * w).sum() / (w.sum() * 3)), rtol=1e-12)
    assert got.dims == ()


def _one_line(exc: pytest.ExceptionInfo, func: str) -> None:
    msg = str(exc.value)
    assert msg.startswith(f"{func}: ") and "\n" not in msg


@pytest.mark.parametrize(
    ("fn", "change", "kw", "needle"),
    [
        (energy_score, None, {"over": ("latitude", "height")}, "height"),
        (energy_score, None, {"over": ()}, "over must name"),
        (energy_score, None, {"over": ("member", "latitude")}, "member dim"),
        (energy_score, None, {"over": ("latitude", "latitude")}, "twice"),
        (energy_score, "obs_extra_dim", {"over": OVER}, "do not match"),
        (energy_score, "no_overlap", {"over": OVER}, "share no coordinates along 'longitude'"),
        (energy_score, "no_member", {"over": OVER}, "no member dimension"),
        (energy_score, "inf_obs", {"over": OVER}, "observation has 1 infinite value"),
        (energy_score, "one_member", {"over": OVER, "fair": True}, "at least 2 members"),
        (energy_score, None, {"over": OVER, "reduce_dims": "latitude"}, "dim of the vector"),
        (energy_score, None, {"over": OVER, "preserve_dims": "member"}, "preserve_dims"),
        (energy_score, "weights_over", {"over": OVER}, "weights are over the cases"),
        (energy_score, "weights_size", {"over": OVER}, "weights have size 2 along 'lead_time'"),
        (variogram_score, None, {"over": OVER, "p": 0.0}, "p must be a finite number > 0"),
        (variogram_score, None, {"over": OVER, "p": -1}, "p must be a finite number > 0"),
        (variogram_score, None, {"over": OVER, "p": np.nan}, "p must be a finite number > 0"),
        (variogram_score, None, {"over": OVER, "p": "half"}, "p must be a number"),
        (variogram_score, None, {"over": OVER, "pair_weights": np.ones((4, 4))}, r"expected \(12, 12\)"),
        (variogram_score, None, {"over": OVER, "pair_weights": -np.ones((12, 12))}, ">= 0"),
        (variogram_score, None, {"over": OVER, "pair_weights": np.full((12, 12), np.nan)}, "NaN or infinite"),
        (variogram_score, "one_component", {"over": "latitude"}, "has 1 component"),
    ],
)
def test_bad_inputs(field, fn, change, kw, needle):
    fcst, obs = field
    w = None
    if change == "obs_extra_dim":
        obs = obs.expand_dims(level=[500.0])
    elif change == "no_overlap":
        obs = obs.assign_coords(longitude=obs.longitude + 10.0)
    elif change == "no_member":
        fcst = fcst.rename(member="number")
    elif change == "inf_obs":
        obs = obs.copy(deep=True)
        obs[0, 0, 0, 0] = -np.inf
    elif change == "one_member":
        fcst = fcst.isel(member=[0])
    elif change == "weights_over":
        w = xr.DataArray(np.ones(3), dims="latitude", coords={"latitude": obs.latitude})
    elif change == "weights_size":
        w = xr.DataArray(np.ones(2), dims="lead_time")
    elif change == "one_component":
        fcst, obs = fcst.isel(latitude=[0]), obs.isel(latitude=[0])
    with pytest.raises(EnsmlError, match=needle) as exc:
        fn(fcst, obs, weights=w, **kw)
    _one_line(exc, fn.__name__)


def test_impossible_vector_length_refused(field, monkeypatch):
    fcst, obs = field
    monkeypatch.setattr(mv, "MAX_VARIOGRAM_PAIRS", 65)  # D = 12 gives 66 pairs
    with pytest.raises(EnsmlError, match="66 pairs per case, over the limit") as exc:
        variogram_score(fcst, obs, over=OVER)
    _one_line(exc, "variogram_score")
    monkeypatch.setattr(mv, "MAX_VARIOGRAM_PAIRS", 66)
    assert np.isfinite(variogram_score(fcst, obs, over=OVER))
