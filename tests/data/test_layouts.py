"""Real ensemble layouts: ENS-10 (one GRIB file per calendar date, all years), operational GRIB
with control and perturbed members, members in separate files, reader options from YAML."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.data.open import open_forecast
from ensml.errors import EnsmlError
from tests.conftest import REPO
from tests.data.grib_files import YEARS, field

ENS10_PERIODS = {
    "train_period": ["2016-01-01", "2016-12-31"],
    "val_period": ["2017-01-01", "2017-12-31"],
    "test_period": ["2018-01-01", "2018-12-31"],
}


@pytest.fixture(scope="module")
def grib(tmp_path_factory) -> Path:
    """The files of tests/data/grib_files.py, written in a subprocess (see its docstring)."""
    out = tmp_path_factory.mktemp("grib_layouts")
    subprocess.run([sys.executable, "-m", "tests.data.grib_files", str(out)], cwd=REPO, check=True)
    return out


def ens10(grib: Path, folder: str = "ens10") -> list[str]:
    return [str(grib / folder / "ens10_pl_*.grib"), str(grib / folder / "ens10_sfc_*.grib")]


@pytest.mark.slow
def test_ens10_layout_opens_as_one_dataset_sorted_by_init_time(grib) -> None:
    ds = open_forecast(ens10(grib))
    assert dict(ds.sizes) == {
        "init_time": 6,
        "lead_time": 3,
        "member": 3,
        "level": 2,
        "latitude": 5,
        "longitude": 8,
    }
    expected = [np.datetime64(f"{y}-01-{d}") for y in YEARS for d in ("02", "05")]
    np.testing.assert_array_equal(ds["init_time"].values, np.array(expected, dtype="datetime64[ns]"))
    assert ds["t2m"].dims == ("init_time", "lead_time", "member", "latitude", "longitude")  # surface
    assert ds["z"].chunks[0] == (1,) * 6  # lazy, one init time per chunk: read when a sample needs it
    got = ds["t"].sel(init_time="2017-01-05", lead_time=np.timedelta64(24, "h"), member=2, level=850).values
    np.testing.assert_allclose(got, field("t", 850, 2, 2017, 5, 24), rtol=1e-6)
    np.testing.assert_allclose(
        ds["msl"].sel(init_time="2016-01-02", lead_time=np.timedelta64(0, "h"), member=0).values,
        field("msl", 0, 0, 2016, 2, 0),
        rtol=1e-6,
    )


def test_ens10_file_with_a_missing_date(grib) -> None:
    with pytest.raises(
        EnsmlError, match=r"^forecast file .*ens10_pl_0105\.grib lacks 1 of the 3 years .* 2017-01-05"
    ):
        open_forecast(ens10(grib, "ens10_gap"))


@pytest.mark.slow
def test_data_module_on_the_ens10_layout_with_a_surface_variable(grib) -> None:
    dm = EnsembleDataModule(
        ens10(grib), variables=["z", "t", "t2m"], levels=[500, 850], k=2, batch_size=2, **ENS10_PERIODS
    )
    dm.setup("fit")
    batch = next(iter(dm.train_dataloader()))
    assert batch["mean_k"].shape == (2, 3, 3, 2, 5, 8)  # (B, V, L, D, H, W)
    assert batch["std_m"].shape == (2, 3, 2, 5, 8)
    np.testing.assert_array_equal(dm.stats["surface"], [0, 0, 1])
    init = dm.train_set.init_times[int(batch["index"][0])]
    year, day = int(str(init)[:4]), int(str(init)[8:10])
    expected = np.mean([field("t", 500, n, year, day, 48) for n in range(2)], axis=0)
    np.testing.assert_allclose(batch["mean_k"][0, 1, 2, 0].numpy(), expected, rtol=1e-6)


@pytest.mark.slow
def test_control_and_perturbed_members(grib) -> None:
    ds = open_forecast(grib / "cfpf.grib")
    assert ds["member"].values.tolist() == [0, 1, 2, 3] and sorted(ds.data_vars) == ["t", "t2m", "z"]
    np.testing.assert_allclose(
        ds["z"].sel(member=0, level=500).isel(init_time=0, lead_time=0).values,
        field("z", 500, 0, 2017, 2, 0),
        rtol=1e-6,
    )
    assert open_forecast(grib / "cfpf.grib", reader={"drop_control": True})["member"].values.tolist() == [
        1,
        2,
        3,
    ]
    pl = open_forecast(grib / "cfpf.grib", reader={"filter_by_keys": {"typeOfLevel": "isobaricInhPa"}})
    assert sorted(pl.data_vars) == ["t", "z"]


@pytest.mark.slow
def test_control_member_duplicated(grib) -> None:
    with pytest.raises(
        EnsmlError, match=r"^GRIB file .*cfpf_dup\.grib: the control member number 0 of '\w+' appears twice"
    ):
        open_forecast(grib / "cfpf_dup.grib")


def test_filter_that_selects_nothing(grib) -> None:
    with pytest.raises(EnsmlError, match=r"^GRIB file .*cfpf\.grib has no messages matching filter_by_keys"):
        open_forecast(grib / "cfpf.grib", reader={"filter_by_keys": {"shortName": "q"}})


@pytest.mark.slow
def test_rename_and_a_rename_of_a_missing_variable(grib) -> None:
    ds = open_forecast(grib / "cfpf.grib", ["temperature"], reader={"rename": {"t": "temperature"}})
    assert list(ds.data_vars) == ["temperature"]
    with pytest.raises(
        EnsmlError, match=r"^forecast file .*cfpf\.grib: reader\.rename names 'q', which it lacks"
    ):
        open_forecast(grib / "cfpf.grib", reader={"rename": {"q": "humidity"}})
    with pytest.raises(EnsmlError, match=r"^reader options must be filter_by_keys, drop_control, rename"):
        open_forecast(grib / "cfpf.grib", reader={"filter": {}})


# -- members in separate files -----------------------------------------------------------------
def member_file(path: Path, member: int, n_lat: int = 4, member_dim: bool = False) -> None:
    rng = np.random.default_rng(member)
    ds = xr.Dataset(
        {
            "t": (
                ("init_time", "lead_time", "level", "latitude", "longitude"),
                rng.normal(280, 1, (2, 2, 1, n_lat, 6)),
            )
        },
        coords={
            "init_time": np.array(["2020-01-01", "2020-01-02"], dtype="datetime64[ns]"),
            "lead_time": np.array([0, 24], dtype="timedelta64[h]").astype("timedelta64[ns]"),
            "level": [850.0],
            "latitude": np.linspace(60, 30, n_lat),
            "longitude": np.arange(6) * 2.0,
        },
    )
    if member_dim:
        ds = ds.expand_dims(member=[member], axis=2)
    path.parent.mkdir(parents=True, exist_ok=True)
    ds.to_netcdf(path)


def test_members_in_separate_files(tmp_path) -> None:
    for m in (3, 1, 2, 10):
        member_file(tmp_path / f"regional_mem{m:02d}.nc", m)
    ds = open_forecast(str(tmp_path / "regional_mem{member}.nc"))
    assert ds["member"].values.tolist() == [1, 2, 3, 10]
    assert ds["t"].dims == ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    with xr.open_dataset(tmp_path / "regional_mem10.nc") as one:
        np.testing.assert_array_equal(
            ds["t"].sel(member=10).values, one["t"].values[:, :, :, ::-1][:, :, :, ::-1]
        )


@pytest.mark.parametrize(
    ("names", "pattern", "order"),
    [
        (["gep1", "gep10", "gep2"], "arw-fer-{member}/fc.nc", ["gep1", "gep2", "gep10"]),
        (["pf03", "pf1", "cf"], "{member}/fc.nc", ["cf", "pf1", "pf03"]),
        (["mem_b", "mem_a"], "{member}.nc", ["mem_a", "mem_b"]),
    ],
)
def test_members_named_by_any_token(tmp_path, names: list[str], pattern: str, order: list[str]) -> None:
    """Member folders and files named as regional ensembles name them: the names are the member
    coordinate, in natural order (digit runs as numbers)."""
    for i, name in enumerate(names):
        member_file(tmp_path / pattern.replace("{member}", name), i)
    ds = open_forecast(str(tmp_path / pattern))
    assert ds["member"].values.tolist() == order
    with xr.open_dataset(tmp_path / pattern.replace("{member}", order[0])) as one:
        np.testing.assert_array_equal(ds["t"].isel(member=0).values, one["t"].values)


def test_members_on_a_projected_grid_without_x_y_coordinates(tmp_path) -> None:
    """Member files on a projected grid whose dims y, x have no coordinate values (a KeyError
    traceback before): stacked, the grid checked by its 2-D latitude/longitude."""
    lat, lon = np.meshgrid(np.linspace(60, 50, 3), np.linspace(0, 10, 4), indexing="ij")
    for m in (1, 2):
        ds = xr.Dataset(
            {"t": (("init_time", "lead_time", "y", "x"), np.full((1, 1, 3, 4), 280.0 + m))},
            coords={
                "init_time": np.array(["2020-01-01"], dtype="datetime64[ns]"),
                "lead_time": np.array([24], dtype="timedelta64[h]").astype("timedelta64[ns]"),
                "latitude": (("y", "x"), lat),
                "longitude": (("y", "x"), lon),
            },
        )
        (tmp_path / f"{m}").mkdir()
        ds.to_netcdf(tmp_path / f"{m}" / "wrf.nc")
    fc = open_forecast(str(tmp_path / "{member}" / "wrf.nc"))
    assert fc["member"].values.tolist() == [1, 2] and fc["t"].sizes["member"] == 2
    assert fc["t"].sel(member=2).values.min() == 282.0


def test_member_files_on_different_grids(tmp_path) -> None:
    member_file(tmp_path / "m1" / "fc.nc", 1)
    member_file(tmp_path / "m2" / "fc.nc", 2, n_lat=5)
    with pytest.raises(
        EnsmlError,
        match=r"^forecast member file .*m2/fc\.nc and member 1 .* are on different grids: latitude has 5",
    ):
        open_forecast(str(tmp_path / "m{member}" / "fc.nc"))


def test_member_file_that_already_has_members(tmp_path) -> None:
    member_file(tmp_path / "fc_1.nc", 1, member_dim=True)
    member_file(tmp_path / "fc_2.nc", 2, member_dim=True)
    with pytest.raises(EnsmlError, match=r"^forecast member file .*fc_1\.nc already has a member dimension"):
        open_forecast(str(tmp_path / "fc_{member}.nc"))


def test_no_member_files_match(tmp_path) -> None:
    with pytest.raises(EnsmlError, match=r"no forecast files match"):
        open_forecast(str(tmp_path / "fc_{member}.nc"))


def test_layout_configs_parse_as_data_module_arguments() -> None:
    from jsonargparse import ArgumentParser

    parser = ArgumentParser()
    parser.add_class_arguments(EnsembleDataModule, "data")
    configs = sorted((REPO / "configs" / "layouts").glob("*.yaml"))
    assert len(configs) == 4
    for path in configs:
        cfg = parser.parse_args([f"--data={path}"])
        assert cfg.data.forecast, path
