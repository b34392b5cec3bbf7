"""Predictive families (:mod:`ensml.scores.distributions`): every formula against an independent reference.

References, none of them ensml's own code:

* the CRPS: scoringrules 0.10's closed forms where they are usable, and everywhere the integral
  ∫(F(x) − 1{x ≥ y})² dx of each family's cdf written here from its definition (scipy's
  adaptive quadrature in float64; mpmath's tanh-sinh in 20 digits for the truncated families
  with their location below 0, whose tails underflow or cancel in float64);
* densities, cdfs, quantiles and moments: scipy.stats (``norm``, ``truncnorm``, ``logistic``,
  ``gamma``) with the truncation, censoring and shift written out here, and mpmath;
* samples and the PIT: moments, point masses and a KS test at fixed seeds, with tolerances
  from the sample size; the CRPS once more as E|X − y| − ½E|X − X′| by Monte Carlo.

Where scoringrules 0.10.0 fails and ensml does not (σ the scale, y = 0.5 unless said):

* ``crps_tnormal(lower=0)``: inexact from loc ≈ −4σ (1 − Φ cancels; at −5σ, y = 0: 0.094834σ
  for the exact 0.094755σ), 7.17σ for 0.061σ at −8σ, NaN from −8.3σ;
* ``crps_cnormal(lower=0)``: NaN from loc ≈ −8.3σ (the exact value there is ≈ |y|);
* ``crps_tlogistic``/``crps_clogistic`` with ``lower=0`` and ``upper=inf``: NaN for every input
  (``gtclogistic`` sets both tails' terms to NaN when either bound is infinite), and with a
  huge finite upper bound too (log F(−u) underflows to −inf). Compared here with ``upper =
  loc + 600σ``, which changes the distribution by e⁻⁶⁰⁰ (below float64); even so the
  truncated logistic is 4e-3 relative off at −14σ, gives 0.32, −10.9, 21.7, … for 0.213 from
  −16σ down, and both are NaN from about −37σ.
"""

from __future__ import annotations

import itertools
import math

import mpmath as mp
import numpy as np
import pytest
import scoringrules as sr
import torch
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from ensml.errors import EnsmlError
from ensml.scores.distributions import LOGISTIC_SCALE, bernstein_basis, get_family

# a reference integral that scipy cannot converge is a failed reference, not a warning
pytestmark = pytest.mark.filterwarnings("error::scipy.integrate.IntegrationWarning")

PARAMETRIC = ("normal", "truncnormal", "trunclogistic", "cnormal", "clogistic", "csg0")
LOC_SCALE = ("truncnormal", "trunclogistic", "cnormal", "clogistic")
BOUNDED = (*LOC_SCALE, "csg0")


# --------------------------------------------------------------------------------------------------
# References


def _params(name: str, *values: float) -> dict[str, float]:
    return dict(zip(get_family(name).params, values))


def regular(name: str, n: int, rng: np.random.Generator) -> tuple[dict[str, np.ndarray], np.ndarray]:
    """``n`` ordinary forecasts of the family and observations (some exactly 0 if bounded)."""
    if name == "normal":
        p = {"mean": rng.normal(0, 2, n), "std": rng.uniform(0.05, 3, n)}
        return p, rng.normal(0, 3, n)
    if name == "csg0":
        p = {
            "shape": np.exp(rng.uniform(np.log(0.05), np.log(200), n)),
            "scale": rng.uniform(0.2, 3, n),
            "shift": rng.uniform(0, 2, n),
        }
    else:
        p = {"loc": rng.uniform(-3, 5, n), "scale": rng.uniform(0.2, 3, n)}
    return p, np.where(rng.random(n) < 0.2, 0.0, rng.exponential(2.0, n))


class ScipyRef:
    """The family from scipy.stats, with the truncation, censoring and shift written out."""

    def __init__(self, name: str, p: dict[str, np.ndarray]) -> None:
        self.name = name
        if name == "normal":
            self.base = stats.norm(p["mean"], p["std"])
        elif name == "truncnormal":
            self.base = stats.truncnorm(-p["loc"] / p["scale"], np.inf, loc=p["loc"], scale=p["scale"])
        elif name == "csg0":
            self.base = stats.gamma(p["shape"], scale=p["scale"])
            self.shift = p["shift"]
        else:
            kernel = stats.norm if "normal" in name else stats.logistic
            self.base = kernel(p["loc"], p["scale"])
            self.f0 = self.base.cdf(0.0)

    def cdf(self, x: np.ndarray) -> np.ndarray:
        if self.name in ("normal", "truncnormal"):
            return self.base.cdf(x)
        if self.name == "csg0":
            return np.where(x < 0, 0.0, self.base.cdf(np.maximum(x, 0) + self.shift))
        if self.name == "trunclogistic":
            return np.where(x < 0, 0.0, (self.base.cdf(x) - self.f0) / (1 - self.f0))
        return np.where(x < 0, 0.0, self.base.cdf(x))  # censored

    def ppf(self, u: np.ndarray) -> np.ndarray:
        if self.name in ("normal", "truncnormal"):
            return self.base.ppf(u)
        if self.name == "csg0":
            return np.maximum(self.base.ppf(u) - self.shift, 0.0)
        if self.name == "trunclogistic":
            return self.base.ppf(self.f0 + u * (1 - self.f0))
        return np.maximum(self.base.ppf(u), 0.0)

    def log_score(self, y: np.ndarray) -> np.ndarray:
        """−log density; −log P(Y = 0) at y = 0 for the families with a point mass there."""
        if self.name in ("normal", "truncnormal"):
            return -self.base.logpdf(y)
        if self.name == "csg0":
            return np.where(y == 0, -self.base.logcdf(self.shift), -self.base.logpdf(y + self.shift))
        if self.name == "trunclogistic":
            return -(self.base.logpdf(y) - self.base.logsf(0.0))
        return np.where(y == 0, -self.base.logcdf(0.0), -self.base.logpdf(y))  # censored


def mp_cdf(name: str, p: dict[str, float]):
    """A truncated family's cdf, 1 − P(X > x)/P(X > 0), in mpmath (whose tails do not underflow)."""
    m, s = (mp.mpf(v) for v in p.values())
    if name == "truncnormal":
        tail = lambda x: mp.erfc((x - m) / (s * mp.sqrt(2)))  # noqa: E731
    else:
        tail = lambda x: 1 / (1 + mp.exp((x - m) / s))  # noqa: E731
    return lambda x: 1 - tail(x) / tail(0) if x >= 0 else mp.mpf(0)


def float_cdf(name: str, p: dict[str, float]):
    """The family's (cdf, survival function) in float64 (scipy.special), for ordinary parameters;
    the survival function directly, not 1 − cdf, so that a tail or a point mass ≈ 1 keeps its
    relative precision in the integrand."""
    from scipy.special import expit, gammainc, gammaincc, ndtr

    if name == "csg0":
        k, theta, d = (p[n] for n in ("shape", "scale", "shift"))
        return (lambda x: gammainc(k, (x + d) / theta)), (lambda x: gammaincc(k, (x + d) / theta))
    m, s = p.values()
    kernel = ndtr if "normal" in name else expit
    if name.startswith("trunc"):  # loc ≥ 0 here: no cancellation
        f0 = kernel(-m / s)
        return (lambda x: (kernel((x - m) / s) - f0) / (1 - f0)), (lambda x: kernel((m - x) / s) / (1 - f0))
    return (lambda x: kernel((x - m) / s)), (lambda x: kernel((m - x) / s))


def crps_integral(name: str, p: dict[str, float], y: float) -> float:
    """∫(F(x) − 1{x ≥ y})² dx, split where F changes on its own scale.

    By scipy's adaptive quadrature of the float64 cdf; for a truncated family with its location
    below 0 (whose tails underflow or cancel in float64) by mpmath's tanh-sinh quadrature of
    the cdf in 20 digits.
    """
    if name == "csg0":
        levels = [1e-9, 1e-6, 1e-3, 0.1, 0.5, 0.9, 0.999, 1 - 1e-6]
        q = stats.gamma.ppf(levels, p["shape"], scale=p["scale"]) - p["shift"]
        # for shape ≪ 1 the cdf (∝ x^shape) climbs on a log scale of x: geometric pieces
        points = [0.0, *q[q > 0], *(p["scale"] * 10.0 ** -np.r_[1:20, 32, 64, 128])]
    else:
        m, s = p.values()
        centre = max(m, 0.0) if name != "normal" else m
        # below 0 a truncated/censored normal's tail decays over σ²/|μ|, a logistic's over σ
        width = s if (m >= 0 or "logistic" in name) else min(s, s * s / abs(m))
        points = [centre + width * c for c in (-64, -16, -4, -1, -0.25, 0, 0.25, 1, 4, 16, 64)]
        if name != "normal":
            points = [0.0, *(x for x in points if x > 0)]
    points = sorted({*points, y})
    ends = ([-np.inf] if name == "normal" else []) + points + [np.inf]
    if name.startswith("trunc") and p["loc"] < 0:
        with mp.workdps(20):
            cdf, y_mp = mp_cdf(name, p), mp.mpf(y)
            return float(
                mp.quad(lambda x: (cdf(x) - (1 if x >= y_mp else 0)) ** 2, [mp.mpf(e) for e in ends])
            )
    cdf, sf = float_cdf(name, p)
    total = 0.0
    for a, b in itertools.pairwise(ends):  # y is an end: F² below it, (1 − F)² above
        f = sf if a >= y else cdf
        total += integrate.quad(lambda x, f=f: f(x) ** 2, a, b, epsabs=1e-20, epsrel=1e-10, limit=200)[0]
    return total


def scoringrules_crps(name: str, p: dict[str, np.ndarray], y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """scoringrules' CRPS, and where it is usable as a reference.

    Not where it is NaN, nor for a truncated family with its location below −3 scales, where
    its forms cancel (the module docstring; in ``regular``'s draws its truncated normal is 2e-4
    relative off at loc = −5.1σ, its truncated logistic 2e-8 at −8.4σ); ours are checked there
    by test_crps_matches_integral.
    """
    with np.errstate(all="ignore"):
        ref = _scoringrules_crps(name, p, y)
    usable = np.isfinite(ref)
    if name.startswith("trunc"):
        usable &= p["loc"] > -3 * p["scale"]
    return ref, usable


def _scoringrules_crps(name: str, p: dict[str, np.ndarray], y: np.ndarray) -> np.ndarray:
    if name == "normal":
        return sr.crps_normal(y, p["mean"], p["std"])
    if name == "csg0":
        return sr.crps_csg0(y, p["shape"], scale=p["scale"], shift=p["shift"])
    fn = {
        "truncnormal": sr.crps_tnormal,
        "cnormal": sr.crps_cnormal,
        "trunclogistic": sr.crps_tlogistic,
        "clogistic": sr.crps_clogistic,
    }[name]
    upper = p["loc"] + 600 * p["scale"] if "logistic" in name else np.inf  # see the module docstring
    return fn(y, p["loc"], p["scale"], lower=0.0, upper=upper)


# --------------------------------------------------------------------------------------------------
# CRPS


# Agreement with scoringrules to its own accuracy: its truncated normal's 1 − Φ(lo) cancels
# (3e-10 relative at loc = −2.6σ); torch's gammainc, under ensml's csg0, is good to only
# ~2e-9 relative for shapes above 20 (scipy's, under scoringrules', to 1e-15)
SR_RTOL = {"truncnormal": 1e-9, "csg0": 3e-8}


@pytest.mark.parametrize("name", PARAMETRIC)
def test_crps_matches_scoringrules(name: str) -> None:
    p, y = regular(name, 2000, np.random.default_rng(1))
    ours = get_family(name).crps(p, y)
    assert ours.dtype == np.float64 and ours.shape == (2000,) and np.all(np.isfinite(ours))
    ref, usable = scoringrules_crps(name, p, y)
    assert usable.mean() > 0.8
    np.testing.assert_allclose(ours[usable], ref[usable], rtol=SR_RTOL.get(name, 1e-12), atol=1e-13)


# (family, parameters, y): ordinary cases and the extremes the closed forms must survive
CRPS_CASES = [
    ("normal", (0.3, 1.7, -0.4)),
    ("normal", (1.0, 1e-7, 1.0 + 3e-7)),  # tiny scale
    ("normal", (5.5e4, 300.0, 5.5e4 - 420.0)),
    ("truncnormal", (1.0, 2.0, 0.5)),
    ("truncnormal", (1.0, 2.0, 0.0)),  # y exactly at the bound
    ("truncnormal", (-5.0, 1.0, 0.0)),  # scoringrules: 0.094834 for 0.094755
    ("truncnormal", (-5.0, 1.0, 0.3)),
    ("truncnormal", (-50.0, 1.0, 0.02)),  # scoringrules NaN from here down
    ("truncnormal", (-1e3, 1.0, 1e-3)),
    ("truncnormal", (-1e5, 1.0, 1e-5)),  # the textbook form was off by 5e4x here
    ("truncnormal", (-1.0, 1e-6, 2e-6)),  # tiny scale below 0: loc = −1e6 scales
    ("truncnormal", (1e-3, 1e-6, 0.0)),
    ("truncnormal", (5.5e4, 300.0, 5.5e4 + 10.0)),
    ("cnormal", (1.0, 2.0, 0.5)),
    ("cnormal", (1.0, 2.0, 0.0)),
    ("cnormal", (-5.0, 1.0, 0.0)),  # a point mass of 1 − 3e-7 at the observation
    ("cnormal", (-50.0, 1.0, 0.3)),
    ("cnormal", (0.3, 1e-6, 0.3 + 1e-6)),
    ("cnormal", (-1e-3, 1e-6, 0.0)),
    ("trunclogistic", (1.0, 2.0, 0.5)),
    ("trunclogistic", (1.0, 2.0, 0.0)),
    ("trunclogistic", (-5.0, 1.0, 0.0)),
    ("trunclogistic", (-50.0, 1.0, 0.3)),
    ("trunclogistic", (-1e3, 1.0, 1.0)),  # scoringrules NaN at any finite upper bound
    ("trunclogistic", (-1.0, 1e-6, 1e-6)),
    ("clogistic", (1.0, 2.0, 0.5)),
    ("clogistic", (1.0, 2.0, 0.0)),
    ("clogistic", (-5.0, 1.0, 0.0)),
    ("clogistic", (-50.0, 1.0, 0.3)),
    ("clogistic", (-1e3, 1.0, 2.0)),
    ("clogistic", (5.5e4, 300.0, 5.5e4 + 10.0)),
    ("csg0", (2.0, 1.0, 0.5, 1.0)),
    ("csg0", (2.0, 1.0, 0.5, 0.0)),
    ("csg0", (0.3, 2.0, 0.0, 0.0)),  # shift 0
    ("csg0", (0.05, 3.0, 0.0, 2.0)),  # shape ≪ 1
    ("csg0", (1e-3, 5.0, 0.0, 0.0)),
    ("csg0", (1e-3, 5.0, 0.2, 1.0)),
    ("csg0", (50.0, 0.1, 1.0, 3.0)),  # shape ≫ 1
    ("csg0", (500.0, 0.01, 0.0, 5.0)),
    ("csg0", (1.0, 1.0, 3.0, 0.0)),  # P(Y = 0) = 0.95
]


@pytest.mark.parametrize(("name", "case"), CRPS_CASES, ids=[f"{n}-{c}" for n, c in CRPS_CASES])
def test_crps_matches_integral(name: str, case: tuple[float, ...]) -> None:
    """Exact to rounding: 1e-9 relative (csg0's gammainc in torch: ~1e-11), and an absolute
    error of eps·max(|loc|, scale, y) (the rounding of the inputs themselves)."""
    *values, y = case
    p = _params(name, *values)
    ours = float(get_family(name).crps(p, y))
    ref = crps_integral(name, p, y)
    size = max(abs(v) for v in (*values, y))
    assert ours == pytest.approx(ref, rel=1e-9, abs=5e-14 * size)


def test_crps_float32_geopotential_sized() -> None:
    """float32 inputs around 5.5e4 are scored in float64: exact for the float32 values."""
    mu, s, y = np.float32(55012.3), np.float32(0.37), np.float32(55012.9)
    for name in ("normal", "truncnormal", "cnormal", "clogistic"):
        ours = get_family(name).crps(_params(name, mu, s), y)
        assert ours.dtype == np.float32
        ref = crps_integral(name, _params(name, float(mu), float(s)), float(y))
        assert float(ours) == pytest.approx(ref, rel=1e-6)


@pytest.mark.parametrize("name", BOUNDED)
def test_crps_all_zero_observations(name: str) -> None:
    """A dry day: every observation exactly 0 (the integral at y = 0 is in CRPS_CASES)."""
    p, _ = regular(name, 200, np.random.default_rng(2))
    ours = get_family(name).crps(p, np.zeros(200))
    assert np.all(np.isfinite(ours)) and np.all(ours >= 0)
    ref, usable = scoringrules_crps(name, p, np.zeros(200))
    np.testing.assert_allclose(ours[usable], ref[usable], rtol=1e-9, atol=1e-14)


@pytest.mark.parametrize("name", BOUNDED)
def test_crps_never_negative_at_a_point_mass(name: str) -> None:
    """With P(Y = 0) → 1 and y = 0 the closed forms cancel to ±eps; the CRPS stays ≥ 0."""
    fam = get_family(name)
    far = np.linspace(0.0, 60.0, 600)  # the location below 0 or the shift, in scales
    p = {"shape": 1.0, "scale": 1.0, "shift": far} if name == "csg0" else {"loc": -far, "scale": 1.0}
    assert np.all(fam.crps(p, 0.0) >= 0)


@pytest.mark.parametrize("name", BOUNDED)
def test_crps_below_support_adds_the_distance(name: str) -> None:
    p, _ = regular(name, 20, np.random.default_rng(3))
    fam = get_family(name)
    np.testing.assert_allclose(fam.crps(p, np.full(20, -0.7)), fam.crps(p, np.zeros(20)) + 0.7, rtol=1e-12)


def test_truncnormal_continuous_across_the_branches() -> None:
    """The Mills-ratio form (loc < 0) and the textbook form (loc ≥ 0) meet at loc = 0."""
    fam = get_family("truncnormal")
    y = np.array([0.0, 0.3, 2.0])
    below = fam.crps({"loc": -1e-12, "scale": 1.0}, y)
    above = fam.crps({"loc": 1e-12, "scale": 1.0}, y)
    np.testing.assert_allclose(below, above, rtol=1e-11)


# --------------------------------------------------------------------------------------------------
# σ → 0 and gradients


@pytest.mark.parametrize("name", ("normal", *LOC_SCALE))
def test_crps_tends_to_absolute_error(name: str) -> None:
    """|CRPS(σ) − |y⁺ − m|| ≤ E|X − m| + ½E|X − X′| ≤ 2E|X − m| = O(σ) with m = max(μ, 0)
    (at most 2·2 log 2·σ, the half-logistic's), and σ = 0 gives the limit exactly."""
    fam = get_family(name)
    mu, y = np.meshgrid([-2.0, -1e-3, 0.0, 1.5], [0.0, 0.7, 3.0])
    mu, y = mu.ravel(), y.ravel()
    m = mu if name == "normal" else np.maximum(mu, 0.0)
    ae = np.abs(y - m)
    gaps = []
    for sigma in (1e-2, 1e-4, 1e-6, 1e-9):
        gap = np.abs(fam.crps(_params(name, mu, np.full_like(mu, sigma)), y) - ae)
        assert np.all(gap <= 3 * sigma)
        gaps.append(gap.max())
    assert gaps == sorted(gaps, reverse=True)
    np.testing.assert_array_equal(fam.crps(_params(name, mu, np.zeros_like(mu)), y), ae)


def _crps_fn(name: str, lower: float | None = None):
    fam = get_family(name, lower=lower)
    return lambda *a: fam.crps(dict(zip(fam.params, a[:-1])), a[-1])


GRAD_INPUTS = {  # parameters and y away from kinks (y > 0, scale > 0, loc ≠ y)
    "normal": ([-1.0, 0.5, 2.0, 0.1], [0.7, 1.1, 0.5, 2.0], [0.3, -1.9, 0.8, 4.0]),
    "loc_scale": ([-1.3, 0.4, 2.0, -40.0], [0.7, 1.1, 0.5, 1.0], [0.3, 1.9, 0.8, 0.02]),
    "csg0": ([0.5, 2.0, 7.0, 30.0], [1.3, 0.4, 0.9, 0.2], [0.2, 0.7, 0.05, 1.1], [0.3, 1.9, 5.0, 4.0]),
}


@pytest.mark.parametrize("name", PARAMETRIC)
def test_gradcheck(name: str) -> None:
    """Analytic gradients in every parameter and y; csg0's shape through a central difference."""
    raw = GRAD_INPUTS[name if name in GRAD_INPUTS else "loc_scale"]
    args = tuple(torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in raw)
    assert torch.autograd.gradcheck(_crps_fn(name), args)


def test_csg0_shape_gradient_against_scipy() -> None:
    """∂CRPS/∂shape (a central difference of torch's gammainc) against a central difference of
    scoringrules' CRPS (scipy's gammainc): 1e-7 relative, but 2e-4 across torch's change of
    method at a = 20 (shape 19: a = shape + 1; shape 20: a = shape), where its values step."""
    fam = get_family("csg0")
    k = np.array([0.05, 0.3, 2.0, 7.0, 10.0, 15.0, 19.0, 20.0, 25.0, 60.0, 300.0])
    theta, d = 0.5, 0.4
    y = 1.1 * k * theta
    shape = torch.tensor(k, requires_grad=True)
    p = {"shape": shape, "scale": torch.full_like(shape, theta), "shift": torch.full_like(shape, d)}
    fam.crps(p, torch.tensor(y)).sum().backward()
    h = 1e-6 * k
    up, down = (sr.crps_csg0(y, k + e, scale=theta, shift=d) for e in (h, -h))
    ref = (up - down) / (2 * h)
    rtol = np.where(np.isin(k, [19.0, 20.0]), 2e-4, 1e-7)
    assert np.all(np.abs(shape.grad.numpy() - ref) <= rtol * np.abs(ref)), (shape.grad.numpy() - ref) / ref


def test_gradcheck_bqn() -> None:
    alpha = torch.tensor(np.cumsum(np.random.default_rng(4).exponential(1.0, (9, 3)), axis=0) - 3.0)
    y = torch.tensor([-0.37, 0.81, 2.93], dtype=torch.float64)
    args = (*(a.clone().requires_grad_() for a in alpha), y.requires_grad_())
    assert torch.autograd.gradcheck(_crps_fn("bqn"), args, fast_mode=True)


@pytest.mark.parametrize("name", PARAMETRIC)
def test_gradients_finite_at_bound_and_sigma_zero(name: str) -> None:
    """y = 0 (the kink of the bounded families), σ = 0 (a point mass), shift = 0: finite."""
    fam = get_family(name)
    y = [0.0, 0.0, 1.5, 0.0]
    if name == "csg0":
        cases = [([0.5, 3.0, 1.0, 0.02], [1.0, 0.2, 2.0, 1.0], [0.0, 0.5, 0.0, 0.0])]
    else:
        loc = [-1.0, 0.0, 2.0, -40.0]
        cases = [(loc, [0.0] * 4), (loc, [1.0] * 4)]
    for values in cases:
        args = [torch.tensor(v, dtype=torch.float64, requires_grad=True) for v in (*values, y)]
        out = fam.crps(dict(zip(fam.params, args[:-1])), args[-1])
        grads = torch.autograd.grad(out.sum(), args)
        assert torch.isfinite(out).all()
        assert all(torch.isfinite(g).all() for g in grads), grads


def test_torch_equals_numpy_and_keeps_dtype() -> None:
    for name in PARAMETRIC:
        fam = get_family(name)
        p, y = regular(name, 30, np.random.default_rng(5))
        ref = fam.crps(p, y)
        got = fam.crps({k: torch.tensor(v) for k, v in p.items()}, torch.tensor(y))
        np.testing.assert_allclose(got.numpy(), ref, rtol=1e-13)
        got32 = fam.crps({k: torch.tensor(v).float() for k, v in p.items()}, torch.tensor(y).float())
        assert got32.dtype == torch.float32
        ref32 = fam.crps({k: v.astype(np.float32) for k, v in p.items()}, y.astype(np.float32))
        assert ref32.dtype == np.float32


# --------------------------------------------------------------------------------------------------
# Log score


@pytest.mark.parametrize("name", PARAMETRIC)
def test_log_score_matches_scipy(name: str) -> None:
    p, y = regular(name, 300, np.random.default_rng(6))
    got = get_family(name).log_score(p, y)
    np.testing.assert_allclose(got, ScipyRef(name, p).log_score(y), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", ("cnormal", "clogistic", "csg0"))
def test_log_score_point_mass(name: str) -> None:
    """−log P(Y = 0) at y = 0; +inf below the support."""
    fam = get_family(name)
    p, _ = regular(name, 20, np.random.default_rng(7))
    with np.errstate(divide="ignore"):  # P(Y = 0) may underflow to 0: both sides +inf
        np.testing.assert_allclose(fam.log_score(p, np.zeros(20)), -np.log(fam.cdf(p, 0.0)), rtol=1e-10)
    assert np.all(fam.log_score(p, np.full(20, -1.0)) == np.inf)


@pytest.mark.parametrize(("mu", "s", "y"), [(-1e3, 1.0, 1e-3), (-1e5, 1.0, 1e-5), (-1.0, 1e-8, 1e-8)])
def test_log_score_truncnormal_far_below_zero(mu: float, s: float, y: float) -> None:
    """−log(φ(z)/(σΦ(−lo))) in 40 digits; scipy's truncnorm.logpdf loses 6e-7 nats at loc =
    −1e5σ and 2 nats at loc = −1e8σ (its (z² − lo²)/2 cancels), ensml does not."""
    with mp.workdps(40):
        m, sg, yy = (mp.mpf(v) for v in (mu, s, y))
        mass = mp.erfc(-m / (sg * mp.sqrt(2))) / 2  # P(X ≥ 0) = Φ(μ/σ)
        ref = float(-(mp.log(mp.npdf((yy - m) / sg)) - mp.log(sg) - mp.log(mass)))
    assert float(get_family("truncnormal").log_score({"loc": mu, "scale": s}, y)) == pytest.approx(
        ref, rel=1e-13
    )


def test_log_score_bqn_refused() -> None:
    fam = get_family("bqn:3")
    with pytest.raises(EnsmlError, match="log score of the bqn:3 family is not defined"):
        fam.log_score({f"alpha{j}": float(j) for j in range(4)}, 1.0)


# --------------------------------------------------------------------------------------------------
# cdf, ppf, quantiles


@pytest.mark.parametrize("name", PARAMETRIC)
def test_cdf_and_ppf_match_scipy(name: str) -> None:
    fam = get_family(name)
    p, y = regular(name, 300, np.random.default_rng(8))
    ref = ScipyRef(name, p)
    x = np.concatenate([y[:150], -y[150:]])  # some below the support
    np.testing.assert_allclose(fam.cdf(p, x), ref.cdf(x), rtol=1e-10, atol=1e-14)
    u = np.random.default_rng(9).uniform(0, 1, 300)
    np.testing.assert_allclose(fam.ppf(p, u), ref.ppf(u), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(fam.exceedance(p, 1.3), 1 - ref.cdf(np.float64(1.3)), rtol=1e-10, atol=1e-11)


@pytest.mark.parametrize("name", ("truncnormal", "trunclogistic"))
@pytest.mark.parametrize("mu", [-50.0, -500.0, -5e4])
def test_truncated_far_below_zero(name: str, mu: float) -> None:
    """loc ≪ 0: the tails underflow in float64 (P(X > 0) = 1e-543 at loc = −50σ); the cdf and
    quantiles come from the ratio of the tails, against mpmath."""
    fam = get_family(name)
    p = {"loc": mu, "scale": 1.0}
    width = 1.0 / abs(mu) if name == "truncnormal" else 1.0  # the distribution's own scale
    x = width * np.array([1e-6, 0.1, 1.0, 3.0, 10.0])
    cdf = mp_cdf(name, p)
    with mp.workdps(30):
        ref = np.array([float(cdf(mp.mpf(v))) for v in x])
    got = fam.cdf(p, x)
    np.testing.assert_allclose(got, ref, rtol=5e-9)  # 1 − ratio at x = 1e-6 of the width
    np.testing.assert_allclose(fam.ppf(p, got), x, rtol=1e-8)
    assert np.all(np.isfinite(fam.sample(p, 100, np.random.default_rng(0))))


@pytest.mark.parametrize("name", [*PARAMETRIC, "bqn"])
def test_ppf_inverts_cdf(name: str) -> None:
    fam = get_family(name, lower=0.0)
    if name == "bqn":
        alpha = np.cumsum(np.random.default_rng(10).exponential(1.0, (9, 50)), axis=0) - 1.0
        p = dict(zip(fam.params, alpha))
    else:
        p, _ = regular(name, 50, np.random.default_rng(10))
    u = np.random.default_rng(11).uniform(0.02, 0.98, 50)
    x = fam.ppf(p, u)
    inside = x > 1e-9  # a point mass at 0 maps every u below it there
    # bqn: its cdf inverts the quantile function on 1001 levels, linearly between
    tol = 2e-3 if name == "bqn" else 1e-9
    np.testing.assert_allclose(fam.cdf(p, x)[inside], u[inside], rtol=tol, atol=tol * 1e-2)
    np.testing.assert_allclose(fam.ppf(p, fam.cdf(p, x))[inside], x[inside], rtol=tol)


@pytest.mark.parametrize("name", [*BOUNDED, "bqn"])
def test_quantiles_never_below_zero(name: str) -> None:
    fam = get_family(name, lower=0.0)
    if name == "bqn":
        alpha = np.cumsum(np.random.default_rng(12).exponential(1.0, (9, 100)), axis=0) - 5.0
        p = dict(zip(fam.params, alpha))
    elif name == "csg0":
        p = {"shape": np.full(4, 0.3), "scale": np.full(4, 2.0), "shift": np.array([0.0, 1.0, 5.0, 50.0])}
    else:
        p = {"loc": np.array([-1e5, -30.0, -1.0, 0.0, 2.0]), "scale": np.array([1.0, 1.0, 1e-8, 0.0, 3.0])}
    q = fam.quantiles(p, [1e-12, 1e-6, 0.01, 0.5, 0.99, 1 - 1e-9])
    assert np.all(q >= 0) and np.all(np.isfinite(q))
    assert np.all(np.diff(q, axis=0) >= 0)


def test_quantiles_axis() -> None:
    fam = get_family("cnormal")
    p = {"loc": np.linspace(-1, 2, 12).reshape(3, 4), "scale": np.full((1, 4), 0.5)}
    levels = [0.1, 0.25, 0.5, 0.75, 0.9]
    first = fam.quantiles(p, levels)
    assert first.shape == (5, 3, 4)
    for i, tau in enumerate(levels):
        np.testing.assert_array_equal(first[i], fam.ppf(p, tau))
    np.testing.assert_array_equal(fam.quantiles(p, levels, axis=-1), np.moveaxis(first, 0, -1))
    np.testing.assert_array_equal(fam.quantiles(p, levels, axis=1), np.moveaxis(first, 0, 1))
    assert fam.quantiles({"loc": 1.0, "scale": 2.0}, 0.5).shape == (1,)


# --------------------------------------------------------------------------------------------------
# Samples, Monte Carlo CRPS, PIT


def _moments(name: str, p: dict[str, float]) -> tuple[float, float, float]:
    """(mean, variance, P(Y = 0)) from the scipy cdf: E Y = ∫S, E Y² = 2∫xS over the support."""
    if name == "normal":
        return p["mean"], p["std"] ** 2, 0.0
    ref = ScipyRef(name, {k: np.float64(v) for k, v in p.items()})
    m1 = integrate.quad(lambda x: 1 - ref.cdf(np.float64(x)), 0, np.inf, epsabs=1e-12)[0]
    m2 = integrate.quad(lambda x: 2 * x * (1 - ref.cdf(np.float64(x))), 0, np.inf, epsabs=1e-12)[0]
    return m1, m2 - m1 * m1, float(ref.cdf(np.float64(0.0)))


SAMPLE_CASES = {
    "normal": (0.3, 1.7),
    "truncnormal": (-0.5, 1.2),
    "trunclogistic": (0.4, 0.8),
    "cnormal": (0.3, 1.0),
    "clogistic": (-0.2, 0.9),
    "csg0": (0.6, 2.0, 0.4),
}


@pytest.mark.parametrize("name", PARAMETRIC)
def test_sample_moments(name: str) -> None:
    fam = get_family(name)
    p = _params(name, *SAMPLE_CASES[name])
    n = 200_000
    x = fam.sample(p, n, np.random.default_rng(13))
    assert x.shape == (n,)
    mean, var, p0 = _moments(name, p)
    assert abs(x.mean() - mean) < 5 * math.sqrt(var / n)
    se_var = math.sqrt((np.mean((x - x.mean()) ** 4) - var**2) / n)
    assert abs(x.var() - var) < 5 * se_var
    assert abs(np.mean(x == 0) - p0) < 5 * math.sqrt(max(p0 * (1 - p0), 1e-12) / n)
    if name == "csg0":  # the closed-form mean
        assert float(fam.mean(p)) == pytest.approx(mean, rel=1e-9)


def test_sample_axis_and_shape() -> None:
    fam = get_family("csg0")
    p = {"shape": np.full((2, 3), 0.5), "scale": 1.0, "shift": 0.1}
    assert fam.sample(p, 7, np.random.default_rng(0)).shape == (7, 2, 3)
    assert fam.sample(p, 7, np.random.default_rng(0), axis=-1).shape == (2, 3, 7)
    np.testing.assert_array_equal(
        fam.sample(p, 7, np.random.default_rng(1), axis=-1),
        np.moveaxis(fam.sample(p, 7, np.random.default_rng(1)), 0, -1),
    )


@pytest.mark.parametrize("name", [*PARAMETRIC, "bqn"])
def test_crps_equals_monte_carlo(name: str) -> None:
    """CRPS = E|X − y| − ½E|X − X′|: the mean of |x − y| − ½|x − x′| over independent pairs is
    unbiased; summed over 10 forecasts it agrees within 5 standard errors."""
    fam = get_family(name, lower=0.0)
    rng = np.random.default_rng(14)
    if name == "bqn":
        alpha = np.cumsum(rng.exponential(0.7, (9, 10)), axis=0) - 1.5  # a point mass at 0
        p = dict(zip(fam.params, alpha))
        y = np.abs(rng.normal(1.0, 2.0, 10))
    else:
        p, y = regular(name, 10, rng)
    n = 20_000
    x, x2 = fam.sample(p, n, rng), fam.sample(p, n, rng)
    d = np.abs(x - y) - 0.5 * np.abs(x - x2)
    mc, se = d.mean(0).sum(), math.sqrt((d.var(0) / n).sum())
    assert abs(fam.crps(p, y).sum() - mc) < 5 * se, (fam.crps(p, y).sum(), mc, se)


@pytest.mark.parametrize("name", ("csg0", "cnormal", "truncnormal"))
def test_randomised_pit_is_uniform(name: str) -> None:
    fam = get_family(name)
    rng = np.random.default_rng(15)
    p, _ = regular(name, 4000, rng)
    if name != "truncnormal":
        p[fam.params[0]] = p[fam.params[0]] * 0.3  # more weight at 0: ~35% of the draws
    y = fam.sample(p, 1, rng)[0]
    assert name == "truncnormal" or np.mean(y == 0) > 0.2
    pit = fam.pit(p, y, rng)
    assert stats.kstest(pit, "uniform").pvalue > 0.01
    at_zero = y == 0
    assert np.all(pit[at_zero] <= fam.cdf(p, 0.0)[at_zero])
    np.testing.assert_array_equal(fam.pit(p, y), fam.cdf(p, y))  # without rng: F(y)
    if name != "truncnormal":
        assert stats.kstest(fam.pit(p, y), "uniform").pvalue < 1e-6  # F(y) alone is not uniform


# --------------------------------------------------------------------------------------------------
# BQN


def _scaled_first_guess(degree: int, c: float, s: float, n: int) -> dict[str, np.ndarray]:
    fam = get_family(f"bqn:{degree}")
    return {k: np.full(n, c + s * b) for k, b in zip(fam.params, fam.first_guess())}


@pytest.mark.parametrize("degree", [8, 12, 20])
def test_bqn_first_guess_approximates_the_normal(degree: int) -> None:
    """The expected CRPS under N(c, s²) observations is within 1% of the normal's s/√π.

    Pointwise the approximation is coarser at low degree: a Bernstein polynomial stays within
    its coefficients (±1.59 for degree 8), so its tails are light and its CRPS at y = c is
    5.7% below the normal's at degree 8, 3.3% at 12, 1.8% at 20.
    """
    c, s = 2.0, 3.0
    y = c + s * stats.norm.ppf((np.arange(2000) + 0.5) / 2000)
    fam = get_family(f"bqn:{degree}")
    p = _scaled_first_guess(degree, c, s, y.size)
    assert fam.crps(p, y).mean() == pytest.approx(s / math.sqrt(math.pi), rel=0.01)
    grid = np.linspace(c - 4 * s, c + 4 * s, 41)
    rel = fam.crps(_scaled_first_guess(degree, c, s, 41), grid) / sr.crps_normal(grid, c, s) - 1
    assert np.max(np.abs(rel)) < {8: 0.06, 12: 0.035, 20: 0.02}[degree]


@pytest.mark.parametrize("lower", [None, 0.0])
def test_bqn_midpoint_crps_equals_pinball_integral(lower: float | None) -> None:
    """CRPS = 2∫₀¹ ρ_τ(y − Q(τ)) dτ; the 100-level midpoint rule is within 3e-4 of adaptive
    quadrature (the pinball loss has a kink where Q(τ) = y)."""
    fam = get_family("bqn:12", lower=lower)
    alpha = np.cumsum(np.random.default_rng(16).exponential(1.0, 13)) - 3.0
    p = dict(zip(fam.params, alpha))
    for y in (-1.0, 0.0, 0.3, 2.0, 7.0):

        def pinball(tau: float, y: float = y) -> float:
            q = float(bernstein_basis(tau, 12) @ alpha)
            q = q if lower is None else max(q, lower)
            return 2 * max(tau * (y - q), (tau - 1) * (y - q))

        ref = integrate.quad(pinball, 0, 1, limit=200, epsabs=1e-13, epsrel=1e-12)[0]
        assert float(fam.crps(p, y)) == pytest.approx(ref, rel=3e-4)


@settings(max_examples=25, deadline=None)
@given(
    degree=st.sampled_from([2, 8, 13]),
    raw=st.lists(st.floats(-60, 60), min_size=4 * 31, max_size=4 * 31),
    center=st.floats(-5.5e4, 5.5e4),
    spread=st.floats(1e-3, 1e3),
    unit=st.floats(1e-2, 1e2),
)
def test_bqn_link_is_monotone(
    degree: int, raw: list[float], center: float, spread: float, unit: float
) -> None:
    fam = get_family(f"bqn:{degree}")
    r = torch.tensor(raw, dtype=torch.float64)[: 4 * (degree + 1)].reshape(degree + 1, 4)
    alpha = fam.link(list(r), torch.full((4,), center, dtype=torch.float64), torch.tensor(spread), unit)
    a = torch.stack([alpha[k] for k in fam.params])
    assert torch.isfinite(a).all()
    assert (torch.diff(a, dim=0) >= 0).all()
    fam.check_params({k: v.numpy() for k, v in alpha.items()}, "the link")


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_bqn_link_zero_is_the_first_guess(dtype: torch.dtype) -> None:
    fam = get_family("bqn")
    center, spread = torch.tensor([2.0, -1.0], dtype=dtype), torch.tensor([3.0, 0.5], dtype=dtype)
    zeros = [torch.zeros(2, dtype=dtype)] * (fam.degree + 1)
    alpha = fam.link(zeros, center, spread, unit=1.0)
    want = center.double()[:, None] + spread.double()[:, None] * torch.tensor(fam.first_guess())
    got = torch.stack([alpha[k] for k in fam.params], dim=-1)
    assert got.dtype == dtype
    torch.testing.assert_close(got.double(), want, rtol=1e-5 if dtype == torch.float32 else 1e-12, atol=1e-6)


def test_bqn_check_params_refuses_decreasing() -> None:
    fam = get_family("bqn:3")
    p = {"alpha0": [0.0, 0.0], "alpha1": [1.0, 1.0], "alpha2": [2.0, 0.5], "alpha3": [3.0, 3.0]}
    with pytest.raises(EnsmlError, match=r"non-decreasing.*at 1 point") as err:
        fam.crps(p, [1.0, 1.0])
    assert "\n" not in str(err.value)


def test_bqn_names() -> None:
    fam = get_family("bqn:12")
    assert fam.degree == 12 and fam.params[-1] == "alpha12" and fam.name == "bqn:12"
    assert get_family("bqn").degree == 8
    for bad, match in (("bqn:1", "degree must be 2"), ("bqn:x", "unknown distribution 'bqn:x'")):
        with pytest.raises(EnsmlError, match=match) as err:
            get_family(bad)
        assert "\n" not in str(err.value)
    assert get_family("bqn", lower=0.0).lower == 0.0 and get_family("bqn").lower is None


# --------------------------------------------------------------------------------------------------
# Bad inputs, NaN/Inf, xarray


def test_unknown_family_lists_the_known_ones() -> None:
    with pytest.raises(EnsmlError) as err:
        get_family("gamma")
    msg = str(err.value)
    assert "\n" not in msg and "'gamma'" in msg
    assert all(name in msg for name in (*PARAMETRIC, "bqn"))


@pytest.mark.parametrize("name", [*PARAMETRIC, "bqn:3"])
def test_nan_gives_nan_and_inf_is_refused(name: str) -> None:
    fam = get_family(name, lower=0.0)
    p = {k: np.array([1.0 + j, 1.0 + j, 1.0 + j]) for j, k in enumerate(fam.params)}
    first = fam.params[0]
    p[first] = np.array([np.nan, p[first][1], p[first][2]])
    y = np.array([0.5, np.nan, 0.5])
    out = fam.crps(p, y)
    assert np.isnan(out[:2]).all() and np.isfinite(out[2])
    assert np.isnan(fam.cdf(p, y)[:2]).all() and np.isnan(fam.ppf(p, 0.5)[0])
    for k in fam.params:
        for inf in (np.inf, -np.inf):
            bad = {**p, k: np.array([1.0, inf, 1.0])}
            with pytest.raises(EnsmlError, match=k):
                fam.crps(bad, np.ones(3))
    with pytest.raises(EnsmlError, match="infinite"):
        fam.crps(p, np.array([0.5, 0.5, np.inf]))


@pytest.mark.parametrize(
    ("name", "param", "value", "match"),
    [
        ("normal", "std", -1.0, r"std out of range at 1 point\(s\) \(needs a finite value >= 0, found -1\)"),
        ("cnormal", "scale", -0.1, "scale out of range"),
        ("csg0", "shape", 0.0, "shape out of range.*> 0"),
        ("csg0", "scale", -2.0, "scale out of range"),
        ("csg0", "shift", -0.5, "shift out of range.*>= 0"),
    ],
)
def test_check_params_out_of_range(name: str, param: str, value: float, match: str) -> None:
    fam = get_family(name)
    p = {k: np.ones(3) for k in fam.params}
    p[param] = np.array([1.0, value, 1.0])
    with pytest.raises(EnsmlError, match=match) as err:
        fam.check_params(p, "forecast x.nc")
    assert str(err.value).startswith("forecast x.nc") and "\n" not in str(err.value)
    with pytest.raises(EnsmlError, match="has no shift"):
        get_family("csg0").check_params({"shape": 1.0, "scale": 1.0}, "forecast x.nc")


@pytest.mark.parametrize("name", BOUNDED)
def test_check_obs_refuses_negative(name: str) -> None:
    fam = get_family(name)
    fam.check_obs(np.array([0.0, 1.0, np.nan]), "obs.nc")
    with pytest.raises(EnsmlError, match=r"obs.nc.*2 value\(s\) below 0.*min -3") as err:
        fam.check_obs(np.array([0.0, -1.0, -3.0]), "obs.nc")
    assert "\n" not in str(err.value)
    get_family("normal").check_obs(np.array([-3.0]), "obs.nc")


def test_xarray_inputs_give_dataarrays_lazily() -> None:
    import dask
    from dask.callbacks import Callback

    fam = get_family("csg0")
    p, y = regular("csg0", 40, np.random.default_rng(17))
    ref = fam.crps(p, y)
    da = {k: xr.DataArray(v, dims="x") for k, v in p.items()}
    out = fam.crps(da, xr.DataArray(y, dims="x"))
    assert isinstance(out, xr.DataArray) and out.dims == ("x",)
    np.testing.assert_allclose(
        out.values, ref, rtol=1e-13
    )  # the same formula, vectorised otherwise: float64 rounding

    computes = []

    class Count(Callback):
        def _start(self, dsk):
            computes.append(1)

    lazy = {k: v.chunk(x=10) for k, v in da.items()}
    with Count():
        out = fam.crps(lazy, xr.DataArray(y, dims="x").chunk(x=10))
        assert out.chunks is not None and not computes  # nothing computed by the call
    np.testing.assert_allclose(out.values, ref, rtol=1e-13)
    # a bad value in a lazy input is found when computed, in its chunk
    bad = {**lazy, "scale": lazy["scale"].where(lazy["scale"].x != 33, -1.0)}
    out = fam.crps(bad, xr.DataArray(y, dims="x"))
    with pytest.raises(EnsmlError, match="scale out of range"), dask.config.set(scheduler="sync"):
        out.compute()
    # an unnamed array beside DataArrays would broadcast as an outer product (x, dim_0)
    assert fam.crps(da, 0.5).dims == ("x",)
    with pytest.raises(EnsmlError, match="the observation is an array of shape"):
        fam.crps(da, y)


# --------------------------------------------------------------------------------------------------
# Model outputs → parameters, file attributes


def test_from_moments() -> None:
    mu, sigma = np.array([0.5, 3.0, 40.0]), np.array([0.2, 1.5, 9.0])
    for name in ("normal", *LOC_SCALE):
        p = get_family(name).from_moments(mu, sigma)
        kernel = stats.logistic if "logistic" in name else stats.norm
        parent = kernel(*p.values())
        np.testing.assert_allclose(parent.mean(), mu)
        np.testing.assert_allclose(parent.std(), sigma, rtol=1e-12)
    assert LOGISTIC_SCALE == pytest.approx(math.sqrt(3) / math.pi)
    fam = get_family("csg0")
    p = fam.from_moments(mu, sigma, unit=0.01)  # mu ≫ unit: the softplus is the identity
    gamma = stats.gamma(p["shape"], scale=p["scale"])
    np.testing.assert_allclose(gamma.mean(), mu, rtol=1e-12)
    np.testing.assert_allclose(gamma.std(), sigma, rtol=1e-12)
    np.testing.assert_array_equal(p["shift"], 0.0)
    extra = torch.tensor([-50.0, 0.0, 5.0], dtype=torch.float64)
    pt = fam.from_moments(torch.tensor(mu), torch.tensor(sigma), extra, unit=0.01)
    pn = fam.from_moments(mu, sigma, np.array([-50.0, 0.0, 5.0]), unit=0.01)
    for k in fam.params:
        np.testing.assert_allclose(pt[k].numpy(), pn[k], rtol=1e-12)
    assert np.all(pn["shift"] >= 0) and np.all(np.isfinite(pn["shift"]))
    fam.check_params(pn, "from_moments")


def test_param_attrs() -> None:
    attrs = get_family("csg0").param_attrs("tp", {"long_name": "total precipitation", "units": "m"})
    assert (
        attrs["shape"]["units"] == "1" and attrs["scale"]["units"] == "m" and attrs["shift"]["units"] == "m"
    )
    assert all(
        a["ensml_family"] == "csg0" and "total precipitation" in a["long_name"] for a in attrs.values()
    )
    attrs = get_family("normal").param_attrs("z", {"units": "m2 s-2"})
    assert set(attrs) == {"mean", "std"} and attrs["std"]["units"] == "m2 s-2"


@pytest.mark.parametrize("name", ["cnormal", "clogistic", "truncnormal", "trunclogistic"])
def test_closed_form_means_match_integration(name: str) -> None:
    """The bounded location-scale families' means in closed form: against ∫(1 − F) over [0, ∞)."""
    from scipy.integrate import quad

    family = get_family(name)
    for loc, scale in [(2.0, 1.0), (-1.5, 0.7), (-6.0, 1.0), (0.0, 3.0)]:
        params = {"loc": np.array(loc), "scale": np.array(scale)}
        upper = max(loc, 0.0) + 60 * scale

        def survival(x: float, p: dict = params) -> float:
            return 1.0 - float(family.cdf(p, np.array(x)))

        expected = quad(survival, 0.0, upper, limit=400)[0]
        np.testing.assert_allclose(family.mean(params), expected, rtol=1e-6, atol=1e-12)
    far = {"loc": np.array([-1e4]), "scale": np.array([1.0])}
    mean = family.mean(far)  # a truncated family's mean stays inside its support (> 0); censored: ≥ 0
    assert np.isfinite(mean).all() and ((mean > 0) if name.startswith("trunc") else (mean >= 0)).all()
