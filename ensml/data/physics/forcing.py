"""The Held & Suarez (1994) forcing of a dry primitive-equation core.

Held, I. M. and M. J. Suarez, 1994: A proposal for the intercomparison of the dynamical cores of
atmospheric general circulation models. *Bull. Amer. Meteor. Soc.*, 75, 1825–1830. With
``σ = p / p_s``, ``p0 = 1000 hPa`` and ``κ = R / c_p = 2/7``:

* Newtonian cooling, ``∂T/∂t = … − k_T (T − T_eq)``, towards

  ``T_eq = max(T_min, [T_s − ΔT_y sin²φ − Δθ_z log(p/p0) cos²φ] (p/p0)^κ)``

  with ``k_T = k_a + (k_s − k_a) max(0, (σ − σ_b)/(1 − σ_b)) cos⁴φ``;
* Rayleigh friction of the horizontal wind in the boundary layer, ``∂v/∂t = … − k_v v`` with
  ``k_v = k_f max(0, (σ − σ_b)/(1 − σ_b))``.

The paper's constants are :class:`HeldSuarez`'s defaults. ``k_v`` depends on σ only, so the
friction acts on vorticity and divergence as it acts on the wind: ``−k_v ζ`` and ``−k_v δ``.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

#: Reference pressure of the forcing, Pa.
P0_PA = 1.0e5
KAPPA = 2.0 / 7.0


@dataclass(frozen=True)
class HeldSuarez:
    """The forcing's constants (temperatures in K, rates per day), the paper's by default."""

    delta_t_y: float = 60.0  # equator-to-pole temperature difference
    delta_theta_z: float = 10.0  # static stability: potential temperature difference in the vertical
    t_surface: float = 315.0  # equatorial surface temperature
    t_min: float = 200.0  # the stratosphere's floor
    k_a: float = 1.0 / 40.0  # free-atmosphere cooling rate
    k_s: float = 1.0 / 4.0  # surface cooling rate at the equator
    k_f: float = 1.0  # boundary-layer friction rate at the surface
    sigma_b: float = 0.7  # top of the boundary layer


def _boundary_layer(sigma, sigma_b: float):
    """``max(0, (σ − σ_b) / (1 − σ_b))``: 0 above the boundary layer, 1 at the surface."""
    return ((sigma - sigma_b) / (1.0 - sigma_b)).clip(min=0.0)


def equilibrium_temperature(p_pa, lat_rad, c: HeldSuarez = HeldSuarez()):
    """``T_eq`` (K) at pressure ``p_pa`` (Pa) and latitude ``lat_rad``; numpy or torch, broadcast."""
    lib = torch if isinstance(p_pa, torch.Tensor) else np
    sin2 = lib.sin(lat_rad) ** 2
    ratio = p_pa / P0_PA
    t = (c.t_surface - c.delta_t_y * sin2 - c.delta_theta_z * lib.log(ratio) * (1.0 - sin2)) * ratio**KAPPA
    return t.clip(min=c.t_min)


def cooling_rate(sigma, lat_rad, c: HeldSuarez = HeldSuarez()):
    """``k_T`` (per day) at σ and latitude; numpy or torch, broadcast."""
    lib = torch if isinstance(sigma, torch.Tensor) else np
    return c.k_a + (c.k_s - c.k_a) * _boundary_layer(sigma, c.sigma_b) * lib.cos(lat_rad) ** 4


def friction_rate(sigma, c: HeldSuarez = HeldSuarez()):
    """``k_v`` (per day) at σ; numpy or torch."""
    return c.k_f * _boundary_layer(sigma, c.sigma_b)


class HeldSuarezTendency(torch.nn.Module):
    """The forcing's tendencies of a modal primitive-equation state, in the core's units.

    Parameters
    ----------
    grid
        The core's horizontal grid (``dinosaur_torch.spherical_harmonic.Grid``): transforms and
        the nodal latitudes.
    sigma
        Layer centres, (layers,).
    reference_temperature
        The core's ``T_ref`` per layer, in its units: states hold ``T − T_ref``.
    kelvin, per_day, pascal
        One K, one day⁻¹ and one Pa in the core's units.
    constants
        :class:`HeldSuarez`.
    """

    def __init__(
        self,
        grid,
        sigma: np.ndarray,
        reference_temperature: np.ndarray,
        *,
        kelvin: float,
        per_day: float,
        pascal: float,
        constants: HeldSuarez = HeldSuarez(),
    ):
        super().__init__()
        self.grid, self.constants = grid, constants
        self.kelvin, self.pascal = kelvin, pascal
        lat = np.arcsin(grid.spec.nodal_axes[1])[None, None, :]  # nodal layout (layer, lon, lat)
        s = np.asarray(sigma, dtype=np.float64)[:, None, None]

        def buffer(name: str, value: np.ndarray) -> None:
            self.register_buffer(name, torch.as_tensor(value, dtype=torch.float32), persistent=False)

        buffer("lat", lat)
        buffer("sigma", s)
        buffer("t_ref", np.asarray(reference_temperature, dtype=np.float64)[:, None, None])
        buffer("k_t", cooling_rate(s, lat, constants) * per_day)
        buffer("k_v", friction_rate(s, constants) * per_day)

    def forward(self, state):
        """Tendencies of (vorticity, divergence, temperature variation) for ``state``."""
        temperature = self.grid.to_nodal(state.temperature_variation) + self.t_ref
        surface_pa = torch.exp(self.grid.to_nodal(state.log_surface_pressure)) / self.pascal
        t_eq = equilibrium_temperature(self.sigma * surface_pa, self.lat, self.constants) * self.kelvin
        d_temperature = self.grid.to_modal(-self.k_t * (temperature - t_eq))
        return -self.k_v * state.vorticity, -self.k_v * state.divergence, d_temperature
