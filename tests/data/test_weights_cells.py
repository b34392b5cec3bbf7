"""Grids of cells (one ``cell`` dim with 1-D latitude/longitude: reduced Gaussian, HEALPix, a
subset of cells) and their area weights, without anemoi (``tests/data/test_anemoi.py`` reads them
from anemoi datasets)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.data.grid import check_same_grid, describe, horizontal_dims, is_projected
from ensml.data.normalise import normalise
from ensml.data.weights import area_weights, voronoi_areas
from ensml.errors import EnsmlError


def _cells(lat: np.ndarray, lon: np.ndarray, **coords) -> xr.Dataset:
    data = np.arange(lat.size, dtype=np.float32)
    return xr.Dataset(
        {"t": (("time", "cell"), data[None])},
        coords={
            "time": [np.datetime64("2020-01-01")],
            "latitude": ("cell", lat),
            "longitude": ("cell", lon),
            **coords,
        },
    )


def _mesh(step: float = 10.0) -> tuple[np.ndarray, np.ndarray]:
    """Cell centres of a regular grid without pole rows, flattened (a grid of cells)."""
    lat = np.arange(90 - step / 2, -90, -step)
    lon = np.arange(0, 360, step)
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    return la.ravel(), lo.ravel()


def test_a_grid_of_cells_has_one_horizontal_dim() -> None:
    lat, lon = _mesh()
    ds = _cells(lat, lon)
    assert horizontal_dims(ds) == ("cell",) and not is_projected(ds)
    assert describe(ds) == "unstructured grid of 648 cells (cell)"
    other = _cells(lat, (lon + 1.0) % 360)
    with pytest.raises(EnsmlError, match="different grids"):
        check_same_grid(ds, other, "forecast a", "analysis b")
    check_same_grid(ds, _cells(lat, lon), "forecast a", "analysis b")


def test_normalise_keeps_the_order_of_cells() -> None:
    lat, lon = _mesh()
    shuffled = np.random.default_rng(0).permutation(lat.size)
    ds = normalise(_cells(lat[shuffled], lon[shuffled] - 180.0))  # longitudes in [-180, 180)
    np.testing.assert_array_equal(ds.t.values[0], np.arange(lat.size))  # no cell moved
    np.testing.assert_array_equal(ds.longitude.values, (lon[shuffled] - 180.0) % 360.0)
    assert "axis" not in ds.latitude.attrs  # CF: axis only on dimension coordinates


def test_voronoi_areas_of_a_regular_mesh_are_its_band_areas() -> None:
    """Centres of a 10° grid without poles: each Voronoi cell is, to within its great-circle edges,
    the latitude band × longitude width of its grid cell (sin φ₊ − sin φ₋)·Δλ; together 4π."""
    lat, lon = _mesh()
    areas = voronoi_areas(lat, lon)
    upper, lower = np.minimum(lat + 5, 90), np.maximum(lat - 5, -90)
    exact = (np.sin(np.deg2rad(upper)) - np.sin(np.deg2rad(lower))) * np.deg2rad(10.0)
    assert areas.sum() == pytest.approx(4 * np.pi, rel=1e-9)
    np.testing.assert_allclose(areas, exact, rtol=0.03)  # great circles vs latitude circles at 10°
    w = area_weights(_cells(lat, lon))
    assert w.dims == ("cell",) and w.attrs["weighting"] == "spherical Voronoi cell area from the cell centres"
    np.testing.assert_allclose(w.values, areas / areas.mean())


def test_a_cell_area_coordinate_is_used_as_given() -> None:
    lat, lon = _mesh()
    given = np.linspace(1.0, 2.0, lat.size)
    w = area_weights(_cells(lat, lon, cell_area=("cell", given)))
    assert w.attrs["weighting"] == "cell area given by the data (cell_area)"
    np.testing.assert_allclose(w.values, given / given.mean())
    with pytest.raises(EnsmlError, match="cell_area must be finite and positive"):
        area_weights(_cells(lat, lon, cell_area=("cell", np.where(given > 1.5, np.nan, given))))


def test_cells_that_do_not_cover_the_globe_are_weighed_uniformly(capsys) -> None:
    lat, lon = _mesh(2.0)
    box = (lat > 30) & (lat < 60) & (lon > 0) & (lon < 40)  # a regional subset
    w = area_weights(_cells(lat[box], lon[box]), what="forecast r.zarr")
    assert w.attrs["weighting"].startswith("uniform: the cells do not cover the globe")
    np.testing.assert_array_equal(w.values, 1.0)
    assert "forecast r.zarr: the cells do not cover the globe" in capsys.readouterr().err
    twice = _cells(np.r_[lat, lat[:1]], np.r_[lon, lon[:1]])
    assert area_weights(twice, note=False).attrs["weighting"].startswith("uniform: 1 cells share a position")
