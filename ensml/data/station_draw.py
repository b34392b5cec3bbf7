"""Random stations for the generated datasets: their places, ids and observations file.

Shared by ``ensml data synth --stations N`` (:mod:`ensml.data.synth.stations`) and ``ensml data
physics --stations N`` (:mod:`ensml.data.physics.stations`). Stations lie uniformly on the
sphere between a grid's first and last cell-centre latitudes (:func:`draw_places`), and their
observations are written as :func:`ensml.data.stations.read_observations` reads them: dims
``(station, time[, level])``, ``latitude``, ``longitude`` (and ``elevation`` when given) along
``station``, CF discrete sampling geometry ``timeSeries`` (:func:`observations_dataset`).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import xarray as xr
from jsonargparse.typing import restricted_number_type

from ensml import names
from ensml.data.stations import COORD_ATTRS

#: The numbers of stations the generators accept (0: none).
StationCount = restricted_number_type("StationCount", int, [(">=", 0), ("<=", 100_000)])


def draw_places(rng: np.random.Generator, n: int, latitude: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``n`` places (latitudes, longitudes in degrees, 0 … 360 east) uniform on the sphere between
    the outer values of ``latitude`` (a grid's cell centres), drawn from ``rng`` (two draws of
    ``n``: the sines of the latitudes, then the longitudes)."""
    lo, hi = np.sin(np.deg2rad([latitude.min(), latitude.max()]))
    lat = np.rad2deg(np.arcsin(rng.uniform(lo, hi, n)))
    lon = rng.uniform(0.0, 360.0, n)
    return lat, lon


def station_ids(prefix: str, n: int) -> np.ndarray:
    """``n`` ids ``{prefix}00001`` … (text)."""
    return np.array([f"{prefix}{i + 1:05d}" for i in range(n)])


def station_coords(
    ids: np.ndarray, latitude: np.ndarray, longitude: np.ndarray, elevation: np.ndarray | None = None
) -> dict:
    """The coordinates along ``station`` with their CF attributes (``elevation`` when given, m)."""
    coords = {
        names.STATION: (names.STATION, ids, COORD_ATTRS[names.STATION]),
        names.LATITUDE: (names.STATION, latitude, names.COORD_ATTRS[names.LATITUDE]),
        names.LONGITUDE: (names.STATION, longitude, names.COORD_ATTRS[names.LONGITUDE]),
    }
    if elevation is not None:
        coords[names.ELEVATION] = (names.STATION, elevation, COORD_ATTRS[names.ELEVATION])
    return coords


def observed_attrs(grid_attrs: Mapping, note: str) -> dict:
    """An observed variable's attributes: its grid variable's (their comment left out) and ``note``."""
    return {**{k: v for k, v in grid_attrs.items() if k != "comment"}, "comment": note}


def observations_dataset(data: Mapping, coords: Mapping, time: np.ndarray) -> xr.Dataset:
    """The observations file: ``data`` (variables on ``(station, time[, level])``), the station
    ``coords`` (:func:`station_coords`) and the valid times ``time``, as a CF ``timeSeries``."""
    ds = xr.Dataset(dict(data), coords={**coords, names.TIME: time})
    ds[names.TIME].attrs.update(COORD_ATTRS[names.TIME])
    ds.attrs["featureType"] = "timeSeries"
    return ds


__all__ = [
    "StationCount",
    "draw_places",
    "observations_dataset",
    "observed_attrs",
    "station_coords",
    "station_ids",
]
