"""Static inputs: location channels and static fields of the surface read from a file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.static import location_channels, read_static
from ensml.errors import EnsmlError
from tests.conftest import TINY_PERIODS

LAT = np.array([60.0, 20.0, -20.0, -60.0])
LON = np.array([0.0, 90.0, 180.0, 270.0])


def static_file(path: Path, lat=LAT, lon=LON, **fields: np.ndarray) -> str:
    ds = xr.Dataset(
        {k: (("latitude", "longitude"), v) for k, v in fields.items()},
        coords={"latitude": lat, "longitude": lon},
    )
    ds.to_netcdf(path)
    return str(path)


def test_location_channels_by_hand() -> None:
    loc = location_channels(LAT, LON)
    assert loc.shape == (4, 4, 4) and loc.dtype == np.float32
    np.testing.assert_allclose(loc[0, :, 0], np.sin(np.deg2rad(LAT)), atol=1e-7)
    np.testing.assert_allclose(loc[1, 1, :], np.cos(np.deg2rad(20.0)), atol=1e-7)
    np.testing.assert_allclose(loc[2, 0], [0, 1, 0, -1], atol=1e-7)  # sin(lon)
    np.testing.assert_allclose(loc[3, 2], [1, 0, -1, 0], atol=1e-7)  # cos(lon)


def test_static_fields_are_standardised_and_oriented(tmp_path: Path) -> None:
    """An orography with ascending latitude and a size-1 time dim: flipped to north → south,
    squeezed, and standardised over the grid (mean 0, std 1)."""
    oro = np.arange(16, dtype=float).reshape(4, 4) * 100.0
    lsm = np.zeros((4, 4))
    ds = xr.Dataset(
        {"z": (("time", "lat", "lon"), oro[::-1][None]), "lsm": (("time", "lat", "lon"), lsm[None])},
        coords={"time": [np.datetime64("2017-01-01")], "lat": LAT[::-1], "lon": LON},
    )
    ds.to_netcdf(tmp_path / "static.nc")
    out = read_static(tmp_path / "static.nc", ["z", "lsm"], LAT, LON)
    assert out.shape == (2, 4, 4) and out.dtype == np.float32
    np.testing.assert_allclose(out[0], (oro - oro.mean()) / oro.std(), rtol=1e-6)
    np.testing.assert_array_equal(out[1], 0.0)  # a constant field stays a zero channel


@pytest.mark.parametrize(
    ("fields", "lon", "message"),
    [
        ({"z": np.ones((4, 4))}, LON, r"static file .*static.nc has no variable 'lsm' \(found: z\)"),
        ({"lsm": np.full((4, 4), np.nan)}, LON, r"'lsm' has NaN or infinite values"),
        ({"lsm": np.ones((4, 4))}, LON + 1.0, r"'lsm' is on another grid than the forecast: longitude"),
    ],
)
def test_bad_static_files(tmp_path: Path, fields, lon, message) -> None:
    path = static_file(tmp_path / "static.nc", lon=lon, **fields)
    with pytest.raises(EnsmlError, match=message):
        read_static(path, ["lsm"], LAT, LON)


def test_static_field_with_other_dims_is_refused(tmp_path: Path) -> None:
    ds = xr.Dataset(
        {"lsm": (("level", "latitude", "longitude"), np.ones((2, 4, 4)))},
        coords={"level": [500, 850], "latitude": LAT, "longitude": LON},
    )
    ds.to_netcdf(tmp_path / "s.nc")
    with pytest.raises(EnsmlError, match=r"'lsm' has dims \('level', 'latitude', 'longitude'\)"):
        read_static(tmp_path / "s.nc", ["lsm"], LAT, LON)


@pytest.mark.slow
def test_data_module_reads_static_fields(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    with xr.open_dataset(tiny_data["forecast"]) as fc:
        lat, lon = fc["latitude"].values, fc["longitude"].values
    rng = np.random.default_rng(0)
    path = static_file(tmp_path / "static.nc", lat=lat, lon=lon, orog=rng.normal(size=(lat.size, lon.size)))
    dm = EnsembleDataModule(
        str(tiny_data["forecast"]),
        str(tiny_data["analysis"]),
        static=path,
        static_variables=["orog"],
        **TINY_PERIODS,
    )
    assert dm.stats["static"].shape == (1, lat.size, lon.size)
    assert dm.grid_shape == (lat.size, lon.size)
    with pytest.raises(EnsmlError, match=r"static_variables \['orog'\] need data.static"):
        EnsembleDataModule(str(tiny_data["forecast"]), static_variables=["orog"])
