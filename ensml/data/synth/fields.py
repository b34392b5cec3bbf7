"""Random fields and idealised physics for the synthetic ensemble (:mod:`ensml.data.synth.generate`).

Pieces, all pure numpy functions of their arguments:

* the grid (cell-centre latitudes, no pole rows), independent random streams per key, and
  unit-variance Gaussian random fields made by FFT filtering (periodic in longitude, padded in
  latitude so the poles do not wrap);
* a vertical structure that turns three independent unit fields into physically coherent
  geopotential and temperature anomalies on any pressure levels (hydrostatic thickness);
* the climatology of z and t with an equator-pole gradient, a seasonal cycle, a tropopause
  and a stationary wave; the storm-track "activity" that scales forecast uncertainty;
* idealised storms: compact, moving, warm-core lows.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import scipy.fft as sfft
from scipy.integrate import trapezoid

R_DRY = 287.05  # gas constant of dry air, J kg-1 K-1
LAPSE_EXPONENT = 0.19  # R Γ / g for a lapse rate Γ of 6.5 K km-1: T = T0 (p / 1000 hPa)^0.19
DAY_HOURS = 24.0
YEAR_DAYS = 365.25
TIME_BATCH = 128  # fields per FFT batch in sample_fields


def stream(seed: int, *key: int) -> np.random.Generator:
    """The random stream ``key`` of ``seed``: independent of every other key (``SeedSequence`` spawn key)."""
    return np.random.default_rng(np.random.SeedSequence(seed, spawn_key=key))


def lat_lon_grid(n_lat: int, n_lon: int) -> tuple[np.ndarray, np.ndarray]:
    """Cell-centre latitudes (north to south, no pole rows) and longitudes (0 → 360), degrees.

    For 32 × 64: latitudes 87.1875 … -87.1875 (5.625° apart), longitudes 0 … 354.375.
    """
    dlat = 180.0 / n_lat
    lat = 90.0 - dlat * (np.arange(n_lat) + 0.5)
    lon = np.arange(n_lon) * (360.0 / n_lon)
    return lat, lon


class GaussianFields:
    """Unit-variance, spatially correlated Gaussian random fields on a regular lat/lon grid.

    White noise on a grid padded in latitude is filtered in Fourier space with a
    Gaussian transfer function (correlation ``exp(-d² / 2ℓ²)`` in degrees of latitude and of
    longitude) and cropped. The field is periodic in longitude, does not wrap from pole to
    pole, and has pointwise variance exactly 1 (the filter is normalised by its kernel's energy).

    Parameters
    ----------
    n_lat, n_lon
        Grid size.
    length_deg
        Correlation length ℓ in degrees.
    """

    def __init__(self, n_lat: int, n_lon: int, length_deg: float) -> None:
        self.n_lat, self.n_lon = n_lat, n_lon
        ly = length_deg / (180.0 / n_lat)  # in grid cells
        # Pad latitude by 5 correlation lengths (correlation e^-12.5) so the poles do not wrap.
        self.n_pad = sfft.next_fast_len(n_lat + int(np.ceil(5 * ly)) + 1, real=True)
        lx = length_deg / (360.0 / n_lon)
        ky = np.fft.fftfreq(self.n_pad)[:, None]
        kx = np.fft.rfftfreq(n_lon)[None, :]
        transfer = np.exp(-(np.pi**2) * ((ly * ky) ** 2 + (lx * kx) ** 2))
        kernel = sfft.irfft2(transfer, s=(self.n_pad, n_lon))
        self.transfer = transfer / np.sqrt(np.sum(kernel**2))

    def white_shape(self, *batch: int) -> tuple[int, ...]:
        """Shape of the white noise that :meth:`filter` expects for a batch of fields."""
        return (*batch, self.n_pad, self.n_lon)

    def filter(self, white: np.ndarray) -> np.ndarray:
        """Correlated fields ``(..., n_lat, n_lon)`` from white noise of :meth:`white_shape`."""
        spec = sfft.rfft2(white, axes=(-2, -1), workers=-1)
        spec *= self.transfer.astype(spec.dtype, copy=False)
        out = sfft.irfft2(spec, s=(self.n_pad, self.n_lon), axes=(-2, -1), workers=-1)
        return out[..., : self.n_lat, :]

    def sample(self, rng: np.random.Generator, *batch: int, dtype: type = np.float64) -> np.ndarray:
        """Draw ``(*batch, n_lat, n_lon)`` fields."""
        return self.filter(rng.standard_normal(self.white_shape(*batch), dtype=dtype))


def sample_fields(rng: np.random.Generator, gf: GaussianFields, nt: int, n_fields: int) -> np.ndarray:
    """``(nt, n_fields, lat, lon)`` float32 unit fields, drawn in small batches to bound memory."""
    out = np.empty((nt, n_fields, gf.n_lat, gf.n_lon), dtype=np.float32)
    for k in range(0, nt, TIME_BATCH):
        n = min(TIME_BATCH, nt - k)
        out[k : k + n] = gf.sample(rng, n, n_fields, dtype=np.float32)
    return out


def _integrate_lnp(profile, p_hpa: float, nodes: int = 257) -> float:
    """∫ profile(p') d ln p' from p to 1000 hPa (negative for p > 1000 hPa)."""
    x = np.linspace(np.log(p_hpa), np.log(1000.0), nodes)
    return float(trapezoid(profile(np.exp(x)), x))


@dataclass(frozen=True)
class VerticalStructure:
    """Map three independent unit fields to coherent (z, t) anomalies on pressure levels.

    Temperature anomaly ``t'(p) = a(p) Θ(p)`` with ``Θ(p) = ρ F1 + √(1-ρ²)(cos β(p) F2 + sin β(p) F3)``
    (vertically coherent, decorrelating slowly with height), and geopotential from the
    hydrostatic equation, ``z'(p) = c0 F1 + R ∫_p^1000 t'(p') d ln p'``: a warm column lifts the
    upper levels. ``coef[v, k, j]`` (v = z, t; k = level; j = F1..F3) holds these weights;
    ``amp = |coef|`` is the pointwise standard deviation (m2 s-2 and K) and ``unit = coef / amp``
    maps unit fields to unit-variance, z–t correlated fields.
    """

    coef: np.ndarray  # (2, n_level, 3)

    @classmethod
    def anomalies(cls, levels: np.ndarray, *, c0: float = 600.0, rho: float = 0.5) -> VerticalStructure:
        """Weather anomalies: z' std ≈ 700 (850 hPa) and 1070 m2 s-2 (500 hPa), t' ≈ 3 K."""

        def a(p):
            return 2.5 + p / 1000.0  # K

        def beta(p):
            return (np.pi / 3.0) * (1.0 - p / 1000.0)

        s = np.sqrt(1.0 - rho**2)
        coef = np.zeros((2, len(levels), 3))
        for k, p in enumerate(levels):
            i1 = _integrate_lnp(a, p)
            ic = _integrate_lnp(lambda q: a(q) * np.cos(beta(q)), p)
            i_s = _integrate_lnp(lambda q: a(q) * np.sin(beta(q)), p)
            coef[0, k] = [c0 + R_DRY * rho * i1, R_DRY * s * ic, R_DRY * s * i_s]
            coef[1, k] = a(p) * np.array([rho, s * np.cos(beta(p)), s * np.sin(beta(p))])
        return cls(coef)

    @property
    def amp(self) -> np.ndarray:
        """Standard deviation of the anomaly per (variable, level), shape (2, n_level)."""
        return np.sqrt(np.sum(self.coef**2, axis=-1))

    @property
    def unit(self) -> np.ndarray:
        """Weights giving unit-variance fields per (variable, level), shape (2, n_level, 3)."""
        return self.coef / self.amp[..., None]

    def combine(self, base: np.ndarray) -> np.ndarray:
        """Unit-variance (z, t) fields ``(..., 2, n_level, lat, lon)`` from ``base (..., 3, lat, lon)``."""
        *batch, nj, ny, nx = base.shape
        unit = self.unit.reshape(-1, nj).astype(base.dtype)  # (v k, j)
        out = np.matmul(unit, base.reshape(*batch, nj, ny * nx))
        return out.reshape(*batch, *self.coef.shape[:2], ny, nx)


def storm_profile(levels: np.ndarray, *, z_surface: float = -2500.0, t_core: float = 6.0) -> np.ndarray:
    """Peak (z, t) anomaly of a storm per level, shape (2, n_level), m2 s-2 and K.

    A warm-core low: ``t'(p) = t_core · min(1, p / 250 hPa)``, and a geopotential low of
    ``z_surface`` at 1000 hPa that weakens with height hydrostatically.
    """

    def tc(p):
        return t_core * np.minimum(1.0, p / 250.0)

    out = np.zeros((2, len(levels)))
    for k, p in enumerate(levels):
        out[0, k] = z_surface + R_DRY * _integrate_lnp(tc, p)
        out[1, k] = tc(p)
    return out


def season(doy: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Winter index: +1 in mid-January in the north (and mid-July in the south), -1 in summer.

    ``doy (time,)``, ``lat (lat,)`` in degrees; returns ``(time, lat, 1)``.
    """
    hemi = np.sign(lat)
    return (np.cos(2 * np.pi * (doy[:, None] - 15.0) / YEAR_DAYS) * hemi[None, :])[..., None]


def climatology(
    levels: np.ndarray, lat: np.ndarray, lon: np.ndarray, doy: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Climatological z (m2 s-2) and t (K), each ``(time, level, lat, lon)``.

    The 1000 hPa temperature ``T0`` is 300 K at the equator and 255 K at the poles, with a
    seasonal cycle of ±13 sin(lat) K (cold northern winter) and a wavenumber-2 stationary wave;
    ``T(p) = max(T0 (p/1000)^0.19, T_tropopause)``; geopotential is integrated hydrostatically
    from ``z(1000 hPa) ≈ 1000 m2 s-2``. At 500 hPa: z ≈ 5.7e4 (equator) … 4.8e4 (pole), t ≈ 263
    … 225 K; at 850 hPa: z ≈ 1.5e4 … 1.2e4, t ≈ 291 … 247 K.
    """
    phi = np.deg2rad(lat)[None, :, None]
    lam = np.deg2rad(lon)[None, None, :]
    doy = np.asarray(doy, dtype=float)[:, None, None]
    t0 = (
        255.0
        + 45.0 * np.cos(phi) ** 2
        - 13.0 * np.sin(phi) * np.cos(2 * np.pi * (doy - 20.0) / YEAR_DAYS)
        + 3.0 * np.cos(2 * lam - 0.5) * np.sin(2 * phi) ** 2
    )
    t_trop = 220.0 - 25.0 * np.cos(phi) ** 2
    z1000 = 900.0 + 200.0 * np.cos(phi) ** 2
    k = LAPSE_EXPONENT
    p_trop = 1000.0 * (t_trop / t0) ** (1.0 / k)
    zs, ts = [], []
    for p in levels:
        x = p / 1000.0
        below = p >= p_trop
        thick = np.where(
            below,
            R_DRY * t0 / k * (1.0 - x**k),
            R_DRY * (t0 - t_trop) / k + R_DRY * t_trop * np.log(np.maximum(p_trop, p) / p),
        )
        zs.append(z1000 + thick)
        ts.append(np.maximum(t0 * x**k, t_trop))
    return np.stack(zs, axis=1), np.stack(ts, axis=1)


def anomaly_envelope(lat: np.ndarray) -> np.ndarray:
    """Relative size of weather anomalies by latitude: 1 near 50°, 0.35 in the tropics. ``(lat, 1)``."""
    return (0.35 + 0.65 * np.exp(-(((np.abs(lat) - 50.0) / 22.0) ** 2)))[:, None]


def activity_climatology(doy: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """Storm-track activity scaling error growth: ≈1.5 at 45° (more in winter), 0.8 in the tropics.

    Returns ``(time, lat, 1)``.
    """
    track = np.exp(-(((np.abs(lat) - 45.0) / 15.0) ** 2))[None, :, None]
    return 0.8 + 0.7 * track * (1.0 + 0.35 * season(doy, lat))


def great_circle_deg(lat0: float, lon0: float, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Great-circle distance (degrees) from one point to every grid point, ``(lat, lon)``."""
    p0, p = np.deg2rad(lat0), np.deg2rad(lat)[:, None]
    dl = np.deg2rad(lon[None, :] - lon0)
    c = np.sin(p0) * np.sin(p) + np.cos(p0) * np.cos(p) * np.cos(dl)
    return np.rad2deg(np.arccos(np.clip(c, -1.0, 1.0)))


@dataclass(frozen=True)
class Storm:
    """An idealised storm: a Gaussian blob moving along a straight track, ``sin²`` life cycle."""

    genesis_hours: float  # hours since the first time of the state grid
    lifetime_hours: float
    lat0: float
    lon0: float
    dlat_per_hour: float
    dlon_per_hour: float
    amplitude: float  # known intensity A0 (multiplies storm_profile)
    radius_deg: float

    def active(self, hours: np.ndarray) -> np.ndarray:
        """Indices of ``hours`` within the storm's life."""
        age = np.asarray(hours, dtype=float) - self.genesis_hours
        return np.flatnonzero((age >= 0) & (age <= self.lifetime_hours))

    def envelope_shape(self, hours: np.ndarray, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        """``env(t) · shape(x; t)`` in [0, 1], ``(time, lat, lon)``; 0 outside the storm's life."""
        age = np.asarray(hours, dtype=float) - self.genesis_hours
        alive = (age >= 0) & (age <= self.lifetime_hours)
        env = np.where(alive, np.sin(np.pi * np.clip(age, 0, None) / self.lifetime_hours) ** 2, 0.0)
        out = np.zeros((len(age), len(lat), len(lon)))
        for n in np.flatnonzero(env > 0):
            clat = np.clip(self.lat0 + self.dlat_per_hour * age[n], -80.0, 80.0)
            clon = (self.lon0 + self.dlon_per_hour * age[n]) % 360.0
            d = great_circle_deg(clat, clon, lat, lon)
            out[n] = env[n] * np.exp(-0.5 * (d / self.radius_deg) ** 2)
        return out


def draw_storms(rng: np.random.Generator, n: int, t_first: float, t_last: float) -> list[Storm]:
    """``n`` storms with genesis uniform in ``[t_first - 3 days, t_last]`` (hours).

    Mid-latitude storms (genesis 25–55°) move east 6–12° and poleward 0.5–2° a day; tropical
    ones (12–25°) move west 3–6° and poleward 1–2° a day. Radius 5–8°, life 2.5–4.5 days.
    """
    storms = []
    for _ in range(n):
        lat0 = rng.uniform(12.0, 55.0) * rng.choice([-1.0, 1.0])
        tropical = abs(lat0) < 25.0
        dlon = -rng.uniform(3.0, 6.0) if tropical else rng.uniform(6.0, 12.0)
        dlat = np.sign(lat0) * (rng.uniform(1.0, 2.0) if tropical else rng.uniform(0.5, 2.0))
        storms.append(
            Storm(
                genesis_hours=float(np.floor(rng.uniform(t_first - 3 * DAY_HOURS, t_last))),
                lifetime_hours=rng.uniform(2.5, 4.5) * DAY_HOURS,
                lat0=float(lat0),
                lon0=rng.uniform(0.0, 360.0),
                dlat_per_hour=float(dlat) / DAY_HOURS,
                dlon_per_hour=float(dlon) / DAY_HOURS,
                amplitude=rng.uniform(0.8, 1.3),
                radius_deg=rng.uniform(5.0, 8.0),
            )
        )
    return storms
