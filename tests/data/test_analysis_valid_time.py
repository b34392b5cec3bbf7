"""An analysis whose ``time`` is the start of an accumulation (GRIB: ``time`` + ``step`` =
``valid_time``) verifies at its valid time, also when the file holds one time (was "missing time")."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.data.open import open_analysis
from ensml.verify.evaluate import evaluate

STEP = np.timedelta64(6, "h")


def _accumulated(tiny_data, path) -> None:
    """The tiny analysis as an accumulation over the 6 h before each valid time."""
    with xr.open_dataset(tiny_data["analysis"]) as an:
        an = an.load()
    valid = an["time"].values
    an = an.assign_coords(time=valid - STEP, valid_time=("time", valid), step=STEP)
    an.to_netcdf(path)


@pytest.mark.slow
def test_an_accumulated_analysis_aligns_by_valid_time(tiny_data, tmp_path) -> None:
    path = tmp_path / "accumulated.nc"
    _accumulated(tiny_data, path)
    with xr.open_dataset(tiny_data["analysis"]) as an:
        assert (open_analysis(str(path))["time"].values == an["time"].values).all()
    fc = str(tiny_data["forecast"])
    got = evaluate(fc, str(path), leads=24, out_dir=None).table
    pd.testing.assert_frame_equal(got, evaluate(fc, str(tiny_data["analysis"]), leads=24, out_dir=None).table)


def test_one_time_analysis_gets_a_time_dimension(tiny_data, tmp_path) -> None:
    with xr.open_dataset(tiny_data["analysis"]) as an:
        one = an.isel(time=3).load()
    start = one["time"].values - STEP
    one.assign_coords(time=start, valid_time=one["time"].values, step=STEP).to_netcdf(tmp_path / "one.nc")
    got = open_analysis(str(tmp_path / "one.nc"))
    assert got["t"].dims[0] == "time" and got.sizes["time"] == 1 and got["time"].values[0] == start + STEP
