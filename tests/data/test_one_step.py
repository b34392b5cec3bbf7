"""A forecast of one lead time, stored with a scalar ``lead_time`` and ``time`` for the
initialisation, opens and scores as the same forecast with those as dims (it gave a traceback)."""

from __future__ import annotations

from pathlib import Path

import pandas as pd
import pytest
import xarray as xr

from ensml.data.open import open_forecast
from ensml.names import FORECAST_DIMS
from ensml.verify.evaluate import evaluate

VARIANTS = {
    "lead dim": lambda ds: ds.isel(lead_time=[1]),
    "scalar lead": lambda ds: ds.isel(lead_time=1),
    "scalar lead, time for init": lambda ds: ds.isel(lead_time=1).rename(init_time="time"),
}


@pytest.mark.slow
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_one_step_forecast_opens_with_ensmls_dims_and_scores_alike(
    variant, tiny_data, tmp_path: Path
) -> None:
    with xr.open_dataset(tiny_data["forecast"]) as ds:
        one = VARIANTS[variant](ds.load())
    path = tmp_path / "one.nc"
    one.to_netcdf(path)
    fc = open_forecast(str(path))
    assert fc["z"].dims == FORECAST_DIMS and fc.sizes["lead_time"] == 1
    assert (fc["valid_time"].values == (fc["init_time"] + fc["lead_time"]).values).all()
    got = evaluate(str(path), str(tiny_data["analysis"]), out_dir=None).table
    want = evaluate(str(tiny_data["forecast"]), str(tiny_data["analysis"]), leads=24, out_dir=None).table
    pd.testing.assert_frame_equal(got, want)


def test_one_step_files_one_per_init_combine(tiny_data, tmp_path) -> None:
    """Each file is made a forecast with ensml's dims before the files are combined by init."""
    with xr.open_dataset(tiny_data["forecast"]) as ds:
        one = ds.isel(lead_time=1, init_time=slice(0, 4)).rename(init_time="time").load()
    for i in range(one.sizes["time"]):
        one.isel(time=i).to_netcdf(tmp_path / f"fc_{i}.nc")
    fc = open_forecast(str(tmp_path / "fc_*.nc"))
    assert fc["z"].dims == FORECAST_DIMS and fc.sizes["init_time"] == 4 and fc.sizes["lead_time"] == 1
    got = fc["z"].isel(lead_time=0, drop=True).drop_vars("valid_time", errors="ignore")
    want = one["z"].rename(time="init_time").drop_vars(["lead_time", "valid_time"], errors="ignore")
    xr.testing.assert_equal(got, want)
