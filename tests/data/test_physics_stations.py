"""Stations of the physics testbed (``ensml data physics --stations N``).

The observations are checked against the formulas of :mod:`ensml.data.physics.stations` worked by
hand from the grid files (the analysis at the station's nearest cell, found here by its own
great-circle search), the wind direction against the core's own wind, and end to end: the grid
files are the same with or without stations, the reader and the station table read them. The
parts that need no model run (the draw, the shelter, the direction, determinism) run on a small
made-up analysis.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from ensml import names
from ensml.cli.main import main
from ensml.data.physics import stations as ps
from ensml.data.stations import read_observations
from tests.data.test_physics import TINY
from tests.data.test_synth_stations import _nearest_cell

N = 40
#: L = R Δφ / √12 on the 32 latitudes of T21: 6,371,000 m · π/32 / 3.4641 = 180,559 m.
L_T21 = 180_559.0


def _made_up(n_times: int = 8, seed: int = 0) -> tuple[xr.Dataset, xr.Dataset]:
    """An analysis (si10, t on 500 and 850 hPa) and 10 m wind on a 16 × 32 grid, every 12 h."""
    rng = np.random.default_rng(seed)
    lat = np.linspace(84.375, -84.375, 16)
    lon = np.arange(32) * 11.25
    coords = {
        names.TIME: pd.date_range("2000-01-01", periods=n_times, freq="12h").to_numpy(),
        names.LEVEL: np.array([500, 850], dtype="int32"),
        names.LATITUDE: lat,
        names.LONGITUDE: lon,
    }
    flat = (names.TIME, names.LATITUDE, names.LONGITUDE)
    u, v = (rng.normal(0, 6, (n_times, 16, 32)).astype(np.float32) for _ in "uv")
    an = xr.Dataset(
        {
            "si10": (flat, np.hypot(u, v), names.VARIABLE_ATTRS["si10"]),
            "t": (
                (names.TIME, names.LEVEL, names.LATITUDE, names.LONGITUDE),
                rng.normal(270, 5, (n_times, 2, 16, 32)).astype(np.float32),
                names.VARIABLE_ATTRS["t"],
            ),
        },
        coords=coords,
    )
    wind = xr.Dataset({"u10": (flat, u), "v10": (flat, v)}, coords={d: coords[d] for d in flat})
    return an, wind


def test_wind_direction_and_shelter_by_hand() -> None:
    # from the north (blowing south: v < 0), the east, the south, the west
    u = np.array([0.0, -3.0, 0.0, 2.0])
    v = np.array([-5.0, 0.0, 1.0, 0.0])
    np.testing.assert_allclose(ps.wind_from_direction(u, v), [0.0, 90.0, 180.0, 270.0], atol=1e-12)
    # r = 0.4 about 100°: 1 − r at the centre, 1 − r e⁻⁸ opposite, 1 − r/2 where
    # cos(Δ) = 1 − ln 2 / 4, Δ = 34.237°; none off when r = 0
    direction = np.array([100.0, 280.0, 134.237, 65.763])
    got = ps.shelter(direction, 100.0, 0.4)
    np.testing.assert_allclose(got, [0.6, 1 - 0.4 * np.exp(-8), 0.8, 0.8], atol=2e-4)
    assert (ps.shelter(direction, 100.0, 0.0) == 1).all()
    assert ps.representativeness_length(32) == pytest.approx(L_T21, rel=1e-5)


def test_temperature_gradient_by_hand() -> None:
    an, _ = _made_up(1)
    t = an["t"].isel(time=0, level=0)
    grad = ps.temperature_gradient(t).values
    lat, r = np.deg2rad(an.latitude.values), 6_371_000.0
    dlon = np.deg2rad(11.25)
    x = t.values.astype(np.float64)
    for i, j in ((5, 0), (0, 31), (15, 7), (8, 16)):
        east = (x[i, (j + 1) % 32] - x[i, j - 1]) / (2 * r * np.cos(lat[i]) * dlon)
        up, down = max(i - 1, 0), min(i + 1, 15)  # one-sided at the outer rows
        north = (x[up, j] - x[down, j]) / (r * (lat[up] - lat[down]))
        assert grad[i, j] == pytest.approx(np.hypot(east, north), rel=1e-9), (i, j)


def test_deterministic_own_stream_and_formulas_on_made_up_truth() -> None:
    an, wind = _made_up()
    first, again = ps.station_datasets(3, 400, an, wind), ps.station_datasets(3, 400, an, wind)
    for key in ps.STATION_FILES:
        xr.testing.assert_identical(first[key], again[key])
    other = ps.station_datasets(4, 400, an, wind)["stations"]
    assert not np.allclose(first["stations"][names.LATITUDE], other[names.LATITUDE])
    # the same seed on another truth: the same stations and parameters (their own stream)
    an2, wind2 = _made_up(seed=1)
    moved = ps.station_datasets(3, 400, an2, wind2)
    np.testing.assert_array_equal(moved["stations"][names.LATITUDE], first["stations"][names.LATITUDE])
    np.testing.assert_array_equal(
        moved["stations_truth"]["si10_factor"], first["stations_truth"]["si10_factor"]
    )
    st, truth = first["stations"], first["stations_truth"]
    assert st.attrs["featureType"] == "timeSeries" and list(st[names.STATION].values[:2]) == [
        "PHY00001",
        "PHY00002",
    ]
    lat = st[names.LATITUDE].values
    assert lat.min() >= -84.375 and lat.max() <= 84.375
    # the noise is standard normal; about 3% of the observations are missing
    for name in ("si10_epsilon", "t_eta"):
        e = truth[name].values
        assert abs(e.mean()) < 0.05 and abs(e.std() - 1) < 0.05, name
    assert 0.02 < float(np.isnan(st["si10"].values).mean()) < 0.04
    # soundings at every fourth station (every time here is 00 or 12 UTC), none elsewhere
    sounding = truth["sounding"].values.astype(bool)
    np.testing.assert_array_equal(sounding, np.arange(400) % 4 == 0)
    assert np.isnan(st["t"].values[~sounding]).all()
    assert 0.02 < float(np.isnan(st["t"].values[sounding]).mean()) < 0.04
    # the truth file's inputs and the parameters give the observations (float32 inputs)
    p = {
        k: truth[k].values[:, None].astype(np.float64)
        for k in truth.data_vars
        if truth[k].dims == (names.STATION,)
    }
    w, theta, anomaly, eps = (
        truth[k].values.astype(np.float64)
        for k in ("si10_cell", "wind_from_direction", "t_anomaly", "si10_epsilon")
    )
    want = (
        p["si10_factor"]
        * 5.0
        * (w / 5.0) ** p["si10_exponent"]
        * (1 - p["shelter_depth"] * np.exp(4 * (np.cos(np.deg2rad(theta - p["shelter_direction"])) - 1)))
        * np.exp(-p["stability"] * anomaly)
        * np.exp(p["si10_noise"] * eps)
    )
    seen = ~np.isnan(st["si10"].values)
    np.testing.assert_allclose(st["si10"].values[seen], want[seen], rtol=2e-5)


def test_t_soundings_only_at_00_and_12_utc() -> None:
    an, wind = _made_up()
    an6 = an.assign_coords(time=pd.date_range("2000-01-01", periods=8, freq="6h").to_numpy())
    wind6 = wind.assign_coords(time=an6.time)
    st = ps.station_datasets(0, 40, an6, wind6)["stations"]
    hours = pd.DatetimeIndex(st.time.values).hour
    t = st["t"].isel(station=slice(None, None, 4))  # the sounding stations
    assert np.isnan(t.values[:, np.isin(hours, [6, 18])]).all()
    assert np.isfinite(t.values[:, np.isin(hours, [0, 12])]).mean() > 0.9


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict:
    root = tmp_path_factory.mktemp("physics_stations")
    for name, extra in (("with", ["--stations", str(N)]), ("without", [])):
        assert main(["data", "physics", "--out_dir", str(root / name), *TINY, *extra]) == 0
    return {name: root / name for name in ("with", "without")}


@pytest.mark.slow  # two tiny physics runs (about 25 s each) are the fixture
def test_grid_files_unchanged_by_stations(runs) -> None:
    assert sorted(p.name for p in runs["with"].glob("*.nc")) == [
        "analysis.nc",
        "forecast.nc",
        "stations.nc",
        "stations_truth.nc",
    ]
    for name in ("forecast.nc", "analysis.nc"):
        with xr.open_dataset(runs["with"] / name) as a, xr.open_dataset(runs["without"] / name) as b:
            history = [ds.attrs.pop("history").split(": ", 1)[1] for ds in (a, b)]
            xr.testing.assert_identical(a.load(), b.load())  # data and every attribute but history
            assert [h.replace("without", "with") for h in history] == [history[0]] * 2


@pytest.mark.slow
def test_observations_are_the_formulas_of_the_truth_run_by_hand(runs) -> None:
    an = xr.load_dataset(runs["with"] / "analysis.nc")
    st = xr.load_dataset(runs["with"] / "stations.nc")
    truth = xr.load_dataset(runs["with"] / "stations_truth.nc")
    cell = an.isel(_nearest_cell(an, st))  # (station, …)
    # the truth file holds the analysis at the station's cell, and the anomaly of its 850 hPa t
    si10 = cell["si10"].transpose(names.STATION, names.TIME).values
    np.testing.assert_array_equal(truth["si10_cell"].values, si10)
    t = cell["t"].transpose(names.STATION, names.TIME, names.LEVEL).values
    np.testing.assert_array_equal(truth["t_cell"].values, t)
    zonal = an["t"].sel(level=850).astype(np.float64).mean("longitude")
    row = _nearest_cell(an, st)[names.LATITUDE]
    anomaly = t[:, :, 1] - zonal.isel(latitude=row).transpose(names.STATION, names.TIME).values
    np.testing.assert_allclose(truth["t_anomaly"].values, anomaly, rtol=1e-6, atol=1e-6)
    assert (truth["t_anomaly"].values != 0).any()
    # stations 1, 2 and 5 (5: a sounding station) by hand, at every time they observed
    for k in (0, 1, 4):
        p = {name: float(truth[name][k]) for name in truth.data_vars if truth[name].dims == (names.STATION,)}
        theta = truth["wind_from_direction"].values[k].astype(np.float64)
        eps = truth["si10_epsilon"].values[k].astype(np.float64)
        w = si10[k].astype(np.float64)
        shelter = 1 - p["shelter_depth"] * np.exp(
            4 * (np.cos(np.deg2rad(theta - p["shelter_direction"])) - 1)
        )
        want = p["si10_factor"] * 5 * (w / 5) ** p["si10_exponent"] * shelter
        want *= np.exp(-p["stability"] * anomaly[k]) * np.exp(p["si10_noise"] * eps)
        got = st["si10"].values[k]
        seen = ~np.isnan(got)
        assert seen.sum() >= 6
        np.testing.assert_allclose(got[seen], want[seen], rtol=2e-5, err_msg=st.station.values[k])
        if k % 4:
            assert np.isnan(st["t"].values[k]).all()
            continue
        assert p["sounding"] == 1
        # |∇t| at the cell from its neighbours (T21: 64 longitudes 5.625° apart; Gaussian latitudes)
        i, j = int(row[k]), int(_nearest_cell(an, st)[names.LONGITUDE][k])
        lat = np.deg2rad(an.latitude.values)
        x = an["t"].values.astype(np.float64)  # (time, level, lat, lon)
        east = (x[..., i, (j + 1) % 64] - x[..., i, j - 1]) / (
            2 * 6_371_000.0 * np.cos(lat[i]) * np.deg2rad(5.625)
        )
        up, down = max(i - 1, 0), min(i + 1, 31)
        north = (x[..., up, j] - x[..., down, j]) / (6_371_000.0 * (lat[up] - lat[down]))
        gradient = np.hypot(east, north)
        np.testing.assert_allclose(truth["t_gradient"].values[k], gradient, rtol=1e-5)
        want_t = t[k] + p["t_bias"] + (p["t_noise"] + L_T21 * gradient) * truth["t_eta"].values[k]
        got_t = st["t"].values[k]
        seen = ~np.isnan(got_t)
        np.testing.assert_allclose(got_t[seen], want_t[seen], rtol=1e-6, atol=1e-3)


@pytest.mark.slow
def test_the_direction_is_the_cores_own_wind(runs) -> None:
    """The truth's first time spun up again: the stations' wind direction is that of the core's
    lowest-layer wind (its diagnostic state, as the dynamics see it) at their cells."""
    from ensml.data.physics.generate import _plan
    from ensml.data.physics.runs import core_for, spin_up

    plan = _plan("T21", 8, (500, 850), (0, 12, 24, 36, 48), 3, 3, 24, 2, 0)
    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # as the generator runs the truth
    try:
        core = core_for(plan.truth)
        state, _ = spin_up(plan, core)
        diagnostic = core._pe.compute_diagnostic_state(state, core.coords)
    finally:
        torch.set_num_threads(threads)
    cos_lat_u, cos_lat_v = diagnostic.cos_lat_u
    u, v = (x[0, -1].numpy() / core.grid.cos_lat.numpy() for x in (cos_lat_u, cos_lat_v))  # (lon, lat)
    u, v = (x.T[::-1] for x in (u, v))  # (lat, lon), north to south
    an = xr.load_dataset(runs["with"] / "analysis.nc")
    st = xr.load_dataset(runs["with"] / "stations.nc")
    truth = xr.load_dataset(runs["with"] / "stations_truth.nc")
    cell = _nearest_cell(an, st)
    i, j = cell[names.LATITUDE].values, cell[names.LONGITUDE].values
    want = np.rad2deg(np.arctan2(-u[i, j], -v[i, j])) % 360
    got = truth["wind_from_direction"].isel(time=0).values
    diff = (got - want + 180) % 360 - 180
    assert np.abs(diff).max() < 0.01
    # Core.wind's speed is si10 (float32 rounding apart)
    speed = core.wind_factor * np.hypot(u[i, j], v[i, j]) / core.metre_per_second
    np.testing.assert_allclose(truth["si10_cell"].isel(time=0).values, speed, rtol=1e-4)


@pytest.mark.slow
def test_the_reader_and_the_station_table_read_them(runs) -> None:
    from ensml.data.station_frame import build_station_frame
    from ensml.data.station_table import station_table, table_rows
    from ensml.data.subset import Subset

    obs = read_observations(runs["with"] / "stations.nc")
    assert obs.sizes[names.STATION] == N and sorted(obs.data_vars) == ["si10", "t"]
    assert obs["si10"].dims == (names.STATION, names.TIME)
    assert obs["t"].dims == (names.STATION, names.TIME, names.LEVEL)
    assert list(obs[names.LEVEL].values) == [500, 850] and names.ELEVATION not in obs.coords
    with xr.open_dataset(runs["with"] / "analysis.nc") as an:
        np.testing.assert_array_equal(obs[names.TIME].values, an[names.TIME].values)
    frame = build_station_frame(
        str(runs["with"] / "forecast.nc"), str(runs["with"] / "stations.nc"), k=2, leads=["24h", "48h"]
    )
    table = station_table(frame, Subset.first(2))
    rows = table_rows(table, "si10")
    assert rows.obs.size > 0.9 * N * 3 * 2 and (rows.obs >= 0).all()
    upper = table_rows(table, "t", level=850)
    assert 0 < upper.obs.size <= N // 4 * 3 * 2 and np.isfinite(upper.obs).all()
