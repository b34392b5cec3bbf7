"""CF netCDF and zarr written through an output folder: the writers' behaviour, kept."""

from __future__ import annotations

from pathlib import Path

import netCDF4
import numpy as np
import pytest
import xarray as xr
import zarr

from ensml.data.outputs import DEFAULT_COMPRESSION, OutputFolder, create_zarr_store
from ensml.errors import EnsmlError

pytestmark = pytest.mark.timeout(60)


def _dataset() -> xr.Dataset:
    """A small field near 5.5e4 m2 s-2 (geopotential) on a 3 × 4 grid."""
    lat, lon = [60.0, 0.0, -60.0], [0.0, 90.0, 180.0, 270.0]
    values = 5.5e4 + np.arange(12, dtype="float32").reshape(3, 4)
    dims = ("latitude", "longitude")
    z = xr.DataArray(values, {"latitude": lat, "longitude": lon}, dims, attrs={"units": "m2 s-2"})
    return z.to_dataset(name="z").assign_attrs(title="test")


@pytest.fixture
def folder(tmp_path: Path):
    with OutputFolder.open(tmp_path / "out", "evaluate") as folder:
        yield folder


def test_netcdf_attrs_and_defaults(folder: OutputFolder) -> None:
    ds = _dataset()
    path = folder.write_netcdf(ds, "a.nc", history="unit test")
    assert path == folder.root / "a.nc"
    back = xr.open_dataset(path)
    xr.testing.assert_identical(back["z"].reset_coords(drop=True), ds["z"].reset_coords(drop=True))
    assert back.attrs["Conventions"] == "CF-1.8" and back.attrs["source"].startswith("ensml")
    assert back.attrs["history"].endswith("ensml 0.1.0: unit test") and back.attrs["title"] == "test"
    assert "history" not in ds.attrs  # the caller's dataset is not modified
    with netCDF4.Dataset(path) as nc:
        assert nc["z"].filters()["zlib"] and nc["z"].filters()["shuffle"]
        assert "_FillValue" not in nc["latitude"].ncattrs()  # CF: no fill value on coordinates
    assert folder.ledger.entries["a.nc"].size == path.stat().st_size


def test_history_prepended_source_kept_encoding_merged(folder: OutputFolder) -> None:
    ds = _dataset().assign_attrs(history="2000-01-01 made by hand", source="my model")
    before = dict(DEFAULT_COMPRESSION)
    back = xr.open_dataset(folder.write_netcdf(ds, "a.nc", {"z": {"zlib": False, "dtype": "float64"}}))
    lines = back.attrs["history"].splitlines()
    assert len(lines) == 2 and lines[1] == "2000-01-01 made by hand" and "ensml" in lines[0]
    assert back.attrs["source"] == "my model"
    with netCDF4.Dataset(folder.root / "a.nc") as nc:
        assert not nc["z"].filters()["zlib"] and nc["z"].dtype == np.float64
    assert before == DEFAULT_COMPRESSION


def test_unknown_encoding_writes_nothing(folder: OutputFolder) -> None:
    with pytest.raises(EnsmlError, match="netCDF encoding names variables not in the dataset: q"):
        folder.write_netcdf(_dataset(), "a.nc", {"q": {"zlib": True}})
    assert sorted(p.name for p in folder.root.iterdir()) == [".ensml"]


@pytest.mark.parametrize("zarr_format", [2, 3])
def test_zarr_every_chunk_written(folder: OutputFolder, zarr_format: int) -> None:
    ds = xr.Dataset({"z": ("x", np.zeros(8, "float32"))}, coords={"x": np.arange(8.0)})
    enc = {"z": {"chunksizes": (2,), "zlib": True, "shards": (4,)}}
    path = folder.write_zarr(ds, "s.zarr", enc, zarr_format=zarr_format, history="test")
    group = zarr.open_group(path, mode="r")
    assert group["z"].chunks == (2,) and group["z"].nchunks_initialized == 4  # fill-value chunks too
    assert (path / ".zmetadata").exists() == (zarr_format == 2)
    assert xr.open_zarr(path, consolidated=zarr_format == 2).attrs["Conventions"] == "CF-1.8"
    assert folder.ledger.entries["s.zarr"].kind == "dir"
    with pytest.raises(EnsmlError, match="zarr_format must be 2 or 3, got 4"):
        folder.write_zarr(ds, "t.zarr", zarr_format=4)


def test_a_worker_writes_netcdf_through_staging(folder: OutputFolder) -> None:
    folder.reserve(["w.nc"])
    path = folder.staging(["w.nc"]).write_netcdf(_dataset(), "w.nc", history="worker")
    folder.record(["w.nc"])
    assert xr.open_dataset(path).attrs["history"].endswith("worker")


def test_a_zarr_store_created_for_every_init(folder: OutputFolder) -> None:
    inits = np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]")
    template = xr.Dataset(
        {"v": (("init_time", "x"), np.zeros((1, 3), "f4"))},
        coords={"init_time": inits[:1], "x": [1.0, 2.0, 3.0]},
    )
    store_id = create_zarr_store(folder, "p.zarr", template, inits, {"v": {"chunks": (1, 3)}}, {}, "test")
    back = xr.open_zarr(folder.final("p.zarr"))
    assert back["v"].shape == (2, 3) and back.attrs["ensml_store_id"] == store_id
    assert back["init_time"].values.tolist() == inits.tolist()
    assert folder.ledger.entries["p.zarr"].kind == "dir"
