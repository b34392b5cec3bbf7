"""Scores of predictive distributions given as a family and its parameters (``ensml.scores.predictive``).

References: the Gaussian CRPS of ``ensml.scores.gaussian``; for the threshold-weighted CRPS,
exact closed forms (the chained censored shifted gamma and censored normal), the integral of
its definition by ``scipy.integrate.quad``, and the ensemble twCRPS of ``scoringrules`` and of
``ensml.scores.twcrps`` on large samples of the distribution; for the randomised PIT, a
Kolmogorov-Smirnov test of uniformity on draws from the forecast.
"""

from __future__ import annotations

import numpy as np
import pytest
import scoringrules as sr
import xarray as xr
from scipy import integrate, stats

from ensml.errors import EnsmlError
from ensml.scores.calibration import histogram_flatness, pit_value_histogram
from ensml.scores.distributions import get_family
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.predictive import crps_family, exceedance_family, median_family, pit_family, twcrps_family
from ensml.scores.twcrps import twcrps_ensemble

DIMS = ("init_time", "latitude", "longitude")


def _fields(
    rng: np.random.Generator, family: str, shape: tuple[int, ...] = (5, 3, 4)
) -> dict[str, xr.DataArray]:
    draw = {
        "csg0": {"shape": (0.4, 2.5), "scale": (1.0, 6.0), "shift": (0.0, 3.0)},
        "truncnormal": {"loc": (-3.0, 12.0), "scale": (0.5, 5.0)},
        "normal": {"mean": (-2.0, 2.0), "std": (0.3, 2.0)},
        "cnormal": {"loc": (-3.0, 8.0), "scale": (0.5, 4.0)},
    }[family]
    return {
        k: xr.DataArray(rng.uniform(lo, hi, shape), dims=DIMS[: len(shape)]) for k, (lo, hi) in draw.items()
    }


def _obs(rng: np.random.Generator, family: str, params: dict[str, xr.DataArray]) -> xr.DataArray:
    f = get_family(family)
    y = f.sample({k: v.values for k, v in params.items()}, 1, rng)[0]
    return next(iter(params.values())).copy(data=y)


def test_normal_family_is_the_gaussian_crps() -> None:
    rng = np.random.default_rng(0)
    p = _fields(rng, "normal")
    y = p["mean"] + rng.normal(size=p["mean"].shape)
    got = crps_family("normal", p, y, preserve_dims="all")
    want = crps_gaussian_xr(p["mean"], p["std"], y, preserve_dims="all")
    np.testing.assert_allclose(got, want, rtol=1e-14, atol=0)


def test_crps_family_is_the_family_crps_with_nan_left_out() -> None:
    rng = np.random.default_rng(1)
    p = _fields(rng, "csg0")
    y = _obs(rng, "csg0", p)
    y[0, 0, 0] = np.nan
    family = get_family("csg0")
    by_hand = family.crps({k: v.values for k, v in p.items()}, y.values)
    pointwise = crps_family(family, p, y, preserve_dims="all")
    np.testing.assert_allclose(pointwise, by_hand, rtol=1e-12)
    assert np.isnan(pointwise[0, 0, 0])
    np.testing.assert_allclose(crps_family(family, p, y), np.nanmean(by_hand), rtol=1e-12)
    with pytest.raises(EnsmlError, match="no shift"):
        crps_family(family, {"shape": p["shape"], "scale": p["scale"]}, y)


def test_exceedance_and_median() -> None:
    rng = np.random.default_rng(2)
    p = _fields(rng, "csg0")
    family = get_family("csg0")
    prob = exceedance_family(family, p, [0.1, 5.0])
    assert prob.dims == ("threshold", *DIMS)
    for t in (0.1, 5.0):
        np.testing.assert_allclose(
            prob.sel(threshold=t), 1 - family.cdf({k: v.values for k, v in p.items()}, t)
        )
    med = median_family(family, p)
    np.testing.assert_allclose(med, family.ppf({k: v.values for k, v in p.items()}, 0.5))


@pytest.mark.parametrize("threshold", [0.0, 1.0, 10.0, 30.0])
def test_twcrps_of_csg0_quadrature_matches_the_closed_form(threshold: float) -> None:
    """max(Y, u) = u + csg0(shape, scale, shift + u): exact, against the quantile quadrature."""
    rng = np.random.default_rng(3)
    p = _fields(rng, "csg0", (40, 5))
    y = _obs(rng, "csg0", p)
    exact = twcrps_family("csg0", p, y, threshold, preserve_dims="all")
    shifted = {**p, "shift": p["shift"] + threshold}
    np.testing.assert_allclose(
        exact, crps_family("csg0", shifted, np.maximum(y, threshold) - threshold, preserve_dims="all")
    )
    quad = twcrps_family("csg0", p, y, threshold, method="quadrature", nodes=64, preserve_dims="all")
    np.testing.assert_allclose(quad, exact, rtol=2e-3, atol=5e-4 * float(exact.mean()))
    if threshold == 0.0:  # the weight covers the whole support: the CRPS
        np.testing.assert_allclose(exact, crps_family("csg0", p, y, preserve_dims="all"), rtol=1e-12)


@pytest.mark.parametrize("threshold", [-2.0, 1.5])
def test_twcrps_of_normal_quadrature_matches_the_censored_normal(threshold: float) -> None:
    rng = np.random.default_rng(4)
    p = _fields(rng, "normal", (60,))
    y = p["mean"] + rng.normal(size=60)
    exact = twcrps_family("normal", p, y, threshold, preserve_dims="all")
    quad = twcrps_family("normal", p, y, threshold, method="quadrature", nodes=64, preserve_dims="all")
    np.testing.assert_allclose(quad, exact, rtol=2e-3, atol=1e-3 * float(exact.mean()))


def test_twcrps_of_truncnormal_is_its_definition() -> None:
    """∫_u^∞ (F(z) − 1{y ≤ z})² dz by adaptive quadrature, point by point."""
    rng = np.random.default_rng(5)
    p = _fields(rng, "truncnormal", (12,))
    y = _obs(rng, "truncnormal", p)
    family = get_family("truncnormal")
    u = 8.0
    got = twcrps_family(family, p, y, u, preserve_dims="all").values
    for i in range(12):
        pi = {k: v.values[i] for k, v in p.items()}
        yi = float(y[i])

        def integrand(z: float, pi: dict = pi, yi: float = yi) -> float:
            return (float(family.cdf(pi, z)) - (yi <= z)) ** 2

        kink = max(yi, u)
        want = integrate.quad(integrand, u, kink)[0] + integrate.quad(integrand, kink, np.inf)[0]
        np.testing.assert_allclose(got[i], want, rtol=1e-3, atol=1e-6)


@pytest.mark.parametrize(("family", "threshold"), [("csg0", 5.0), ("truncnormal", 10.0), ("cnormal", 2.0)])
def test_twcrps_family_against_ensembles_of_its_samples(family: str, threshold: float) -> None:
    """scoringrules' and ensml's ensemble twCRPS of a large sample of each distribution."""
    rng = np.random.default_rng(6)
    p = _fields(rng, family, (4,))
    y = _obs(rng, family, p)
    got = twcrps_family(family, p, y, threshold, preserve_dims="all").values
    f = get_family(family)
    n = 40_000
    values = {k: v.values for k, v in p.items()}
    drawn = f.sample(values, n, rng, axis=-1)  # (4, n): random draws
    ref_sr = sr.twcrps_ensemble(y.values, drawn, a=threshold, backend="numpy")
    np.testing.assert_allclose(got, ref_sr, rtol=3e-2, atol=2e-3)
    # a stratified sample (the quantiles at (i + 1/2)/n) is much closer than random draws
    n = 4000
    strata = f.quantiles(values, (np.arange(n) + 0.5) / n, axis=-1)
    ref_sr = sr.twcrps_ensemble(y.values, strata, a=threshold, backend="numpy")
    np.testing.assert_allclose(got, ref_sr, rtol=3e-3, atol=2e-4)
    members = xr.DataArray(strata, dims=("x", "member"))
    ref_ensml = twcrps_ensemble(members, y.rename({"init_time": "x"}), threshold, preserve_dims="all")
    np.testing.assert_allclose(ref_ensml, ref_sr, rtol=1e-10)  # the same ensemble estimator


def test_twcrps_family_refuses_a_threshold_below_the_support() -> None:
    p = _fields(np.random.default_rng(7), "csg0", (3,))
    with pytest.raises(EnsmlError, match="below the csg0 family's lower bound"):
        twcrps_family("csg0", p, p["scale"], -1.0)


def test_randomised_pit_is_uniform_for_draws_from_the_forecast() -> None:
    """A censored forecast with about half its mass at 0: F(y) piles the dry days up in the
    lowest bins; the randomised PIT spreads them uniformly over [0, F(0)]."""
    rng = np.random.default_rng(8)
    shape = (200, 50)
    p = {
        "shape": xr.DataArray(rng.uniform(0.5, 1.5, shape), dims=DIMS[:2]),
        "scale": xr.DataArray(rng.uniform(1.0, 4.0, shape), dims=DIMS[:2]),
        "shift": xr.DataArray(rng.uniform(0.3, 3.0, shape), dims=DIMS[:2]),
    }
    y = _obs(rng, "csg0", p)
    assert float((y == 0).mean()) > 0.3
    pit = pit_family("csg0", p, y, seed=1)
    assert stats.kstest(pit.values.ravel(), "uniform").pvalue > 0.01
    plain = get_family("csg0").pit({k: v.values for k, v in p.items()}, y.values)  # F(y), not randomised
    assert stats.kstest(plain.ravel(), "uniform").pvalue < 1e-6
    np.testing.assert_array_equal(pit, pit_family("csg0", p, y, seed=1))  # seeded
    bins = 11
    flat = float(histogram_flatness(pit_value_histogram(pit, bins=bins)))
    expected = np.sqrt(2 * (bins - 1) / (np.pi * pit.size))  # of a calibrated forecast (the function's note)
    assert flat < 3 * expected
    lumpy = float(histogram_flatness(pit_value_histogram(pit.copy(data=plain), bins=bins)))
    assert lumpy > 10 * flat
