"""EMOS / non-homogeneous regression (Gneiting, Raftery, Westveld & Goldman 2005).

``μ = a + b·m``, ``σ = sqrt(c + d·s²)`` from the ensemble mean ``m`` and std ``s``: the mean and
std of a Gaussian, or the location and spread that another family maps to its parameters (a
normal truncated at 0 for wind, IMPROVER's choice; a censored shifted gamma for precipitation,
Scheuerer & Hamill 2015, with a per-point shift in ``extra``), with one set
of coefficients per variable and level (global EMOS) or per variable, level and grid point
(local EMOS). Coefficients act on standardised inputs (``loc``/``scale`` per variable and level)
so that one optimiser step suits geopotential and temperature alike; ``c, d ≥ 0`` through a
softplus. The fit (the mean closed-form Gaussian CRPS, full-batch L-BFGS) is
:func:`ensml.train.emos.fit_emos`: a model here never imports a score.
"""

from __future__ import annotations

from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn

Mode = Literal["global", "local"]


def _inv_softplus(x: float) -> float:
    return float(torch.log(torch.expm1(torch.tensor(x))))


class EMOS(nn.Module):
    """Gaussian EMOS on (B, V, D, H, W) ensemble mean and std.

    Parameters
    ----------
    n_vars, n_levels
        V and D.
    grid
        ``(H, W)`` for local EMOS (coefficients per grid point), ``None`` for global EMOS.
    n_extra
        Further coefficients per variable and level (and point), unconstrained, starting at 0:
        the shift of a censored shifted gamma (:mod:`ensml.scores.distributions`), which the fit
        maps from ``(μ, σ, extra)`` to the family's parameters.
    """

    def __init__(
        self, n_vars: int, n_levels: int, grid: tuple[int, int] | None = None, n_extra: int = 0
    ) -> None:
        super().__init__()
        shape = (n_vars, n_levels, *(grid if grid is not None else (1, 1)))
        if n_extra:
            self.extra = nn.Parameter(torch.zeros(n_extra, *shape))
        else:
            self.register_parameter("extra", None)
        self.a = nn.Parameter(torch.zeros(shape))
        self.b = nn.Parameter(torch.ones(shape))
        self.c_raw = nn.Parameter(torch.full(shape, _inv_softplus(0.01)))
        self.d_raw = nn.Parameter(torch.full(shape, _inv_softplus(1.0)))
        self.register_buffer("loc", torch.zeros(n_vars, n_levels, 1, 1))
        self.register_buffer("scale", torch.ones(n_vars, n_levels, 1, 1))

    @property
    def c(self) -> torch.Tensor:
        return F.softplus(self.c_raw)

    @property
    def d(self) -> torch.Tensor:
        return F.softplus(self.d_raw)

    def forward(self, mean: torch.Tensor, std: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Predictive (μ, σ), each (B, V, D, H, W) in the units of ``mean``."""
        m = (mean - self.loc) / self.scale
        s = std / self.scale
        mu = self.loc + self.scale * (self.a + self.b * m)
        sigma = self.scale * torch.sqrt(self.c + self.d * s**2)
        return mu, sigma

    def coefficients(self) -> dict[str, torch.Tensor]:
        """``a, b, c, d`` in physical units (``μ = a + b·m``, ``σ² = c + d·s²``)."""
        with torch.no_grad():
            a = self.loc * (1 - self.b) + self.scale * self.a
            return {"a": a, "b": self.b.clone(), "c": self.c * self.scale**2, "d": self.d.clone()}
