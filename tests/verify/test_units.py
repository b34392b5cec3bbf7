"""The tables' units are the data's own (its ``units`` attribute), else those ensml knows by name."""

from __future__ import annotations

from pathlib import Path

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


def test_units_come_from_the_data(tiny_data: dict[str, Path], tmp_path: Path) -> None:
    fc, an = _renamed(tiny_data, tmp_path, "kg m-2")
    scores = evaluate(str(fc), str(an), leads=24, levels=500, out_dir=None)
    assert set(scores.table["units"]) == {"kg m-2"}


def test_without_units_a_known_name_gets_ensmls_and_an_unknown_one_1(tiny_data, tmp_path) -> None:
    fc, an = _renamed(tiny_data, tmp_path, None)
    scores = evaluate(str(fc), str(an), leads=24, levels=500, out_dir=None)
    assert set(scores.table["units"]) == {"1"}
    assert units_of("tp") == "m" and units_of("t") == "K"
