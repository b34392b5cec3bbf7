"""The distribution-free family: a Bernstein quantile function (Bremnes 2020).

``Q(τ) = Σ_j α_j b_j,d(τ)`` with the Bernstein basis ``b_j,d(τ) = C(d, j) τ^j (1 − τ)^(d−j)``;
non-decreasing coefficients ``α_0 ≤ … ≤ α_d`` make ``Q`` monotone (a network's outputs are made
so by :meth:`BQN.link`). For a variable bounded below (precipitation, wind speed) the quantile
function is clipped there, ``max(Q(τ), lower)``, which lets the family put a point mass at 0.

Its CRPS is twice the integral of the pinball loss over quantile levels,
``CRPS(F, y) = 2 ∫₀¹ ρ_τ(y − Q(τ)) dτ`` (Laio & Tamea 2007), evaluated by the midpoint rule on
``N_LEVELS`` levels (Bremnes 2020 trains on the mean pinball loss over such levels); the rule's
error is below 1e-4 of the CRPS for smooth quantile functions (tests check it against the
closed form of the normal it approximates).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ensml.errors import EnsmlError
from ensml.names import BQN_DEFAULT_DEGREE, bqn_degree, family_params
from ensml.scores.distributions.base import Family, _is_lazy

#: Degree when a config says just ``bqn``.
DEFAULT_DEGREE = BQN_DEFAULT_DEGREE
#: Quantile levels of the CRPS integral (midpoints) and of the cdf's inversion.
N_LEVELS = 100
_GRID = 1001


def parse_degree(name: str) -> int:
    """``bqn`` → the default degree, ``bqn:12`` → 12 (2 … 30): :func:`ensml.names.bqn_degree`."""
    return bqn_degree(name)


def bernstein_basis(tau: np.ndarray, degree: int) -> np.ndarray:
    """``(…, d + 1)`` basis values at the levels ``tau`` (float64)."""
    tau = np.asarray(tau, np.float64)[..., None]
    j = np.arange(degree + 1)
    coef = np.array([math.comb(degree, int(k)) for k in j], dtype=np.float64)
    return coef * tau**j * (1.0 - tau) ** (degree - j)


@dataclass(frozen=True)
class BQN(Family):
    """Bernstein quantile function of degree ``len(params) − 1``, clipped at ``lower``."""

    @classmethod
    def of_degree(cls, degree: int, lower: float | None) -> BQN:
        name = "bqn" if degree == DEFAULT_DEGREE else f"bqn:{degree}"
        params = family_params(name)
        return cls(name, params, lower, lower is not None, f"Bernstein quantile function of degree {degree}")

    @property
    def degree(self) -> int:
        return len(self.params) - 1

    @property
    def n_raw(self) -> int:
        return self.degree + 1

    @property
    def ranges(self) -> dict:
        return {k: np.isfinite for k in self.params}

    @property
    def range_text(self) -> dict[str, str]:
        return {k: "a finite value" for k in self.params}

    def check_params(self, params: Mapping[str, Any], source: str) -> None:
        super().check_params(params, source)
        values = [params[k] for k in self.params]
        if any(isinstance(v, torch.Tensor) or _is_lazy(v) for v in values):
            return
        arr = np.stack(np.broadcast_arrays(*(np.asarray(getattr(v, "data", v)) for v in values)))
        decreasing = np.diff(arr, axis=0) < 0
        if np.any(decreasing):
            raise EnsmlError(
                f"{source}: bqn coefficients must be non-decreasing (alpha0 <= … <= alpha{self.degree}); "
                f"they decrease at {int(decreasing.any(axis=0).sum())} point(s)"
            )

    def param_meaning(self, param: str) -> tuple[str, bool]:
        return f"Bernstein coefficient {param[5:]} of the quantile function", True

    def _clip(self, q: Any) -> Any:
        if self.lower is None:
            return q
        return torch.clamp_min(q, self.lower) if isinstance(q, torch.Tensor) else np.maximum(q, self.lower)

    def _crps_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        tau = (np.arange(N_LEVELS) + 0.5) / N_LEVELS
        basis = torch.from_numpy(bernstein_basis(tau, self.degree)).to(y.device, y.dtype)  # (N, d+1)
        alpha = torch.stack([p[k] for k in self.params], dim=-1)  # (…, d+1)
        q = self._clip(alpha @ basis.T)  # (…, N)
        t = torch.from_numpy(tau).to(y.device, y.dtype)
        err = y[..., None] - q
        pinball = torch.maximum(t * err, (t - 1.0) * err)
        return 2.0 * pinball.mean(-1)

    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        u = np.asarray(u, np.float64)
        out = 0.0
        for j, k in enumerate(self.params):
            coef = math.comb(self.degree, j) * u**j * (1.0 - u) ** (self.degree - j)
            out = out + coef * np.asarray(params[k], np.float64)
        return self._clip(out)

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        """F(x) by inverting the monotone quantile function on a grid of levels (linear between)."""
        tau = np.linspace(0.0, 1.0, _GRID)
        alpha = np.stack(np.broadcast_arrays(*(np.asarray(params[k], np.float64) for k in self.params)), -1)
        x = np.asarray(x, np.float64)
        shape = np.broadcast_shapes(alpha.shape[:-1], x.shape)
        q = np.broadcast_to(alpha, (*shape, alpha.shape[-1])) @ bernstein_basis(tau, self.degree).T
        q = self._clip(q)
        xb = np.broadcast_to(x, shape)[..., None]
        i = (q <= xb).sum(-1)  # levels at or below x
        lo = np.clip(i - 1, 0, _GRID - 1)
        hi = np.clip(i, 0, _GRID - 1)
        q_lo = np.take_along_axis(q, lo[..., None], -1)[..., 0]
        q_hi = np.take_along_axis(q, hi[..., None], -1)[..., 0]
        with np.errstate(divide="ignore", invalid="ignore"):
            frac = np.where(q_hi > q_lo, (xb[..., 0] - q_lo) / (q_hi - q_lo), 1.0)
        f = np.where(
            i == 0, 0.0, np.where(i >= _GRID, 1.0, tau[lo] + np.clip(frac, 0, 1) * (tau[hi] - tau[lo]))
        )
        missing = np.isnan(q).any(-1) | np.isnan(xb[..., 0])  # NaN compares False: F would be 0
        return np.where(missing, np.nan, f)

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        raise EnsmlError(
            "the bqn family has no location-scale form: a quantile network makes its coefficients"
        )

    def first_guess(self) -> np.ndarray:
        """``(d + 1,)`` coefficients whose quantile function approximates the standard normal's."""
        from scipy import special

        return special.ndtri((np.arange(self.degree + 1) + 0.5) / (self.degree + 1))

    def link(
        self, raw: Sequence[torch.Tensor], center: torch.Tensor, spread: torch.Tensor, unit: Any
    ) -> dict:
        """Non-decreasing coefficients from ``d + 1`` unconstrained outputs: ``α_0 = c + s β_0 +
        u r_0``, ``α_j = α_j−1 + u softplus(r_j + softplus⁻¹(s (β_j − β_j−1)/u))``, so that zero
        outputs give the normal quantile function ``c + s Φ⁻¹`` of the first guess (center,
        spread), in the variable's units (``unit`` the field's scale)."""
        beta = torch.as_tensor(self.first_guess(), dtype=center.dtype, device=center.device)
        softplus = torch.nn.functional.softplus
        alpha = [center + spread * beta[0] + unit * raw[0]]
        for j in range(1, self.degree + 1):
            step = torch.clamp_min(spread * (beta[j] - beta[j - 1]) / unit, 1e-3)
            alpha.append(alpha[-1] + unit * softplus(raw[j] + step + torch.log(-torch.expm1(-step))))
        return dict(zip(self.params, alpha))


__all__ = ["BQN", "DEFAULT_DEGREE", "N_LEVELS", "bernstein_basis", "parse_degree"]
