"""Tests for the synthetic ensemble: layout, determinism, and the designed statistics.

Scores use properscoring as an independent reference (empirical ensemble CRPS and the closed
form Gaussian CRPS).
"""

from __future__ import annotations

import hashlib

import numpy as np
import properscoring as ps
import pytest
import xarray as xr
from scipy.stats import norm

from ensml import names
from ensml.data.outputs import OutputFolder
from ensml.data.synth import build as synth_build
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError

SMALL = {"n_lat": 16, "n_lon": 32, "start": "2017-01-01", "end": "2017-12-31", "storms_per_year": 20}
TINY = {"n_lat": 8, "n_lon": 16, "start": "2017-01-01", "end": "2017-01-20", "every_days": 3}


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    paths = synth(tmp_path_factory.mktemp("synth") / "out", **SMALL)
    fc, an, orc = (xr.open_dataset(paths[k]) for k in ("forecast", "analysis", "oracle"))
    fc, orc = fc.load(), orc.load()
    y = an.load().sel(time=fc.valid_time)  # verifying analysis, (init_time, lead_time, ...)
    return paths, fc, y, orc


def _weights(lat):
    w = np.cos(np.deg2rad(lat))
    return w / w.mean()


def _wmean(a, lat):
    """Mean over everything, weighted by cos(latitude) on the second-last axis."""
    return float(np.mean(np.asarray(a) * _weights(lat)[:, None]))


@pytest.mark.slow
def test_files_dims_coords_attrs(data):
    paths, fc, _, orc = data
    assert set(paths) == {"forecast", "analysis", "oracle"}
    an = xr.open_dataset(paths["analysis"])
    for v in ("z", "t"):
        assert fc[v].dims == names.FORECAST_DIMS and fc[v].dtype == np.float32
        assert an[v].dims == names.ANALYSIS_DIMS
        for ds in (fc, an):
            for key in ("units", "standard_name", "long_name"):
                assert ds[v].attrs[key] == names.VARIABLE_ATTRS[v][key]
        assert orc[f"{v}_mean"].dims == (
            names.INIT_TIME,
            names.LEAD_TIME,
            names.LEVEL,
            names.LATITUDE,
            names.LONGITUDE,
        )
        assert orc[f"{v}_std"].attrs["units"] == names.VARIABLE_ATTRS[v]["units"]
    assert orc["event_mask"].dims == (names.INIT_TIME, names.LEAD_TIME, names.LATITUDE, names.LONGITUDE)
    assert orc["event_mask"].dtype == np.uint8
    for ds in (fc, an, orc):
        assert ds.attrs["Conventions"] == "CF-1.8" and ds.attrs["synth_seed"] == 0
        assert "synth(" in ds.attrs["history"]
        for c in ds.coords:
            for key, value in names.COORD_ATTRS.get(str(c), {}).items():
                assert ds[c].attrs[key] == value, (c, key)
    lat, lon = fc.latitude.values, fc.longitude.values
    np.testing.assert_allclose(lat, 90 - 180 / 16 * (np.arange(16) + 0.5))  # cell centres, N → S
    np.testing.assert_allclose(lon, np.arange(32) * 360 / 32)
    assert list(fc.level.values) == [500, 850] and list(fc.member.values) == list(range(1, 11))
    assert fc.lead_time.dtype.kind == "m"
    assert list(fc.lead_time.values / np.timedelta64(1, "h")) == [0, 24, 48]
    np.testing.assert_array_equal(fc.valid_time, fc.init_time + fc.lead_time)
    assert fc.sizes[names.INIT_TIME] == 183  # every 2 days in 2017
    with xr.open_dataset(paths["forecast"]) as raw:
        assert raw["z"].encoding["chunksizes"] == (1, 1, 1, 2, 16, 32)  # one member field
        assert raw["z"].encoding["zlib"]


def test_climatology_is_realistic(data):
    _, fc, y, _ = data
    lat = fc.latitude.values
    expected = {("z", 500): (5.2e4, 5.7e4), ("z", 850): (1.25e4, 1.55e4), ("t", 500): (240, 260)}
    expected[("t", 850)] = (268, 290)
    for (v, lev), (lo, hi) in expected.items():
        a = y[v].sel(level=lev).mean(("init_time", "lead_time")).values
        assert lo < _wmean(a, lat) < hi, (v, lev)
        assert a[len(lat) // 2].mean() - a[0].mean() > (1500 if v == "z" else 15)  # equator > pole


def test_analysis_holds_every_valid_time(data):
    paths, fc, _, _ = data
    an = xr.open_dataset(paths["analysis"])
    assert np.isin(fc.valid_time.values.ravel(), an.time.values).all()
    assert np.isin(fc.init_time.values, an.time.values).all()


def test_oracle_is_calibrated(data):
    _, fc, y, orc = data
    for v in ("z", "t"):
        r = ((y[v] - orc[f"{v}_mean"]) / orc[f"{v}_std"]).values
        assert abs(r.mean()) < 0.03 and abs(r.std() - 1) < 0.03, v
        pit = norm.cdf(r)
        for j in range(fc.sizes["lead_time"]):
            hist = np.histogram(pit[:, j], bins=10, range=(0, 1))[0] / pit[:, j].size
            np.testing.assert_allclose(hist, 0.1, atol=0.012)
            inside = np.mean((pit[:, j] > 0.05) & (pit[:, j] < 0.95))
            assert abs(inside - 0.9) < 0.01, (v, j, inside)


def test_ensemble_is_biased_and_underdispersive(data):
    _, fc, y, orc = data
    lat = fc.latitude.values
    for v in ("z", "t"):
        x = fc[v].sel(lead_time=np.timedelta64(48, "h"))
        mean, sd = x.mean("member"), x.std("member", ddof=1)
        sd_true = orc[f"{v}_std"].sel(lead_time=np.timedelta64(48, "h"))
        err = (mean - y[v].sel(lead_time=np.timedelta64(48, "h"))).values
        # Systematic: the time-mean error per grid point is a large part of sigma*.
        bias = np.abs(err.mean(axis=0))
        assert _wmean(bias, lat) > 0.2 * _wmean(sd_true.mean("init_time"), lat), v
        # Under-dispersive: spread well below the RMSE of the ensemble mean and below sigma*.
        ratio = np.sqrt(_wmean((sd**2).mean("init_time"), lat) / _wmean((err**2).mean(axis=0), lat))
        assert 0.4 < ratio < 0.75, (v, ratio)
        assert float((sd / sd_true).median()) < 0.8


def test_spread_grows_with_lead_and_tracks_sigma(data):
    _, fc, _, orc = data
    for v in ("z", "t"):
        sd = fc[v].std("member").mean(("init_time", "level", "latitude", "longitude")).values
        sd_true = orc[f"{v}_std"].mean(("init_time", "level", "latitude", "longitude")).values
        assert np.all(np.diff(sd) > 0) and np.all(np.diff(sd_true) > 0)
        assert sd[-1] > 2 * sd[0]
        # The ensemble's own spread is informative of sigma* (flow dependence).
        a = np.log(fc[v].std("member").isel(lead_time=-1).values.ravel())
        b = np.log(orc[f"{v}_std"].isel(lead_time=-1).values.ravel())
        assert np.corrcoef(a, b)[0, 1] > 0.6


def test_members_coherent_across_leads(data):
    _, fc, _, orc = data
    x = fc["z"].isel(level=0)
    anom = (x - x.mean("member")) / orc["z_std"].isel(level=0)
    c = xr.corr(anom.isel(lead_time=1), anom.isel(lead_time=2)).item()
    assert c > 0.4


def test_storms_marked_and_harder(data):
    _, fc, y, orc = data
    lead = np.timedelta64(48, "h")
    mask = orc["event_mask"].sel(lead_time=lead).values.astype(bool)
    assert mask.any() and mask.mean() < 0.05
    sd_true = orc["z_std"].sel(lead_time=lead, level=850).values
    assert sd_true[mask].mean() > 2 * sd_true[~mask].mean()
    x = fc["z"].sel(lead_time=lead, level=850)
    err = np.abs((x.mean("member") - y["z"].sel(lead_time=lead, level=850)).values)
    assert err[mask].mean() > 2 * err[~mask].mean()
    assert int(orc.sizes["storm"]) > 5
    # Storms are warm-core lows: at lead 0, z850 below and t850 above their time means there.
    at0 = orc["event_mask"].isel(lead_time=0).values.astype(bool)
    for v, sign in (("z", -1), ("t", 1)):
        a = y[v].isel(lead_time=0).sel(level=850)
        anom = (a - a.mean("init_time")).values
        assert sign * anom[at0].mean() > 0.5 * anom.std(), v


def test_oracle_beats_raw_ensemble(data):
    _, fc, y, orc = data
    lat = fc.latitude.values
    lead = np.timedelta64(48, "h")
    for v in ("z", "t"):
        for lev in (500, 850):
            obs = y[v].sel(lead_time=lead, level=lev).values
            ens = np.moveaxis(fc[v].sel(lead_time=lead, level=lev).values, 1, -1)
            raw10 = _wmean(ps.crps_ensemble(obs, ens).mean(axis=0), lat)
            raw5 = _wmean(ps.crps_ensemble(obs, ens[..., :5]).mean(axis=0), lat)
            mu = orc[f"{v}_mean"].sel(lead_time=lead, level=lev).values
            sd = orc[f"{v}_std"].sel(lead_time=lead, level=lev).values
            oracle = _wmean(ps.crps_gaussian(obs, mu, sd).mean(axis=0), lat)
            assert 1.12 < raw10 / oracle < 1.5, (v, lev, raw10 / oracle)
            assert raw5 > raw10


def test_analysis_at_init_is_informative(data):
    _, _, y, _ = data
    for v in ("z", "t"):
        y0 = y[v].isel(lead_time=0).values
        y48 = y[v].isel(lead_time=-1).values
        persistence = np.mean((y48 - y0) ** 2)
        climatology = np.mean((y48 - y48.mean(axis=0)) ** 2)
        assert persistence < 0.5 * climatology


def test_deterministic_by_seed(tmp_path):
    a = synth(tmp_path / "a", **TINY, seed=3)
    b = synth(tmp_path / "b", **TINY, seed=3)
    c = synth(tmp_path / "c", **TINY, seed=4)
    for k in a:
        xa, xb, xc = (xr.open_dataset(p[k]) for p in (a, b, c))
        for v in xa.data_vars:
            xr.testing.assert_identical(xa[v], xb[v])
        assert not np.array_equal(
            xa["z" if k != "oracle" else "z_mean"], xc["z" if k != "oracle" else "z_mean"]
        )


#: sha256 of every array of the TINY dataset with ``surface=True`` (values, dtype and shape of each
#: variable and coordinate, by file): the generator's output pinned bit for bit, so that a change
#: which reorders a random draw or an operation fails here. Update it only with a change that is
#: meant to change the data (and say so in its commit).
TINY_SHA256 = {
    "analysis": "8134bb8dfea441bf8ff87efa61012f1985d3be91449c7e76c23a06549b3daedc",
    "forecast": "106c5480f7c21523a234f762cbf9492082a17970a797f1557fde5424d7176bb4",
    "oracle": "ef26909084fb6ab6dc700a08862b04987bffac114050f9d509a2ab3397cba3d1",
}


def _array_digests(paths) -> dict[str, str]:
    out = {}
    for name, path in sorted(paths.items()):
        h = hashlib.sha256()
        with xr.open_dataset(path) as ds:
            for v in sorted(ds.variables):
                a = np.ascontiguousarray(ds[v].values)
                h.update(f"{v} {a.dtype.str} {a.shape}".encode())
                h.update(a.tobytes())
        out[name] = h.hexdigest()
    return out


def test_tiny_dataset_is_pinned_bit_for_bit(tmp_path):
    assert _array_digests(synth(tmp_path / "t", **TINY, surface=True)) == TINY_SHA256


def test_member_count_does_not_change_truth(tmp_path):
    a = synth(tmp_path / "a", **TINY, members=4)
    b = synth(tmp_path / "b", **TINY, members=6)
    xr.testing.assert_identical(xr.open_dataset(a["analysis"]).z, xr.open_dataset(b["analysis"]).z)
    xr.testing.assert_identical(xr.open_dataset(a["oracle"]).t_std, xr.open_dataset(b["oracle"]).t_std)
    fa, fb = xr.open_dataset(a["forecast"]), xr.open_dataset(b["forecast"])
    assert fb.sizes["member"] == 6 and fa.sizes["member"] == 4


def test_sub_daily_leads_and_other_levels(tmp_path):
    p = synth(tmp_path / "o", **TINY, leads=range(0, 49, 6), levels=(1000, 700, 300), members=3)
    fc, an = xr.open_dataset(p["forecast"]), xr.open_dataset(p["analysis"])
    assert fc.sizes["lead_time"] == 9 and list(fc.level.values) == [1000, 700, 300]
    assert np.isin(fc.valid_time.values.ravel(), an.time.values).all()
    first = an.time.sel(time=slice("2017-01-01", "2017-01-03")).values  # one forecast's window
    assert (np.diff(first) == np.timedelta64(6, "h")).all()
    z = an["z"].mean(("time", "latitude", "longitude")).values
    assert z[0] < z[1] < z[2]  # geopotential increases with height


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"members": 1}, "at least 2 members"),
        ({"start": "2017-02-01", "end": "2017-01-01"}, "date range is empty"),
        ({"start": "not a date"}, "is not a date"),
        ({"leads": (24, 0)}, "strictly increasing"),
        ({"leads": (24, 24)}, "strictly increasing"),
        ({"leads": (-6, 0)}, ">= 0"),
        ({"leads": ()}, "leads is empty"),
        ({"leads": ("P1D", "tomorrow")}, "'tomorrow' is not understood"),
        ({"n_lat": 2}, "too small"),
        ({"n_lon": 4}, "too small"),
        ({"levels": ()}, "levels is empty"),
        ({"levels": (500, 500)}, "distinct"),
        ({"levels": (0,)}, "1..1100"),
        ({"every_days": 0}, "every_days"),
        ({"storms_per_year": -1}, "storms_per_year"),
        ({"seed": -1}, "seed"),
        ({"seed": 2**64}, r"--seed: 18446744073709551616 is out of range \(must be >= 0 and <= 4294967295\)"),
        (
            {"start": "1600-01-01", "end": "1600-02-01"},
            r"1600-01-01 is out of range \(must be a date in 1677-09-22 …",
        ),
        ({"start": "2262-01-01", "end": "2263-02-01"}, "2263-02-01 is out of range"),
        ({"start": "2262-04-10", "end": "2262-04-11"}, "runs past 2262-04-11"),
        ({"leads": (0, 1_000_000_000)}, r"out of range \(must be >= 0 and <= 87600 h"),
        ({"members": "ten"}, "invalid option"),
    ],
)
def test_bad_options(tmp_path, options, match):
    with pytest.raises(EnsmlError, match=match):
        synth(tmp_path / "out", **{**TINY, **options})
    assert not (tmp_path / "out").exists()


def test_existing_outputs_need_overwrite(tmp_path):
    out = tmp_path / "out"
    synth(out, **TINY)
    (out / "notes.txt").write_text("keep me")
    with pytest.raises(
        EnsmlError, match=r"already holds analysis\.nc, forecast\.nc, oracle\.nc of an earlier synth"
    ):
        synth(out, **TINY, seed=1)
    assert xr.open_dataset(out / "forecast.nc").attrs["synth_seed"] == 0
    synth(out, **TINY, seed=1, overwrite=True)
    assert xr.open_dataset(out / "forecast.nc").attrs["synth_seed"] == 1
    assert (out / "notes.txt").read_text() == "keep me"
    (tmp_path / "file").write_text("")
    with pytest.raises(EnsmlError, match="is a file, not a folder"):
        synth(tmp_path / "file", **TINY)


@pytest.mark.parametrize("existing", [False, True])
def test_no_partial_output_on_failure(tmp_path, monkeypatch, existing):
    out = tmp_path / "out"
    if existing:
        synth(out, **TINY)

    def outputs() -> dict[str, bytes]:
        return {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".ensml"} if out.exists() else {}

    before = outputs()
    real = OutputFolder.write_netcdf
    calls = []

    def fail_on_third(self, ds, name, *args, **kw):
        calls.append(name)
        if len(calls) == 3:
            raise OSError("disk full")
        return real(self, ds, name, *args, **kw)

    monkeypatch.setattr(OutputFolder, "write_netcdf", fail_on_third)
    with pytest.raises(OSError, match="disk full"):
        synth(out, **TINY, seed=5, overwrite=True)
    assert outputs() == before  # all three files or none
    assert not out.exists() or list((out / ".ensml" / "staging").iterdir()) == []


def test_storage_rounding_is_far_below_spread(data):
    _, fc, _, orc = data
    for v in ("z", "t"):
        # Members are rounded relative to their spread: no subset of 5 collapses to one value.
        assert float(fc[v].isel(member=slice(0, 5)).std("member").min()) > 0
        assert float(orc[f"{v}_std"].min()) > 0


def test_quantise_helpers():
    a = np.array([1.3, -2.7, 100.01], dtype=np.float32)
    synth_build._quantise(a, np.array([8.0, 8.0, 1.0], dtype=np.float32), 8)  # steps 1, 1, 1/8
    np.testing.assert_array_equal(a, [1.0, -3.0, 100.0])
    b = np.array([1.0, np.pi, 123.456], dtype=np.float32)
    c = b.copy()
    synth_build._round_mantissa(c, 11)
    assert np.all(np.abs(c / b - 1) <= 2.0**-12)


def test_progress_a_bar_on_a_terminal_a_closing_line_otherwise(tmp_path, monkeypatch, capsys):
    import io

    class Terminal(io.StringIO):
        def isatty(self) -> bool:
            return True

    synth(tmp_path / "log", **TINY)  # seconds: no line per 30 s, only the closing one
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("ensml synth: 7/7 init times drawn and written; ")
    term = Terminal()
    monkeypatch.setattr("sys.stderr", term)
    synth(tmp_path / "tty", **TINY)
    assert "ensml synth" in term.getvalue() and "7/7" in term.getvalue() and "elapsed" not in term.getvalue()
