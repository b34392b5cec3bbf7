"""Exact cell-area latitude weights."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.data.weights import latitude_weights
from ensml.errors import EnsmlError


def _wb2_weights(lat: np.ndarray) -> np.ndarray:
    # WeatherBench2's formula for an equiangular grid, written independently.
    rad = np.deg2rad(lat)
    d = np.abs(rad[1] - rad[0])
    upper = np.clip(rad + d / 2, -np.pi / 2, np.pi / 2)
    lower = np.clip(rad - d / 2, -np.pi / 2, np.pi / 2)
    w = np.abs(np.sin(upper) - np.sin(lower))
    return w / w.mean()


@pytest.mark.parametrize(
    "lat", [np.linspace(90, -90, 361), np.linspace(-90, 90, 73), np.arange(-88.5, 90, 3.0)]
)
def test_matches_weatherbench2(lat):
    w = latitude_weights(lat)
    np.testing.assert_allclose(w.values, _wb2_weights(lat), rtol=1e-12)
    np.testing.assert_allclose(w.mean(), 1.0)
    assert w.dims == ("latitude",) and np.array_equal(w.latitude.values, lat)


def test_orders_agree_and_pole_cells_are_caps():
    north_south = latitude_weights(np.linspace(90, -90, 361))
    south_north = latitude_weights(np.linspace(-90, 90, 361))
    np.testing.assert_allclose(north_south.values, south_north.values[::-1], rtol=1e-12)
    pole = north_south.values[0]
    # cap from 89.75° to 90°: (1 − sin 89.75°) relative to the mean cell (2 / 361)
    np.testing.assert_allclose(pole, (1 - np.sin(np.deg2rad(89.75))) / (2 / 361), rtol=1e-10)


def test_from_dataarray_and_custom_dim():
    da = xr.DataArray(np.zeros((3, 2)), dims=("lat", "x"), coords={"lat": [45.0, 0.0, -45.0]})
    w = latitude_weights(da, dim="lat")
    assert w.dims == ("lat",)
    np.testing.assert_allclose(w[0], w[2])
    assert latitude_weights([10.0]).values.tolist() == [1.0]


@pytest.mark.parametrize(
    ("lat", "match"),
    [
        ([0.0, 0.0, 1.0], "strictly increasing or decreasing"),
        ([0.0, 95.0], "within \\[-90, 90\\]"),
        ([[0.0]], "1-D"),
        ([], "non-empty"),
        ([0.0, np.nan], "finite"),
    ],
)
def test_bad_latitudes(lat, match):
    with pytest.raises(EnsmlError, match=match):
        latitude_weights(lat)


def test_dataset_without_latitude():
    with pytest.raises(EnsmlError, match="no 'latitude' coordinate"):
        latitude_weights(xr.Dataset({"a": ("x", [1.0])}))


def test_area_weights_on_a_regular_grid_are_latitude_weights():
    from ensml.data.weights import area_weights

    lat, lon = np.linspace(90, -90, 19), np.arange(0.0, 360.0, 20.0)
    coords = {"latitude": lat, "longitude": lon}
    da = xr.DataArray(np.zeros((19, 18)), dims=("latitude", "longitude"), coords=coords)
    w = area_weights(da)
    assert w.dims == ("latitude",) and w.attrs["weighting"] == "exact cell area"
    np.testing.assert_array_equal(w.values, latitude_weights(lat).values)
