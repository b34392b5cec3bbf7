"""The censored shifted gamma (Scheuerer & Hamill 2015): precipitation's family."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from ensml.scores.distributions import closed
from ensml.scores.distributions.base import Family, _is_torch, _softplus_np

#: softplus⁻¹(0.1): a model's zero output gives a censored shifted gamma a shift of 0.1 units.
SHIFT_OFFSET = math.log(math.expm1(0.1))
#: How sharply the censored shifted gamma's link makes its mean positive (see ``CSG0.from_moments``).
MEAN_SHARPNESS = 10.0
#: The least mean and standard deviation of X that ``CSG0.from_moments`` passes on, in ``unit``s: a
#: softplus of a very negative mean underflows to 0 in float32, and a gamma of mean or spread 0
#: has no finite shape or scale (so a fit's gradient would turn NaN at a point that is always dry).
MOMENT_FLOOR = 1e-6


@dataclass(frozen=True)
class CSG0(Family):
    """``Y = max(0, X − shift)``, ``X ~ Gamma(shape, scale)`` (Scheuerer & Hamill 2015)."""

    @property
    def n_raw(self) -> int:
        return 3

    @property
    def ranges(self) -> dict[str, Callable]:
        return {
            "shape": lambda v: np.isfinite(v) & (v > 0),
            "scale": lambda v: np.isfinite(v) & (v > 0),
            "shift": lambda v: np.isfinite(v) & (v >= 0),
        }

    @property
    def range_text(self) -> dict[str, str]:
        return {"shape": "a finite value > 0", "scale": "a finite value > 0", "shift": "a finite value >= 0"}

    def param_meaning(self, param: str) -> tuple[str, bool]:
        return {
            "shape": ("gamma shape", False),
            "scale": ("gamma scale", True),
            "shift": ("shift of the gamma to the left before censoring at 0", True),
        }[param]

    def _crps_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        return closed.crps_csg0(p["shape"], p["scale"], p["shift"], y)

    def _log_score_torch(self, p: dict, y: torch.Tensor) -> torch.Tensor:
        k, theta, d = p["shape"], p["scale"], p["shift"]
        x = torch.clamp_min(y, 0.0) + d
        log_pdf = (k - 1) * torch.log(x) - x / theta - torch.lgamma(k) - k * torch.log(theta)
        p0 = closed.gamma_cdf(d, k, theta)
        below = torch.full_like(y, math.inf)
        return torch.where(y < 0, below, torch.where(y == 0, -torch.log(p0), -log_pdf))

    def ppf(self, params: Mapping[str, np.ndarray], u: np.ndarray) -> np.ndarray:
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        return np.maximum(theta * special.gammaincinv(k, np.asarray(u, np.float64)) - d, 0.0)

    def cdf(self, params: Mapping[str, np.ndarray], x: np.ndarray) -> np.ndarray:
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        x = np.asarray(x, np.float64)
        return np.where(x < 0, 0.0, special.gammainc(k, np.maximum(x + d, 0.0) / theta))

    def mean(self, params: Mapping[str, Any], n_levels: int = 199) -> np.ndarray:
        """E[max(0, X − δ)] = kθ(1 − F_k+1(δ)) − δ(1 − F_k(δ)), in closed form."""
        from scipy import special

        k, theta, d = (np.asarray(params[n], np.float64) for n in ("shape", "scale", "shift"))
        return k * theta * (1 - special.gammainc(k + 1, d / theta)) - d * (1 - special.gammainc(k, d / theta))

    def from_moments(self, mu: Any, sigma: Any, extra: Any = None, unit: Any = 1.0) -> dict[str, Any]:
        """``mu`` and ``sigma`` are the mean and standard deviation of X, ``mu`` made > 0 by a
        sharp softplus, ``m = (unit/k) softplus(k mu/unit)`` with ``k = MEAN_SHARPNESS``: ``m ≈ mu``
        once ``mu`` is a tenth of ``unit`` or more, and a fourteenth of ``unit`` at ``mu = 0``, below
        the shift ``unit·softplus(extra + SHIFT_OFFSET)`` (a tenth of ``unit`` at ``extra = 0``).
        So a model's first guess from an all-dry subset (mean and spread 0) is dry: P(Y = 0) ≈ 1.
        Both moments are at least ``MOMENT_FLOOR·unit``, where their gradient is 0."""
        k = MEAN_SHARPNESS
        if _is_torch(mu):
            softplus = torch.nn.functional.softplus
            floor = torch.as_tensor(MOMENT_FLOOR * unit, dtype=mu.dtype, device=mu.device)
            m = torch.maximum(unit / k * softplus(k * mu / unit), floor)
            sigma = torch.maximum(sigma, floor)
            shift = unit * softplus(extra + SHIFT_OFFSET) if extra is not None else torch.zeros_like(mu)
        else:
            floor = MOMENT_FLOOR * np.asarray(unit)
            m = np.maximum(unit / k * _softplus_np(k * np.asarray(mu) / unit), floor)
            sigma = np.maximum(sigma, floor)
            shift = (
                unit * _softplus_np(np.asarray(extra) + SHIFT_OFFSET)
                if extra is not None
                else np.zeros_like(m)
            )
        return {"shape": (m / sigma) ** 2, "scale": sigma**2 / m, "shift": shift}
