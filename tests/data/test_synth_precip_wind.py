"""Tests for the synthetic ensemble's precipitation ``tp`` and 10 m wind speed ``si10`` (``precip_wind``).

The oracle is checked by the PIT of the analysis under it (scipy's cdf; a randomised PIT for tp's
point mass at 0), the ensemble by its rank histogram and spread, the scores against
scoringrules' closed forms (csg0, truncated normal) and properscoring's ensemble CRPS.
"""

from __future__ import annotations

import numpy as np
import properscoring as ps
import pytest
import scoringrules as sr
import xarray as xr
from scipy import stats

from ensml import names
from ensml.data.synth.generate import synth
from ensml.data.synth.precip_wind import TP_ATTRS

#: Half a year on a 16 × 32 grid (91 inits, 3 leads): about 47 000 PITs per lead and variable.
HALF_YEAR = {"n_lat": 16, "n_lon": 32, "start": "2017-01-01", "end": "2017-06-30", "storms_per_year": 20}
TINY = {"n_lat": 8, "n_lon": 16, "start": "2017-01-01", "end": "2017-01-20", "every_days": 3}
LEAD_48 = np.timedelta64(48, "h")
# Bounds on the PIT histogram of the true oracle: over 4 seeds the worst bin was 0.010 from 0.1
# and the worst mean 0.011 from 0.5 (the fields are correlated in space and time); an oracle
# with its scale 25% off or si10's location 0.2 scale off is 0.039 or more away.
PIT_BIN_TOL, PIT_MEAN_TOL, WRONG_MIN = 0.02, 0.02, 0.03


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    paths = synth(tmp_path_factory.mktemp("synth_pw") / "out", **HALF_YEAR, precip_wind=True)
    fc, an, orc = (xr.open_dataset(paths[k]).load() for k in ("forecast", "analysis", "oracle"))
    y = an.sel(time=fc.valid_time)  # verifying analysis, (init_time, lead_time, lat, lon)
    return paths, fc, an, y, orc


def _pit(
    y: np.ndarray, orc: xr.Dataset, var: str, rng: np.random.Generator, scale: float = 1.0, shift: float = 0.0
):
    """PIT of ``y`` under the oracle's ``var`` (``scale``/``shift`` spoil it): randomised at tp's 0."""
    if var == "tp":
        k, theta, c = orc.tp_shape.values, orc.tp_scale.values * scale, orc.tp_shift.values
        cdf = stats.gamma.cdf(y + c, k, scale=theta)  # F(y) = G(y + shift) for y >= 0
        dry = stats.gamma.cdf(c, k, scale=theta)  # P(Y = 0) = G(shift)
        return np.where(y > 0, cdf, rng.uniform(size=y.shape) * dry)
    loc = orc.si10_loc.values + shift * orc.si10_scale.values
    sd = orc.si10_scale.values * scale
    return stats.truncnorm.cdf(y, -loc / sd, np.inf, loc=loc, scale=sd)


def _uniformity(u: np.ndarray) -> tuple[float, float]:
    """Largest distance of a PIT decile's share from 0.1, and of the PIT's mean from 0.5."""
    hist = np.histogram(u, bins=10, range=(0, 1))[0] / u.size
    return float(np.abs(hist - 0.1).max()), abs(float(u.mean()) - 0.5)


@pytest.mark.slow
def test_oracle_is_calibrated(data):
    """The key property: the analysis is a draw from the oracle at every init and lead."""
    _, fc, _, y, orc = data
    rng = np.random.default_rng(0)
    for var in ("tp", "si10"):
        for j in range(fc.sizes[names.LEAD_TIME]):
            obs, o = y[var].isel(lead_time=j).values.astype(float), orc.isel(lead_time=j)
            worst_bin, mean_off = _uniformity(_pit(obs, o, var, rng))
            assert worst_bin < PIT_BIN_TOL and mean_off < PIT_MEAN_TOL, (var, j, worst_bin, mean_off)
            # The check has power: a spoilt oracle fails it by far.
            spoilt = [_pit(obs, o, var, rng, scale=1.25)]
            spoilt.append(_pit(obs, o, var, rng, shift=0.2) if var == "si10" else _pit(obs, o, var, rng, 0.8))
            for u in spoilt:
                assert max(_uniformity(u)) > WRONG_MIN, (var, j)


def test_oracle_sharpens_with_lead(data):
    _, _, _, _, orc = data
    shape = orc.tp_shape.isel(latitude=0, longitude=0).values  # (init, lead), one value per lead
    assert np.all(shape == shape[:1]) and np.all(np.diff(shape[0]) < 0)  # surer of tp nearer the time
    sd = orc.si10_scale.mean(("init_time", "latitude", "longitude")).values
    assert np.all(np.diff(sd) > 0) and sd[-1] > 2 * sd[0]


def test_non_negative_and_finite(data):
    _, fc, an, _, orc = data
    for ds in (fc, an):
        for var in ("tp", "si10"):
            assert np.isfinite(ds[var].values).all() and float(ds[var].min()) >= 0, var
    for var in ("tp_shape", "tp_scale", "si10_scale"):
        assert float(orc[var].min()) > 0, var
    assert float(orc.tp_shift.min()) >= 0


def test_realistic_amounts(data):
    _, _, an, _, _ = data
    tp, si10 = an.tp, an.si10
    extratropics = np.abs(an.latitude) > 30
    dry = float((tp.where(extratropics) == 0).sum() / (tp.where(extratropics).notnull()).sum())
    assert 0.4 < dry < 0.7, dry
    heavy = float((tp > 10).mean())
    assert 0.005 < heavy < 0.08, heavy
    assert 4 < float(si10.mean()) < 9 and 12 < float(si10.max()) < 40


def test_tied_to_the_flow(data):
    """Rain and wind where the storms are; rain where z at 850 hPa is low; the members know part."""
    _, fc, _, y, orc = data
    at0 = y.isel(lead_time=0)
    storm = orc.event_mask.isel(lead_time=0).values.astype(bool)
    assert storm.sum() > 10
    assert at0.tp.values[storm].mean() > 3 * at0.tp.values[~storm].mean()
    assert at0.si10.values[storm].mean() > 1.15 * at0.si10.values[~storm].mean()
    z850 = at0.z.sel(level=850)
    anomaly = (z850 - z850.mean("init_time")).values.ravel()
    assert np.corrcoef(np.log1p(at0.tp.values.ravel()), anomaly)[0, 1] < -0.2
    for var in ("tp", "si10"):  # the ensemble mean at 48 h is skilful
        mean = fc[var].sel(lead_time=LEAD_48).mean("member").values.ravel()
        assert np.corrcoef(mean, y[var].sel(lead_time=LEAD_48).values.ravel())[0, 1] > 0.45, var


def _ranks(ens: np.ndarray, obs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Rank of ``obs`` among the members (last axis of ``ens``), ties broken at random."""
    below = (ens < obs[..., None]).sum(-1)
    ties = (ens == obs[..., None]).sum(-1)
    return below + np.floor(rng.uniform(size=obs.shape) * (ties + 1)).astype(int)


def test_members_biased_and_underdispersive(data):
    _, fc, _, y, _ = data
    rng = np.random.default_rng(1)
    m = fc.sizes[names.MEMBER]
    for var in ("tp", "si10"):
        ens = fc[var].sel(lead_time=LEAD_48).transpose(..., "member").values
        obs = y[var].sel(lead_time=LEAD_48).values
        ranks = _ranks(ens, obs, rng)
        outside = np.mean((ranks == 0) | (ranks == m))
        assert outside > 1.5 * 2 / (m + 1), (var, outside)  # a U-shaped rank histogram
        spread = np.sqrt(np.mean(ens.var(-1, ddof=1)))
        rmse = np.sqrt(np.mean((ens.mean(-1) - obs) ** 2))
        assert spread / rmse < 0.8, (var, spread / rmse)
    # Biased: too much drizzle, too weak winds (here at 48 h).
    assert float((fc.tp.sel(lead_time=LEAD_48) > 0).mean()) > float((y.tp.sel(lead_time=LEAD_48) > 0).mean())
    assert float(fc.si10.sel(lead_time=LEAD_48).mean()) < float(y.si10.sel(lead_time=LEAD_48).mean()) - 0.3


def test_oracle_beats_raw_ensemble(data):
    _, fc, _, y, orc = data
    lat_w = np.cos(np.deg2rad(fc.latitude.values))[:, None]
    o, obs = orc.sel(lead_time=LEAD_48), y.sel(lead_time=LEAD_48)
    oracle = {
        "tp": sr.crps_csg0(
            obs.tp.values, o.tp_shape.values, scale=o.tp_scale.values, shift=o.tp_shift.values
        ),
        "si10": sr.crps_tnormal(obs.si10.values, o.si10_loc.values, o.si10_scale.values, 0.0, np.inf),
    }
    for var, crps in oracle.items():  # the usual ensemble CRPS (not the fair one) of the 10 members
        raw = ps.crps_ensemble(
            obs[var].values, fc[var].sel(lead_time=LEAD_48).transpose(..., "member").values
        )
        ratio = np.mean(raw * lat_w) / np.mean(crps * lat_w)
        assert 1.1 < ratio < 1.6, (var, ratio)


def test_files_attrs_and_distribution(data):
    paths, fc, an, _, orc = data
    for ds in (fc, an):
        assert {k: ds.tp.attrs[k] for k in TP_ATTRS} == TP_ATTRS
        assert ds.tp.attrs["units"] == "kg m-2" and ds.tp.attrs["standard_name"] == "precipitation_amount"
        assert ds.tp.attrs["cell_methods"] == "time: sum (interval: 24 hours)"
        for key, value in names.VARIABLE_ATTRS["si10"].items():
            assert ds.si10.attrs[key] == value
    # Surface variables: every dimension of their file but level.
    assert fc.tp.dims == fc.si10.dims == tuple(d for d in names.FORECAST_DIMS if d != names.LEVEL)
    assert an.tp.dims == an.si10.dims == tuple(d for d in names.ANALYSIS_DIMS if d != names.LEVEL)
    units = {
        "tp_shape": "1",
        "tp_scale": "kg m-2",
        "tp_shift": "kg m-2",
        "si10_loc": "m s-1",
        "si10_scale": "m s-1",
    }
    for var, unit in units.items():
        assert orc[var].dims == (names.INIT_TIME, names.LEAD_TIME, names.LATITUDE, names.LONGITUDE)
        assert orc[var].dtype == np.float32 and orc[var].attrs["units"] == unit
        assert orc[var].attrs["long_name"].startswith("oracle ")
    assert "censored shifted gamma shape" in orc.tp_shape.attrs["long_name"]
    assert "truncated" in orc.si10_loc.attrs["long_name"]
    assert orc.attrs["ensml_distribution"] == "z:normal t:normal tp:csg0 si10:truncnormal"
    for ds in (fc, an, orc):
        assert "N(mean, std**2)" not in ds.attrs["title"]
        assert "ensml_distribution" in ds.attrs["comment"] and "csg0" in ds.attrs["comment"]
        assert ds.attrs["synth_precip_wind"] == "True"
    with xr.open_dataset(paths["forecast"]) as raw:
        assert raw.tp.encoding["chunksizes"] == (1, 1, 1, 16, 32)  # one member's field


def test_distribution_attribute_without_precip_wind(tmp_path):
    plain = xr.open_dataset(synth(tmp_path / "plain", **TINY)["oracle"])
    assert plain.attrs["ensml_distribution"] == "z:normal t:normal"
    assert "tp" not in plain.attrs["ensml_distribution"] and "tp_scale" not in plain
    surface = xr.open_dataset(synth(tmp_path / "surface", **TINY, surface=True)["oracle"])
    assert surface.attrs["ensml_distribution"] == "z:normal t:normal t2m:normal"


def test_z_t_and_t2m_identical_with_or_without_precip_wind(tmp_path):
    a = synth(tmp_path / "a", **TINY, surface=True)
    b = synth(tmp_path / "b", **TINY, surface=True, precip_wind=True)
    for key in a:
        xa, xb = xr.open_dataset(a[key]), xr.open_dataset(b[key])
        assert set(xa.data_vars) < set(xb.data_vars)
        for var in xa.data_vars:
            np.testing.assert_array_equal(xa[var].values, xb[var].values, err_msg=f"{key} {var}")
        assert {"tp", "si10"} <= set(xb.data_vars) or key == "oracle"


@pytest.mark.slow
def test_deterministic_by_seed(tmp_path):
    a = synth(tmp_path / "a", **TINY, precip_wind=True, seed=3)
    b = synth(tmp_path / "b", **TINY, precip_wind=True, seed=3)
    c = synth(tmp_path / "c", **TINY, precip_wind=True, seed=4)
    for key in a:
        xa, xb, xc = (xr.open_dataset(p[key]) for p in (a, b, c))
        for var in xa.data_vars:
            xr.testing.assert_identical(xa[var], xb[var])
        new = "tp_scale" if key == "oracle" else "tp"
        assert not np.array_equal(xa[new].values, xc[new].values)


@pytest.mark.slow
def test_zarr_store(tmp_path):
    paths = synth(tmp_path / "z", **TINY, members=2, leads=(0, 48), precip_wind=True, format="zarr")
    fc = xr.open_zarr(paths["forecast"], consolidated=False)
    assert fc.tp.dims == tuple(d for d in names.FORECAST_DIMS if d != names.LEVEL)
    assert float(fc.si10.min()) >= 0
    orc = xr.open_zarr(paths["oracle"], consolidated=False)
    assert orc.attrs["ensml_distribution"].endswith("tp:csg0 si10:truncnormal")
