"""A tiny WRF-like polar-stereographic grid for the projected-grid tests: the CF grid mapping,
its x/y points and their 2-D latitude/longitude (pyproj)."""

from __future__ import annotations

import numpy as np
import pyproj

R = 6370000.0  # m, WRF's sphere
#: A WRF-like polar-stereographic grid mapping (true at 60°N, x/y in metres).
POLAR = {
    "grid_mapping_name": "polar_stereographic",
    "straight_vertical_longitude_from_pole": -45.0,
    "latitude_of_projection_origin": 90.0,
    "standard_parallel": 60.0,
    "false_easting": 0.0,
    "false_northing": 0.0,
    "earth_radius": R,
}
GM = "polar_stereographic"


def geographic(mapping: dict, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """2-D latitude, longitude (degrees) of the points x × y (metres) of a CF grid mapping."""
    crs = pyproj.CRS.from_cf(mapping)
    xx, yy = np.meshgrid(x, y)
    lon, lat = pyproj.Transformer.from_crs(crs, crs.source_crs, always_xy=True).transform(xx, yy)
    return lat, lon


def grid(ny: int = 6, nx: int = 7, dx: float = 250e3) -> tuple[np.ndarray, np.ndarray]:
    """x, y (m) of a grid around (not centred on) the pole."""
    return (np.arange(nx) - (nx - 1) / 2 + 0.4) * dx, (np.arange(ny) - (ny - 1) / 2 - 0.3) * dx
