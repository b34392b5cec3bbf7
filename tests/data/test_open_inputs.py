"""The one reader-and-check path (:func:`ensml.data.open.open_inputs`) that training, evaluation,
the station frame and post-processing share: what it checks, in which order, and the init times
the analysis verifies."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.data.open import open_analysis, open_inputs
from ensml.errors import EnsmlError

LEADS = np.array([0, 24, 48], "timedelta64[h]").astype("timedelta64[ns]")
LAT, LON = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Inits on days 0–4 with 3 members, t on 500 and 850 hPa and t2m at the surface; the analysis
    of days 0–5 (no day 6)."""
    root = tmp_path_factory.mktemp("inputs")
    inits = pd.date_range("2020-01-01", periods=5, freq="D").values
    times = pd.date_range("2020-01-01", periods=6, freq="D").values
    dims = ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    coords = {"level": [500.0, 850.0], "latitude": LAT, "longitude": LON}
    fc = xr.Dataset(
        {
            "t": (dims, np.ones((5, 3, 3, 2, 3, 4), "float32")),
            "t2m": (dims[:3] + dims[4:], np.ones((5, 3, 3, 3, 4), "float32")),
        },
        coords={"init_time": inits, "lead_time": LEADS, "member": [0, 1, 2], **coords},
    )
    an_dims = ("time", "level", "latitude", "longitude")
    an = xr.Dataset(
        {
            "t": (an_dims, np.ones((6, 2, 3, 4), "float32")),
            "t2m": (an_dims[:1] + an_dims[2:], np.ones((6, 3, 4), "float32")),
        },
        coords={"time": times, **coords},
    )
    paths = {"forecast": root / "fc.nc", "analysis": root / "an.nc", "other_grid": root / "an_grid.nc"}
    fc.to_netcdf(paths["forecast"])
    an.to_netcdf(paths["analysis"])
    an.isel(latitude=slice(0, 2)).to_netcdf(paths["other_grid"])
    paths["t2m_levels"] = root / "an_t2m_levels.nc"
    an.assign(t2m=an["t"]).to_netcdf(paths["t2m_levels"])  # t2m on levels in the analysis only
    return paths


def test_defaults_and_the_verified_inits(files) -> None:
    inputs = open_inputs(files["forecast"], files["analysis"])
    assert inputs.variables == ["t", "t2m"] and inputs.levels == [500.0, 850.0] and inputs.members == 3
    assert inputs.names == (f"forecast {files['forecast']}", f"analysis {files['analysis']}")
    inits = inputs.forecast["init_time"].values
    # +48 h of day 4 is day 6, which the analysis lacks; one set of inits for every lead
    assert len(inputs.verified(inits, [0, 24, 48])) == 4
    assert len(inputs.verified(inits, [0, 24])) == 5
    assert len(inputs.verified(inits[::-1], ["0h"])) == 5  # the order given is kept
    alone = open_inputs(files["forecast"], variables=["t"], levels=[850])
    assert alone.analysis is None and alone.levels == [850.0]
    np.testing.assert_array_equal(alone.verified(inits, [48]), inits)


def test_an_analysis_already_opened(files) -> None:
    an = open_analysis(files["analysis"], ["t"])
    inputs = open_inputs(files["forecast"], an, names=("fc", "an"))
    assert inputs.analysis is an and inputs.names == ("fc", "an")


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (
            {"levels": [300]},
            r"^forecast .*fc\.nc has no level\(s\) \[300\] hPa \(found: \[500\.0, 850\.0\]\)$",
        ),
        ({"leads": [72]}, r"^forecast .*fc\.nc has no lead time\(s\) 72 h"),
        ({"k": 5}, r"^cannot take a subset of k=5 members: forecast .*fc\.nc has 3 members$"),
        ({"variables": ["z"]}, r"^forecast file .*fc\.nc has no variable 'z' \(found: t, t2m\)$"),
    ],
)
def test_what_is_asked_of_the_forecast(files, kwargs, message) -> None:
    with pytest.raises(EnsmlError, match=message):
        open_inputs(files["forecast"], files["analysis"], **kwargs)


def test_the_analysis_on_the_grid_and_levels_of_the_forecast(files) -> None:
    with pytest.raises(EnsmlError, match=r"^forecast .* and analysis .*an_grid\.nc are on different grids"):
        open_inputs(files["forecast"], files["other_grid"])
    message = r"^variable 't2m' has no level dimension in forecast .*fc\.nc .* but has levels in analysis"
    with pytest.raises(EnsmlError, match=message):
        open_inputs(files["forecast"], files["t2m_levels"], levels=[500])


def test_the_further_check_sees_the_forecast_first(files) -> None:
    seen = []

    def check(fc: xr.Dataset, name: str) -> None:
        seen.append((sorted(fc.data_vars), name))
        raise EnsmlError(f"{name}: not as trained")

    # the check runs before the levels, leads and members are checked, and names the forecast
    with pytest.raises(EnsmlError, match=r"^fc: not as trained$"):
        open_inputs(files["forecast"], files["analysis"], levels=[300], k=9, names=("fc", "an"), check=check)
    assert seen == [(["t", "t2m"], "fc")]
