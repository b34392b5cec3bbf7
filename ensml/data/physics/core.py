"""A dry primitive-equation model: the ``dinosaur-torch`` spectral core with Held–Suarez forcing.

The core (``dinosaur_torch``, an Apache-2.0 PyTorch port of NeuralGCM's Dinosaur) integrates
vorticity, divergence, temperature and log surface pressure on σ levels in spherical harmonics,
semi-implicitly (the SIL3 IMEX Runge–Kutta scheme), with an exponential spectral filter as its
diffusion. :class:`Core` adds the Held–Suarez forcing (:mod:`ensml.data.physics.forcing`) to
the core's explicit terms, starts from an isothermal atmosphere at rest, perturbs states with
random large-scale fields, and writes z and t on pressure levels with the core's own vertical
interpolation. Every state carries a leading batch dimension: members and init times step
together.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from ensml.data.physics.forcing import HeldSuarez, HeldSuarezTendency
from ensml.errors import EnsmlError

#: The truncations the core offers here (a Gaussian grid of 64 × 32, 96 × 48, 128 × 64 points).
TRUNCATIONS = ("T21", "T31", "T42")
#: Isothermal reference and initial temperature (K) and the initial surface pressure (Pa).
REST_TEMPERATURE_K = 288.0
REST_SURFACE_PA = 1.0e5


def dinosaur():
    """The ``dinosaur_torch`` package, or one line saying how to install it."""
    try:
        import dinosaur_torch
    except ImportError:  # the optional extra is missing
        raise EnsmlError(
            "the physics testbed needs the optional package dinosaur-torch: pip install 'ensml[physics]'"
        ) from None
    return dinosaur_torch


@dataclass(frozen=True)
class ModelConfig:
    """One model: resolution, time step, forcing and diffusion.

    ``filter_order`` is the order of the core's exponential filter (attenuation 16 per 20 min at
    the highest wavenumber): 18 damps only the last few wavenumbers; lower orders reach further
    into the resolved scales, a stronger diffusion.
    """

    truncation: str = "T21"
    layers: int = 8
    dt_minutes: float = 30.0
    forcing: HeldSuarez = field(default_factory=HeldSuarez)
    filter_order: int = 18


class Core:
    """The model of ``config``: build states, step them, perturb them, read them on pressure levels."""

    def __init__(self, config: ModelConfig):
        if config.truncation not in TRUNCATIONS:
            raise EnsmlError(
                f"physics truncation must be one of {', '.join(TRUNCATIONS)}, got {config.truncation!r}"
            )
        d = dinosaur()
        sh, ti, pe = d.spherical_harmonic, d.time_integration, d.primitive_equations
        units = d.scales.units
        self.config, self._pe, self._vi = config, pe, d.vertical_interpolation
        self.specs = d.units.SimUnits.from_si()
        nd = self.specs.nondimensionalize
        self.grid = sh.Grid(getattr(sh.GridSpec, config.truncation)())
        sigma = d.sigma_coordinates.SigmaCoordinates.equidistant(config.layers)
        self.coords = d.coordinate_systems.CoordinateSystem(self.grid, d.sigma_coordinates.SigmaLevels(sigma))
        self.kelvin = float(nd(1.0 * units.degK))
        self.pascal = float(nd(1.0 * units.pascal))
        self.geopotential_si = 1.0 / float(nd(1.0 * units.m**2 / units.s**2))
        self.per_second = float(nd(1.0 / units.s))
        t_ref = np.full(config.layers, REST_TEMPERATURE_K * self.kelvin)
        flat = torch.zeros(self.grid.modal_shape)
        dycore = pe.PrimitiveEquations(t_ref, flat, self.coords, self.specs)
        forcing = HeldSuarezTendency(
            self.grid, sigma.centers, t_ref, kelvin=self.kelvin, per_day=float(nd(1.0 / units.day)),
            pascal=self.pascal, constants=config.forcing,
        )  # fmt: skip
        equation = ti.compose_equations([dycore, _Forcing(forcing, pe)])
        dt = float(nd(config.dt_minutes * units.minute))
        smooth = ti.exponential_step_filter(self.grid, dt, order=config.filter_order)
        self._step = ti.step_with_filters(ti.imex_rk_sil3(equation, dt), [smooth])
        self._geopotential = pe.Geopotential(sigma, self.specs.g, self.specs.R)
        self._sigma = torch.as_tensor(sigma.centers, dtype=torch.float32)
        self._mask = torch.as_tensor(self.grid.sh.mask, dtype=torch.float32)
        lon, sin_lat = self.grid.spec.nodal_axes
        self.latitude = np.rad2deg(np.arcsin(sin_lat))[::-1].copy()  # north to south
        self.longitude = np.rad2deg(lon)

    def steps(self, hours: float) -> int:
        """Time steps in ``hours`` (which must be a whole number of them)."""
        n = hours * 60.0 / self.config.dt_minutes
        if abs(n - round(n)) > 1e-9:
            raise EnsmlError(
                f"physics: {hours} h is not a whole number of {self.config.dt_minutes:g}-minute steps"
            )
        return round(n)

    def advance(self, state, hours: float):
        """``state`` ``hours`` later."""
        for _ in range(self.steps(hours)):
            state = self._step(state)
        return state

    def rest(self, batch: int):
        """``batch`` isothermal atmospheres at rest (the reference temperature, 1000 hPa)."""
        modal = (batch, *self.coords.modal_shape)
        log_ps = torch.full((batch, 1, *self.grid.nodal_shape), float(np.log(REST_SURFACE_PA * self.pascal)))
        zeros = torch.zeros(modal)
        return self._pe.State(vorticity=zeros, divergence=zeros.clone(), temperature_variation=zeros.clone(),
                              log_surface_pressure=self.grid.to_modal(log_ps), sim_time=0.0)  # fmt: skip

    def noise(self, batch: int, rms: float, generator: torch.Generator) -> torch.Tensor:
        """Random large-scale fields, modal (batch, layers, m, l), each of nodal RMS ``rms``.

        Independent Gaussian coefficients with amplitude ∝ 1/l for total wavenumbers l ≥ 1 (a red
        spectrum: synoptic and larger scales), scaled per field to the RMS asked for.
        """
        modal = (batch, *self.coords.modal_shape)
        total = torch.arange(modal[-1], dtype=torch.float32)
        shape = torch.where(total > 0, 1.0 / total.clamp(min=1.0), torch.zeros(()))
        coeffs = torch.randn(modal, generator=generator) * self._mask * shape
        nodal_rms = self.grid.to_nodal(coeffs).square().mean(dim=(-3, -2, -1), keepdim=True).sqrt()
        return coeffs * (rms / nodal_rms)

    def perturb(self, state, temperature_k: float, vorticity_per_s: float, generator: torch.Generator):
        """``state`` plus random temperature and vorticity fields of these RMS (K, s⁻¹)."""
        batch = state.vorticity.shape[0]
        d_t = self.noise(batch, temperature_k * self.kelvin, generator)
        d_vort = self.noise(batch, vorticity_per_s * self.per_second, generator)
        return self._pe.State(
            vorticity=state.vorticity + d_vort, divergence=state.divergence,
            temperature_variation=state.temperature_variation + d_t,
            log_surface_pressure=state.log_surface_pressure, sim_time=state.sim_time,
        )  # fmt: skip

    def on_pressure(self, state, levels_hpa) -> dict[str, np.ndarray]:
        """Geopotential (m² s⁻²) and temperature (K) on ``levels_hpa``: (batch, level, lat, lon),
        latitudes north to south, by the core's linear interpolation in σ."""
        temperature = self.grid.to_nodal(state.temperature_variation) + REST_TEMPERATURE_K * self.kelvin
        orography = torch.zeros((1, *self.grid.nodal_shape))
        phi = self._geopotential(temperature, orography)
        surface = torch.exp(self.grid.to_nodal(state.log_surface_pressure))
        targets = torch.as_tensor(
            np.asarray(levels_hpa, dtype=np.float64) * 100.0 * self.pascal, dtype=torch.float32
        )
        fields = {"z": phi * self.geopotential_si, "t": temperature / self.kelvin}
        out = self._vi.interp_sigma_to_pressure(fields, targets, self._sigma, surface, extrapolate="linear")
        return {k: v.transpose(-1, -2).flip(-2).numpy().astype(np.float32) for k, v in out.items()}

    def state_arrays(self, state) -> dict[str, np.ndarray]:
        """The state's modal tensors as numpy arrays (to send to another process)."""
        keys = ("vorticity", "divergence", "temperature_variation", "log_surface_pressure")
        return {k: getattr(state, k).numpy() for k in keys}

    def from_arrays(self, arrays: dict[str, np.ndarray]):
        """The state of :meth:`state_arrays`."""
        return self._pe.State(
            **{k: torch.from_numpy(np.ascontiguousarray(v)) for k, v in arrays.items()}, sim_time=0.0
        )


class _Forcing:
    """The forcing as the explicit-only equation ``compose_equations`` adds to the core's."""

    def __init__(self, tendency: HeldSuarezTendency, pe):
        self.tendency, self._pe = tendency, pe

    def explicit_terms(self, state):
        d_vort, d_div, d_temp = self.tendency(state)
        zero = torch.zeros_like(state.log_surface_pressure)
        time = None if state.sim_time is None else 0.0
        return self._pe.State(vorticity=d_vort, divergence=d_div, temperature_variation=d_temp,
                              log_surface_pressure=zero, sim_time=time)  # fmt: skip
