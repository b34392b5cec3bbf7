"""A dry primitive-equation model: the ``dinosaur-torch`` spectral core with Held–Suarez forcing.

The core (``dinosaur_torch``, an Apache-2.0 PyTorch port of NeuralGCM's Dinosaur) integrates
vorticity, divergence, temperature and log surface pressure on σ levels in spherical harmonics,
semi-implicitly (the SIL3 IMEX Runge–Kutta scheme), with an exponential spectral filter as its
diffusion. :class:`Core` adds the Held–Suarez forcing (:mod:`ensml.data.physics.forcing`) to
the core's explicit terms, starts from an isothermal atmosphere at rest, perturbs states with
random large-scale fields, and writes z and t on pressure levels with the core's own vertical
interpolation, and the wind speed ``si10`` of its lowest σ layer reduced to 10 m
(:meth:`Core.wind_speed`). Every state carries a leading batch dimension: members and init times
step together.
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
#: Roughness length of the open sea (m): class "sea" of the Davenport–Wieringa terrain classification
#: in WMO-No. 8 (the CIMO Guide), chapter "Measurement of surface wind". Sets the 10 m reduction of
#: :meth:`Core.wind_speed`.
SEA_ROUGHNESS_M = 2.0e-4
#: Height (m) of the wind speed written: the standard 10 m of ``si10``.
WIND_HEIGHT_M = 10.0


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
        self.metre_per_second = float(nd(1.0 * units.m / units.s))
        #: Height (m) of the lowest layer's centre in the isothermal reference atmosphere
        #: (hypsometric: R T_ref / g · ln(1/σ)), and the factor that reduces its wind to 10 m.
        self.wind_layer_m = float(
            self.specs.R * REST_TEMPERATURE_K * self.kelvin / self.specs.g * np.log(1.0 / sigma.centers[-1])
        ) / float(nd(1.0 * units.m))
        self.wind_factor = float(
            np.log(WIND_HEIGHT_M / SEA_ROUGHNESS_M) / np.log(self.wind_layer_m / SEA_ROUGHNESS_M)
        )
        t_ref = np.full(config.layers, REST_TEMPERATURE_K * self.kelvin)
        flat = torch.zeros(self.grid.modal_shape)
        dycore = pe.PrimitiveEquations(t_ref, flat, self.coords, self.specs)
        forcing = HeldSuarezTendency(
            self.grid,
            sigma.centers,
            t_ref,
            kelvin=self.kelvin,
            per_day=float(nd(1.0 / units.day)),
            pascal=self.pascal,
            constants=config.forcing,
        )
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
        return self._pe.State(
            vorticity=zeros,
            divergence=zeros.clone(),
            temperature_variation=zeros.clone(),
            log_surface_pressure=self.grid.to_modal(log_ps),
            sim_time=0.0,
        )

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
            vorticity=state.vorticity + d_vort,
            divergence=state.divergence,
            temperature_variation=state.temperature_variation + d_t,
            log_surface_pressure=state.log_surface_pressure,
            sim_time=state.sim_time,
        )

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

    def wind_speed(self, state) -> np.ndarray:
        """Wind speed at 10 m (m s⁻¹), ``si10``: (batch, lat, lon), latitudes north to south.

        The wind (u, v) of the lowest σ layer comes from its vorticity and divergence as the
        core's dynamics see it (``Grid.vor_div_to_uv_nodal`` without the wavenumber clip, as in
        ``primitive_equations.compute_diagnostic_state``), and its speed √(u² + v²) is reduced to
        10 m by the neutral logarithmic profile over the open sea, u(z) ∝ ln(z / z0) (Prandtl–von
        Kármán; e.g. Stull 1988, *An Introduction to Boundary Layer Meteorology*), with
        z0 = :data:`SEA_ROUGHNESS_M`: ``wind_factor`` = ln(10 m / z0) / ln(z1 / z0), where z1 is
        the layer's height in the isothermal reference atmosphere (:attr:`wind_layer_m`). With
        8 layers z1 ≈ 544 m (σ = 0.9375) and the factor is 0.730; with 4 … 32 layers it is
        0.70 … 0.81, the usual ratio of the 10 m wind to the wind a few hundred metres up over
        the sea. The model has no surface layer: the log law stands in for one, and stability,
        gustiness and the sub-grid variance of the wind are left out.
        """
        u, v = self.grid.vor_div_to_uv_nodal(state.vorticity[:, -1:], state.divergence[:, -1:], clip=False)
        speed = torch.hypot(u[:, 0], v[:, 0]) * (self.wind_factor / self.metre_per_second)
        return speed.transpose(-1, -2).flip(-2).numpy().astype(np.float32)

    def wind(self, state) -> tuple[np.ndarray, np.ndarray]:
        """The 10 m wind's components (m s⁻¹): eastward ``u10`` and northward ``v10``, each (batch,
        lat, lon), latitudes north to south: the lowest σ layer's (u, v) times the log-law factor
        of :meth:`wind_speed`, whose speed they have up to float32 rounding (not written to the
        grid files; the physics stations' wind direction, :mod:`ensml.data.physics.stations`)."""
        u, v = self.grid.vor_div_to_uv_nodal(state.vorticity[:, -1:], state.divergence[:, -1:], clip=False)
        scale = self.wind_factor / self.metre_per_second
        return tuple((c[:, 0] * scale).transpose(-1, -2).flip(-2).numpy().astype(np.float32) for c in (u, v))

    def outputs(self, state, levels_hpa) -> dict[str, np.ndarray]:
        """Every field written: z and t on ``levels_hpa`` (:meth:`on_pressure`) and ``si10``
        (:meth:`wind_speed`)."""
        return {**self.on_pressure(state, levels_hpa), "si10": self.wind_speed(state)}

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
        return self._pe.State(
            vorticity=d_vort,
            divergence=d_div,
            temperature_variation=d_temp,
            log_surface_pressure=zero,
            sim_time=time,
        )
