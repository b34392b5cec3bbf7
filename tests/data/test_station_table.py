"""Tests for the station table (``ensml.data.station_table``): a station model's training data.

Against hand computations on synthetic stations (``synth --stations``): the members at the
station are the forecast at its nearest grid point (found by brute-force great-circle distance),
the observation is the station's at ``init_time + lead_time``, and the neighbourhood statistics
are the pooled mean and std of the members over the points within the radius (haversine).
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml import names
from ensml.data.heights import STANDARD_LAPSE_RATE
from ensml.data.station_frame import build_station_frame
from ensml.data.station_table import neighbourhood, station_table, table_rows, variable_table
from ensml.data.subset import Subset
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError

SMALL = {
    "n_lat": 8,
    "n_lon": 16,
    "start": "2020-01-01",
    "end": "2020-01-31",
    "members": 4,
    "surface": True,
    "precip_wind": True,
    "stations": 40,
}
RADIUS_KM = 2500.0


def _haversine_km(lat1, lon1, lat2, lon2):
    p1, p2, dl = np.deg2rad(lat1), np.deg2rad(lat2), np.deg2rad(lon2 - lon1)
    h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * 6371.0 * np.arcsin(np.sqrt(h))


@pytest.fixture(scope="module")
def made(tmp_path_factory):
    paths = synth(tmp_path_factory.mktemp("station_table") / "out", **SMALL)
    orog = xr.load_dataset(paths["orography"])["orog"]
    static = paths["orography"].parent.parent / "static.nc"  # a land fraction beside the data
    land = (orog > 0).astype("float64").expand_dims(time=[np.datetime64("2020-01-01", "ns")])
    land.to_dataset(name="lsm").to_netcdf(static)
    frame = build_station_frame(
        str(paths["forecast"]), str(paths["stations"]), k=2, model_height=str(paths["orography"])
    )
    table = station_table(
        frame, Subset.first(2), radius_km=RADIUS_KM, static=str(static), analysis=str(paths["analysis"])
    )
    files = {k: xr.load_dataset(p) for k, p in paths.items()} | {"static": xr.load_dataset(static)}
    return files, table, frame


def _distances(fc: xr.Dataset, table: xr.Dataset) -> np.ndarray:
    """(station, lat, lon) great-circle distances in km, by brute force."""
    glat, glon = np.meshgrid(fc[names.LATITUDE].values, fc[names.LONGITUDE].values, indexing="ij")
    lat, lon = table[names.LATITUDE].values, table[names.LONGITUDE].values
    return _haversine_km(lat[:, None, None], lon[:, None, None], glat[None], glon[None])


def test_members_mean_and_observations(made):
    files, table, _ = made
    fc, obs, orog = files["forecast"], files["stations"], files["orography"]["orog"]
    d = _distances(fc, table)
    i, j = np.unravel_index(d.reshape(len(d), -1).argmin(axis=1), d.shape[1:])
    lead = np.timedelta64(24, "h")
    at = table.sel({names.LEAD_TIME: lead})
    raw = fc["t2m"].sel({names.LEAD_TIME: lead}).isel({names.MEMBER: slice(0, 2)}).values[..., i, j]
    height = orog.values[i, j]
    corrected = raw + STANDARD_LAPSE_RATE * (height - table[names.ELEVATION].values)
    got = at["t2m"].transpose(names.INIT_TIME, names.MEMBER, names.STATION).values
    np.testing.assert_allclose(got, corrected, rtol=1e-6)
    np.testing.assert_allclose(at["t2m_mean"], got.mean(axis=1), rtol=1e-10)
    np.testing.assert_allclose(at["t2m_std"], got.std(axis=1), rtol=1e-8, atol=1e-12)
    np.testing.assert_allclose(table["height_difference"], table[names.ELEVATION] - height, atol=1e-3)
    valid = at[names.INIT_TIME].values + lead
    expected = obs["t2m"].sel({names.STATION: table[names.STATION], names.TIME: valid})
    got_obs = at["t2m_obs"].transpose(names.STATION, names.INIT_TIME).values
    np.testing.assert_array_equal(got_obs, expected.transpose(names.STATION, names.TIME).values)
    assert table.attrs["k"] == 2 and table.attrs["members"] == [0, 1]


def test_neighbourhood_statistics(made):
    files, table, _ = made
    fc = files["forecast"]
    within = _distances(fc, table) <= RADIUS_KM
    lead = np.timedelta64(48, "h")
    x = fc["tp"].sel({names.LEAD_TIME: lead}).isel({names.MEMBER: slice(0, 2)}).values  # (init, m, lat, lon)
    for s in range(0, table.sizes[names.STATION], 7):
        pooled = x[:, :, within[s]].reshape(x.shape[0], -1)
        at = table.sel({names.LEAD_TIME: lead}).isel({names.STATION: s})
        np.testing.assert_allclose(at["tp_nbr_mean"], pooled.mean(axis=1), rtol=1e-6, atol=1e-9)
        np.testing.assert_allclose(at["tp_nbr_std"], pooled.std(axis=1), rtol=1e-5, atol=1e-6)


def test_neighbourhood_takes_at_least_the_nearest_point():
    grid = xr.Dataset(
        coords={names.LATITUDE: [45.0, 15.0, -15.0, -45.0], names.LONGITUDE: np.arange(8) * 45.0}
    )
    nbr = neighbourhood(grid, np.array([44.0, 0.0]), np.array([1.0, 22.5]), radius_km=10.0)
    assert nbr.counts.tolist() == [1, 1] and np.allclose(nbr.matrix.sum(axis=1), 1)
    # from (0°N, 22.5°E) the four points at 15°N/S, 0° and 45°E are 2,980 km away, the next 5,450 km
    nbr = neighbourhood(grid, np.array([0.0]), np.array([22.5]), radius_km=3000.0)
    assert nbr.counts.tolist() == [4]
    with pytest.raises(EnsmlError, match="positive number of km"):
        neighbourhood(grid, np.array([0.0]), np.array([0.0]), radius_km=-1)


def test_rows(made):
    _, table, _ = made
    rows = table_rows(table, "si10")
    observed = int(np.isfinite(table["si10_obs"]).sum())
    assert rows.features.shape == (observed, len(rows.names)) and rows.obs.shape == (observed,)
    assert rows.dropped == table["si10_obs"].size - observed
    assert rows.names[:5] == ("mean", "std", "nbr_mean", "nbr_std", "lead_hours")
    assert {"latitude", "elevation", "height_difference"} <= set(rows.names)
    assert set(np.unique(rows.features[:, rows.names.index("lead_hours")])) == {
        24.0,
        48.0,
    }  # the frame's leads: all but 0 h
    assert rows.station.max() < table.sizes[names.STATION]
    with pytest.raises(EnsmlError, match="no variable 'msl'"):
        table_rows(table, "msl")


def test_static_fields_are_station_facts(made, tmp_path):
    files, table, frame = made
    d = _distances(files["forecast"], table)
    i, j = np.unravel_index(d.reshape(len(d), -1).argmin(axis=1), d.shape[1:])
    lsm = files["static"]["lsm"].values[0]
    np.testing.assert_array_equal(table["lsm"].values, lsm[i, j])
    assert table.attrs["static"] == ["lsm"] and "lsm" in table_rows(table, "t2m").names
    bad = {
        "other grid": (
            xr.Dataset(
                {"lsm": (("latitude", "longitude"), np.zeros((4, 8)))},
                coords={"latitude": [60.0, 20.0, -20.0, -60.0], "longitude": np.arange(8) * 45.0},
            ),
            "different grids",
        ),
        "a taken name": (files["static"].rename({"lsm": "elevation"}), "'elevation' is a station fact"),
        "not finite": (files["static"].where(files["static"]["lsm"] > 0), "NaN or infinite"),
    }
    for label, (ds, message) in bad.items():
        path = tmp_path / f"{label}.nc"
        ds.to_netcdf(path)
        with pytest.raises(EnsmlError, match=message):
            station_table(frame, Subset.first(2), static=str(path))


def test_the_analysis_at_the_stations(made):
    """The analysis column is the nearest cell's analysis moved to the station's height, so the
    observation less it is what the station adds: its bias (stations_oracle.nc) plus noise."""
    files, table, _ = made
    d = _distances(files["forecast"], table)
    i, j = np.unravel_index(d.reshape(len(d), -1).argmin(axis=1), d.shape[1:])
    lead = np.timedelta64(48, "h")
    at = table.sel({names.LEAD_TIME: lead}).transpose(names.INIT_TIME, names.STATION, ...)
    valid = at[names.INIT_TIME].values + lead
    cell = files["analysis"]["t2m"].sel({names.TIME: valid}).values[:, i, j]
    height = files["orography"]["orog"].values[i, j]
    expected = cell + STANDARD_LAPSE_RATE * (height - table[names.ELEVATION].values)
    np.testing.assert_allclose(at["t2m_analysis"].values, expected, rtol=1e-6)
    np.testing.assert_allclose(
        at["si10_analysis"].values,
        files["analysis"]["si10"].sel({names.TIME: valid}).values[:, i, j],
        rtol=1e-6,
    )
    added = (table["t2m_obs"] - table["t2m_analysis"]).mean((names.LEAD_TIME, names.INIT_TIME))
    bias = files["stations_oracle"]["t2m_bias"].sel({names.STATION: table[names.STATION]})
    assert np.corrcoef(added.values, bias.values)[0, 1] > 0.8


def test_variable_table_takes_only_its_own_columns():
    """``t`` and ``t2m`` side by side: ``t``'s columns are ``t_*`` alone, not ``t2m_*``."""
    dims = (names.LEAD_TIME, names.INIT_TIME, names.STATION)
    table = xr.Dataset(
        {f"{v}_{c}": (dims, np.zeros((1, 2, 3))) for v in ("t", "t2m") for c in ("mean", "std", "obs")}
    )
    assert sorted(variable_table(table, "t").data_vars) == ["t_mean", "t_obs", "t_std"]


def test_predictors_mean_and_gradient_by_hand(made):
    """A predictor's subset mean at the station and its gradient there, against centred
    differences worked here at the station's nearest grid point (periodic in longitude)."""
    files, _, frame = made
    paths_fc = frame.forecast.encoding.get("source") or files["forecast"].encoding["source"]
    with_z = build_station_frame(
        str(paths_fc), frame.names["observations"].split(" ", 1)[1], k=2, predictors=["z500"]
    )
    table = station_table(with_z, Subset.first(2))
    fc = files["forecast"]
    d = _distances(fc, table)
    i, j = np.unravel_index(d.reshape(len(d), -1).argmin(axis=1), d.shape[1:])
    lead = np.timedelta64(48, "h")
    z = (
        fc["z"]
        .sel({names.LEAD_TIME: lead, names.LEVEL: 500})
        .isel({names.MEMBER: slice(0, 2)})
        .mean(names.MEMBER)
    )
    z = z.transpose(names.INIT_TIME, names.LATITUDE, names.LONGITUDE).values.astype(np.float64)
    lat = np.deg2rad(fc[names.LATITUDE].values)
    dlon = np.deg2rad(360.0 / fc.sizes[names.LONGITUDE])
    n_lon, r = fc.sizes[names.LONGITUDE], 6_371_000.0  # the sphere of ensml.data.points
    east = (z[:, i, (j + 1) % n_lon] - z[:, i, (j - 1) % n_lon]) / (2 * dlon * r * np.cos(lat[i]))
    at = table.sel({names.LEAD_TIME: lead})
    np.testing.assert_allclose(
        at["z500_mean"].transpose(names.INIT_TIME, names.STATION), z[:, i, j], rtol=1e-6
    )
    np.testing.assert_allclose(
        at["z500_grad_east"].transpose(names.INIT_TIME, names.STATION), east, rtol=1e-4, atol=1e-9
    )
    inner = (i > 0) & (i < lat.size - 1)
    north = (z[:, i[inner] + 1, j[inner]] - z[:, i[inner] - 1, j[inner]]) / (
        r * (lat[i[inner] + 1] - lat[i[inner] - 1])
    )
    got = at["z500_grad_north"].transpose(names.INIT_TIME, names.STATION).values[:, inner]
    np.testing.assert_allclose(got, north, rtol=1e-4, atol=1e-9)
    rows = table_rows(table, "t2m")
    assert {"z500_mean", "z500_grad_east", "z500_grad_north"} <= set(rows.names)
    with pytest.raises(EnsmlError, match="predictor 'z300' is no field"):
        build_station_frame(
            str(paths_fc), frame.names["observations"].split(" ", 1)[1], k=2, predictors=["z300"]
        )
