"""Readers: vocabulary normalisation and schema validation."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.data.grid import check_same_grid
from ensml.data.normalise import normalise
from ensml.data.open import check_levels, open_analysis, open_forecast
from ensml.errors import EnsmlError


def foreign_forecast() -> xr.Dataset:
    """A forecast in cfgrib/CMIP-like naming: number, time, step (h), isobaricInhPa, lat ↑, lon ±180."""
    rng = np.random.default_rng(0)
    lat = np.array([-45.0, 0.0, 45.0])
    lon = np.array([-90.0, 0.0, 90.0, 180.0 - 1e-9])
    shape = (2, 3, 4, 2, 3, 4)
    return xr.Dataset(
        {"t": (("time", "step", "number", "isobaricInhPa", "lat", "lon"), rng.normal(size=shape))},
        coords={
            "time": pd.date_range("2020-01-01", periods=2),
            "step": [0, 24, 48],
            "number": np.arange(4),
            "isobaricInhPa": [500, 850],
            "lat": lat,
            "lon": lon,
        },
    )


def test_normalise_renames_and_orders() -> None:
    src = foreign_forecast()
    ds = normalise(src)
    assert ds["t"].dims == ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    assert ds["latitude"].values.tolist() == [45.0, 0.0, -45.0]  # north → south
    lon = ds["longitude"].values
    assert np.all(np.diff(lon) > 0) and lon.min() >= 0 and lon.max() < 360
    assert ds["lead_time"].values[2] == np.timedelta64(48, "h")
    assert (ds["valid_time"] == ds["init_time"] + ds["lead_time"]).all()
    # values travel with their coordinates: the point at 45°N, 90°W (= 270°E)
    np.testing.assert_array_equal(
        ds["t"].sel(latitude=45.0, longitude=270.0).values, src["t"].sel(lat=45.0, lon=-90.0).values
    )
    assert ds["level"].attrs["units"] == "hPa" and ds["latitude"].attrs["units"] == "degrees_north"


def test_open_forecast_from_foreign_file(tmp_path: Path) -> None:
    path = tmp_path / "f.nc"
    foreign_forecast().to_netcdf(path)
    ds = open_forecast(path, ["t"])
    assert ds.sizes["member"] == 4 and ds.sizes["lead_time"] == 3


def test_open_many_files_by_glob(tmp_path: Path) -> None:
    src = normalise(foreign_forecast())
    for i in range(2):
        src.isel(init_time=[i]).to_netcdf(tmp_path / f"part{i}.nc")
    ds = open_forecast(str(tmp_path / "part*.nc"), ["t"])
    assert ds.sizes["init_time"] == 2
    xr.testing.assert_allclose(ds["t"].load(), src["t"])


def test_corrupt_file_among_many_is_named(tmp_path: Path) -> None:
    normalise(foreign_forecast()).isel(init_time=[0]).to_netcdf(tmp_path / "a.nc")
    (tmp_path / "b.nc").write_bytes(b"\x89HDF\r\n\x1a\n garbage")
    with pytest.raises(EnsmlError, match=r"b\.nc cannot be read"):
        open_forecast(str(tmp_path / "*.nc"))


def test_no_matching_files(tmp_path: Path) -> None:
    with pytest.raises(EnsmlError, match="no forecast files match"):
        open_forecast(str(tmp_path / "*.nc"))


def test_analysis_missing_dimension(tmp_path: Path) -> None:
    # Without level it would be a surface variable (ensml.data.surface); without longitude it is wrong.
    ds = xr.Dataset({"z": (("time", "level", "latitude"), np.zeros((2, 1, 3)))}, coords={"level": [500.0]})
    ds.to_netcdf(tmp_path / "a.nc")
    with pytest.raises(EnsmlError, match="missing longitude"):
        open_analysis(tmp_path / "a.nc", ["z"])


def test_grid_and_level_checks() -> None:
    a = normalise(foreign_forecast())
    b = a.isel(latitude=slice(0, 2))
    with pytest.raises(EnsmlError, match="different grids: latitude has 3 points"):
        check_same_grid(a, b, "A", "B")
    with pytest.raises(EnsmlError, match=r"no level\(s\) \[700\]"):
        check_levels(a, [500, 700], "A")


def test_repeated_init_time(tmp_path: Path) -> None:
    src = normalise(foreign_forecast())
    src.isel(init_time=[0, 1, 1]).drop_vars("valid_time").to_netcdf(tmp_path / "f.nc")
    with pytest.raises(EnsmlError, match=r"f\.nc has 1 repeated init_time value\(s\), e\.g\. 2020-01-02"):
        open_forecast(tmp_path / "f.nc", ["t"])


def test_repeated_analysis_time(tmp_path: Path) -> None:
    time = pd.to_datetime(["2020-01-01", "2020-01-02", "2020-01-01"])
    ds = xr.Dataset(
        {"z": (("time", "level", "latitude", "longitude"), np.zeros((3, 1, 2, 2)))},
        coords={"time": time, "level": [500.0], "latitude": [10.0, 0.0], "longitude": [0.0, 1.0]},
    )
    ds.to_netcdf(tmp_path / "a.nc")
    with pytest.raises(EnsmlError, match="repeated time value"):
        open_analysis(tmp_path / "a.nc", ["z"])


def test_extra_dimension(tmp_path: Path) -> None:
    foreign_forecast().expand_dims(surface=1).to_netcdf(tmp_path / "f.nc")
    with pytest.raises(EnsmlError, match=r"variable 't' has dims .*, unexpected surface \(expected init"):
        open_forecast(tmp_path / "f.nc", ["t"])


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_stores_open_like_netcdf(tiny_data, tmp_path, zarr_format) -> None:
    from ensml.data.open import open_analysis

    with xr.open_dataset(tiny_data["analysis"]) as ds:
        small = ds.isel(time=slice(0, 4)).load()
    store = tmp_path / "analysis.store"  # recognised by its metadata, not its name
    small.to_zarr(store, zarr_format=zarr_format, consolidated=zarr_format == 2)
    xr.testing.assert_equal(
        open_analysis(store, ["z", "t"]).load(),
        open_analysis(tiny_data["analysis"], ["z", "t"]).isel(time=slice(0, 4)).load(),
    )
