"""Every bad input a user can give: one clear line on stderr, exit status 1, no output left."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import xarray as xr

from ensml.cli.main import main
from tests.conftest import SMOKE, tiny_data_args


def run_failing(args: list[str], capsys: pytest.CaptureFixture, match: str) -> str:
    """Run ``ensml args`` in the current directory; assert a one-line error and no outputs."""
    before = set(Path().iterdir())
    assert main(args) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) >= 1
    line = err[-1]
    assert line.startswith("ensml: "), line
    assert match in line, line
    assert set(Path().iterdir()) == before, "partial output left behind"
    return line


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _variant(src: Path, dst: Path, change) -> Path:
    with xr.open_dataset(src) as ds:
        change(ds.load()).to_netcdf(dst)
    return dst


def fit_args(data: dict[str, Path], **overrides: object) -> list[str]:
    return ["fit", "--config", SMOKE, *tiny_data_args(data, **overrides)]


def test_missing_variable(tiny_data, work, capsys) -> None:
    line = run_failing(fit_args(tiny_data, **{"data.variables": "[z, q]"}), capsys, "has no variable 'q'")
    assert "forecast.nc" in line and "found: t, z" in line


@pytest.mark.slow
def test_missing_member_dimension(tiny_data, work, capsys) -> None:
    """A forecast without members is one run, an ensemble of one: too few for a subset of 5."""
    bad = _variant(tiny_data["forecast"], work / "nomember.nc", lambda ds: ds.isel(member=0, drop=True))
    args = fit_args(tiny_data, **{"data.forecast": bad})
    run_failing(args, capsys, "has 1 members")


@pytest.mark.slow
def test_different_grids(tiny_data, work, capsys) -> None:
    bad = _variant(tiny_data["analysis"], work / "coarse.nc", lambda ds: ds.isel(longitude=slice(0, None, 2)))
    run_failing(fit_args(tiny_data, **{"data.analysis": bad}), capsys, "different grids")


@pytest.mark.slow
def test_no_common_dates(tiny_data, work, capsys) -> None:
    shift = np.timedelta64(3650, "D")
    bad = _variant(
        tiny_data["analysis"], work / "later.nc", lambda ds: ds.assign_coords(time=ds.time + shift)
    )
    run_failing(fit_args(tiny_data, **{"data.analysis": bad}), capsys, "no dates in common")


@pytest.mark.slow
def test_nan_in_inputs(tiny_data, work, capsys) -> None:
    def poison(ds: xr.Dataset) -> xr.Dataset:
        ds["t"][5, 1, 3, 0, 4, 4] = np.nan
        return ds

    bad = _variant(tiny_data["forecast"], work / "nan.nc", poison)
    line = run_failing(fit_args(tiny_data, **{"data.forecast": bad}), capsys, "NaN or infinite values in 't'")
    assert "2017-01-16" in line  # the 6th init time, every 3 days from 2017-01-01


@pytest.mark.parametrize("how", ["truncated", "garbage"])
def test_unreadable_file(tiny_data, work, capsys, how) -> None:
    raw = Path(tiny_data["forecast"]).read_bytes()
    bad = work / f"{how}.nc"
    bad.write_bytes(raw[: len(raw) // 3] if how == "truncated" else b"not a netCDF file\n" * 100)
    expected = "cannot be read" if how == "truncated" else "is not a netCDF, HDF5, GRIB or zarr file"
    run_failing(fit_args(tiny_data, **{"data.forecast": bad}), capsys, expected)


def test_missing_file(tiny_data, work, capsys) -> None:
    run_failing(fit_args(tiny_data, **{"data.forecast": "nowhere.nc"}), capsys, "does not exist")


def test_k_larger_than_m(tiny_data, work, capsys) -> None:
    run_failing(fit_args(tiny_data, **{"data.k": 11}), capsys, "k=11 members: forecast")


def test_empty_split(tiny_data, work, capsys) -> None:
    line = run_failing(
        fit_args(tiny_data, **{"data.test_period": "[2030-01-01, 2030-12-31]"}), capsys, "holds no init dates"
    )
    assert "test split" in line and "2017-01-01" in line


def test_overlapping_periods(tiny_data, work, capsys) -> None:
    run_failing(fit_args(tiny_data, **{"data.val_period": "[2017-08-01, 2017-10-31]"}), capsys, "overlaps")


def test_target_lead_not_an_input(tiny_data, work, capsys) -> None:
    run_failing(fit_args(tiny_data, **{"data.target_leads": 72}), capsys, "target_leads=72")


def test_checkpoint_for_other_variables(tiny_data, fitted, work, capsys) -> None:
    ckpt = fitted / "runs/smoke/checkpoints/best.ckpt"
    args = [
        "predict",
        "--config",
        SMOKE,
        *tiny_data_args(tiny_data, **{"data.variables": "[z]"}),
        f"--ckpt_path={ckpt}",
    ]
    run_failing(args, capsys, "was trained with variables=['z', 't'] but the data has variables=['z']")


def test_checkpoint_corrupt(tiny_data, work, capsys) -> None:
    ckpt = work / "broken.ckpt"
    ckpt.write_bytes(b"\x00" * 64)
    args = ["predict", "--config", SMOKE, *tiny_data_args(tiny_data), f"--ckpt_path={ckpt}"]
    run_failing(args, capsys, "cannot be read")


def test_evaluate_predictions_on_other_grid(tiny_data, fitted, work, capsys) -> None:
    preds = _variant(
        fitted / "runs/smoke/predictions.nc", work / "p.nc", lambda ds: ds.isel(latitude=slice(0, None, 2))
    )
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--predictions={preds}",
        "--out_dir=out",
    ]
    run_failing(args, capsys, "different grids")


def test_evaluate_k_too_large(tiny_data, work, capsys) -> None:
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        "--k=20",
        "--out_dir=out",
    ]
    run_failing(args, capsys, "k=20")
