"""ECMWF's EFI and SOT: ECMWF's published values, earthkit-meteo on random and precipitation-like
inputs, hand-computed cases, the NaN/Inf policy and bad inputs."""

from __future__ import annotations

import json
from pathlib import Path

import earthkit.meteo.extreme.array as ek
import numpy as np
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.climate import climate_quantiles, model_climate
from ensml.scores.efi import extreme_forecast_index, reforecast_efi
from ensml.scores.sot import shift_of_tails

REFERENCE = json.loads((Path(__file__).with_name("ecmwf_extreme_reference.json")).read_text())
TOL = 1e-6


def _clim(values, **coords) -> xr.DataArray:
    return xr.DataArray(np.asarray(values, float), dims=(*coords, "quantile") if coords else "quantile")


def _ens(values) -> xr.DataArray:
    return xr.DataArray(np.asarray(values, float), dims="member")


def _ours(index: str, clim: xr.DataArray, ens: xr.DataArray, eps: float | None) -> xr.DataArray:
    if index == "efi":
        return extreme_forecast_index(ens, clim, eps=eps)
    return shift_of_tails(ens, clim, tail=index.removeprefix("sot_"), eps=eps)


@pytest.mark.parametrize(
    "ref", REFERENCE["expected"], ids=lambda r: f"{r['case']}-{r['index']}-eps{r['eps']}"
)
def test_ecmwf_published_values(ref):
    case = REFERENCE["cases"][ref["case"]]
    got = float(_ours(ref["index"], _clim(case["climate"]), _ens(case["ensemble"]), ref["eps"]))
    if ref["value"] is None:
        assert np.isnan(got)
    else:
        assert abs(got - ref["value"]) < TOL


def _random_case(rng, n=300, k=101, m=51):
    samples = rng.normal(size=(n, 2000)) * rng.uniform(0.5, 3, size=(n, 1))
    q = np.quantile(samples, np.linspace(0, 1, k), axis=1).T
    q += rng.normal(scale=0.01, size=q.shape)  # small inversions, as ECMWF's own M-climate has
    shift = rng.normal(scale=1.5, size=(n, 1))
    ens = rng.normal(size=(n, m)) * rng.uniform(0.3, 2, size=(n, 1)) + shift
    ens[::7, :5] = q[::7, 40:45]  # members equal to climate quantiles: F_f counts members <= q
    return q, ens


def _precip_case(rng, n=300, k=101, m=51):
    dry = rng.uniform(0.0, 0.97, size=(n, 1)) * (rng.uniform(size=(n, 1)) > 0.25)
    samples = rng.gamma(0.7, 3e-3, size=(n, 3000)) * (rng.uniform(size=(n, 3000)) > dry)
    q = np.quantile(samples, np.linspace(0, 1, k), axis=1).T  # many zero percentiles
    q[:5] = 0.0  # an all-dry climate
    wet = rng.uniform(size=(n, 1))
    ens = rng.gamma(0.8, 6e-3, size=(n, m)) * (rng.uniform(size=(n, m)) < wet)
    ens[::5, ::3] = 5e-5  # members between 0 and eps
    return q, ens


def _compare(q, ens, eps):
    clim = xr.DataArray(q, dims=("x", "quantile"))
    fc = xr.DataArray(ens, dims=("x", "member"))
    ek_eps = {} if eps is None else {"eps": eps}
    diffs = {}
    ref = ek.efi(q.T, ens.T, **({"eps": eps} if eps else {}))
    diffs["efi"] = (extreme_forecast_index(fc, clim, eps=eps).values, ref)
    with np.errstate(divide="ignore", invalid="ignore"):
        for tail, perc in (("upper", 90), ("lower", 10)):
            ref = ek.sot(q.T, ens.T, perc, **ek_eps)
            diffs[f"sot_{tail}"] = (shift_of_tails(fc, clim, tail=tail, eps=eps).values, ref)
    for name, (ours, ref) in diffs.items():
        np.testing.assert_array_equal(np.isnan(ours), np.isnan(ref), err_msg=name)
        assert np.isfinite(ours).sum() > 20, name
        assert np.nanmax(np.abs(ours - ref)) < TOL, name
    return diffs


@pytest.mark.parametrize("eps", [None, 1e-4])
def test_agrees_with_earthkit_on_random_inputs(eps):
    diffs = _compare(*_random_case(np.random.default_rng(11)), eps)
    if eps is None:
        assert np.ptp(diffs["efi"][0]) > 1.5  # the cases span most of [-1, 1]


@pytest.mark.parametrize("eps", [None, 1e-4])
def test_agrees_with_earthkit_on_precipitation_with_zero_climate(eps):
    q, ens = _precip_case(np.random.default_rng(12))
    assert (q == 0).mean() > 0.3
    diffs = _compare(q, ens, eps)
    if eps:
        np.testing.assert_array_equal(diffs["efi"][0][:5], 0.0)  # all-dry climate: EFI-max 0
        # the continuous form (no bounded-variable rule) differs where the climate is mostly 0
        samples = xr.DataArray(q, dims=("x", "climate_sample"))
        cont = extreme_forecast_index(xr.DataArray(ens, dims=("x", "member")), samples, method="continuous")
        assert np.nanmax(np.abs(cont.values - diffs["efi"][0])) > 0.3


def test_hand_computed_efi():
    # three quantiles at 0, 1/2, 1; F_f = 0, 0, 1: EFI = (2/pi)(pi/2 - 1)
    clim = _clim([0.0, 1.0, 2.0])
    np.testing.assert_allclose(extreme_forecast_index(_ens([1.5, 1.5]), clim), 1 - 2 / np.pi, atol=1e-14)
    # F_f equal to p at every quantile: the ensemble is distributed as the climate
    q = np.sort(np.random.default_rng(3).normal(size=101))
    mid = (q[1:] + q[:-1]) / 2
    np.testing.assert_allclose(extreme_forecast_index(_ens(mid), _clim(q)), 0.0, atol=1e-12)
    np.testing.assert_allclose(
        extreme_forecast_index(_ens(q.max() + np.array([1.0, 2.0])), _clim(q)), 1.0, atol=1e-12
    )
    np.testing.assert_allclose(
        extreme_forecast_index(_ens(q.min() - np.array([1.0, 2.0])), _clim(q)), -1.0, atol=1e-12
    )
    # bounded variable: EFI-max normalises, so all members above a mostly-zero climate give 1
    rain = np.r_[np.zeros(70), np.linspace(1e-3, 1e-2, 31)]
    assert float(extreme_forecast_index(_ens([0.02, 0.03]), _clim(rain), eps=1e-4)) == pytest.approx(
        1.0, abs=1e-12
    )
    assert float(extreme_forecast_index(_ens([0.02]), _clim(np.zeros(101)), eps=1e-4)) == 0.0


def test_float32_geopotential_like_values():
    rng = np.random.default_rng(9)
    q = np.sort(5.5e4 + 50 * rng.normal(size=101)).astype(np.float32)
    members = (5.5e4 + 60 + 40 * rng.normal(size=51)).astype(np.float32)
    members[:3] = q[[10, 50, 90]]  # exact ties in float32
    for f, ref in (
        (extreme_forecast_index, ek.efi),
        (lambda e, c: shift_of_tails(e, c), lambda c, e: ek.sot(c, e, 90)),
    ):
        got = float(f(_ens(members).astype(np.float32), _clim(q).astype(np.float32)))
        want = float(ref(q.astype(np.float64)[:, None], members.astype(np.float64)[:, None])[0])
        assert abs(got - want) < TOL


def test_quantile_levels_coordinate():
    q = np.sort(np.random.default_rng(4).gamma(2.0, size=101))
    fc = _ens(np.random.default_rng(5).gamma(2.5, size=20))
    plain = extreme_forecast_index(fc, _clim(q))
    frac = _clim(q).assign_coords(quantile=np.linspace(0, 1, 101))
    pct = _clim(q).assign_coords(quantile=np.arange(101.0))
    np.testing.assert_allclose(extreme_forecast_index(fc, frac), plain, atol=1e-14)
    np.testing.assert_allclose(extreme_forecast_index(fc, pct), plain, atol=1e-14)
    np.testing.assert_allclose(shift_of_tails(fc, pct), shift_of_tails(fc, _clim(q)), atol=1e-14)


def _efi_quadrature(members, q, levels):
    # (2/pi) int (p - F(p)) / sqrt(p(1-p)) dp with F linear in p through the fractions at the
    # quantiles; p = sin^2(t) makes the integrand smooth: (2/pi) int_0^{pi/2} 2 (p - F) dt
    frac = (np.asarray(members)[None, :] <= np.asarray(q)[:, None]).mean(1)
    t = np.linspace(0, np.pi / 2, 400001)
    p = np.sin(t) ** 2
    return 2 / np.pi * np.trapezoid(2 * (p - np.interp(p, levels, frac)), t)


def test_unequal_levels_against_quadrature():
    # levels 0, 1/4, 1; F_f = 0, 0, 1: (2/pi)(pi/6 - b + (pi/3 - b)/3), b = sqrt(3)/4
    clim = _clim([0.0, 1.0, 2.0]).assign_coords(quantile=[0.0, 0.25, 1.0])
    b = np.sqrt(3) / 4
    want = 2 / np.pi * (np.pi / 6 - b + (np.pi / 3 - b) / 3)
    np.testing.assert_allclose(extreme_forecast_index(_ens([1.5, 1.5]), clim), want, atol=1e-14)
    rng = np.random.default_rng(8)
    for _ in range(5):
        levels = np.r_[0.0, np.sort(rng.uniform(size=rng.integers(1, 30))), 1.0]
        q = np.sort(rng.normal(size=levels.size))
        members = rng.normal(loc=rng.normal(), size=15)
        got = extreme_forecast_index(_ens(members), _clim(q).assign_coords(quantile=levels))
        np.testing.assert_allclose(got, _efi_quadrature(members, q, levels), atol=1e-6)


def test_hand_computed_sot():
    clim = _clim(np.arange(101.0))  # q(p %) = p
    members = _ens([0.0] * 9 + [104.0, 200.0])  # 90th percentile 104, 10th 0
    assert float(shift_of_tails(members, clim)) == pytest.approx((104 - 99) / (99 - 90))
    assert float(shift_of_tails(members, clim, tail="lower")) == pytest.approx((0 - 1) / (1 - 10))
    assert float(shift_of_tails(members * 10, clim)) == 10.0  # clipped, as ECMWF
    assert float(shift_of_tails(members, clim, percentile=80, tail_percentile=95)) == pytest.approx(
        (float(np.percentile(members, 80)) - 95) / 15
    )
    assert np.isnan(shift_of_tails(members, _clim(np.full(101, 3.0))))  # no tail width
    out = shift_of_tails(members, clim, eps=1e-3)
    assert out.name == "sot_upper" and out.attrs["eps"] == 1e-3


def test_nan_members_dropped_nan_climate_missing():
    q = np.linspace(0.0, 10.0, 101)
    fc = xr.DataArray([[2.0, 7.0, np.nan], [2.0, 7.0, 9.0], [np.nan] * 3], dims=("x", "member"))
    bad_q = q.copy()
    bad_q[90] = np.nan  # used by both
    for f in (extreme_forecast_index, shift_of_tails):
        out = f(fc, _clim(q))
        assert float(out[0]) == pytest.approx(float(f(_ens([2.0, 7.0]), _clim(q))), abs=1e-14)
        assert np.isfinite(out[1]) and np.isnan(out[2])
        assert np.isnan(f(_ens([2.0, 7.0]), _clim(bad_q)))


def test_dask_and_broadcast_climate():
    q, ens = _random_case(np.random.default_rng(6), n=40)
    clim = xr.DataArray(q, dims=("x", "quantile"))
    fc = xr.DataArray(ens.reshape(40, 51, 1).repeat(3, 2), dims=("x", "member", "t"))
    for f in (extreme_forecast_index, shift_of_tails):
        eager = f(fc, clim)
        assert eager.dims == ("x", "t")
        lazy = f(fc.chunk({"x": 10, "member": 17}), clim.chunk({"x": 20, "quantile": 30}))
        assert lazy.chunks is not None
        np.testing.assert_allclose(lazy.compute(), eager, atol=1e-15)


def test_climate_quantiles_and_reforecast_efi():
    rng = np.random.default_rng(7)
    samples = xr.DataArray(rng.normal(size=(3, 400)), dims=("x", "climate_sample"))
    samples[0, :10] = np.nan
    q = climate_quantiles(samples)
    assert q.sizes["quantile"] == 101 and q["quantile"].values[-1] == 1.0
    np.testing.assert_allclose(q.isel(x=1), np.quantile(samples[1], np.linspace(0, 1, 101)))
    np.testing.assert_allclose(q.isel(x=0), np.nanquantile(samples[0], np.linspace(0, 1, 101)))
    np.testing.assert_allclose(climate_quantiles(samples.chunk({"climate_sample": 50})), q)
    with pytest.raises(EnsmlError, match="n must be an integer >= 2"):
        climate_quantiles(samples, 1)

    base = np.array(["2001-02-01", "2001-02-04"], "datetime64[ns]")
    init = np.concatenate([base + np.timedelta64(365 * y, "D") for y in range(5)])
    fc = xr.DataArray(
        rng.gamma(2.0, size=(10, 11, 2)), dims=("init_time", "member", "x"), coords={"init_time": init}
    )
    got = reforecast_efi(fc)
    t = init[4]
    want = extreme_forecast_index(fc.sel(init_time=t), climate_quantiles(model_climate(fc, t)))
    np.testing.assert_allclose(got.sel(init_time=t), want)
    with pytest.raises(EnsmlError, match="reforecast_efi: eps applies to method='ecmwf' only"):
        reforecast_efi(fc, method="continuous", eps=1e-4)
    cont = reforecast_efi(fc, method="continuous")
    assert cont.dims == got.dims == ("init_time", "x")
    assert 0 < float(np.abs(cont - got).max()) < 0.2  # discretisation of 101 quantiles of 88 samples


def _one_line_error(match, f, *args, **kwargs):
    with pytest.raises(EnsmlError, match=match) as exc:
        f(*args, **kwargs)
    assert "\n" not in str(exc.value)


Q = _clim(np.linspace(0.0, 1.0, 101))
FC = _ens([0.2, 0.5, 0.9])


@pytest.mark.parametrize(
    ("fcst", "climate", "kwargs", "match"),
    [
        (FC.rename(member="m"), Q, {}, "extreme_forecast_index: forecast has no member dimension 'member'"),
        (
            FC,
            Q.rename(quantile="climate_sample"),
            {},
            r"climate has no 'quantile' dimension .*climate_quantiles",
        ),
        (FC, Q.expand_dims(y=2), {}, r"climate dims \(y, quantile\) must be 'quantile' and forecast dims"),
        (FC, Q[:1], {}, "climate has 1 quantile along 'quantile'; at least 2"),
        (FC, Q.assign_coords(quantile=np.linspace(1, 0, 101)), {}, "levels must be strictly increasing"),
        (FC, Q.assign_coords(quantile=np.linspace(0, 0.9, 101)), {}, "levels must run from 0 to 1"),
        (FC, Q.assign_coords(quantile=np.r_[np.nan, np.linspace(0, 1, 100)]), {}, "must hold finite numbers"),
        (FC.where(FC < 0.8, np.inf), Q, {}, "forecast has 1 infinite value"),
        (FC, Q.where(Q < 1, np.inf), {}, "climate has 1 infinite value"),
        (FC, Q, {"method": "quadrature"}, "method must be one of ecmwf, continuous"),
        (FC, Q, {"eps": -0.1}, r"eps must be a finite number > 0 \(None turns the rule off\)"),
        (FC, Q, {"eps": np.nan}, "eps must be a finite number > 0"),
        (FC, Q, {"method": "continuous", "eps": 1e-4}, "eps applies to method='ecmwf' only"),
    ],
)
def test_efi_bad_inputs(fcst, climate, kwargs, match):
    _one_line_error(match, extreme_forecast_index, fcst, climate, **kwargs)


@pytest.mark.parametrize(
    ("climate", "kwargs", "match"),
    [
        (Q, {"tail": "middle"}, "tail must be 'upper' or 'lower'"),
        (Q, {"percentile": 40}, r"upper tail needs 50 < percentile < tail_percentile <= 100"),
        (
            Q,
            {"tail": "lower", "percentile": 10, "tail_percentile": 20},
            "lower tail needs 0 <= tail_percentile",
        ),
        (Q, {"percentile": np.nan}, "percentile must be a finite number in percent"),
        (Q, {"eps": 0}, "eps must be a finite number > 0"),
        (Q[::10], {}, "the climate has no 99 % quantile along 'quantile'"),
        (Q[:1], {}, "at least 2"),
        (Q.where(Q > 0, -np.inf), {}, "shift_of_tails: climate has 1 infinite value"),
        (Q.rename(quantile="q"), {}, "shift_of_tails: climate has no 'quantile' dimension"),
    ],
)
def test_sot_bad_inputs(climate, kwargs, match):
    _one_line_error(match, shift_of_tails, FC, climate, **kwargs)
