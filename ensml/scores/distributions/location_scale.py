"""The normal and the normal and logistic families bounded at 0, with a location and a scale."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ensml.scores.distributions import closed
from ensml.scores.distributions.base import Family, _softplus_np

#: A logistic of standard deviation σ has scale σ·√3/π.
LOGISTIC_SCALE = math.sqrt(3.0) / math.pi


@dataclass(frozen=True)
class LocationScale(Family):
    """Normal or logistic, unbounded, truncated to [0, ∞) or censored at 0."""

    kernel: str = "normal"  # or "logistic"
    bound: str = "none"  # "none", "truncated" or "censored"

    @property
    def _loc(self) -> str:
        return self.params[0]

    @property
    def _scale(self) -> str:
        return self.params[1]

    @property
    def ranges(self) -> dict[str, Callable]:
        return {self._loc: np.isfinite, self._scale: lambda s: np.isfinite(s) & (s >= 0)}

    @property
    def range_text(self) -> dict[str, str]:
        return {self._loc: "a finite value", self._scale: "a finite value >= 0"}

    def param_meaning(self, param: str) -> tuple[str, bool]:
        if self.name == "normal":
            return ("mean" if param == "mean" else "standard deviation"), True
        parent = f"{'censored' if self.bound == 'censored' else 'truncated'} {self.kernel}'s parent"
        return (f"location ({parent})" if param == "loc" else f"scale ({parent})"), True

    def _crps_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        mu, s = p[self._loc], p[self._scale]
        if self.bound == "none":
            if self.kernel == "normal":
                from ensml.scores.gaussian import crps_gaussian

                return crps_gaussian(mu, s, y, check=False)
            return closed.crps_logistic(mu, s, y)
        fn = {
            ("normal", "truncated"): closed.crps_tnormal,
            ("normal", "censored"): closed.crps_cnormal,
            ("logistic", "truncated"): closed.crps_tlogistic,
            ("logistic", "censored"): closed.crps_clogistic,
        }[self.kernel, self.bound]
        return fn(mu, s, y)

    def _log_score_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        mu, s = p[self._loc], p[self._scale]
        z = (y - mu) / s
        if self.kernel == "normal":
            log_pdf = -0.5 * z * z - 0.5 * math.log(2 * math.pi) - torch.log(s)
            log_cdf_l = torch.special.log_ndtr(-mu / s)  # log P(X ≤ 0)
            log_sf_l = torch.special.log_ndtr(mu / s)  # log P(X ≥ 0)
        else:
            sp = closed._softplus
            log_pdf = -z - 2.0 * sp(-z) - torch.log(s)
            log_cdf_l, log_sf_l = -sp(mu / s), -sp(-mu / s)
        if self.bound == "none":
            return -log_pdf
        below = torch.full_like(y, math.inf)
        if self.bound == "truncated" and self.kernel == "normal":
            # for lo = −μ/σ > 0, (z² − lo²)/2 − log Φ(−lo) cancels (eps·lo² nats); with u = y/σ
            # and the Mills ratio R: u(u + 2 lo)/2 + log R(lo) + log σ + log √(2π) − log √(2π)
            lo = -mu / s
            upper = lo > 0
            lo_m = torch.where(upper, lo, torch.ones_like(lo))
            u = torch.clamp_min(y, 0.0) / s
            far = 0.5 * u * (u + 2.0 * lo_m) + torch.log(closed._mills(lo_m)) + torch.log(s)
            return torch.where(y < 0, below, torch.where(upper, far, -(log_pdf - log_sf_l)))
        if self.bound == "truncated":
            return torch.where(y < 0, below, -(log_pdf - log_sf_l))
        return torch.where(y < 0, below, torch.where(y == 0, -log_cdf_l, -log_pdf))

    def _std_ppf(self, u: np.ndarray) -> np.ndarray:
        from scipy import special

        return special.ndtri(u) if self.kernel == "normal" else special.logit(u)

    def _std_cdf(self, z: np.ndarray) -> np.ndarray:
        from scipy import special

        return special.ndtr(z) if self.kernel == "normal" else special.expit(z)

    def _log_tail_ratio(self, lo: np.ndarray, u: np.ndarray) -> np.ndarray:
        """``log P(X > lo + u)/P(X > lo)`` of the standard parent (u ≥ 0), exact for lo ≫ 0.

        The tails themselves underflow from lo ≈ 38 (normal) or 745 (logistic), and their
        logs, of size lo²/2 or lo, cancel; in Mills ratios R (normal) or with softplus(x) =
        x + log1p(e^−x) (logistic) the difference ``u`` enters exactly.
        """
        from scipy import special

        z = lo + u
        upper = lo > 0
        lo_m, z_m = np.where(upper, lo, 1.0), np.where(upper, z, 1.0 + u)
        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            if self.kernel == "normal":
                # R(x) = √(π/2) erfcx(x/√2) and φ(z)/φ(lo) = exp(−u(z + lo)/2)
                far = -0.5 * u * (z_m + lo_m) + np.log(special.erfcx(z_m / math.sqrt(2.0)))
                far -= np.log(special.erfcx(lo_m / math.sqrt(2.0)))
                near = special.log_ndtr(-z) - special.log_ndtr(-lo)
            else:  # log P(X > x) = −softplus(x)
                far = -u - np.log1p(np.exp(-z_m)) + np.log1p(np.exp(-lo_m))
                near = _softplus_np(lo) - _softplus_np(z)
        return np.where(upper, far, near)

    def _trunc_ppf_std(self, lo: np.ndarray, u: np.ndarray) -> np.ndarray:
        """The truncated standard parent's quantile minus ``lo`` (the quantile in units of σ
        above 0): solves ``P(X > lo + t)/P(X > lo) = 1 − u`` in logs, exact for lo ≫ 0."""
        from scipy import special

        with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
            log_v = np.log1p(-u)
            if self.kernel == "normal":
                t = -special.ndtri_exp(log_v + special.log_ndtr(-lo)) - lo
                # ndtri_exp is good to ~1e-12·lo here; one Newton step on the exact log tail
                # ratio (slope −1/R(lo + t), R the Mills ratio) makes t exact to rounding
                step = np.isfinite(t) & (lo > 0)
                z_m = np.where(step, lo + t, 1.0)
                mills = math.sqrt(math.pi / 2.0) * special.erfcx(z_m / math.sqrt(2.0))
                newton = t + (self._log_tail_ratio(np.where(step, lo, 1.0), z_m - lo) - log_v) * mills
                return np.where(step, newton, t)
            # −softplus(lo + t) = log_v − softplus(lo); for lo > 0 with b = −log_v + log1p(e^−lo),
            # t = b + log1p(−e^−(lo + b)), which holds no difference of large numbers
            lo_m = np.where(lo > 0, lo, 1.0)
            b = -log_v + np.log1p(np.exp(-lo_m))
            far = b + np.log1p(-np.exp(-(lo_m + b)))
            w = _softplus_np(lo) - log_v
            near = w + np.log(-np.expm1(-w)) - lo  # softplus⁻¹(w) − lo
        return np.where(lo > 0, far, near)

    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        mu, s = np.asarray(params[self._loc], np.float64), np.asarray(params[self._scale], np.float64)
        u = np.asarray(u, np.float64)
        if self.bound == "truncated":
            s1 = np.where(s > 0, s, 1.0)
            x = s * np.maximum(self._trunc_ppf_std(-mu / s1, u), 0.0)
            x = np.where(s > 0, x, np.maximum(mu, 0.0))
        else:
            x = mu + s * self._std_ppf(u)
            if self.bound == "censored":
                x = np.maximum(x, 0.0)
        return np.where(np.isnan(mu) | np.isnan(s), np.nan, x)

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        mu, s = np.asarray(params[self._loc], np.float64), np.asarray(params[self._scale], np.float64)
        x = np.asarray(x, np.float64)
        s1 = np.where(s > 0, s, 1.0)
        with np.errstate(divide="ignore", invalid="ignore"):
            z = np.where(s > 0, (x - mu) / s1, np.where(x >= mu, np.inf, -np.inf))
        if self.bound == "truncated":
            # 1 − P(X > x)/P(X > 0), from the ratio of the tails so that μ ≪ 0 stays exact
            f = -np.expm1(self._log_tail_ratio(-mu / s1, np.maximum(x, 0.0) / s1))
            f = np.where(s > 0, f, (x >= np.maximum(mu, 0.0)).astype(float))
            f = np.clip(f, 0.0, 1.0) + 0.0  # not −0.0 at x = 0
        else:
            f = self._std_cdf(z)
        if self.bound != "none":
            f = np.where(x < 0, 0.0, f)
        return np.where(np.isnan(mu) | np.isnan(s) | np.isnan(x), np.nan, f)

    def mean(self, params: Mapping[str, Any], n_levels: int = 199) -> np.ndarray:
        """The predictive mean in closed form, with ``α = loc/scale``: the location unbounded;
        censored, ``E[max(X, 0)]`` = ``loc Φ(α) + scale φ(α)`` (normal), ``scale softplus(α)``
        (logistic); truncated, that divided by ``P(X > 0)``: ``loc + scale φ(α)/Φ(α)`` (normal),
        ``scale softplus(α)/F(α)`` (logistic), through logarithms so that ``α ≪ 0`` stays exact."""
        from scipy import special

        mu = np.asarray(params[self._loc], np.float64)
        s = np.asarray(params[self._scale], np.float64)
        if self.bound == "none":
            return mu + 0.0 * s
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            a = np.where(s > 0, mu / np.where(s > 0, s, 1.0), 0.0)
            if self.kernel == "normal":
                log_pdf = -0.5 * a * a - 0.5 * np.log(2.0 * np.pi)
                if self.bound == "censored":
                    value = mu * special.ndtr(a) + s * np.exp(log_pdf)
                else:
                    value = mu + s * np.exp(log_pdf - special.log_ndtr(a))
            else:
                softplus = np.logaddexp(0.0, a)
                if self.bound == "censored":
                    value = s * softplus
                else:  # softplus(α)/F(α) → 1 as α → −∞ (both ≈ e^α)
                    ratio = np.exp(np.log(np.where(a > -30, softplus, 1.0)) - special.log_expit(a))
                    value = s * np.where(a > -30, ratio, 1.0)
        out = np.where(s > 0, value, np.maximum(mu, 0.0))
        return np.where(np.isnan(mu) | np.isnan(s), np.nan, out)

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        scale = sigma * LOGISTIC_SCALE if self.kernel == "logistic" else sigma
        return {self._loc: mu, self._scale: scale}
