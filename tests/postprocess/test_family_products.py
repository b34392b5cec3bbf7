"""The products of every predictive family, from hand-made parameters, against scipy and closed forms."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr
from scipy import interpolate, optimize, special, stats

from ensml.errors import EnsmlError
from ensml.names import VARIABLE_ATTRS
from ensml.postprocess.ecc import (
    ecc_levels,
    ecc_members,
    ecc_quantile_members,
    exceedance,
    gaussian_quantiles,
)
from ensml.postprocess.options import (
    PRECIPITATION_THRESHOLDS_MM,
    Products,
    ThresholdSet,
    check_products,
)
from ensml.postprocess.products import placeholder_params, product_dataset
from ensml.predictions import RunMeta

INIT = np.datetime64("2017-11-03T00:00", "ns")
LEADS = (np.timedelta64(24, "h"), np.timedelta64(48, "h"))
LEVELS = (500.0, 850.0)
SHAPE = (len(LEADS), len(LEVELS), 3, 4)  # (L, D, H, W)
M = 10
Q = [0.05, 0.25, 0.5, 0.75, 0.95]
BOUNDED = ["truncnormal", "trunclogistic", "cnormal", "clogistic", "csg0", "bqn"]
POINT_MASS = {"cnormal", "clogistic", "csg0", "bqn"}
THRESHOLDS = (0.0, 0.5, 2.0, 6.0)


def _params(name: str, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Parameters of ``name`` on the grid, float32, spanning mostly-dry to wet points."""

    def u(lo: float, hi: float) -> np.ndarray:
        return rng.uniform(lo, hi, SHAPE).astype(np.float32)

    if name == "normal":
        return {"mean": u(-2.0, 5.0), "std": u(0.5, 3.0)}
    if name in ("truncnormal", "trunclogistic", "cnormal", "clogistic"):
        return {"loc": u(-3.0, 5.0), "scale": u(0.5, 3.0)}
    if name == "csg0":
        return {"shape": u(0.3, 3.0), "scale": u(0.5, 4.0), "shift": u(0.0, 2.0)}
    # bqn (degree 8): non-decreasing coefficients from below 0 (a point mass) to wet
    steps = rng.uniform(0.0, 1.5, (9, *SHAPE))
    alpha = rng.uniform(-4.0, 1.0, SHAPE) + np.cumsum(steps, axis=0) - steps[0]
    return {f"alpha{j}": alpha[j].astype(np.float32) for j in range(9)}


def _meta(families: dict[str, str], surface: tuple[str, ...] = ()) -> RunMeta:
    return RunMeta(
        task="MixedTask",
        k=5,
        members=tuple(range(5)),
        ensemble_size=M,
        variables=tuple(families),
        levels=LEVELS,
        leads=LEADS,
        surface=surface,
        families=tuple(families.values()),
    )


def _raw(rng: np.random.Generator, dry: float = 0.0) -> np.ndarray:
    """(L, M, D, H, W) raw members; a fraction ``dry`` of them exactly 0 (ties)."""
    raw = rng.gamma(1.0, 2.0, (SHAPE[0], M, *SHAPE[1:])).astype(np.float32)
    return np.where(rng.uniform(size=raw.shape) < dry, np.float32(0.0), raw)


def _products(
    families: dict[str, str],
    params: list[dict[str, np.ndarray]],
    raw: np.ndarray,
    thresholds: list[ThresholdSet] | None = None,
    init: np.datetime64 = INIT,
    **options,
) -> xr.Dataset:
    meta = _meta(families)
    lat, lon = np.linspace(40.0, 50.0, SHAPE[2]), np.linspace(0.0, 15.0, SHAPE[3])
    products = Products(quantiles=Q, **options)
    return product_dataset(init, meta, lat, lon, params, raw, products, thresholds or [])


class Reference:
    """scipy's (or a closed form's) quantile function, survival function and P(0) at one point."""

    def __init__(self, name: str, p: dict[str, float]) -> None:
        self.name, self.p = name, p

    def ppf(self, u: np.ndarray) -> np.ndarray:
        n, p = self.name, self.p
        if n == "truncnormal":
            return stats.truncnorm(-p["loc"] / p["scale"], np.inf, p["loc"], p["scale"]).ppf(u)
        if n == "trunclogistic":
            dist = stats.logistic(p["loc"], p["scale"])
            return dist.isf((1 - u) * dist.sf(0.0))
        if n in ("cnormal", "clogistic"):
            dist = (stats.norm if n == "cnormal" else stats.logistic)(p["loc"], p["scale"])
            return np.maximum(dist.ppf(u), 0.0)
        if n == "csg0":
            return np.maximum(stats.gamma(p["shape"], scale=p["scale"]).ppf(u) - p["shift"], 0.0)
        return np.maximum(self._bernstein(u), 0.0)

    def sf(self, t: float) -> float:
        n, p = self.name, self.p
        if n == "truncnormal":
            return float(stats.truncnorm(-p["loc"] / p["scale"], np.inf, p["loc"], p["scale"]).sf(t))
        if n == "trunclogistic":
            dist = stats.logistic(p["loc"], p["scale"])
            return float(dist.sf(max(t, 0.0)) / dist.sf(0.0))
        if n in ("cnormal", "clogistic"):
            return float((stats.norm if n == "cnormal" else stats.logistic)(p["loc"], p["scale"]).sf(t))
        if n == "csg0":
            return float(stats.gamma(p["shape"], scale=p["scale"]).sf(t + p["shift"]))
        return 1.0 - self._bernstein_cdf(t)

    def p0(self) -> float:
        n, p = self.name, self.p
        if n == "cnormal":
            return float(special.ndtr(-p["loc"] / p["scale"]))
        if n == "clogistic":
            return float(special.expit(-p["loc"] / p["scale"]))
        if n == "csg0":
            return float(special.gammainc(p["shape"], p["shift"] / p["scale"]))
        return self._bernstein_cdf(0.0)

    def _bernstein(self, u: np.ndarray) -> np.ndarray:
        alpha = np.array([self.p[f"alpha{j}"] for j in range(9)], dtype=np.float64)
        return interpolate.BPoly(alpha[:, None], [0.0, 1.0])(u)

    def _bernstein_cdf(self, t: float) -> float:
        if self._bernstein(0.0) > t:
            return 0.0
        if self._bernstein(1.0) <= t:
            return 1.0
        return float(optimize.brentq(lambda u: self._bernstein(u) - t, 0.0, 1.0, xtol=1e-12))


def _at(params: dict[str, np.ndarray], idx: tuple[int, ...]) -> dict[str, float]:
    return {k: float(v[idx]) for k, v in params.items()}


POINTS = [(0, 0, 0, 0), (1, 1, 2, 3), (0, 1, 1, 2), (1, 0, 2, 0)]


@pytest.mark.parametrize("name", BOUNDED)
def test_quantiles_exceedance_and_zero_probability_match_scipy(name: str) -> None:
    rng = np.random.default_rng(1)
    params = _params(name, rng)
    thresholds = [ThresholdSet("tp", "tp", None, THRESHOLDS), ThresholdSet("tp850", "tp", 850.0, (1.0,))]
    ds = _products({"tp": name}, [params], _raw(rng)[None], thresholds)
    q = ds["tp_quantile"].isel(init_time=0).values  # (L, Q, D, H, W)
    assert (np.diff(q, axis=1) >= 0).all() and (q >= 0).all()
    p = ds["tp_exceedance"].isel(init_time=0).values  # (L, threshold, D, H, W)
    assert ((p >= 0) & (p <= 1)).all() and (np.diff(p, axis=1) <= 0).all()
    # bqn's cdf inverts its quantile function on a grid of 1001 levels
    atol = 2e-3 if name == "bqn" else 2e-6
    for lead, lev, lat, lon in POINTS:
        ref = Reference(name, _at(params, (lead, lev, lat, lon)))
        np.testing.assert_allclose(q[lead, :, lev, lat, lon], ref.ppf(np.array(Q)), rtol=2e-6, atol=2e-6)
        want = [ref.sf(t) for t in THRESHOLDS]
        np.testing.assert_allclose(p[lead, :, lev, lat, lon], want, atol=atol)
        if lev == 1:
            at850 = ds["tp850_exceedance"].isel(init_time=0).values[lead, 0, lat, lon]
            assert at850 == pytest.approx(ref.sf(1.0), abs=atol)
        if name in POINT_MASS:
            p0 = float(ds["tp_probability_of_zero"].isel(init_time=0).values[lead, lev, lat, lon])
            assert p0 == pytest.approx(ref.p0(), abs=atol)
            assert p0 == pytest.approx(1.0 - p[lead, 0, lev, lat, lon], abs=atol)  # P(Y > 0) = 1 - P(0)
    if name not in POINT_MASS:
        assert "tp_probability_of_zero" not in ds


@pytest.mark.parametrize("name", BOUNDED)
def test_ecc_members_are_the_family_quantiles_in_raw_rank_order(name: str) -> None:
    rng = np.random.default_rng(2)
    params, raw = _params(name, rng), _raw(rng)  # continuous raw members: no ties
    ds = _products({"tp": name}, [params], raw[None])
    members = ds["tp"].isel(init_time=0).values  # (L, N, D, H, W)
    assert members.shape == raw.shape and members.dtype == np.float32 and (members >= 0).all()
    levels = ecc_levels(M)
    for idx in POINTS:
        ref = Reference(name, _at(params, idx))
        lead, rest = idx[0], idx[1:]
        at = (lead, slice(None), *rest)
        np.testing.assert_allclose(np.sort(members[at]), ref.ppf(levels), rtol=2e-6, atol=2e-6)
    # where the family's quantiles differ, the members keep the raw members' order; where they
    # are equal (several at 0), any order of those is the same members
    order = np.argsort(raw, axis=1)
    assert (np.diff(np.take_along_axis(members, order, axis=1), axis=1) >= 0).all()
    distinct = (np.diff(np.sort(members, axis=1), axis=1) > 0).all(axis=1)
    assert distinct.any()
    ranks_m = np.argsort(np.argsort(members, axis=1), axis=1)
    ranks_r = np.argsort(order, axis=1)
    np.testing.assert_array_equal(
        np.moveaxis(ranks_m, 1, -1)[distinct], np.moveaxis(ranks_r, 1, -1)[distinct]
    )


def test_ties_among_raw_members_are_broken_at_random_and_reproducibly() -> None:
    rng = np.random.default_rng(3)
    # few dry points in the forecast (P(0) small) and many dry raw members: the tied members
    # take distinct calibrated values
    params = {
        k: np.full(SHAPE, v, np.float32) for k, v in {"shape": 2.0, "scale": 2.0, "shift": 0.05}.items()
    }
    raw = _raw(rng, dry=0.6)
    ds = _products({"tp": "csg0"}, [params], raw[None])
    members = ds["tp"].isel(init_time=0).values
    again = _products({"tp": "csg0"}, [params], raw[None])["tp"].isel(init_time=0).values
    np.testing.assert_array_equal(members, again)  # seeded: the same forecast, the same members
    other = _products({"tp": "csg0"}, [params], raw[None], init=INIT + np.timedelta64(1, "D"))
    other_members = other["tp"].isel(init_time=0).values
    assert not np.array_equal(members, other_members)  # another init, another draw of the ties
    quantiles = np.sort(members, axis=1)
    np.testing.assert_array_equal(np.sort(other_members, axis=1), quantiles)
    # the dry raw members take the lowest calibrated values, the wet ones keep their order above
    dry = raw == 0
    n_dry = dry.sum(axis=1, keepdims=True)
    ranks = np.argsort(np.argsort(members, axis=1), axis=1)
    np.testing.assert_array_equal(dry, ranks < n_dry)
    raw_ranks = np.argsort(np.argsort(raw, axis=1, kind="stable"), axis=1)
    np.testing.assert_array_equal(ranks[~dry], raw_ranks[~dry])
    # which dry member is the driest is random: the first dry member is not always it
    first_dry = np.argmax(dry, axis=1)
    driest = np.argmin(np.where(dry, members, np.inf), axis=1)
    several = n_dry[:, 0] >= 2
    share = (first_dry == driest)[several].mean()
    expected = (1.0 / n_dry[:, 0][several]).mean()
    assert abs(share - expected) < 0.2, (share, expected)


def test_ecc_of_precomputed_quantiles_and_of_a_quantile_function_agree() -> None:
    rng = np.random.default_rng(11)
    raw = _raw(rng, dry=0.5)[:, :, 0]  # (L, M, H, W)
    gamma = stats.gamma(2.0, scale=1.5)
    q = np.maximum(gamma.ppf(ecc_levels(M)) - 1.0, 0.0)[None, :, None, None] * np.ones_like(raw)

    def quantile(levels: np.ndarray) -> np.ndarray:
        return np.broadcast_to(np.maximum(gamma.ppf(levels) - 1.0, 0.0)[None, :, None, None], raw.shape)

    a = ecc_quantile_members(q, raw, axis=1, rng=np.random.default_rng(0))
    b = ecc_quantile_members(quantile, raw, axis=1, rng=np.random.default_rng(0))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(np.sort(a, axis=1), q)
    with pytest.raises(EnsmlError, match="do not match the raw members"):
        ecc_quantile_members(q[:, :3], raw, axis=1)


def test_more_members_than_raw_keep_copies_adjacent_with_random_ties() -> None:
    rng = np.random.default_rng(4)
    params, raw = _params("csg0", rng), _raw(rng, dry=0.5)
    ds = _products({"tp": "csg0"}, [params], raw[None], members=2 * M + 3)
    members = ds["tp"].isel(init_time=0).values
    assert members.shape[1] == 2 * M + 3 and (members >= 0).all()
    for idx in POINTS[:2]:
        ref = Reference("csg0", _at(params, idx))
        at = (idx[0], slice(None), *idx[1:])
        np.testing.assert_allclose(np.sort(members[at]), ref.ppf(ecc_levels(2 * M + 3)), rtol=2e-6, atol=2e-6)
    # with distinct quantiles 0 … N−1 the members are their ranks: the copies of raw member j
    # (j, j + M, j + 2M) take adjacent ranks in copy order, the dry ones the lowest
    n = 2 * M + 3
    ranks = np.arange(n, dtype=np.float64)[None, :, None, None, None] * np.ones((1, 1, *SHAPE[1:]))
    distinct = np.broadcast_to(ranks, (SHAPE[0], n, *SHAPE[1:]))
    ranks = ecc_quantile_members(distinct, raw, n, axis=1, rng=np.random.default_rng(0))
    for j in range(3):
        np.testing.assert_array_equal(np.diff(ranks[:, j::M], axis=1), 1.0)
    dry_copies = (raw == 0)[:, np.arange(n) % M]
    np.testing.assert_array_equal(dry_copies, ranks < dry_copies.sum(axis=1, keepdims=True))


def test_bqn_products_from_its_coefficients() -> None:
    """A linear quantile function Q(τ) = a + bτ (Bernstein coefficients a + bj/d): its quantiles,
    P(0) = −a/b, mean E max(0, a + bτ) = (a + b)²/(2b) and exceedances in closed form."""
    a, b = -1.0, 4.0
    alpha = a + b * np.arange(9) / 8
    params = {f"alpha{j}": np.full(SHAPE, alpha[j], np.float32) for j in range(9)}
    thresholds = [ThresholdSet("tp", "tp", None, (1.0, 2.0))]
    ds = _products({"tp": "bqn"}, [params], _raw(np.random.default_rng(5))[None], thresholds)
    at = dict(init_time=0, lead_time=0, level=0, latitude=0, longitude=0)
    np.testing.assert_allclose(ds["tp_quantile"].isel(at), np.maximum(a + b * np.array(Q), 0), atol=2e-6)
    assert float(ds["tp_probability_of_zero"].isel(at)) == pytest.approx(-a / b, abs=1e-3)
    assert float(ds["tp_mean"].isel(at)) == pytest.approx((a + b) ** 2 / (2 * b), rel=1e-3)
    np.testing.assert_allclose(ds["tp_exceedance"].isel(at), [1 - (1 - a) / b, 1 - (2 - a) / b], atol=1e-3)
    assert ds["tp_alpha3"].attrs["ensml_family"] == "bqn"
    np.testing.assert_array_equal(ds["tp_alpha8"].values[0], params["alpha8"])


@pytest.mark.parametrize("name", BOUNDED)
def test_the_mean_is_the_family_mean(name: str) -> None:
    """Against ∫₀^∞ P(Y > t) dt (the quadrature of families.Family.mean is within 2e-3·scale)."""
    from scipy import integrate

    rng = np.random.default_rng(6)
    params = _params(name, rng)
    ds = _products({"tp": name}, [params], _raw(rng)[None])
    mean = ds["tp_mean"].isel(init_time=0).values
    assert (mean >= 0).all() and mean.dtype == np.float32
    for idx in POINTS:
        ref = Reference(name, _at(params, idx))
        if name == "bqn":
            want = integrate.quad(lambda u, ref=ref: float(ref.ppf(np.array(u))), 0.0, 1.0)[0]
        else:
            want = integrate.quad(ref.sf, 0.0, np.inf)[0]
        scale = _at(params, idx).get("scale", 1.0)
        assert float(mean[idx]) == pytest.approx(want, abs=(1e-5 if name == "csg0" else 2e-3) * scale)


@pytest.mark.parametrize("name", BOUNDED)
def test_bounded_products_are_never_negative_even_far_below_zero(name: str) -> None:
    """Locations far below 0, tiny scales, large shifts: every value ≥ 0."""
    extreme = {
        "truncnormal": {"loc": -40.0, "scale": 0.5},
        "trunclogistic": {"loc": -40.0, "scale": 0.5},
        "cnormal": {"loc": -40.0, "scale": 1e-3},
        "clogistic": {"loc": -40.0, "scale": 1e-3},
        "csg0": {"shape": 0.05, "scale": 1e-3, "shift": 50.0},
        "bqn": {f"alpha{j}": -50.0 + 1e-3 * j for j in range(9)},
    }[name]
    params = {k: np.full(SHAPE, v, np.float32) for k, v in extreme.items()}
    ds = _products({"tp": name}, [params], _raw(np.random.default_rng(7))[None])
    for product in ("tp_quantile", "tp", "tp_mean"):
        values = ds[product].values
        assert np.isfinite(values).all() and (values >= 0).all(), product


def test_normal_products_are_the_gaussian_ones_unchanged() -> None:
    rng = np.random.default_rng(8)
    params = _params("normal", rng)
    raw = (params["mean"][:, None] + rng.normal(0, 2.0, (SHAPE[0], M, *SHAPE[1:]))).astype(np.float32)
    t = [ThresholdSet("z", "z", None, (0.0, 1.0)), ThresholdSet("z850", "z", 850.0, (2.0,))]
    ds = _products({"z": "normal"}, [params], raw[None], t).isel(init_time=0)
    mu, sd = params["mean"], params["std"]
    assert sorted(ds.data_vars) == ["z", "z850_exceedance", "z_exceedance", "z_mean", "z_quantile", "z_std"]
    np.testing.assert_array_equal(ds["z_mean"], mu)
    np.testing.assert_array_equal(ds["z_std"], sd)
    np.testing.assert_array_equal(ds["z_quantile"], gaussian_quantiles(mu, sd, np.array(Q), axis=1))
    np.testing.assert_array_equal(ds["z"], ecc_members(mu, sd, raw, axis=1))
    np.testing.assert_array_equal(ds["z_exceedance"], exceedance(mu, sd, np.array([0.0, 1.0]), axis=1))
    np.testing.assert_array_equal(
        ds["z850_exceedance"], exceedance(mu[:, 1], sd[:, 1], np.array([2.0]), axis=1)
    )
    long_name = "geopotential: predictive mean (calibrated Gaussian)"
    assert ds["z_mean"].attrs == {"standard_name": "geopotential", "units": "m2 s-2", "long_name": long_name}
    assert ds["z_std"].attrs == {
        "units": "m2 s-2",
        "long_name": "geopotential: predictive std (calibrated Gaussian)",
    }
    assert ds["z"].attrs["long_name"] == "geopotential: calibrated member (ECC-Q of the calibrated Gaussian)"
    assert "ecc_ties" not in ds["z"].attrs
    # a tie keeps member order, as before families (raw 0 and 1 tied everywhere)
    raw[:, 1] = raw[:, 0]
    tied = _products({"z": "normal"}, [params], raw[None])["z"].isel(init_time=0).values
    assert (tied[:, 0] < tied[:, 1]).all()


def test_cf_attributes_and_run_metadata() -> None:
    rng = np.random.default_rng(9)
    families = {"z": "normal", "tp": "csg0", "si10": "truncnormal"}
    params = [_params("normal", rng), _params("csg0", rng), _params("truncnormal", rng)]
    raw = np.stack([_raw(rng) for _ in families])
    meta = _meta(families, surface=("tp", "si10"))
    lat, lon = np.linspace(40.0, 50.0, SHAPE[2]), np.linspace(0.0, 15.0, SHAPE[3])
    ds = product_dataset(INIT, meta, lat, lon, params, raw, Products(quantiles=Q), [])
    assert ds.attrs["ensml_distribution"] == "z:normal tp:csg0 si10:truncnormal"
    assert RunMeta.from_attrs(ds.attrs, "products").family_of("tp") == "csg0"
    assert {
        "tp_shape",
        "tp_scale",
        "tp_shift",
        "tp_mean",
        "tp_probability_of_zero",
        "tp_quantile",
        "tp",
    } <= set(ds.data_vars)
    assert {"si10_loc", "si10_scale", "si10_mean", "si10_quantile", "si10"} <= set(ds.data_vars)
    assert "si10_probability_of_zero" not in ds and "tp_std" not in ds
    for name in ("tp_shape", "tp_mean", "tp_probability_of_zero", "tp_quantile", "tp", "si10_loc"):
        assert "level" not in ds[name].dims, name  # surface variables keep one level
    assert ds["z_quantile"].dims[3] == "level"
    tp_units = VARIABLE_ATTRS["tp"]["units"]
    assert ds["tp_shape"].attrs["units"] == "1" and ds["tp_shape"].attrs["ensml_family"] == "csg0"
    assert ds["tp_scale"].attrs["units"] == tp_units and ds["tp_shift"].attrs["units"] == tp_units
    assert "gamma shape" in ds["tp_shape"].attrs["long_name"]
    assert ds["tp_mean"].attrs["standard_name"] == "precipitation_amount"
    assert "censored shifted gamma" in ds["tp_mean"].attrs["long_name"]
    assert ds["tp_probability_of_zero"].attrs["units"] == "1"
    assert "standard_name" not in ds["tp_probability_of_zero"].attrs
    assert "censored shifted gamma (csg0)" in ds["tp_quantile"].attrs["long_name"]
    assert ds["tp"].attrs["ecc_ties"].startswith("broken at random")
    assert "normal truncated to [0, ∞)" in ds["si10"].attrs["long_name"]
    assert ds["si10_loc"].attrs["units"] == "m s-1"


def test_placeholder_params_make_the_structure_of_every_family() -> None:
    families = {"z": "normal", "tp": "csg0", "si10": "bqn"}
    meta = _meta(families)
    params = placeholder_params(meta, SHAPE, M)
    assert set(params[0]) == {"mean", "std"} and set(params[1]) == {"shape", "scale", "shift"}
    raw = np.zeros((3, SHAPE[0], M, *SHAPE[1:]), np.float32)
    lat, lon = np.linspace(40.0, 50.0, SHAPE[2]), np.linspace(0.0, 15.0, SHAPE[3])
    ds = product_dataset(INIT, meta, lat, lon, params, raw, Products(quantiles=Q), [])
    assert {"z_mean", "tp_shift", "si10_alpha8", "si10_probability_of_zero"} <= set(ds.data_vars)


def test_parameters_that_do_not_fit_their_family_are_refused_in_one_line() -> None:
    rng = np.random.default_rng(10)
    params = _params("csg0", rng)
    params["scale"][0, 0, 1, 1] = -1.0
    with pytest.raises(EnsmlError, match=r"predictions of tp at init 2017-11-03T00:00 \(csg0\).*scale"):
        _products({"tp": "csg0"}, [params], _raw(rng)[None])
    with pytest.raises(EnsmlError, match="have no shift"):
        _products({"tp": "csg0"}, [{"shape": params["shape"], "scale": params["shape"]}], _raw(rng)[None])
    with pytest.raises(EnsmlError, match="have no std"):
        _products({"z": "normal"}, [{"mean": params["shape"]}], _raw(rng)[None])


# -- default precipitation thresholds ---------------------------------------------------------------


def test_precipitation_without_values_gets_the_default_thresholds() -> None:
    variables, levels = ["z", "tp"], [500.0, 850.0]
    units = VARIABLE_ATTRS["tp"]["units"]
    per_mm = {"m": 1e-3, "kg m-2": 1.0}[units]
    for values in (None, []):
        (t,) = check_products(Products(thresholds={"tp": values}), variables, levels)
        assert t == ThresholdSet("tp", "tp", None, tuple(x * per_mm for x in PRECIPITATION_THRESHOLDS_MM))
    assert PRECIPITATION_THRESHOLDS_MM == (0.1, 1.0, 5.0, 10.0, 25.0)
    given = check_products(Products(thresholds={"tp": [0.001]}), variables, levels)
    assert given[0].values == (0.001,)


def test_default_thresholds_follow_the_units_and_the_family(monkeypatch) -> None:
    monkeypatch.setitem(VARIABLE_ATTRS, "tp", {"units": "m"})
    (t,) = check_products(Products(thresholds={"tp": None}), ["tp"], [1000.0])
    np.testing.assert_allclose(t.values, [1e-4, 1e-3, 5e-3, 1e-2, 2.5e-2])
    # a variable of a precipitation family, in kg m-2 (= mm)
    monkeypatch.setitem(VARIABLE_ATTRS, "rain", {"units": "kg m-2"})
    (t,) = check_products(Products(thresholds={"rain": None}), ["rain"], [1000.0], families=["cnormal"])
    assert t.values == PRECIPITATION_THRESHOLDS_MM
    with pytest.raises(EnsmlError, match=r"products.thresholds\['rain'\] has no values; only precipitation"):
        check_products(Products(thresholds={"rain": None}), ["rain"], [1000.0], families=["truncnormal"])
    monkeypatch.setitem(VARIABLE_ATTRS, "rain", {"units": "kg m-2 s-1"})
    with pytest.raises(EnsmlError, match=r"in the units of rain \(kg m-2 s-1\)"):
        check_products(Products(thresholds={"rain": None}), ["rain"], [1000.0], families=["csg0"])
    with pytest.raises(EnsmlError, match=r"products.thresholds\['z'\] has no values"):
        check_products(Products(thresholds={"z": None}), ["z", "tp"], [500.0])


def test_thresholds_without_values_parse_from_the_command_line() -> None:
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_argument("--products", type=Products, default=Products())
    ns = parser.parse_args(["--products.thresholds={tp: null, t850: [270.0]}"])
    products = parser.instantiate(ns).products
    assert products.thresholds == {"tp": None, "t850": [270.0]}


# -- what the worker reads from predict_step --------------------------------------------------------


def test_predict_step_outputs_become_parameters_by_lead_and_variable() -> None:
    """Nested ``params``, flat ``<var>_<param>`` keys (of ``task.families``) and a spread model's
    lead-major ``std`` give the same per-lead, per-variable parameter fields."""
    from types import SimpleNamespace

    import torch

    from ensml.postprocess.worker import _params_by_lead
    from ensml.scores.distributions import family_for

    grid = (2, 3, 4)
    info = SimpleNamespace(target_leads=LEADS, input_leads=(np.timedelta64(0, "h"), *LEADS))
    task = SimpleNamespace(families=(family_for("z", "normal"), family_for("tp", "csg0")))
    gen = torch.Generator().manual_seed(0)
    params = {
        "z": {"mean": torch.randn(1, 2, *grid, generator=gen), "std": torch.rand(1, 2, *grid, generator=gen)},
        "tp": {k: torch.rand(1, 2, *grid, generator=gen) for k in ("shape", "scale", "shift")},
    }
    flat = {f"{var}_{k}": v for var, p in params.items() for k, v in p.items()}
    nested = _params_by_lead({"index": 0, "params": params}, {}, task, info, ("z", "tp"), grid)
    by_key = _params_by_lead({"index": 0, **flat}, {}, task, info, ("z", "tp"), grid)
    for t in range(2):
        for i, var in enumerate(("z", "tp")):
            assert list(nested[t][i]) == list(params[var]) == list(by_key[t][i])
            for k, v in params[var].items():
                np.testing.assert_array_equal(nested[t][i][k], v[0, t].numpy())
                np.testing.assert_array_equal(by_key[t][i][k], v[0, t].numpy())
    # a spread model: std (1, T·V, D, H, W) lead-major, centred on the subset mean at each lead
    std = torch.rand(1, 4, *grid, generator=gen)
    mean_k = np.random.default_rng(0).normal(size=(2, 3, *grid)).astype(np.float32)  # (V, input leads, …)
    spread = _params_by_lead(
        {"index": 0, "std": std}, {"mean_k": mean_k}, SimpleNamespace(), info, ("z", "t"), grid
    )
    for t in range(2):
        for i in range(2):
            np.testing.assert_array_equal(spread[t][i]["std"], std[0, 2 * t + i].numpy())
            np.testing.assert_array_equal(spread[t][i]["mean"], mean_k[i, t + 1])
