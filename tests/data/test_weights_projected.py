"""Cell-area weights on projected grids, checked against closed forms: a regular grid stored as
2-D arrays, a rotated-pole grid, an equal-area grid, the polar-stereographic map factor; uniform
weights with one note where the coordinates define no cells."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import numpy as np
import pytest
import xarray as xr

from ensml import logs
from ensml.data.grid import horizontal_dims
from ensml.data.weights import area_weights, cell_areas, cell_corners, latitude_weights
from ensml.errors import EnsmlError
from tests.data.projected import POLAR, R, geographic, grid


@contextlib.contextmanager
def logs_quiet() -> Iterator[None]:
    """As under ``ensml --quiet``."""
    logs.configure(quiet=True)
    try:
        yield
    finally:
        logs.configure()


@pytest.mark.parametrize("transpose", [False, True])
def test_regular_grid_as_2d_arrays_gives_latitude_weights(transpose: bool) -> None:
    lat1, lon1 = np.linspace(90, -90, 73), np.arange(0.0, 360.0, 2.5)
    lat, lon = np.meshgrid(lat1, lon1, indexing="ij")
    if transpose:  # latitude along the second index
        lat, lon = lat.T, lon.T
    areas = cell_areas(lat, lon)
    np.testing.assert_allclose(areas.sum(), 4 * np.pi, rtol=1e-12)  # the whole sphere
    w = areas / areas.mean()
    expected = latitude_weights(lat1).values
    expected = np.broadcast_to(expected[None, :] if transpose else expected[:, None], w.shape)
    np.testing.assert_allclose(w, expected, rtol=1e-12)
    da = xr.DataArray(
        np.zeros(lat.shape),
        dims=("y", "x"),
        coords={"latitude": (("y", "x"), lat), "longitude": (("y", "x"), lon)},
    )
    weights = area_weights(da)
    assert weights.dims == ("y", "x") and weights.attrs["weighting"] == "exact cell area"
    np.testing.assert_allclose(weights.values, w, rtol=1e-12)


def test_rotated_pole_cells_match_their_latitude_bands() -> None:
    # cells of a rotated grid are latitude/longitude rectangles in the rotated frame: exact areas known
    mapping = {
        "grid_mapping_name": "rotated_latitude_longitude",
        "grid_north_pole_latitude": 39.25,
        "grid_north_pole_longitude": -162.0,
    }
    d = 1.0
    rlon, rlat = np.arange(-10.0, 10.0 + 1e-9, d), np.arange(-8.0, 8.0 + 1e-9, d)
    lat, lon = geographic(mapping, rlon, rlat)
    assert np.ptp(lat, axis=1).max() > 1.0  # really curvilinear in the geographic frame
    exact = np.outer(
        np.sin(np.deg2rad(rlat + d / 2)) - np.sin(np.deg2rad(rlat - d / 2)), np.full(rlon.size, np.deg2rad(d))
    )
    areas = cell_areas(lat, lon)
    np.testing.assert_allclose(areas[1:-1, 1:-1], exact[1:-1, 1:-1], rtol=1e-4)  # measured 6e-5
    np.testing.assert_allclose(areas, exact, rtol=3e-4)  # outer cells: corners extrapolated (1.6e-4)
    np.testing.assert_allclose(areas.sum(), exact.sum(), rtol=1e-4)


def test_equal_area_grid_has_equal_weights_and_its_area() -> None:
    mapping = {
        "grid_mapping_name": "lambert_azimuthal_equal_area",
        "longitude_of_projection_origin": 10.0,
        "latitude_of_projection_origin": 50.0,
        "earth_radius": R,
    }
    dx, n = 50e3, 30
    x, y = (np.arange(n) - n / 2 + 0.3) * dx, (np.arange(n - 1) - (n - 1) / 2 - 0.2) * dx
    lat, lon = geographic(mapping, x, y)
    areas = cell_areas(lat, lon) * R**2
    np.testing.assert_allclose(areas.sum(), areas.size * dx * dx, rtol=1e-5)  # measured 4.6e-6
    np.testing.assert_allclose(areas[1:-1, 1:-1], dx * dx, rtol=5e-5)  # measured 2.3e-5
    np.testing.assert_allclose(areas, dx * dx, rtol=5e-4)  # outer row: 2.6e-4


def test_polar_stereographic_matches_the_map_factor() -> None:
    # cell area = dx² / k², k = (1 + sin 60°) / (1 + sin φ) on the sphere (true scale at 60°N)
    x, y = grid()
    lat, lon = geographic(POLAR, x, y)
    areas = cell_areas(lat, lon) * R**2
    k = (1 + np.sin(np.deg2rad(60.0))) / (1 + np.sin(np.deg2rad(lat)))
    expected = 250e3**2 / k**2
    np.testing.assert_allclose(areas[1:-1, 1:-1], expected[1:-1, 1:-1], rtol=1e-6)
    np.testing.assert_allclose(areas, expected, rtol=3e-3)  # outer cells of 250 km: 1.9e-3
    np.testing.assert_allclose(areas.sum(), expected.sum(), rtol=1e-3)
    lat_c, lon_c = cell_corners(lat, lon)
    assert lat_c.shape == (7, 8) and 0 <= lon_c.min() and lon_c.max() < 360


def _uniform_cases() -> dict[str, xr.DataArray]:
    x, y = grid()
    lat, lon = geographic(POLAR, x, y)
    order = [0, 4, 3, 2, 1, 5]  # rows 1 to 4 reversed: the cells between them fold over
    folded = lat[order], lon[order]
    two_d = {"dims": ("y", "x"), "data": np.zeros(lat.shape)}
    return {
        "fold over": xr.DataArray(
            **two_d, coords={"latitude": (("y", "x"), folded[0]), "longitude": (("y", "x"), folded[1])}
        ),
        "without latitude/longitude": xr.DataArray(**two_d, coords={"y": y, "x": x}),
        "has no cell size": xr.DataArray(
            np.zeros((1, 7)),
            dims=("y", "x"),
            coords={"latitude": (("y", "x"), lat[:1]), "longitude": (("y", "x"), lon[:1])},
        ),
        "not monotone": xr.DataArray(
            np.zeros((3, 2)),
            dims=("latitude", "longitude"),
            coords={"latitude": [10.0, 30.0, 20.0], "longitude": [0.0, 1.0]},
        ),
    }


@pytest.mark.parametrize("why", list(_uniform_cases()))
def test_uniform_weights_with_one_note(why: str, capsys: pytest.CaptureFixture) -> None:
    da = _uniform_cases()[why]
    w = area_weights(da, what="forecast f.nc")
    assert np.all(w.values == 1.0) and w.attrs["weighting"].startswith("uniform: ")
    assert set(w.dims) == set(horizontal_dims(da))
    notes = capsys.readouterr().err.splitlines()
    assert len(notes) == 1, notes
    assert notes[0].startswith("ensml: note: forecast f.nc: ") and why in notes[0]
    assert notes[0].endswith("weighting every grid point the same (uniform weights)")
    area_weights(da, note=False)
    assert not capsys.readouterr().err
    with logs_quiet():
        area_weights(da)
    assert not capsys.readouterr().err  # --quiet


def test_bad_coordinates_are_errors_not_uniform() -> None:
    lat = np.full((3, 3), 50.0)
    with pytest.raises(EnsmlError, match="finite"):
        cell_areas(np.where(np.eye(3) > 0, np.nan, lat), lat)
    with pytest.raises(EnsmlError, match="one shape"):
        cell_areas(lat, lat[:2])
    coords = {"latitude": (("y", "x"), lat + 50), "longitude": (("y", "x"), lat)}  # 100°N
    da = xr.DataArray(np.zeros((3, 3)), dims=("y", "x"), coords=coords)
    with pytest.raises(EnsmlError, match=r"forecast f\.nc: latitudes and longitudes must be finite"):
        area_weights(da, what="forecast f.nc")
