"""``evaluate``'s skill intervals and DM tests, and NaN in the analysis as "not observed", on the
tiny synthetic data, checked against scores computed here with properscoring and ``scores``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import xarray as xr

from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.scores.significance import forecast_horizon, skill_test
from ensml.verify.evaluate import evaluate

LEAD = np.timedelta64(24, "h")


def pairs(
    fc_path: Path, an_path: Path, var: str = "t", level: float = 500
) -> tuple[xr.DataArray, xr.DataArray]:
    """The forecast at +24 h and the analysis at its valid times, on init_time."""
    with xr.open_dataset(fc_path) as f, xr.open_dataset(an_path) as a:
        x = f[var].sel(level=level, lead_time=LEAD).load()
        y = a[var].sel(level=level).load()
    y = (
        y.sel(time=x.init_time.values + LEAD)
        .rename(time="init_time")
        .assign_coords(init_time=x.init_time.values)
    )
    return x, y


def crps_by_init(x: xr.DataArray, y: xr.DataArray) -> xr.DataArray:
    """properscoring's CRPS per init and point (NaN where y is NaN)."""
    values = ps.crps_ensemble(y.values, x.transpose("init_time", ..., "member").values)
    return xr.DataArray(values, dims=y.dims, coords=y.coords).where(y.notnull())


def test_skill_interval_and_dm_are_those_of_the_per_init_area_means(tiny_data: dict[str, Path]) -> None:
    fc, an = tiny_data["forecast"], tiny_data["analysis"]
    scores = evaluate(str(fc), str(an), leads=24, variables="t", levels=500, k=5, out_dir=None)
    row = scores.table.set_index("forecast").loc["raw subset (5 members)"]
    x, y = pairs(fc, an)
    w = area_weights(y)
    full = crps_by_init(x, y).weighted(w).mean(["latitude", "longitude"])
    sub = crps_by_init(x.isel(member=slice(0, 5)), y).weighted(w).mean(["latitude", "longitude"])
    want = skill_test(sub.values, full.values, forecast_horizon(LEAD, x.init_time.values))
    assert row["skill_vs_raw_ensemble"] == pytest.approx(want.skill, rel=1e-6)
    columns = {
        "skill_low": want.low,
        "skill_high": want.high,
        "dm_stat": want.dm_stat,
        "dm_p": want.p_value,
        "block_length": want.block_length,
    }
    for col, value in columns.items():
        assert row[col] == pytest.approx(value, rel=1e-5), col
    assert row["skill_low"] < row["skill_vs_raw_ensemble"] < row["skill_high"]
    raw = scores.table.set_index("forecast").loc["raw ensemble (10 members)"]
    assert raw[["skill_low", "skill_high", "dm_p"]].isna().all()  # the reference itself


def _masked(tiny_data: dict[str, Path], tmp_path: Path, fill: float = np.nan) -> Path:
    """The analysis with the western half of the grid unobserved on every other time step."""
    with xr.open_dataset(tiny_data["analysis"]) as ds:
        ds = ds.load()
    west = ds.longitude < 180
    odd = xr.DataArray(np.arange(ds.sizes["time"]) % 2 == 1, dims="time", coords={"time": ds.time})
    for var in ds.data_vars:
        ds[var] = ds[var].where(~(west & odd), fill)
    ds.to_netcdf(tmp_path / "analysis_masked.nc")
    return tmp_path / "analysis_masked.nc"


def test_nan_in_the_analysis_is_not_observed(tiny_data: dict[str, Path], tmp_path: Path, capsys) -> None:
    """Each forecast is scored over the observed values only, area-weighted: the pooled mean
    sum(w c) / sum(w) over observed (init, point) pairs; n_scored counts them."""
    fc, an = tiny_data["forecast"], _masked(tiny_data, tmp_path)
    scores = evaluate(str(fc), str(an), leads=24, variables="t", levels=500, out_dir=str(tmp_path / "out"))
    x, y = pairs(fc, an)
    crps = crps_by_init(x, y)
    w = area_weights(y).broadcast_like(crps).where(crps.notnull())
    want = float((crps * w).sum() / w.sum())
    row = scores.table.set_index("forecast").loc["raw ensemble (10 members)"]
    assert row["crps"] == pytest.approx(want, rel=1e-6)
    assert row["n_scored"] == int(y.notnull().sum()) < y.size
    assert "the analysis observes" in capsys.readouterr().err
    with xr.open_dataset(tmp_path / "out" / "scores.nc") as nc:
        assert int(nc["n_observed_t"].sum()) == row["n_scored"]
    table = pd.read_csv(tmp_path / "out" / "scores.csv")
    assert (table["n_scored"] == row["n_scored"]).all()  # every forecast on the same values


def test_inf_in_the_analysis_is_still_an_error(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    an = _masked(tiny_data, tmp_path, fill=np.inf)
    with pytest.raises(EnsmlError, match=r"infinite values in 't' .*infinite values are not scored"):
        evaluate(str(tiny_data["forecast"]), str(an), leads=24, variables="t", levels=500, out_dir=None)


@pytest.mark.slow
def test_nan_in_the_forecast_is_still_an_error(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    with xr.open_dataset(tiny_data["forecast"]) as ds:
        ds = ds.load()
    point = {"init_time": ds.init_time[5], "lead_time": LEAD, "member": 3, "level": 500.0}
    ds["t"].loc[point] = ds["t"].loc[point].where(ds.longitude != ds.longitude[7])  # one column of NaN
    ds.to_netcdf(tmp_path / "forecast.nc")
    with pytest.raises(EnsmlError, match=r"16 NaN values in 't'.*complete fields only"):
        evaluate(
            str(tmp_path / "forecast.nc"), str(tiny_data["analysis"]), leads=24, variables="t", out_dir=None
        )


@pytest.mark.slow
def test_the_decomposition_adds_up_to_the_crps_table(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    """decomposition.csv: crps = reliability - resolution + uncertainty = the scores table's CRPS
    of each ensemble, with and without unobserved analysis values."""
    fc = str(tiny_data["forecast"])
    for an in (str(tiny_data["analysis"]), str(_masked(tiny_data, tmp_path))):
        scores = evaluate(fc, an, leads=[24, 48], variables="z", out_dir=None)
        parts = scores.decomposition.set_index(["forecast", "level_hPa", "lead_h"])
        table = scores.table.set_index(["forecast", "level_hPa", "lead_h"])
        assert set(parts.index.get_level_values("forecast")) == {
            "raw ensemble (10 members)",
            "raw subset (5 members)",
        }
        np.testing.assert_allclose(parts["crps"], table.loc[parts.index, "crps"], rtol=1e-6)
        total = parts["reliability"] - parts["resolution"] + parts["uncertainty"]
        np.testing.assert_allclose(total, parts["crps"], rtol=1e-9)
        assert (parts["reliability"] >= 0).all()


@pytest.mark.slow
def test_missing_forecast_values_are_left_out_alike(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    """``missing_forecast=True``: a NaN member leaves its init time and point out of every score
    (as an unobserved analysis value), so the table equals that of the analysis masked there."""
    with xr.open_dataset(tiny_data["forecast"]) as ds:
        fc = ds.load()
    hole = (fc.longitude < 90) & (fc.init_time == fc.init_time[4])  # a member that did not run there
    fc["t"] = fc["t"].where(~(hole & (fc.member == 2)))
    fc.to_netcdf(tmp_path / "forecast.nc")
    with xr.open_dataset(tiny_data["analysis"]) as ds:
        an = ds.load()
    valid = fc.init_time[4].values + LEAD
    an["t"] = an["t"].where(~((an.longitude < 90) & (an.time == valid)))
    an.to_netcdf(tmp_path / "analysis.nc")
    with pytest.raises(EnsmlError, match=r"NaN values in 't'.*complete fields only"):
        evaluate(
            str(tmp_path / "forecast.nc"), str(tiny_data["analysis"]), leads=24, variables="t", out_dir=None
        )
    missing = evaluate(
        str(tmp_path / "forecast.nc"),
        str(tiny_data["analysis"]),
        leads=24,
        variables="t",
        out_dir=None,
        missing_forecast=True,
    )
    plain = evaluate(
        str(tiny_data["forecast"]), str(tmp_path / "analysis.nc"), leads=24, variables="t", out_dir=None
    )
    cols = ["forecast", "level_hPa", "crps", "n_scored"]
    pd.testing.assert_frame_equal(missing.table[cols], plain.table[cols], rtol=1e-6)
    assert (missing.table["n_scored"] < 16 * 32 * missing.n_inits).all()
    pd.testing.assert_frame_equal(missing.decomposition, plain.decomposition, rtol=1e-6)
