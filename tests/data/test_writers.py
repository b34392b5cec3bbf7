"""Tests for the atomic CF netCDF writer."""

from __future__ import annotations

import netCDF4
import numpy as np
import pytest
import xarray as xr

from ensml.data import writers
from ensml.data.writers import write_netcdf
from ensml.errors import EnsmlError


def _dataset() -> xr.Dataset:
    ds = xr.Dataset(
        {"z": (("latitude", "longitude"), np.arange(12, dtype="float32").reshape(3, 4) + 5.5e4)},
        coords={"latitude": [60.0, 0.0, -60.0], "longitude": [0.0, 90.0, 180.0, 270.0]},
        attrs={"title": "test"},
    )
    ds["z"].attrs["units"] = "m2 s-2"
    return ds


def test_roundtrip_attrs_and_defaults(tmp_path):
    ds = _dataset()
    out = write_netcdf(ds, tmp_path / "a.nc", history="unit test")
    assert out == tmp_path / "a.nc"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nc"]  # no temporary left over
    back = xr.open_dataset(out)
    xr.testing.assert_identical(back["z"].reset_coords(drop=True), ds["z"].reset_coords(drop=True))
    assert back.attrs["Conventions"] == "CF-1.8"
    assert back.attrs["source"].startswith("ensml")
    assert back.attrs["history"].endswith("ensml 0.1.0: unit test")
    assert back.attrs["title"] == "test"
    assert "history" not in ds.attrs  # the caller's dataset is not modified
    with netCDF4.Dataset(out) as nc:
        assert nc["z"].filters()["zlib"] and nc["z"].filters()["shuffle"]
        assert "_FillValue" not in nc["latitude"].ncattrs()  # CF: no fill value on coordinates


def test_history_is_prepended_and_source_kept(tmp_path):
    ds = _dataset().assign_attrs(history="2000-01-01 made by hand", source="my model")
    back = xr.open_dataset(write_netcdf(ds, tmp_path / "a.nc"))
    lines = back.attrs["history"].splitlines()
    assert len(lines) == 2 and lines[1] == "2000-01-01 made by hand" and "ensml" in lines[0]
    assert back.attrs["source"] == "my model"


def test_encoding_is_merged(tmp_path):
    out = write_netcdf(_dataset(), tmp_path / "a.nc", {"z": {"zlib": False, "dtype": "float64"}})
    with netCDF4.Dataset(out) as nc:
        assert not nc["z"].filters()["zlib"]
        assert nc["z"].dtype == np.float64


def test_replaces_existing_file(tmp_path):
    path = tmp_path / "a.nc"
    write_netcdf(_dataset(), path)
    write_netcdf(_dataset() + 1, path)
    assert float(xr.open_dataset(path)["z"].min()) == 5.5e4 + 1


def test_failure_leaves_no_file_and_keeps_old_one(tmp_path, monkeypatch):
    path = tmp_path / "a.nc"
    write_netcdf(_dataset(), path)
    before = path.read_bytes()

    def broken(self, target, **kwargs):
        with open(target, "wb") as f:
            f.write(b"half a file")
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", broken)
    with pytest.raises(RuntimeError, match="disk on fire"):
        write_netcdf(_dataset() + 1, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.nc"]
    assert path.read_bytes() == before


def test_interrupt_removes_temporary(tmp_path, monkeypatch):
    def interrupted(self, target, **kwargs):
        open(target, "wb").close()
        raise KeyboardInterrupt

    monkeypatch.setattr(xr.Dataset, "to_netcdf", interrupted)
    with pytest.raises(KeyboardInterrupt):
        write_netcdf(_dataset(), tmp_path / "a.nc")
    assert list(tmp_path.iterdir()) == []


def test_os_errors_become_ensml_errors(tmp_path, monkeypatch):
    def denied(self, target, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(xr.Dataset, "to_netcdf", denied)
    with pytest.raises(EnsmlError, match=r"cannot write .*a\.nc: .*Permission denied"):
        write_netcdf(_dataset(), tmp_path / "a.nc")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("target", "encoding", "match"),
    [
        ("missing/a.nc", None, "does not exist"),
        (".", None, "is a directory"),
        ("a.nc", {"q": {"zlib": True}}, "not in the dataset: q"),
    ],
)
def test_user_errors(tmp_path, target, encoding, match):
    with pytest.raises(EnsmlError, match=match):
        write_netcdf(_dataset(), tmp_path / target, encoding)
    assert list(tmp_path.iterdir()) == []


def test_default_compression_constant_is_not_mutated(tmp_path):
    before = dict(writers.DEFAULT_COMPRESSION)
    write_netcdf(_dataset(), tmp_path / "a.nc", {"z": {"complevel": 9}})
    assert before == writers.DEFAULT_COMPRESSION
