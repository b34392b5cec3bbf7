"""Tests for EMOS at stations (``ensml.train.station_emos``): the station baselines.

On synthetic stations with a known truth (``synth --stations``: a bias and a noise per station),
scored with scoringrules' closed-form normal CRPS and ensemble CRPS: station-wise EMOS learns
what global EMOS cannot, and gets close to the station oracle on a held-out period.
"""

from __future__ import annotations

import numpy as np
import pytest
import scoringrules as sr
import torch
import xarray as xr

from ensml import names
from ensml.data.station_frame import build_station_frame
from ensml.data.station_table import station_table
from ensml.data.subset import Subset
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError
from ensml.train.emos import fit_emos
from ensml.train.station_emos import fit_station_emos

SYNTH = {"n_lat": 8, "n_lon": 16, "start": "2019-01-01", "end": "2020-06-30", "members": 4, "surface": True}
DIMS = (names.LEAD_TIME, names.INIT_TIME, names.STATION)


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    paths = synth(tmp_path_factory.mktemp("station_emos") / "out", **SYNTH, stations=30)
    frame = build_station_frame(
        str(paths["forecast"]), str(paths["stations"]), k=2, model_height=str(paths["orography"])
    )
    table = station_table(frame, Subset.first(2))
    oracle = xr.load_dataset(paths["stations_oracle"])
    return (
        table.sel({names.INIT_TIME: slice("2019", "2019")}),
        table.sel({names.INIT_TIME: slice("2020", None)}),
        oracle,
    )


def _crps(test: xr.Dataset, mean: xr.DataArray, std: xr.DataArray) -> float:
    y = test["t2m_obs"].transpose(*DIMS).values
    return float(np.nanmean(sr.crps_normal(y, mean.transpose(*DIMS).values, std.transpose(*DIMS).values)))


@pytest.mark.slow
def test_station_wise_beats_global_and_nears_the_oracle(split):
    train, test, oracle = split
    y = test["t2m_obs"].transpose(*DIMS).values
    raw = float(np.nanmean(sr.crps_ensemble(y, test["t2m"].transpose(*DIMS, names.MEMBER).values)))
    crps = {}
    for mode in ("global", "station"):
        fitted = fit_station_emos(train, "t2m", mode=mode)
        params = fitted.distribution(test)
        crps[mode] = _crps(test, params["mean"], params["std"])
    at = oracle.sel({names.INIT_TIME: test[names.INIT_TIME], names.LEAD_TIME: test[names.LEAD_TIME]})
    best = _crps(
        test,
        at["t2m_mean"].sel({names.STATION: test[names.STATION]}),
        at["t2m_std"].sel({names.STATION: test[names.STATION]}),
    )
    assert best < crps["station"] < crps["global"] < raw
    assert (raw - crps["station"]) / (raw - best) > 0.8  # most of the raw → oracle gap closed


def test_missing_observations_weigh_nothing():
    """A fit with some observations NaN equals the fit on the observed samples alone."""
    rng = np.random.default_rng(0)
    m = torch.from_numpy(rng.normal(size=(200, 1, 1, 1, 3)))
    s = torch.from_numpy(rng.uniform(0.5, 1.5, size=(200, 1, 1, 1, 3)))
    y = 1.0 + 0.8 * m + s * torch.from_numpy(rng.normal(size=(200, 1, 1, 1, 3)))
    gaps = y.clone()
    gaps[150:] = float("nan")
    with_gaps = fit_emos(m, s, gaps, mode="global").coefficients()
    observed = fit_emos(m[:150], s[:150], y[:150], mode="global").coefficients()
    for k in ("a", "b", "c", "d"):
        np.testing.assert_allclose(with_gaps[k].numpy(), observed[k].numpy(), rtol=1e-5, atol=1e-7)
    never = y.clone()
    never[..., 2] = float("nan")
    with pytest.raises(EnsmlError, match="needs an observation at every point"):
        fit_emos(m, s, never, mode="local")


@pytest.mark.slow  # the fixture: a year and a half of synthetic stations
def test_bad_inputs(split):
    train, test, _ = split
    with pytest.raises(EnsmlError, match="mode must be 'global' or 'station'"):
        fit_station_emos(train, "t2m", mode="local")  # type: ignore[arg-type]
    with pytest.raises(EnsmlError, match="no variable 'msl'"):
        fit_station_emos(train, "msl")
    fitted = fit_station_emos(train.isel({names.STATION: slice(0, 5)}), "t2m", max_iter=5)
    with pytest.raises(EnsmlError, match="fitted on 5 other stations"):
        fitted.distribution(test)


@pytest.mark.slow  # the fixture
def test_a_station_never_observed_gets_the_global_coefficients(split):
    train, test, _ = split
    gone = str(train[names.STATION].values[3])
    train = train.copy()
    train["t2m_obs"] = train["t2m_obs"].where(train[names.STATION] != gone)
    fitted = fit_station_emos(train, "t2m", mode="station")
    assert fitted.global_stations == [gone]
    params = fitted.distribution(test)
    alone = fit_station_emos(train, "t2m", mode="global").distribution(test)
    for k in ("mean", "std"):
        xr.testing.assert_allclose(params[k].sel({names.STATION: gone}), alone[k].sel({names.STATION: gone}))
        assert not np.allclose(
            params[k].isel({names.STATION: 0}), alone[k].isel({names.STATION: 0}), equal_nan=True
        )
