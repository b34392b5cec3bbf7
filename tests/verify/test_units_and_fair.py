"""The tables' units are the data's own (its ``units`` attribute), else those ensml knows by name;
``fair=True`` scores the ensembles with the fair CRPS."""

from __future__ import annotations

from pathlib import Path

import pytest
import xarray as xr

from ensml.names import units_of
from ensml.verify.evaluate import evaluate


def _renamed(tiny_data: dict[str, Path], tmp_path: Path, units: str | None) -> tuple[Path, Path]:
    """The tiny forecast and analysis with ``t`` renamed ``apcp`` (a name ensml does not know)."""
    paths = []
    for what in ("forecast", "analysis"):
        with xr.open_dataset(tiny_data[what]) as ds:
            ds = ds[["t"]].rename(t="apcp").load()
        ds["apcp"].attrs = {} if units is None else {"units": units}
        ds.to_netcdf(tmp_path / f"{what}.nc")
        paths.append(tmp_path / f"{what}.nc")
    return paths[0], paths[1]


@pytest.mark.slow
def test_units_come_from_the_data(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    fc, an = _renamed(tiny_data, tmp_path, "kg m-2")
    scores = evaluate(str(fc), str(an), leads=24, levels=500, out_dir=None)
    assert set(scores.table["units"]) == {"kg m-2"}


@pytest.mark.slow
def test_without_units_a_known_name_gets_ensmls_and_an_unknown_one_1(tiny_data, tmp_path) -> None:
    fc, an = _renamed(tiny_data, tmp_path, None)
    scores = evaluate(str(fc), str(an), leads=24, levels=500, out_dir=None)
    assert set(scores.table["units"]) == {"1"}
    assert units_of("tp") == "kg m-2" and units_of("t") == "K"


def test_fair_crps_scores_the_ensembles_with_the_fair_estimator(tiny_data: dict[str, Path]) -> None:
    """``fair=True``: the raw ensemble and subset rows are scoringrules' fair CRPS, so labelled."""
    import scoringrules as sr

    from ensml.data.weights import area_weights

    fc, an = str(tiny_data["forecast"]), str(tiny_data["analysis"])
    scores = evaluate(fc, an, leads=24, variables="t", levels=500, out_dir=None, fair=True)
    table = scores.table.set_index("forecast")
    assert set(table["estimator"]) == {"fair ensemble"}
    with xr.open_dataset(fc) as f, xr.open_dataset(an) as a:
        x = f["t"].sel(level=500, lead_time=scores.leads[0])
        y = a["t"].sel(level=500, time=x.init_time + x.lead_time)
        y = y.drop_vars(["time"]).rename(time="init_time") if "time" in y.dims else y
        y = y.assign_coords(init_time=x.init_time.values)
        point = sr.crps_ensemble(
            y.values, x.transpose(..., "member").values, estimator="fair", backend="numpy"
        )
    per_point = xr.DataArray(point, dims=y.dims, coords=y.coords).mean("init_time")
    w = area_weights(per_point)
    want = float(per_point.weighted(w).mean())
    assert table.loc["raw ensemble (10 members)", "crps"] == pytest.approx(want, rel=1e-6)  # float32 data
