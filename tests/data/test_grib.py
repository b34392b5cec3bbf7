"""GRIB through ensml's readers (cfgrib), on the real ERA5 EDA ensemble in ../shared/data."""

from __future__ import annotations

import logging
import logging.config
from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.data.layouts.grib import open_grib
from ensml.data.open import open_forecast
from ensml.errors import EnsmlError
from ensml.names import FORECAST_DIMS


def test_era5_members_open_as_one_lead_forecast(real_data: Path) -> None:
    path = real_data / "cfgrib" / "era5-levels-members.grib"
    before = sorted(p.name for p in path.parent.iterdir())
    ds = open_forecast(path, ["z", "t"])
    assert ds["z"].dims == FORECAST_DIMS
    assert dict(ds["z"].sizes) == {
        "init_time": 4,
        "lead_time": 1,
        "member": 10,
        "level": 2,
        "latitude": 61,
        "longitude": 120,
    }
    assert ds["lead_time"].values[0] == np.timedelta64(0, "ns")
    assert str(ds["init_time"].values[-1])[:13] == "2017-01-02T12"
    assert ds["latitude"].values[0] == 90 and ds["latitude"].values[-1] == -90
    assert sorted(float(v) for v in ds["level"].values) == [500.0, 850.0]
    z500 = ds["z"].sel(level=500).values
    assert 4.5e4 < np.nanmean(z500) < 6e4  # geopotential, m2 s-2
    assert (ds["z"].std("member") > 0).mean() > 0.99
    assert sorted(p.name for p in path.parent.iterdir()) == before  # no .idx written


def test_grib_errors(real_data: Path, tmp_path: Path) -> None:
    with pytest.raises(EnsmlError, match="has no variable 'q'"):
        open_grib(real_data / "cfgrib" / "era5-levels-members.grib", ["q"])
    with pytest.raises(EnsmlError, match="does not exist"):
        open_grib(tmp_path / "missing.grib")
    bad = tmp_path / "bad.grib"
    bad.write_bytes(b"not grib at all")
    with pytest.raises(EnsmlError, match="is not a netCDF, HDF5, GRIB or zarr file"):
        open_forecast(bad)


@pytest.mark.slow
def test_grib_is_recognised_by_content_not_name(real_data: Path, tmp_path: Path) -> None:
    plain = tmp_path / "ST4.2010010112.24h"  # a GRIB file named as NCEP names them
    plain.write_bytes((real_data / "cfgrib" / "era5-levels-members.grib").read_bytes())
    named = open_forecast(real_data / "cfgrib" / "era5-levels-members.grib", ["t"])
    xr.testing.assert_equal(open_forecast(plain, ["t"]).load(), named.load())


@pytest.mark.slow
def test_real_spread_check_runs(real_data: Path) -> None:
    from ensml.experiments.real_spread import real_spread_check

    table = real_spread_check(
        str(real_data / "cfgrib" / "era5-levels-members.grib"),
        epochs=1,
        subsets_per_time=2,
        batch_size=6,
        max_test_subsets=4,
    )
    assert len(table) == 3 * 2 * 2
    assert np.isfinite(table[["rmse", "bias", "correlation"]].to_numpy()).all()
    ddof1 = table[table["estimator"].str.contains("ddof 1")]
    ddof0 = table[table["estimator"].str.contains("ddof 0")]
    assert (ddof1["bias"].to_numpy() > ddof0["bias"].to_numpy()).all()  # ddof 1 is the larger


@pytest.mark.slow
def test_single_time_grib_is_normalised_like_every_forecast(real_data: Path) -> None:
    ds = open_forecast(real_data / "metview-python" / "ztu_multi_dim.grib")
    assert ds["t"].dims == ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    assert ds.sizes["init_time"] == 1 and ds.sizes["lead_time"] == 4
    np.testing.assert_array_equal(ds["valid_time"].values, (ds["init_time"] + ds["lead_time"]).values)


@pytest.mark.slow
def test_control_and_perturbed_members_merge_control_first(real_data: Path) -> None:
    path = real_data / "earthkit-data" / "ens_50.grib"
    ds = open_forecast(path)
    assert ds.sizes["member"] == 51 and ds["member"].values.tolist() == list(range(51))
    kw = {"engine": "cfgrib", "backend_kwargs": {"indexpath": ""}}
    for kind, members in (("cf", 0), ("pf", [1, 50])):
        with xr.open_dataset(path, **kw, filter_by_keys={"dataType": kind}) as ref:
            z = ref["z"].sel(number=members) if kind == "pf" else ref["z"]
            z = z.assign_coords(longitude=z.longitude % 360).sortby("longitude")
            ref_z = z.sortby("latitude", ascending=False).values
        np.testing.assert_array_equal(ds["z"].sel(member=members).values.squeeze(), ref_z.squeeze())
    assert open_forecast(path, reader={"drop_control": True}).sizes["member"] == 50
    pf = open_forecast(path, reader={"filter_by_keys": {"dataType": "pf"}})
    assert pf["member"].values[0] == 1


@pytest.fixture
def analysis_grib(real_data: Path) -> Path:
    """ERA5 t at 850/500 hPa, 13 analysis times (every message a whole field)."""
    return real_data / "metview-python" / "ds" / "an" / "t_pl.grib"


@pytest.mark.parametrize("damage", ["truncated", "overwritten"])
def test_damaged_grib_is_an_error_not_fewer_times(analysis_grib, tmp_path, capfd, damage) -> None:
    data = analysis_grib.read_bytes()
    if damage == "truncated":  # cfgrib alone opens this with 12 of the 13 times, silently
        broken = data[:-300]
    else:
        broken = data[:5000] + np.random.default_rng(0).bytes(3000) + data[5000:]
    path = tmp_path / f"{damage}.grib"
    path.write_bytes(broken)
    capfd.readouterr()
    with pytest.raises(EnsmlError, match=r"is damaged: 1 message\(s\) cannot be read") as err:
        open_forecast(path)
    assert "\n" not in str(err.value) and str(path) in str(err.value)
    assert capfd.readouterr().err == ""  # cfgrib's traceback is not printed beside it


def test_variable_cfgrib_skips_is_named_with_the_reason(analysis_grib, tmp_path, capfd) -> None:
    # t: 13 analysis times; u from the forecast folder: one time -> cfgrib drops u with a traceback.
    mixed = tmp_path / "mixed.grib"
    mixed.write_bytes(
        analysis_grib.read_bytes() + (analysis_grib.parents[1] / "oper" / "u_pl.grib").read_bytes()
    )
    capfd.readouterr()
    with pytest.raises(EnsmlError) as err:
        open_forecast(mixed, ["u"])
    message = str(err.value)
    assert message == (
        f"GRIB file {mixed}: variable 'u' cannot be read beside the others (its 'time' coordinate "
        "differs from the other variables'); read it from a file of its own or with "
        "ensml.data.layouts.grib.read_grib(path, filter_by_keys={'shortName': 'u'})"
    )
    assert capfd.readouterr().err == ""
    from ensml.data.layouts.grib import read_grib

    assert list(read_grib(mixed, filter_by_keys={"shortName": "u"}).data_vars) == ["u"]  # the advice works


@pytest.mark.slow
def test_an_ensemble_given_as_analysis_prints_one_line(real_data, tmp_path, capfd) -> None:
    from ensml.cli.main import main

    path = real_data / "earthkit-data" / "ens_50.grib"
    capfd.readouterr()
    assert (
        main(
            ["evaluate", "--forecast", str(path), "--analysis", str(path), "--out_dir", str(tmp_path / "out")]
        )
        == 1
    )
    err = capfd.readouterr().err
    assert (
        err.count("\n") == 1 and err.startswith("ensml: analysis file") and "unexpected member" in err
    )  # an ensemble, not one field
    assert not (tmp_path / "out").exists()


def test_a_damaged_grib_is_found_after_a_logging_set_up_disabled_the_loggers(analysis_grib, tmp_path) -> None:
    """``logging.config.dictConfig`` disables the loggers that exist (its default; import-linter's
    does so): cfgrib's report of a damaged message must still reach ensml."""
    open_forecast(analysis_grib)  # cfgrib imported: its loggers exist
    path = tmp_path / "truncated.grib"
    path.write_bytes(analysis_grib.read_bytes()[:-300])
    loggers = [lg for lg in logging.Logger.manager.loggerDict.values() if isinstance(lg, logging.Logger)]
    before = {lg: lg.disabled for lg in loggers}
    try:
        logging.config.dictConfig({"version": 1})
        assert logging.getLogger("cfgrib.messages").disabled
        with pytest.raises(EnsmlError, match=r"is damaged: 1 message\(s\) cannot be read"):
            open_forecast(path)
        assert logging.getLogger("cfgrib.messages").disabled  # as the set-up left it
    finally:
        for lg, was in before.items():
            lg.disabled = was
