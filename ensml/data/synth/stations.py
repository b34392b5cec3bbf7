"""Synthetic station observations with a known truth (``ensml data synth --stations N``).

A station observes the synthetic atmosphere's surface variables at a random place. What it
reports differs from the grid cell it lies in (the analysis there) in the ways real stations
differ from a model's grid box, each drawn per station and known exactly:

* **height**: the model's orography ``h_model`` (``orography.nc``, ``orog`` in m: a smooth
  random field, sea level on about half the globe) is a grid box's mean height; a station
  lies ``h_station - h_model`` above it (sub-grid relief, std ``RELIEF_M``). Its 2 m
  temperature is moved along the standard lapse rate Γ = 0.0065 K m-1
  (:data:`ensml.data.heights.STANDARD_LAPSE_RATE`): ``- Γ (h_station - h_model)``, exactly what
  ``evaluate --model_height orography.nc`` corrects;
* **a local bias** ``b`` (std ``T2M_BIAS_K``) and **representativeness noise** of std
  ``sigma_r`` (uniform in ``T2M_NOISE_K``), new at every observation, for 2 m temperature;
* **exposure** for precipitation and wind: a factor ``c`` per station (log-normal, log-std
  ``TP_FACTOR`` and ``SI10_FACTOR``) multiplying the grid box's value;
* **gaps**: each observation is missing (NaN) with probability ``MISSING``.

So, with the analysis ``a`` of the station's grid cell (the cell whose centre is nearest, as
``evaluate --extraction nearest`` finds it)::

    t2m_obs  = a_t2m - Γ (h_station - h_model) + b + sigma_r ε,   ε ~ N(0, 1)
    tp_obs   = c_tp · a_tp
    si10_obs = c_si10 · a_si10

and, as the grid's oracle gives the analysis's exact predictive distribution at the cell, the
station's is exact too (``stations_oracle.nc``, by init time, lead and station)::

    t2m  ~ N(mean + offset + b, sqrt(std² + sigma_r²))
    tp   ~ csg0(shape, c · scale, c · shift)       (c X with X ~ csg0(shape, scale, shift))
    si10 ~ TN(c · loc, c · scale) on [0, ∞)        (c X with X ~ TN(loc, scale) on [0, ∞))

Stations lie uniformly on the sphere between the grid's first and last cell-centre latitudes
(all inside the grid), ids ``SYN00001`` …; the observations file (``stations.nc``) is what
:func:`ensml.data.stations.read_observations` reads: ``(station, time)`` at every valid time of
the analysis, CF discrete sampling geometry ``timeSeries``. Everything is drawn from its own
random stream of the seed (:data:`STREAM`), so the grid files are the same bit for bit with or
without stations, and the same options and seed give the same stations.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import xarray as xr

from ensml import names
from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.points import Points, locate
from ensml.data.station_draw import (
    draw_places,
    observations_dataset,
    observed_attrs,
    station_coords,
    station_ids,
)
from ensml.data.synth.fields import GaussianFields, stream

#: The random stream of the stations (see :mod:`ensml.data.synth.model` for the others).
STREAM = 9
#: The model orography: ``OROG_M · max(0, G)`` for a unit Gaussian field G of length OROG_LEN.
OROG_M, OROG_LEN = 900.0, 12.0
#: Std (m) of a station's height about its grid box's mean height.
RELIEF_M = 250.0
#: 2 m temperature: std of the station bias (K) and range of the representativeness noise std (K).
T2M_BIAS_K = 0.6
T2M_NOISE_K = (0.3, 1.5)
#: Log-std of the exposure factors of precipitation and wind.
TP_FACTOR, SI10_FACTOR = 0.25, 0.2
#: Probability that an observation is missing.
MISSING = 0.03
#: Variables a station observes, and how its value differs from the grid cell's.
OBSERVED = ("t2m", "tp", "si10")
NOTE = "synthetic station observations: see ensml.data.synth.stations"
#: The outputs of ``synth --stations N``, without their suffix.
STATION_FILES = ("orography", "stations", "stations_oracle")


@dataclass(frozen=True)
class StationDraw:
    """The stations' places and their known differences from the grid (one value per station)."""

    ids: np.ndarray  # text
    latitude: np.ndarray
    longitude: np.ndarray
    elevation: np.ndarray  # m
    model_height: np.ndarray  # m, the orography of the station's grid cell
    t2m_bias: np.ndarray  # K
    t2m_noise: np.ndarray  # K, std
    tp_factor: np.ndarray
    si10_factor: np.ndarray
    cells: Points  # each station's grid cell (the nearest centre), on the synthetic grid

    @property
    def t2m_offset(self) -> np.ndarray:
        """What a station's 2 m temperature differs by, in the mean: lapse rate and bias (K)."""
        return -STANDARD_LAPSE_RATE * (self.elevation - self.model_height) + self.t2m_bias


def orography(seed: int, latitude: np.ndarray, longitude: np.ndarray) -> xr.Dataset:
    """The synthetic model's orography ``orog`` (m) on the grid: ``OROG_M · max(0, G)``."""
    gf = GaussianFields(latitude.size, longitude.size, OROG_LEN)
    field = OROG_M * np.maximum(0.0, gf.sample(stream(seed, STREAM, 0), 1)[0])
    orog = xr.DataArray(
        field.astype(np.float32),
        dims=(names.LATITUDE, names.LONGITUDE),
        coords={names.LATITUDE: latitude, names.LONGITUDE: longitude},
        attrs={
            "standard_name": "surface_altitude",
            "long_name": "synthetic model orography (grid box mean height)",
            "units": "m",
            "comment": NOTE,
        },
    )
    return orog.to_dataset(name="orog")


def draw_stations(seed: int, n: int, orog: xr.DataArray) -> StationDraw:
    """``n`` stations on the grid of ``orog``, uniform on the sphere between its outer latitudes."""
    rng = stream(seed, STREAM, 1)
    latitude, longitude = draw_places(rng, n, orog[names.LATITUDE].values)
    cells = locate(orog, latitude, longitude, "nearest")
    model_height = cells.extract(orog).values.astype(np.float64)
    return StationDraw(
        ids=station_ids("SYN", n),
        latitude=latitude,
        longitude=longitude,
        elevation=np.maximum(0.0, model_height + RELIEF_M * rng.standard_normal(n)),
        model_height=model_height,
        t2m_bias=T2M_BIAS_K * rng.standard_normal(n),
        t2m_noise=rng.uniform(*T2M_NOISE_K, n),
        tp_factor=np.exp(TP_FACTOR * rng.standard_normal(n)),
        si10_factor=np.exp(SI10_FACTOR * rng.standard_normal(n)),
        cells=cells,
    )


def _station_coords(draw: StationDraw) -> dict:
    return station_coords(draw.ids, draw.latitude, draw.longitude, draw.elevation)


def observations(seed: int, draw: StationDraw, analysis: xr.Dataset) -> xr.Dataset:
    """The stations' observations ``(station, time)`` of the analysis's surface variables."""
    rng = stream(seed, STREAM, 2)
    at = draw.cells.extract
    data = {}
    for var in (v for v in OBSERVED if v in analysis):
        grid = at(analysis[var]).transpose(names.STATION, names.TIME).values.astype(np.float64)
        if var == "t2m":
            noise = draw.t2m_noise[:, None] * rng.standard_normal(grid.shape)
            value = grid + draw.t2m_offset[:, None] + noise
        else:
            value = grid * (draw.tp_factor if var == "tp" else draw.si10_factor)[:, None]
        value[rng.random(grid.shape) < MISSING] = np.nan
        attrs = observed_attrs(analysis[var].attrs, NOTE)
        data[var] = ((names.STATION, names.TIME), value.astype(np.float32), attrs)
    return observations_dataset(data, _station_coords(draw), analysis[names.TIME].values)


def oracle(draw: StationDraw, grid_oracle: xr.Dataset) -> xr.Dataset:
    """The stations' exact predictive distribution ``(init_time, lead_time, station)``, and the
    known differences from the grid (per station)."""
    at = draw.cells.extract
    station = names.STATION
    out = {}
    if "t2m_mean" in grid_oracle:
        out["t2m_mean"] = at(grid_oracle["t2m_mean"]) + xr.DataArray(draw.t2m_offset, dims=station)
        std = at(grid_oracle["t2m_std"])
        out["t2m_std"] = np.sqrt(std**2 + xr.DataArray(draw.t2m_noise, dims=station) ** 2)
    for var, factor, scaled in (
        ("tp", draw.tp_factor, ("scale", "shift")),
        ("si10", draw.si10_factor, ("loc", "scale")),
    ):
        for param in ("shape", "scale", "shift", "loc"):
            name = f"{var}_{param}"
            if name in grid_oracle:
                value = at(grid_oracle[name])
                out[name] = value * xr.DataArray(factor, dims=station) if param in scaled else value
    ds = xr.Dataset(
        {k: v.astype(np.float32).assign_attrs(grid_oracle[k].attrs) for k, v in out.items()},
        coords=_station_coords(draw),
    )
    if names.VALID_TIME in grid_oracle.coords:
        ds = ds.assign_coords({names.VALID_TIME: grid_oracle[names.VALID_TIME]})
    known = {
        "model_height": (draw.model_height, "orography of the station's grid cell", "m"),
        "t2m_bias": (draw.t2m_bias, "station bias of 2 metre temperature", "K"),
        "t2m_noise": (draw.t2m_noise, "representativeness noise std of 2 metre temperature", "K"),
        "tp_factor": (draw.tp_factor, "exposure factor of precipitation", "1"),
        "si10_factor": (draw.si10_factor, "exposure factor of 10 metre wind speed", "1"),
    }
    for name, (values, long_name, units) in known.items():
        ds[name] = (station, values.astype(np.float32), {"long_name": long_name, "units": units})
    families = grid_oracle.attrs.get("ensml_distribution", "").split()
    ds.attrs["ensml_distribution"] = " ".join(f for f in families if f.split(":")[0] in OBSERVED)
    return ds


def station_datasets(
    seed: int, n: int, analysis: xr.Dataset, grid_oracle: xr.Dataset
) -> dict[str, xr.Dataset]:
    """``orography``, ``stations`` (observations) and ``stations_oracle`` for ``n`` stations."""
    orog = orography(seed, analysis[names.LATITUDE].values, analysis[names.LONGITUDE].values)
    draw = draw_stations(seed, n, orog["orog"])
    made = (orog, observations(seed, draw, analysis), oracle(draw, grid_oracle))
    return dict(zip(STATION_FILES, made))


__all__ = [
    "OBSERVED",
    "STATION_FILES",
    "StationDraw",
    "draw_stations",
    "observations",
    "oracle",
    "orography",
    "station_datasets",
]
