"""Tests for the synthetic station observations (``ensml data synth --stations N``).

The truth is checked against the grid files it is drawn from (the analysis of the station's
nearest grid cell, the grid oracle there), by the PIT of the observations under the station
oracle (scipy's normal cdf), and end to end: ``evaluate --model_height orography.nc`` removes the
height offset the stations were given.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import stats

from ensml import names
from ensml.cli.main import main
from ensml.data.heights import STANDARD_LAPSE_RATE, read_model_height
from ensml.data.stations import read_observations
from ensml.data.synth import stations as synth_stations
from ensml.data.synth.generate import synth

#: A small ensemble with every surface variable: 61 inits × 3 leads × 300 stations.
SMALL = {
    "n_lat": 8,
    "n_lon": 16,
    "start": "2020-01-01",
    "end": "2020-04-30",
    "members": 4,
    "surface": True,
    "precip_wind": True,
}
N = 300


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    paths = synth(tmp_path_factory.mktemp("synth_stations") / "out", **SMALL, stations=N)
    opened = {k: xr.load_dataset(p) for k, p in paths.items()}
    return paths, opened


def _nearest_cell(ds: xr.Dataset, st: xr.Dataset) -> dict:
    """Positions of the grid cell whose centre is nearest each station on the great circle (by
    hand: the angle between unit vectors, against every centre)."""

    def unit(lat, lon):
        lat, lon = np.deg2rad(lat), np.deg2rad(lon)
        return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)

    glat, glon = np.meshgrid(ds[names.LATITUDE].values, ds[names.LONGITUDE].values, indexing="ij")
    cosine = unit(st[names.LATITUDE].values, st[names.LONGITUDE].values) @ unit(glat, glon).reshape(-1, 3).T
    i, j = np.unravel_index(cosine.argmax(axis=1), glat.shape)
    return {
        names.LATITUDE: xr.DataArray(i, dims=names.STATION),
        names.LONGITUDE: xr.DataArray(j, dims=names.STATION),
    }


def test_files_and_reader(data):
    paths, ds = data
    assert set(paths) == {"forecast", "analysis", "oracle", "orography", "stations", "stations_oracle"}
    obs = read_observations(paths["stations"])
    assert obs.sizes[names.STATION] == N and sorted(obs.data_vars) == ["si10", "t2m", "tp"]
    assert ds["stations"].attrs["featureType"] == "timeSeries"
    np.testing.assert_array_equal(obs[names.TIME].values, ds["analysis"][names.TIME].values)
    lat = ds["analysis"][names.LATITUDE].values
    assert (obs[names.LATITUDE] <= lat.max()).all() and (obs[names.LATITUDE] >= lat.min()).all()
    missing = float(np.isnan(ds["stations"]["t2m"].values).mean())
    assert 0.02 < missing < 0.04  # synth_stations.MISSING = 0.03
    assert (ds["stations"]["tp"].fillna(0) >= 0).all() and (ds["stations"]["si10"].fillna(0) >= 0).all()
    assert ds["stations_oracle"].attrs["ensml_distribution"] == "t2m:normal tp:csg0 si10:truncnormal"


def test_observations_are_the_cell_analysis_with_the_stated_differences(data):
    _, ds = data
    st, orc_st = ds["stations"], ds["stations_oracle"]
    cell = ds["analysis"].isel(_nearest_cell(ds["analysis"], st)).transpose(names.STATION, names.TIME, ...)
    # precipitation and wind: the cell's value times the station's exposure factor
    for var in ("tp", "si10"):
        factor = orc_st[f"{var}_factor"].values[:, None]
        observed = ~np.isnan(st[var].values)
        np.testing.assert_allclose(
            st[var].values[observed], (cell[var].values * factor)[observed], rtol=1e-6, atol=1e-6
        )
    # 2 m temperature: the lapse rate from the cell's orography, the bias, and the noise
    orog = ds["orography"]["orog"].isel(_nearest_cell(ds["orography"], st)).values
    np.testing.assert_allclose(orc_st["model_height"].values, orog, rtol=1e-6)
    offset = -STANDARD_LAPSE_RATE * (st[names.ELEVATION].values - orog) + orc_st["t2m_bias"].values
    z = (st["t2m"].values - cell["t2m"].values - offset[:, None]) / orc_st["t2m_noise"].values[:, None]
    z = z[~np.isnan(z)]
    assert abs(z.mean()) < 0.02 and abs(z.std() - 1) < 0.02  # about 50,000 values


def test_station_oracle_is_the_grid_oracle_moved(data):
    _, ds = data
    orc, orc_st = ds["oracle"], ds["stations_oracle"]
    cell = orc.isel(_nearest_cell(orc, orc_st)).transpose(
        names.INIT_TIME, names.LEAD_TIME, names.STATION, ...
    )
    np.testing.assert_allclose(orc_st["tp_scale"], cell["tp_scale"] * orc_st["tp_factor"], rtol=1e-6)
    np.testing.assert_allclose(orc_st["tp_shift"], cell["tp_shift"] * orc_st["tp_factor"], rtol=1e-6)
    np.testing.assert_array_equal(orc_st["tp_shape"], cell["tp_shape"])
    np.testing.assert_allclose(orc_st["si10_loc"], cell["si10_loc"] * orc_st["si10_factor"], rtol=1e-6)
    var = cell["t2m_std"] ** 2 + orc_st["t2m_noise"] ** 2
    np.testing.assert_allclose(orc_st["t2m_std"], np.sqrt(var), rtol=1e-6)


def test_t2m_oracle_is_calibrated(data):
    """The PIT of every observed station-time under the station oracle is uniform."""
    _, ds = data
    orc_st = ds["stations_oracle"]
    y = ds["stations"]["t2m"].sel({names.TIME: orc_st[names.VALID_TIME]})
    y = y.transpose(*orc_st["t2m_mean"].dims)
    u = stats.norm.cdf(y.values, orc_st["t2m_mean"].values, orc_st["t2m_std"].values)
    u = u[~np.isnan(u)]
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / u.size
    assert u.size > 50_000
    assert np.abs(hist - 0.1).max() < 0.01 and abs(u.mean() - 0.5) < 0.01
    # The grid oracle at the cell, without the stations' differences, is not.
    cell = ds["oracle"][["t2m_mean", "t2m_std"]].isel(_nearest_cell(ds["oracle"], orc_st)).transpose(*y.dims)
    wrong = stats.norm.cdf(y.values, cell["t2m_mean"].values, cell["t2m_std"].values)
    wrong = wrong[~np.isnan(wrong)]
    assert np.abs(np.histogram(wrong, bins=10, range=(0, 1))[0] / wrong.size - 0.1).max() > 0.03


@pytest.mark.slow
def test_deterministic_and_grid_files_unchanged(tmp_path):
    tiny = {**SMALL, "end": "2020-01-04", "members": 2}
    first, again = (synth(tmp_path / name, **tiny, stations=20) for name in "ab")
    other = synth(tmp_path / "c", **tiny, stations=20, seed=1)
    without = synth(tmp_path / "d", **tiny)
    for key in synth_stations.STATION_FILES:
        with xr.open_dataset(first[key]) as a, xr.open_dataset(again[key]) as b:
            xr.testing.assert_identical(a.drop_attrs(), b.drop_attrs())
    with xr.open_dataset(first["stations"]) as a, xr.open_dataset(other["stations"]) as c:
        assert not np.allclose(a[names.LATITUDE], c[names.LATITUDE])
    for key in ("forecast", "analysis", "oracle"):
        with xr.open_dataset(first[key]) as a, xr.open_dataset(without[key]) as d:
            xr.testing.assert_identical(a.drop_attrs(), d.drop_attrs())


def test_draw_is_inside_and_uses_its_own_stream():
    lat = np.array([60.0, 20.0, -20.0, -60.0])
    orog = synth_stations.orography(3, lat, np.arange(8) * 45.0)["orog"]
    draw = synth_stations.draw_stations(3, 1000, orog)
    assert draw.latitude.min() >= -60 and draw.latitude.max() <= 60
    # uniform on the sphere: as many stations within 30° of the equator as poleward of it (sin 30° = 1/2)
    within = float(np.mean(np.abs(draw.latitude) < 30))
    assert abs(within - (0.5 / np.sin(np.deg2rad(60)))) < 0.05
    assert (draw.elevation >= 0).all() and np.array_equal(draw.ids[:2], ["SYN00001", "SYN00002"])


@pytest.mark.slow
def test_evaluate_with_the_orography_removes_the_height_offset(data, tmp_path, capsys):
    """``evaluate --observations stations.nc --model_height orography.nc`` (the guide's command)."""
    paths, _ = data
    fc, obs, orog = paths["forecast"], paths["stations"], paths["orography"]
    read_model_height(str(orog), xr.open_dataset(fc))  # a model height evaluate accepts
    crps = {}
    for label, extra in (("raw", []), ("height", ["--model_height", str(orog)])):
        out = tmp_path / label
        args = ["evaluate", "--forecast", str(fc), "--observations", str(obs), "--k", "2"]
        assert main([*args, *extra, "--out_dir", str(out)]) == 0, capsys.readouterr().err
        table = pd.read_csv(out / "scores.csv")
        crps[label] = table.loc[table["variable"] == "t2m", "crps"].mean()
    assert crps["height"] < 0.8 * crps["raw"]
