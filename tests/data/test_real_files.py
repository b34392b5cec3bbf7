"""Every real sample file in ../shared/data/real opens through ensml's checked opener."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from ensml.data.layouts.formats import detect_format
from ensml.data.open import open_dataset, open_forecast
from ensml.errors import EnsmlError
from tests.conftest import SHARED_DATA


def real_files() -> list[Path]:
    if not SHARED_DATA.is_dir():
        return []
    files = [
        p for p in SHARED_DATA.rglob("*") if p.is_file() and detect_format(p) in ("grib", "hdf5", "netcdf3")
    ]
    stores = [
        p
        for p in SHARED_DATA.rglob("*")
        if p.is_dir() and detect_format(p) == "zarr" and detect_format(p.parent) != "zarr"  # not its arrays
    ]
    return sorted(files + stores)


@pytest.mark.parametrize("path", real_files(), ids=lambda p: str(p.relative_to(SHARED_DATA)))
def test_every_real_file_opens(real_data, path: Path) -> None:
    ds = open_dataset(path, "file")
    assert ds.data_vars and {"latitude", "longitude"} <= set(ds.dims)
    if "member" in ds.dims:  # an ensemble opens as a forecast too
        fc = open_forecast(path)
        assert fc.sizes["member"] >= 6
    ds.isel({d: 0 for d in ds.dims if d not in ("latitude", "longitude")}).load()


def test_real_files_were_found(real_data) -> None:
    assert len(real_files()) >= 20


def test_facts_of_the_real_ensembles(real_data) -> None:
    era5 = open_forecast(real_data / "cfgrib" / "era5-levels-members.grib")
    assert era5.sizes["member"] == 10 and sorted(era5["level"].values.tolist()) == [500.0, 850.0]
    ens = open_forecast(real_data / "earthkit-data" / "ens_50.grib")
    assert ens["member"].values.tolist() == list(range(51))  # the control first
    oper = open_forecast(sorted((real_data / "metview-python" / "ds" / "oper").glob("*.grib")))
    # one deterministic run: an ensemble of one member (GRIB's scalar number)
    assert oper["msl"].dims == ("init_time", "lead_time", "member", "latitude", "longitude")  # surface
    assert oper["t"].dims == ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    assert oper.sizes["member"] == 1
    an = open_forecast(sorted((real_data / "metview-python" / "ds" / "an").glob("*.grib")))
    assert an.sizes["init_time"] == 13 and an.sizes["lead_time"] == 1  # analyses: forecasts at 0 h
    assert "msl" in an and "w" in an


def test_sparse_seasonal_file_is_masked_and_refused_for_training(real_data) -> None:
    """7 of 28 members x 3 of 20 leads x 8 starts hold data; the rest opens as NaN."""
    from ensml.data.datamodule import EnsembleDataModule

    path = real_data / "cfgrib" / "forecast_monthly_ukmo.grib"
    fc = open_forecast(path)
    held = np.isfinite(fc["t2m"]).any(["latitude", "longitude"]).values
    assert held.sum() == 7 * 3 * 8 and fc.sizes["member"] == 28
    lead = int(fc["lead_time"].values[0] / np.timedelta64(1, "h"))
    dm = EnsembleDataModule(str(path), variables=["t2m"], levels=[], input_leads=[lead], target_leads=lead)
    with pytest.raises(
        EnsmlError, match=r"^surface variable\(s\) t2m need at least one pressure-level variable"
    ):
        dm.setup("fit")
