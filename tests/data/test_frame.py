"""The one frame builder: alignment by valid time, init-time and lead selection, weights, run metadata.

A hand-built forecast and analysis whose values encode their times (the forecast of init day
``d`` at lead ``h`` hours holds ``1000 d + h`` for every member, the analysis of day ``t`` holds
``t``), so that any misalignment shows as a wrong number.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.data.frame import build_frame
from ensml.data.runfiles import choose_leads, scan_run
from ensml.errors import EnsmlError
from ensml.predictions import RunMeta
from tests.conftest import cell_area_weights

H = np.timedelta64(1, "h")
LEADS = np.array([0, 24, 48], "timedelta64[h]").astype("timedelta64[ns]")
LAT, LON = np.array([60.0, 0.0, -60.0]), np.array([0.0, 90.0, 180.0, 270.0])


def _day(times: np.ndarray) -> np.ndarray:
    return ((times - np.datetime64("2020-01-01")) // np.timedelta64(1, "D")).astype(float)


def _meta(task: str = "MixedTask", leads: tuple = (24, 48), sha: str = "ab" * 32, k: int = 2) -> dict:
    return RunMeta(task, k, tuple(range(k)), 3, ("t",), (500.0,), leads, (sha,)).to_attrs()


@pytest.fixture(scope="module")
def hand(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Inits on days 0–4; the analysis of days 0–5 (day 6 missing: the last init has no +48 h)."""
    root = tmp_path_factory.mktemp("frame")
    inits = pd.date_range("2020-01-01", periods=5, freq="D").values
    times = pd.date_range("2020-01-01", periods=6, freq="D").values
    fc = (1000 * _day(inits)[:, None] + LEADS / H)[:, :, None, None, None, None] * np.ones((1, 1, 3, 1, 3, 4))
    forecast = xr.Dataset(
        {"t": (("init_time", "lead_time", "member", "level", "latitude", "longitude"), fc.astype("float32"))},
        coords={
            "init_time": inits,
            "lead_time": LEADS,
            "member": [0, 1, 2],
            "level": [500.0],
            "latitude": LAT,
            "longitude": LON,
        },
    )
    an = _day(times)[:, None, None, None] * np.ones((1, 1, 3, 4))
    analysis = xr.Dataset(
        {"t": (("time", "level", "latitude", "longitude"), an.astype("float32"))},
        coords={"time": times, "level": [500.0], "latitude": LAT, "longitude": LON},
    )
    # predictions of inits 1-4 at +24 and +48 h: the mean holds the valid day, the std the lead
    sel = forecast.isel(init_time=slice(1, None)).sel(lead_time=LEADS[1:]).isel(member=0, drop=True)
    valid = sel["init_time"] + sel["lead_time"]
    predictions = xr.Dataset(
        {
            "t_mean": _day(valid.values)[..., None, None, None] * xr.ones_like(sel["t"]),
            "t_std": sel["lead_time"] / H * xr.ones_like(sel["t"]),
        },
        attrs=_meta(),
    )
    paths = {"forecast": root / "forecast.nc", "analysis": root / "analysis.nc", "predictions": root / "p.nc"}
    forecast.to_netcdf(paths["forecast"])
    analysis.to_netcdf(paths["analysis"])
    predictions.to_netcdf(paths["predictions"])
    return paths


def test_fields_are_aligned_by_valid_time(hand) -> None:
    frame = build_frame(hand["forecast"], hand["analysis"], predictions=hand["predictions"])
    np.testing.assert_array_equal(frame.leads, LEADS[1:])  # the predictions' run: +24 and +48 h
    # inits 1-3: init 0 has no predictions, init 4 no analysis at +48 h (day 6)
    np.testing.assert_array_equal(_day(frame.inits), [1, 2, 3])
    for lead in frame.leads:
        at = frame.at(lead)
        days, hours = _day(frame.inits), lead / H
        np.testing.assert_array_equal(
            at.forecast["t"].isel(member=1, level=0, latitude=0, longitude=0), 1000 * days + hours
        )
        valid_day = days + hours / 24
        np.testing.assert_array_equal(at.analysis["t"].isel(level=0, latitude=2, longitude=3), valid_day)
        assert list(at.analysis["init_time"].values) == list(frame.inits)
        mean = at.runs["predictions"]["t_mean"].isel(level=0, latitude=1, longitude=1)
        np.testing.assert_array_equal(mean, valid_day)
        assert (at.runs["predictions"]["t_std"] == hours).all()
        assert at.forecast["lead_time"].values == lead and "lead_time" not in at.runs["predictions"].coords


def test_asked_leads_and_inits(hand) -> None:
    frame = build_frame(
        hand["forecast"], hand["analysis"], leads="PT24H", inits=np.array(["2020-01-03"], "M8[ns]")
    )
    assert list(frame.leads / H) == [24] and _day(frame.inits).tolist() == [2]
    frame = build_frame(hand["forecast"], hand["analysis"])  # no run: every forecast lead but 0 h
    assert list(frame.leads / H) == [24, 48] and _day(frame.inits).tolist() == [0, 1, 2, 3]
    with pytest.raises(EnsmlError, match=r"has no lead time\(s\) 72 h \(found: 0, 24, 48 h\)"):
        build_frame(hand["forecast"], hand["analysis"], leads=[24, "3d"])


def test_partial_frame_leaves_out_what_lacks_a_lead(hand) -> None:
    frame = build_frame(hand["forecast"], hand["analysis"], predictions=hand["predictions"], partial=True)
    assert list(frame.leads / H) == [0, 24, 48]  # every forecast lead
    assert "predictions" not in frame.at(0).runs and "predictions" in frame.at(24).runs


def test_weights_are_exact_cell_areas(tiny_data) -> None:
    frame = build_frame(tiny_data["forecast"], tiny_data["analysis"], variables=["t"])
    expected = cell_area_weights(frame.forecast["latitude"].values)
    np.testing.assert_allclose(frame.weights.values, expected / expected.mean(), rtol=1e-12)
    assert frame.weights.dims == ("latitude",) and frame.weights.attrs["weighting"] == "exact cell area"


def test_run_metadata_is_read_from_every_file(hand, tmp_path) -> None:
    with xr.open_dataset(hand["predictions"]) as ds:
        ds.load()
    run = scan_run(hand["predictions"], "predictions", ["t"])
    assert run.meta.k == 2 and run.meta.checkpoints == ("ab" * 32,)
    ds.isel(init_time=[0]).to_netcdf(tmp_path / "a.nc")
    ds.isel(init_time=[1]).assign_attrs(_meta(sha="cd" * 32)).to_netcdf(tmp_path / "b.nc")
    message = (
        f"predictions files {tmp_path / 'a.nc'} and {tmp_path / 'b.nc'} come from different runs "
        f"(checkpoint {'ab' * 6} vs {'cd' * 6}); score one run at a time"
    )
    with pytest.raises(EnsmlError) as err:
        scan_run(str(tmp_path / "*.nc"), "predictions", ["t"])
    assert str(err.value) == message
    ds.assign_attrs(_meta("SpreadTask")).to_netcdf(tmp_path / "s.nc")
    with pytest.raises(EnsmlError, match=r"holds a spread model's predictions \(ensml_task SpreadTask\)"):
        scan_run(tmp_path / "s.nc", "predictions", ["t"])
    ds.drop_attrs().to_netcdf(tmp_path / "bare.nc")
    with pytest.raises(EnsmlError, match=r"bare\.nc has no ensml_task attribute"):
        scan_run(tmp_path / "bare.nc", "members", ["t"])


def test_choose_leads(hand, tmp_path) -> None:
    with xr.open_dataset(hand["predictions"]) as ds:
        ds.load()
    ds.sel(lead_time=[LEADS[2]]).assign_attrs(_meta(leads=(48,))).to_netcdf(tmp_path / "p48.nc")
    runs = [scan_run(hand["predictions"], "predictions", ["t"]), scan_run(tmp_path / "p48.nc", "members", [])]
    with pytest.raises(
        EnsmlError, match=r"p48.nc has no lead time\(s\) 24 h \(found: 48 h\); --leads common"
    ):
        choose_leads(None, runs, LEADS)
    leads, dropped = choose_leads("common", runs, LEADS)
    assert list(leads / H) == [48] and list(dropped / H) == [24]
    leads, dropped = choose_leads(["2d"], runs, LEADS)
    assert list(leads / H) == [48] and dropped.size == 0
