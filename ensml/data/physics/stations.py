"""Station observations of the physics testbed's truth run (``ensml data physics --stations N``).

The Held–Suarez world is an aquaplanet without orography: its stations stand at sea level
(islands, coasts, buoys, platforms; no elevation is written and no model height is needed), at
random places, and observe the truth run of the station's grid cell (the cell whose centre is
nearest, as ``evaluate --extraction nearest`` finds it). Where the synthetic stations
(:mod:`ensml.data.synth.stations`) differ from their grid cells by constants, these differ as
real stations do, in ways that depend on the weather. With, at the cell and valid time, the
truth's 10 m wind speed ``w`` (``si10``), the direction ``θ`` it blows from (degrees clockwise
from north, from the truth's 10 m wind components: ``θ = atan2(-u10, -v10)``) and the
temperature anomaly ``T'`` at the lowest level written (the highest pressure: 850 hPa by
default) from its zonal mean at that latitude and time, a station reports::

    si10_obs = c · W0 · (w / W0)^p · S(θ) · exp(-β T') · exp(σ_w ε)        W0 = 5 m s-1
    S(θ)     = 1 - r · exp(κ (cos(θ - θ_s) - 1))                             κ = 4
    t_obs(p) = t(p) + b + (σ_t + L |∇t(p)|) η                                L = R Δφ / √12

with ε, η ~ N(0, 1) new at every observation, and per station:

* **exposure** ``c`` (log-normal, log-std :data:`SI10_FACTOR`) and a **non-linear response** ``p``
  (log-normal about 1, log-std :data:`SI10_EXPONENT`): the site's wind is not proportional to
  the grid box's. A rough or sheltered site loses more of a light wind than of a strong one
  (``p > 1``); a cape or a ridge speeds up a light wind relatively more (``p < 1``);
* a **sheltered sector** ``θ_s`` (uniform) of depth ``r`` (uniform in 0 … :data:`SHELTER_DEPTH`):
  land, a hill or buildings on that side slow the wind blowing from it, with a half-width of
  34° at half depth (κ = 4). The model's si10 is the open sea's (z0 = 2e-4 m): wind that crossed
  rougher ground is weaker (the direction-dependent exposure correction of WMO-No. 8);
* a **stability response** ``β`` (uniform in 0 … :data:`STABILITY_PER_K` K-1): the model reduces
  its lowest layer's wind to 10 m by the *neutral* log law. Air warmer than the zonal mean (a
  warm sector over the cold sea) is stable at the surface, which keeps the stronger wind aloft
  from mixing down; colder air (a cold-air outbreak) is unstable, and its surface wind is gusty
  and strong;
* **noise** of log-std ``σ_w`` (uniform in :data:`SI10_NOISE`): turbulence in a 10-minute mean and
  what the grid box does not resolve, in proportion to the wind.

Every fourth station (``PHY00001``, ``PHY00005`` …) also launches a **sounding** at 00 and 12 UTC,
reporting ``t`` at every level written: a sensor bias ``b`` (std :data:`T_BIAS_K`) and noise of
std ``σ_t`` (uniform in :data:`T_NOISE_K`) plus ``L |∇t|``: a point samples the unresolved
temperature variability of its grid box, which is largest in frontal zones, where the resolved
gradient is strong. ``L = R Δφ / √12`` (R the Earth's radius, Δφ = 180° / the grid's latitudes:
180 km at T21) is the standard deviation of a point's position across a box of side ``R Δφ``,
and ``|∇t|`` the truth's horizontal gradient at the cell by centred differences (eastward
``(t[j+1] - t[j-1]) / (2 R cos φ Δλ)``, periodic; northward between the rows north and south,
one-sided at the outer rows). Each observation is missing (NaN) with probability
:data:`MISSING`.

Station-wise EMOS (``μ = a + b m``, ``σ² = c + d s²`` per station and lead) models a constant
exposure, bias and noise exactly; what the wind direction, the temperature anomaly and the
power law add is left for a model that sees the flow. ``stations.nc`` holds the observations
(``si10`` on ``(station, time)``, ``t`` on ``(station, time, level)``, CF ``timeSeries``, as
:func:`ensml.data.stations.read_observations` reads them); ``stations_truth.nc`` what made them:
each station's parameters and, at every observation, the truth at its cell (``w``, ``θ``, ``T'``,
``t``, ``|∇t|``) and the noise (ε, η). Everything is drawn from its own random stream of the seed
(:data:`STREAM`): the runs, and so the grid files, are the same bit for bit with or without
stations, and the same options and seed give the same stations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from ensml import names
from ensml.data.points import EARTH_RADIUS_M, Points, locate
from ensml.data.station_draw import (
    draw_places,
    observations_dataset,
    observed_attrs,
    station_coords,
    station_ids,
)
from ensml.data.synth.fields import stream
from ensml.times import hours_of

#: The random stream of the stations (the runs draw from generators of their own).
STREAM = 10
#: Reference wind speed of the power law (m s-1).
W0 = 5.0
#: Log-std of the exposure factor and of the power-law exponent of 10 m wind speed.
SI10_FACTOR, SI10_EXPONENT = 0.2, 0.15
#: Largest depth of the sheltered sector, and the sector's sharpness κ (half depth 34° off centre).
SHELTER_DEPTH, SHELTER_KAPPA = 0.5, 4.0
#: Largest stability response β of 10 m wind speed (per K of the temperature anomaly).
STABILITY_PER_K = 0.05
#: Range of the log-std of the wind's noise.
SI10_NOISE = (0.05, 0.15)
#: Soundings: std of the bias (K) and range of the noise std (K) of temperature.
T_BIAS_K = 0.2
T_NOISE_K = (0.2, 0.6)
#: Every SOUNDING_EVERY-th station launches soundings, at these hours (UTC) of the valid time.
SOUNDING_EVERY = 4
SOUNDING_HOURS = (0, 12)
#: Probability that an observation is missing.
MISSING = 0.03
NOTE = "physics testbed station observations: see ensml.data.physics.stations"
#: The outputs of ``physics --stations N``, without their suffix.
STATION_FILES = ("stations", "stations_truth")


@dataclass(frozen=True)
class StationDraw:
    """The stations' places and parameters (one value per station)."""

    ids: np.ndarray  # text
    latitude: np.ndarray
    longitude: np.ndarray
    si10_factor: np.ndarray  # c
    si10_exponent: np.ndarray  # p
    shelter_direction: np.ndarray  # θ_s, degrees clockwise from north (where the wind comes from)
    shelter_depth: np.ndarray  # r
    stability: np.ndarray  # β, K-1
    si10_noise: np.ndarray  # σ_w, log-std
    sounding: np.ndarray  # bool
    t_bias: np.ndarray  # b, K
    t_noise: np.ndarray  # σ_t, K
    cells: Points  # each station's grid cell (the nearest centre)


def draw_stations(seed: int, n: int, grid: xr.Dataset) -> StationDraw:
    """``n`` stations on ``grid``, uniform on the sphere between its outer latitudes."""
    rng = stream(seed, STREAM, 0)
    latitude, longitude = draw_places(rng, n, grid[names.LATITUDE].values)
    return StationDraw(
        ids=station_ids("PHY", n),
        latitude=latitude,
        longitude=longitude,
        si10_factor=np.exp(SI10_FACTOR * rng.standard_normal(n)),
        si10_exponent=np.exp(SI10_EXPONENT * rng.standard_normal(n)),
        shelter_direction=rng.uniform(0.0, 360.0, n),
        shelter_depth=rng.uniform(0.0, SHELTER_DEPTH, n),
        stability=rng.uniform(0.0, STABILITY_PER_K, n),
        si10_noise=rng.uniform(*SI10_NOISE, n),
        sounding=np.arange(n) % SOUNDING_EVERY == 0,
        t_bias=T_BIAS_K * rng.standard_normal(n),
        t_noise=rng.uniform(*T_NOISE_K, n),
        cells=locate(grid, latitude, longitude, "nearest"),
    )


def wind_from_direction(u: np.ndarray, v: np.ndarray) -> np.ndarray:
    """The direction the wind blows from, degrees clockwise from north in [0, 360)."""
    return np.rad2deg(np.arctan2(-u, -v)) % 360.0


def shelter(direction: np.ndarray, centre: np.ndarray, depth: np.ndarray) -> np.ndarray:
    """``S(θ) = 1 - r exp(κ (cos(θ - θ_s) - 1))``: the share of the wind from ``direction`` a
    station sheltered by ``depth`` about ``centre`` keeps (degrees)."""
    return 1.0 - depth * np.exp(SHELTER_KAPPA * (np.cos(np.deg2rad(direction - centre)) - 1.0))


def si10_station(
    w: np.ndarray, direction: np.ndarray, anomaly: np.ndarray, eps: np.ndarray, draw: StationDraw
) -> np.ndarray:
    """The stations' 10 m wind speed (m s-1) from the cell's ``w``, the wind's ``direction`` (from,
    degrees), the temperature ``anomaly`` (K) and the noise ``eps``, all ``(station, time)``."""
    c, p = draw.si10_factor[:, None], draw.si10_exponent[:, None]
    sheltered = shelter(direction, draw.shelter_direction[:, None], draw.shelter_depth[:, None])
    stability = np.exp(-draw.stability[:, None] * anomaly)
    return c * W0 * (w / W0) ** p * sheltered * stability * np.exp(draw.si10_noise[:, None] * eps)


def temperature_gradient(t: xr.DataArray) -> xr.DataArray:
    """``|∇t|`` (K m-1) of a field on a global latitude-longitude grid, by centred differences:
    periodic in longitude, one-sided at the outer latitude rows."""
    lat = np.deg2rad(t[names.LATITUDE].values)
    lon_step = np.deg2rad(360.0 / t.sizes[names.LONGITUDE])
    ilat, ilon = t.get_axis_num(names.LATITUDE), t.get_axis_num(names.LONGITUDE)
    x = t.values.astype(np.float64)
    east = (np.roll(x, -1, axis=ilon) - np.roll(x, 1, axis=ilon)) / 2.0
    shape = [1] * x.ndim
    shape[ilat] = lat.size
    east = east / (EARTH_RADIUS_M * np.cos(lat).reshape(shape) * lon_step)
    rows = np.arange(lat.size)
    above, below = np.maximum(rows - 1, 0), np.minimum(rows + 1, lat.size - 1)
    dlat = (lat[above] - lat[below]).reshape(shape)
    north = (np.take(x, above, axis=ilat) - np.take(x, below, axis=ilat)) / (EARTH_RADIUS_M * dlat)
    return t.copy(data=np.hypot(east, north))


def representativeness_length(n_lat: int) -> float:
    """``L = R Δφ / √12`` (m) on a grid of ``n_lat`` latitudes (Δφ = π / n_lat)."""
    return EARTH_RADIUS_M * np.pi / n_lat / np.sqrt(12.0)


def _station_time(da: xr.DataArray, dims: tuple[str, ...]) -> np.ndarray:
    return da.transpose(*dims).values.astype(np.float64)


def station_datasets(seed: int, n: int, analysis: xr.Dataset, wind: xr.Dataset) -> dict[str, xr.Dataset]:
    """``stations`` (the observations) and ``stations_truth`` (what made them) for ``n`` stations.

    ``analysis``: the truth by valid time (``si10`` on ``(time, latitude, longitude)``, ``t`` on
    ``(time, level, latitude, longitude)``); ``wind``: its 10 m wind components ``u10`` and
    ``v10`` on ``(time, latitude, longitude)``.
    """
    draw = draw_stations(seed, n, analysis)
    at = draw.cells.extract
    st, time, level = names.STATION, names.TIME, names.LEVEL
    times = analysis[time].values
    levels = analysis[level].values
    lowest = analysis["t"].sel({level: levels.max()}).astype(np.float64)
    anomaly_grid = lowest - lowest.mean(names.LONGITUDE)
    w = _station_time(at(analysis["si10"]), (st, time))
    u, v = (_station_time(at(wind[c]), (st, time)) for c in ("u10", "v10"))
    direction = wind_from_direction(u, v)
    anomaly = _station_time(at(anomaly_grid), (st, time))
    t_cell = _station_time(at(analysis["t"]), (st, time, level))
    gradient = _station_time(at(temperature_gradient(analysis["t"])), (st, time, level))

    rng = stream(seed, STREAM, 1)
    eps = rng.standard_normal(w.shape)
    eta = rng.standard_normal(t_cell.shape)
    si10 = si10_station(w, direction, anomaly, eps, draw)
    si10[rng.random(w.shape) < MISSING] = np.nan
    length = representativeness_length(analysis.sizes[names.LATITUDE])
    spread = draw.t_noise[:, None, None] + length * gradient
    t_obs = t_cell + draw.t_bias[:, None, None] + spread * eta
    hours = hours_of(times - times.astype("datetime64[D]"))  # of the day, UTC
    launched = draw.sounding[:, None] & np.isin(hours, SOUNDING_HOURS)[None, :]
    t_obs[~launched] = np.nan
    t_obs[rng.random(t_cell.shape) < MISSING] = np.nan

    coords = station_coords(draw.ids, draw.latitude, draw.longitude)
    level_coord = {level: (level, levels, dict(analysis[level].attrs))}
    data = {
        "si10": ((st, time), si10.astype(np.float32), observed_attrs(analysis["si10"].attrs, NOTE)),
        "t": ((st, time, level), t_obs.astype(np.float32), observed_attrs(analysis["t"].attrs, NOTE)),
    }
    observed = observations_dataset(data, {**coords, **level_coord}, times)
    truth = _truth(draw, (w, direction, anomaly, eps), (t_cell, gradient, eta), float(levels.max()))
    truth = truth.assign_coords({**coords, time: times, **level_coord})
    truth[time].attrs.update(observed[time].attrs)
    return {"stations": observed, "stations_truth": truth}


def _truth(draw: StationDraw, wind: tuple, temperature: tuple, lowest_hpa: float) -> xr.Dataset:
    """The stations' parameters and, at every observation, the truth and noise that made it."""
    st, time, level = names.STATION, names.TIME, names.LEVEL
    per_station = {
        "si10_factor": (draw.si10_factor, "exposure factor c of 10 metre wind speed", "1"),
        "si10_exponent": (draw.si10_exponent, "power-law exponent p of 10 metre wind speed", "1"),
        "shelter_direction": (draw.shelter_direction, "direction the sheltered wind comes from", "degree"),
        "shelter_depth": (draw.shelter_depth, "depth r of the sheltered sector", "1"),
        "stability": (draw.stability, "stability response beta of 10 metre wind speed", "K-1"),
        "si10_noise": (draw.si10_noise, "log-std of the noise of 10 metre wind speed", "1"),
        "sounding": (
            draw.sounding.astype(np.int8),
            "launches soundings at 00 and 12 UTC (1) or not (0)",
            "1",
        ),
        "t_bias": (draw.t_bias, "sounding temperature bias", "K"),
        "t_noise": (draw.t_noise, "sounding temperature noise std (without the gradient's)", "K"),
    }
    data = {
        k: (st, v.astype(np.int8 if v.dtype == np.int8 else np.float32), {"long_name": d, "units": u})
        for k, (v, d, u) in per_station.items()
    }
    w, direction, anomaly, eps = wind
    t_cell, gradient, eta = temperature
    per_obs = {
        "si10_cell": (w, "truth's 10 metre wind speed at the station's cell", "m s-1", (st, time)),
        "wind_from_direction": (
            direction,
            "direction the truth's 10 metre wind comes from",
            "degree",
            (st, time),
        ),
        "t_anomaly": (
            anomaly,
            f"truth's temperature at {lowest_hpa:g} hPa less its zonal mean, at the station's cell",
            "K",
            (st, time),
        ),
        "si10_epsilon": (eps, "standard normal noise of 10 metre wind speed", "1", (st, time)),
        "t_cell": (t_cell, "truth's temperature at the station's cell", "K", (st, time, level)),
        "t_gradient": (
            gradient,
            "norm of the truth's horizontal temperature gradient",
            "K m-1",
            (st, time, level),
        ),
        "t_eta": (eta, "standard normal noise of sounding temperature", "1", (st, time, level)),
    }
    for k, (v, d, u, dims) in per_obs.items():
        data[k] = (dims, v.astype(np.float32), {"long_name": d, "units": u})
    ds = xr.Dataset(data)
    ds.attrs["comment"] = NOTE
    return ds


__all__ = [
    "STATION_FILES",
    "StationDraw",
    "draw_stations",
    "shelter",
    "si10_station",
    "station_datasets",
    "temperature_gradient",
    "wind_from_direction",
]
