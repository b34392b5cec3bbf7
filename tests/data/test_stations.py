"""Station observations (ensml.data.stations): CSV wide and long, netCDF, values not observed, and every
bad file a one-line error through the CLI that leaves a user's files as they were."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.data.stations import read_observations
from ensml.errors import EnsmlError
from tests.cli.bad_rows import hashes, sandbox
from tests.cli.process import run_cli

WIDE = """\
# synoptic stations, 2 m temperature and pressure
Station,LAT,Lon,valid_time,elevation,t2m,msl
06260,52.1,5.18,2017-01-02T00:00,2,271.5,101200
06260,52.1,5.18,2017-01-01T00:00,2,,101500
06260,52.1,5.18,2017-01-01T00:00,2,,101500
FJ-LKB,-18.2,-178.56,2017-01-01 00:00,18,299.0,NA
FJ-LKB,-18.2,-178.56,2017-01-02T01:00+01:00,18,298.5,100900
"""

LONG = """\
station;latitude;longitude;time;elevation;variable;value
06260;52.1;5.18;2017-01-02T00:00;2;t2m;271.5
06260;52.1;5.18;2017-01-02T00:00;2;msl;101200
06260;52.1;5.18;2017-01-01T00:00;2;msl;101500
FJ-LKB;-18.2;181.44;2017-01-01T00:00;18;t2m;299.0
FJ-LKB;-18.2;181.44;2017-01-02T00:00;18;t2m;298.5
FJ-LKB;-18.2;181.44;2017-01-02T00:00;18;msl;100900
FJ-LKB;-18.2;181.44;2017-01-02T00:00;18;msl;
"""


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def test_wide_csv(tmp_path: Path) -> None:
    obs = read_observations(write(tmp_path, "obs.csv", WIDE))
    assert dict(obs.sizes) == {"station": 2, "time": 2} and sorted(obs.data_vars) == ["msl", "t2m"]
    assert list(obs["station"].values) == ["06260", "FJ-LKB"]  # ids as text: the leading 0 kept
    assert obs["t2m"].dims == ("station", "time")
    np.testing.assert_array_equal(
        obs["time"].values, np.array(["2017-01-01", "2017-01-02"], "datetime64[ns]")
    )
    np.testing.assert_array_equal(obs["t2m"].values, [[np.nan, 271.5], [299.0, 298.5]])  # +01:00 is 00 UTC
    np.testing.assert_array_equal(obs["msl"].values, [[101500, 101200], [np.nan, 100900]])
    np.testing.assert_allclose(obs["longitude"].values, [5.18, 181.44])
    np.testing.assert_array_equal(obs["elevation"].values, [2.0, 18.0])
    assert obs["elevation"].attrs["units"] == "m" and obs["station"].attrs["cf_role"] == "timeseries_id"


def test_long_csv_is_the_same_observations(tmp_path: Path) -> None:
    """Semicolons, longitudes 0..360 (the wide file's -178.56 is 181.44), a repeated row with no value."""
    wide = read_observations(write(tmp_path, "wide.csv", WIDE))
    long = read_observations(write(tmp_path, "long.csv", LONG))
    xr.testing.assert_identical(long.drop_attrs(deep=False), wide.drop_attrs(deep=False))


def test_upper_air_observations_have_a_level_dim(tmp_path: Path) -> None:
    text = "id,lat,lon,time,level,variable,value\n" + "\n".join(
        [
            "A,50,10,2017-01-01T12:00,500,t,250.5",
            "A,50,10,2017-01-01T12:00,850,t,270.0",
            "B,40,20,2017-01-01T12:00,850,t,275.0",
        ]
    )
    obs = read_observations(write(tmp_path, "sonde.csv", text))
    assert obs["t"].dims == ("station", "time", "level")
    np.testing.assert_array_equal(obs["level"].values, [500.0, 850.0])
    np.testing.assert_array_equal(obs["t"].values[:, 0], [[250.5, 270.0], [np.nan, 275.0]])


def test_netcdf_station_file(tmp_path: Path) -> None:
    """A station dim, ids in a char variable with cf_role, lat/lon as variables, valid_time."""
    ds = xr.Dataset(
        {
            "t2m": (("station", "valid_time"), [[np.nan, 271.5], [299.0, 298.5]], {"units": "K"}),
            "msl": (("station", "valid_time"), [[101500.0, 101200.0], [np.nan, 100900.0]], {"units": "Pa"}),
            "name": ("station", np.array([b"06260", b"FJ-LKB"]), {"cf_role": "timeseries_id"}),
            "lat": ("station", [52.1, -18.2]),
            "lon": ("station", [5.18, -178.56]),
            "station_elevation": ("station", [2.0, 18.0]),
        },
        coords={"valid_time": np.array(["2017-01-01", "2017-01-02"], "datetime64[ns]")},
    )
    ds.to_netcdf(tmp_path / "obs.nc")
    obs = read_observations(tmp_path / "obs.nc")
    wide = read_observations(write(tmp_path, "wide.csv", WIDE))
    assert obs["t2m"].attrs["units"] == "K"
    xr.testing.assert_equal(obs[["msl", "t2m"]], wide[["msl", "t2m"]])


# -- bad files: one line through the CLI, nothing written ------------------------------------------
HEAD = "station,lat,lon,time,level,t\n"
BAD: dict[str, tuple[str, tuple[str, ...]]] = {
    "no latitude column": ("station,lon,time,t\nA,10,2017-01-01,250\n", ("no latitude column", "lat")),
    "time not a time": (
        HEAD + "A,50,10,2017-01-01,500,250\nA,50,10,yesterday,500,251\n",
        ("line 3", "'yesterday'", "not a time"),
    ),
    "latitude beyond 90": (
        HEAD + "A,95,10,2017-01-01,500,250\n",
        ("station 'A'", "latitude 95", "[-90, 90]"),
    ),
    "two different values": (
        HEAD + "A,50,10,2017-01-01,500,250\nA,50,10,2017-01-01,500,251\n",
        ("two values of 't'", "lines 2, 3"),
    ),
    "a value not a number": (HEAD + "A,50,10,2017-01-01,500,warm\n", ("line 2", "'warm'", "not a number")),
    "a station at two places": (
        HEAD + "A,50,10,2017-01-01,500,250\nA,51,10,2017-01-02,500,250\n",
        ("station 'A'", "one position"),
    ),
    "a short row": (HEAD + "A,50,10,2017-01-01,500\n", ("line 2", "5 fields", "has 6")),
    "no station on the grid": (
        HEAD + "A,88,10,2017-01-04,500,250\nB,-89,10,2017-01-04,500,250\n",
        ("none of its 2 stations", "'A'", "'B'"),
    ),
    "empty file": ("", ("is empty",)),
    "a variable the forecast lacks": (
        HEAD.replace(",level,t\n", ",rh\n") + "A,50,10,2017-01-04,80\n",
        ("has no variable 'rh'",),
    ),
}


@pytest.fixture(scope="module")
def forecast(tiny_data: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> str:
    """A regional cut of the tiny forecast (28°N–62°N, 0°E–79°E; a global grid has no outside)."""
    path = tmp_path_factory.mktemp("regional") / "forecast.nc"
    with xr.open_dataset(tiny_data["forecast"]) as ds:
        ds.isel(latitude=slice(2, 6), longitude=slice(0, 8), init_time=slice(0, 4)).to_netcdf(path)
    return str(path)


def _bad_file(tmp_path: Path, case: str) -> Path:
    inputs = tmp_path / "inputs"
    inputs.mkdir()
    if case == "netCDF without a station dim":
        xr.Dataset({"t": (("time",), [1.0])}, coords={"time": [np.datetime64("2017-01-01")]}).to_netcdf(
            inputs / "obs.nc"
        )
        return inputs / "obs.nc"
    return write(inputs, "obs.csv", BAD[case][0])


SPECIAL = {
    "netCDF without a station dim": ("has no station dim",),
    "file missing": ("nope.csv", "does not exist"),
    "model height for t": ("corrects 2 m temperature only",),
}


@pytest.mark.parametrize("case", [*BAD, "netCDF without a station dim", "file missing", "model height for t"])
def test_a_bad_station_file_is_one_line_and_harmless(
    case: str, forecast: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    sandbox(work)
    path = tmp_path / "nope.csv" if case == "file missing" else None
    if case == "model height for t":
        path = write(
            tmp_path, "obs.csv", "station,lat,lon,elevation,time,level,t\nA,50,10,120,2017-01-04,500,250\n"
        )
    path = path or _bad_file(tmp_path, case)
    extra = ["--model_height", forecast] if case == "model height for t" else []
    before = hashes(tmp_path)
    status = main(
        ["evaluate", "--forecast", forecast, "--observations", str(path), "--out_dir", "out", *extra]
    )
    lines = [line for line in capsys.readouterr().err.splitlines() if line.strip()]
    assert status == 1 and len(lines) == 1, lines
    says = SPECIAL.get(case) or BAD[case][1]
    assert lines[0].startswith("ensml: ") and "Traceback" not in lines[0]
    for text in says:
        assert text in lines[0], (text, lines[0])
    assert hashes(tmp_path) == before and not (work / "out").exists()


@pytest.mark.timeout(120)
@pytest.mark.slow  # a process per file
def test_bad_station_files_in_a_process(forecast: str, tmp_path: Path) -> None:
    """The console entry point: exit status 1 and one line, no traceback, nothing written."""
    for case in ("time not a time", "no station on the grid"):
        path = write(tmp_path, f"{case.replace(' ', '-')}.csv", BAD[case][0])
        before = hashes(tmp_path)
        done = run_cli(
            ["evaluate", "--forecast", forecast, "--observations", str(path), "--out_dir", "out"],
            tmp_path,
            timeout=110,
        )
        lines = [x for x in done.stdout.splitlines() if x.strip() and "Warning" not in x and "warn(" not in x]
        assert done.returncode == 1 and len(lines) == 1 and lines[0].startswith("ensml: "), done.stdout[
            -2000:
        ]
        assert "Traceback" not in done.stdout and hashes(tmp_path) == before


def test_reader_errors_name_the_file(tmp_path: Path) -> None:
    with pytest.raises(EnsmlError, match=r"observations file .*obs.csv, line 3: .*'yesterday'"):
        read_observations(write(tmp_path, "obs.csv", BAD["time not a time"][0]))
    (tmp_path / "folder").mkdir()
    with pytest.raises(EnsmlError, match="is a folder"):
        read_observations(tmp_path / "folder")
