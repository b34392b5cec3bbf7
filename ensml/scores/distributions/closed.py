"""Closed-form CRPS and log scores of the predictive families, in torch (float64 inside).

Pure functions of tensors: parameters and observations broadcast together, the result has
their shape and is differentiable in every parameter. They are evaluated in float64 and in a
form that stays finite where the textbook forms overflow or cancel: σ → 0 (then the CRPS tends
to the absolute error), observations exactly at the bound 0, and locations far below it
(truncated families: ratios of normal tails through ``log_ndtr``).

The formulas are the lower-bound-at-zero cases of the generalised truncated/censored normal
and logistic CRPS of Jordan, Krüger & Lerch (2019, J. Stat. Softw. 90(12), scoringRules,
eqs. for ``crps_gtcnorm``/``crps_gtclogis``), and of the censored shifted gamma of Scheuerer &
Hamill (2015, Mon. Wea. Rev. 143, 4578, eq. 10). With ``ω = (y − μ)/σ``, ``lo = −μ/σ`` and
``z = max(ω, lo)``:

* censored normal:  ``σ[|ω−z| + μ/σ·Φ(lo)² + z(2Φ(z)−1) + 2φ(z) − 2φ(lo)Φ(lo) − Φ(−√2 lo)/√π]``
* truncated normal: ``σ[|ω−z| + z(1 − 2Φ(−z)/Φ(−lo)) + 2φ(z)/Φ(−lo) − Φ(−√2 lo)/(√π Φ(−lo)²)]``
  (for ``lo > 0`` through Mills ratios, see :func:`_tnormal`)
* censored logistic: ``σ[|ω−z| − z + 2 softplus(z) − 1 + F(lo) − softplus(lo)]``
* truncated logistic: as ``crps_gtclogis`` with no point masses (see :func:`crps_tlogistic`).

Units: every CRPS is in the units of the observation.
"""

from __future__ import annotations

import math
from typing import Any

import torch

_SQRT2 = math.sqrt(2.0)
_SQRT_PI = math.sqrt(math.pi)
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


def _ndtr(x: torch.Tensor) -> torch.Tensor:
    return torch.special.ndtr(x)


def _softplus(x: torch.Tensor) -> torch.Tensor:
    """log(1 + eˣ) to rounding everywhere: torch's softplus returns x itself above 20 (off by
    e⁻²⁰ = 2e-9, which the logistic forms multiply by their O(lo) terms)."""
    return torch.logaddexp(x, torch.zeros_like(x))


def _log_pdf(x: torch.Tensor) -> torch.Tensor:
    return -0.5 * x * x - _LOG_SQRT_2PI


def _at_zero(body, mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """``body(μ, σ, z, lo, u)`` where σ > 0, and the CRPS of the point mass at ``max(μ, 0)`` where σ = 0.

    ``z = (max(y, 0) − μ)/σ``, ``lo = −μ/σ`` and ``u = z − lo = max(y, 0)/σ`` (exact, not a
    difference) are computed with σ = 1 where σ = 0, so that neither branch of the ``where``
    holds a NaN that could reach a gradient. Observations below 0 (outside the support) add
    their distance to it, ``max(−y, 0)``.
    """
    mu, sigma, y = torch.broadcast_tensors(mu, sigma, y)
    pos = sigma > 0
    s = torch.where(pos, sigma, torch.ones_like(sigma))
    yp = torch.clamp_min(y, 0.0)
    body_value = body(mu, s, (yp - mu) / s, -mu / s, yp / s)
    point = (yp - torch.clamp_min(mu, 0.0)).abs()
    # clamped at 0: with a point mass ≈ 1 at y the forms cancel to ±eps·σ, and a CRPS is ≥ 0
    return torch.clamp_min(-y, 0.0) + torch.where(pos, torch.clamp_min(body_value, 0.0), point)


def crps_logistic(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the logistic L(μ, σ): ``σ[ω − 2 log F(ω) − 1] = |y − μ| + σ(2 softplus(−|ω|) − 1)``."""
    mu, sigma, y = torch.broadcast_tensors(mu, sigma, y)
    pos = sigma > 0
    s = torch.where(pos, sigma, torch.ones_like(sigma))
    d = y - mu
    body = s * (2.0 * _softplus(-(d / s).abs()) - 1.0)
    return d.abs() + torch.where(pos, body, torch.zeros_like(body))


def _cnormal(mu, s, z, lo, u):
    phi_l = _ndtr(lo)
    return s * (
        -lo * phi_l**2
        + z * torch.special.erf(z / _SQRT2)
        + 2.0 * torch.exp(_log_pdf(z))
        - 2.0 * torch.exp(_log_pdf(lo)) * phi_l
        - _ndtr(-_SQRT2 * lo) / _SQRT_PI
    )


def _mills(x: torch.Tensor) -> torch.Tensor:
    """Mills ratio ``R(x) = Φ(−x)/φ(x) = √(π/2) erfcx(x/√2)``, finite and exact for x ≥ 0."""
    return math.sqrt(math.pi / 2.0) * torch.special.erfcx(x / _SQRT2)


def _tnormal(mu, s, z, lo, u):
    # μ ≥ 0 (lo ≤ 0): P(X ≥ 0) ≥ ½, and the textbook form through log Φ is exact.
    # μ < 0 (lo > 0): the tail ratios as logs of size lo²/2 lose eps·lo² each, which the
    # O(lo) terms multiply into an absolute error ~eps·lo³·σ (0.3σ for a CRPS of 5e-6σ at
    # μ = −1e5σ). With the Mills ratio R and u = z − lo = y⁺/σ (exact) instead:
    # Φ(−z)/Φ(−lo) = e R(z)/R(lo), φ(z)/Φ(−lo) = e/R(lo) with e = exp(−u(z + lo)/2), and
    # Φ(−√2 lo)/(√π Φ(−lo)²) = √2 R(√2 lo)/R(lo)²: the absolute error is then ~eps·|μ|.
    upper = lo > 0
    lo_t = torch.where(upper, torch.zeros_like(lo), lo)  # each branch on inputs finite for it
    z_t = torch.where(upper, u, z)
    log_mass = torch.special.log_ndtr(-lo_t)  # log P(X ≥ 0) of the parent normal
    ratio = torch.exp(torch.special.log_ndtr(-z_t) - log_mass)  # Φ(−z)/Φ(−lo) ≤ 1
    textbook = (
        z_t * (1.0 - 2.0 * ratio)
        + 2.0 * torch.exp(_log_pdf(z_t) - log_mass)
        - torch.exp(torch.special.log_ndtr(-_SQRT2 * lo_t) - 2.0 * log_mass) / _SQRT_PI
    )
    lo_m = torch.where(upper, lo, torch.ones_like(lo))
    z_m = torch.where(upper, z, 1.0 + u)
    r_lo = _mills(lo_m)
    e = torch.exp(-0.5 * u * (z_m + lo_m))
    mills = (
        z_m * (1.0 - 2.0 * e * _mills(z_m) / r_lo) + 2.0 * e / r_lo - _SQRT2 * _mills(_SQRT2 * lo_m) / r_lo**2
    )
    return s * torch.where(upper, mills, textbook)


def _clogistic(mu, s, z, lo, u):
    sp = _softplus
    # −z + 2 softplus(z) = |z| + 2 softplus(−|z|), which does not cancel for large |z|
    return s * (z.abs() + 2.0 * sp(-z.abs()) - 1.0 + torch.sigmoid(lo) - sp(lo))


def _log_softplus_neg(x: torch.Tensor) -> torch.Tensor:
    """log(softplus(−x)) = log log(1 + e^−x), without underflow for large x (→ −x)."""
    big = x > 30
    return torch.where(big, -x, torch.log(_softplus(-torch.where(big, torch.zeros_like(x), x))))


def _tlogistic(mu, s, z, lo, u):
    # With p = F(−lo) the parent's mass above 0, the textbook form's c = 1/p terms cancel for
    # a location far below 0; regrouped, ``CRPS/σ = z + 2 softplus(−z)/p − lo − 2 softplus(−lo)/p
    # − (p + log(1 − p))/p²``, every term bounded (the last by a series for small p).
    sp = _softplus
    log_p = -sp(lo)
    p = torch.exp(log_p)
    # the series' first omitted term is p⁷/9 and the direct form loses eps/p: they meet near
    # p = 0.015 at ~2e-14 (at the former switch, 0.05, the series was 1e-10 off)
    small = p < 0.015
    ps = torch.where(small, p, torch.zeros_like(p))
    series = -(0.5 + ps / 3 + ps**2 / 4 + ps**3 / 5 + ps**4 / 6 + ps**5 / 7 + ps**6 / 8)
    pl = torch.where(small, torch.ones_like(p), p)
    direct = (pl - sp(-lo)) / pl**2  # log(1 − p) = log F(lo) = −softplus(−lo)
    g = torch.where(small, series, direct)
    t1 = z + 2.0 * torch.exp(_log_softplus_neg(z) - log_p)
    t2 = lo + 2.0 * torch.exp(_log_softplus_neg(lo) - log_p) + g
    return s * (t1 - t2)


def crps_cnormal(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the normal N(μ, σ²) censored at 0 (a point mass Φ(−μ/σ) at 0)."""
    return _at_zero(_cnormal, mu, sigma, y)


def crps_tnormal(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the normal N(μ, σ²) truncated to [0, ∞)."""
    return _at_zero(_tnormal, mu, sigma, y)


def crps_clogistic(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the logistic L(μ, σ) censored at 0 (a point mass F(−μ/σ) at 0)."""
    return _at_zero(_clogistic, mu, sigma, y)


def crps_tlogistic(mu: torch.Tensor, sigma: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the logistic L(μ, σ) truncated to [0, ∞).

    With ``F`` the standard logistic cdf and ``c = 1/F(−lo)`` (Jordan et al. 2019, no point masses):
    ``σ[−c z (1 + F(lo)) − 2c log F(−z) − c²(1 − F(lo) + lo F(lo)² − (1 − 2F(lo)) log F(−lo))]``,
    evaluated in the regrouped form of ``_tlogistic``, which stays exact for ``μ ≪ 0``.
    """
    return _at_zero(_tlogistic, mu, sigma, y)


class _GammaInc(torch.autograd.Function):
    """The regularised lower incomplete gamma P(a, x), differentiable in a as well as x.

    torch's ``gammainc`` has no gradient in the shape ``a``; here it is a central difference
    (step 1e-5·a, float64), accurate to about 1e-9 relative, which is what training needs.
    torch's ``gammainc`` itself is good to ~2e-9 relative only for a > 20 and steps by about
    that at a = 20 (scipy's is good to 1e-15), so a difference taken across a = 20 (a CRPS
    shape within 2e-4 of 19 or 20) is off by up to 1e-4 relative (tests/scores/test_distributions.py).
    """

    @staticmethod
    def forward(ctx: Any, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(a, x)
        return torch.special.gammainc(a, x)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> tuple:
        a, x = ctx.saved_tensors
        ga = gx = None
        if ctx.needs_input_grad[0]:
            h = 1e-5 * a
            da = (torch.special.gammainc(a + h, x) - torch.special.gammainc(a - h, x)) / (2 * h)
            ga = (grad * da).sum_to_size(a.shape)
        if ctx.needs_input_grad[1]:
            xs = torch.clamp_min(x, 1e-300)
            log_density = (a - 1) * torch.log(xs) - xs - torch.lgamma(a)
            dx = torch.where(x > 0, torch.exp(log_density), torch.zeros_like(x))
            gx = (grad * dx).sum_to_size(x.shape)
        return ga, gx


def gamma_cdf(x: torch.Tensor, shape: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """Gamma(shape, scale) cdf at ``x`` (0 below 0), differentiable in all three."""
    a, xs = torch.broadcast_tensors(shape, torch.clamp_min(x, 0.0) / scale)
    return _GammaInc.apply(a.contiguous(), xs.contiguous())


def crps_csg0(shape: torch.Tensor, scale: torch.Tensor, shift: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """CRPS of the censored shifted gamma: ``Y = max(0, X − shift)``, ``X ~ Gamma(shape, scale)``.

    Scheuerer & Hamill (2015), eq. 10, with ``k`` the shape, ``θ`` the scale, ``δ`` the shift,
    ``y⁺ = max(y, 0) + δ`` and ``F_k`` the Gamma(k, θ) cdf:
    ``y⁺(2F_k(y⁺) − 1) − θk/π·B(½, k + ½)(1 − F_2k(2δ)) + θk(1 + 2F_k(δ)F_k+1(δ) − F_k(δ)² −
    2F_k+1(y⁺)) − δF_k(δ)²``.
    """
    ys = torch.clamp_min(y, 0.0) + shift
    f_y = gamma_cdf(ys, shape, scale)
    f_2d = gamma_cdf(2.0 * shift, 2.0 * shape, scale)
    f_d = gamma_cdf(shift, shape, scale)
    f1_d = gamma_cdf(shift, shape + 1.0, scale)
    f1_y = gamma_cdf(ys, shape + 1.0, scale)
    log_beta = (
        torch.lgamma(torch.full_like(shape, 0.5)) + torch.lgamma(shape + 0.5) - torch.lgamma(shape + 1.0)
    )
    mean = shape * scale
    crps = (
        ys * (2.0 * f_y - 1.0)
        - mean / math.pi * torch.exp(log_beta) * (1.0 - f_2d)
        + mean * (1.0 + 2.0 * f_d * f1_d - f_d**2 - 2.0 * f1_y)
        - shift * f_d**2
    )
    # clamped at 0: with P(Y = 0) ≈ 1 and y = 0 the terms cancel to ±eps·(shift + mean)
    return torch.clamp_min(-y, 0.0) + torch.clamp_min(crps, 0.0)


__all__ = [
    "crps_clogistic",
    "crps_cnormal",
    "crps_csg0",
    "crps_logistic",
    "crps_tlogistic",
    "crps_tnormal",
    "gamma_cdf",
]
