"""Tests for the oracle members of the synthetic ensemble (``synth(oracle_members=N)``).

The members must be draws of the truth's exact joint conditional distribution: their per-point
mean and std are the oracle's, the truth is exchangeable with them point by point *and* for
area means (which only a correct spatial correlation gives), they are deterministic per init
and seed, and asking for them changes no other file.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy.stats import chisquare

from ensml import names
from ensml.cli.main import main
from ensml.data.outputs import OutputFolder
from ensml.data.synth import build as synth_build
from ensml.data.synth import model as synth_model
from ensml.data.synth.generate import synth
from ensml.data.synth.oracle_members import oracle_member_drawer
from ensml.errors import EnsmlError
from tests.data.test_synth import TINY, TINY_SHA256, _array_digests

N = 40  # oracle members in the statistical tests
# Four months of inits every 2 days (60), leads 24 and 48 h: two OU steps per forecast through
# the intermediate state time, and at 48 h each init's unknown part (U's increments, noise,
# storm increments after init) is independent of the next init's, so ranks are independent
# across inits. Many storms, so that some are alive at the valid times.
STATS = {
    "n_lat": 16,
    "n_lon": 32,
    "start": "2017-01-01",
    "end": "2017-04-30",
    "leads": (24, 48),
    "members": 2,
    "storms_per_year": 60,
}


@pytest.fixture(scope="module")
def stats(tmp_path_factory):
    """(oracle members, oracle, verifying analysis), loaded; about 1.5 s (writing the members'
    4800 chunks of each variable is most of it)."""
    paths = synth(tmp_path_factory.mktemp("oracle_members") / "out", **STATS, oracle_members=N)
    om, orc = (xr.open_dataset(paths[k]).load() for k in ("oracle_members", "oracle"))
    y = xr.open_dataset(paths["analysis"]).load().sel(time=om.valid_time)
    return om, orc, y


def _ranks(y: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Rank of ``y (...)`` among the members ``x (member, ...)``: 0 … N (no ties: float draws)."""
    return np.sum(x < y[None], axis=0)


def _rank_p(ranks: np.ndarray, n: int) -> float:
    """Chi-square p-value of uniform ranks 0 … n, the n + 1 ranks merged into 8 bins of 5 or 6
    (a histogram of 41 bins at a few hundred ranks reacts to single-bin noise, not to shape)."""
    groups = np.arange(n + 1) * 8 // (n + 1)
    size = np.bincount(groups)
    observed = np.bincount(groups[ranks.ravel()], minlength=8)
    return float(chisquare(observed, size / size.sum() * observed.sum()).pvalue)


def _region_means(a: np.ndarray, lat: np.ndarray) -> np.ndarray:
    """cos-latitude weighted means of ``a (..., 16, 32)`` over 16 regions of 4 × 8 cells (45° × 90°),
    ``(..., 16)``: each 3 correlation lengths of U across, so neighbours' means correlate little
    (about 0.06, in the truth as in the members)."""
    w = np.cos(np.deg2rad(lat)).reshape(4, 4)[:, :, None]  # (region row, lat in it, 1)
    blocks = a.reshape(*a.shape[:-2], 4, 4, 4, 8)  # (..., region row, lat, region col, lon)
    means = (blocks * w[:, :, None]).sum((-3, -1)) / (8 * w.sum(1))  # (..., region row, region col)
    return means.reshape(*a.shape[:-2], 16)


# -- (a) the per-point distribution is the oracle's ------------------------------------------------


def test_per_point_mean_and_std_are_the_oracles(stats):
    om, orc, _ = stats
    for v in ("z", "t"):
        x = om[v].transpose("member", ...).values.astype(float)
        mean, std = orc[f"{v}_mean"].values, orc[f"{v}_std"].values
        # Over 12 seeds of this set-up: mean(zm) 0.000 ± 0.012, std(zm) 1.000 ± 0.005, mean of
        # the variance ratio 1.000 ± 0.001 (the points are correlated in space, across levels and
        # leads, so these spreads, not 1/sqrt(points), set the scale); the bounds are 6 of them.
        zm = (x.mean(0) - mean) / (std / np.sqrt(N))
        ratio = x.var(0, ddof=1) / std**2
        assert abs(zm.mean()) < 0.08 and abs(zm.std() - 1) < 0.03, (v, zm.mean(), zm.std())
        assert abs(ratio.mean() - 1) < 0.01, (v, ratio.mean())
        for j in range(om.sizes[names.LEAD_TIME]):  # each lead on its own (twice the bounds)
            assert abs(ratio[:, j].mean() - 1) < 0.02, (v, j, ratio[:, j].mean())


def test_storms_unknown_intensity_is_in_the_spread(stats):
    om, orc, _ = stats
    # Where a storm is alive at 48 h, its unknown intensity makes most of the oracle's variance:
    # without the storm term the members' variance would be about 0.35 of it there. The band is
    # wide for the few, correlated event points (passed on 12 seeds; 0.99 ± 0.02 with 4000 members).
    event = (orc.event_mask.isel(lead_time=-1) == 1).values  # (init, lat, lon)
    assert event.sum() > 30
    for v in ("z", "t"):
        x = om[v].isel(lead_time=-1).transpose("member", "level", ...).values.astype(float)
        std = orc[f"{v}_std"].isel(lead_time=-1).transpose("level", ...).values
        ratio = (x.var(0, ddof=1) / std**2)[:, event]
        assert 0.75 < ratio.mean() < 1.25, (v, ratio.mean())


# -- (b) the truth is exchangeable with the members -------------------------------------------------


@pytest.mark.parametrize(("v", "level"), [("z", 500), ("t", 850)])
def test_truth_rank_uniform_per_point_and_for_area_means(stats, v, level):
    om, orc, y = stats
    lat = om.latitude.values
    at = {names.LEAD_TIME: -1}
    x = om[v].isel(at).sel(level=level).transpose("member", ...).values  # (member, init, lat, lon)
    truth = y[v].isel(at).sel(level=level).values  # (init, lat, lon)
    # Per point, at points 4 cells (45°) apart: 60 inits × 32 points.
    assert _rank_p(_ranks(truth[:, ::4, ::4], x[:, :, ::4, ::4]), N) > 0.001
    # Area means over 16 regions: 960 ranks; uniform only if the members' spatial correlation
    # is the truth's (too little correlation: too narrow, too much: too wide).
    area = _ranks(_region_means(truth, lat), _region_means(x, lat))
    assert _rank_p(area, N) > 0.001
    assert np.mean((area == 0) | (area == N)) < 0.1  # 2/41 expected

    # Independent draws per point from the oracle's N(mean, std²): exact marginals, so the
    # per-point ranks are uniform, but the area means far too narrow: a U-shaped histogram.
    mean = orc[f"{v}_mean"].isel(at).sel(level=level).values
    std = orc[f"{v}_std"].isel(at).sel(level=level).values
    ind = mean + std * np.random.default_rng(0).standard_normal((N, *mean.shape))
    assert _rank_p(_ranks(truth[:, ::4, ::4], ind[:, :, ::4, ::4]), N) > 0.001
    area_ind = _ranks(_region_means(truth, lat), _region_means(ind, lat))
    assert _rank_p(area_ind, N) < 1e-6
    assert np.mean((area_ind == 0) | (area_ind == N)) > 0.2  # the U: a third outside the members


# -- (c) deterministic per init and seed -------------------------------------------------------------


def _tiny_state(seed: int = 3) -> dict:
    inits = pd.date_range("2017-01-01", "2017-01-31", freq="3D", unit="ns").to_numpy()
    leads = (np.array([0, 24, 48, 72]) * 3600).astype("timedelta64[s]").astype("timedelta64[ns]")
    out = synth_model.generate(
        n_lat=8,
        n_lon=16,
        levels=np.array([500.0, 850.0]),
        inits=inits,
        leads=leads,
        members=2,
        storms_per_year=200,
        seed=seed,
    )
    return out["oracle_state"]


def test_drawer_is_deterministic_and_independent_of_batching():
    state = _tiny_state()
    draw = oracle_member_drawer(3, 5, state)
    whole = draw(0, 11)
    assert whole.shape == (2, 11, 4, 5, 2, 8, 16) and whole.dtype == np.float32
    np.testing.assert_array_equal(np.concatenate([draw(i, i + 1) for i in range(11)], axis=1), whole)
    np.testing.assert_array_equal(draw(4, 7), whole[:, 4:7])
    np.testing.assert_array_equal(oracle_member_drawer(3, 5, _tiny_state())(0, 11), whole)
    assert not np.array_equal(oracle_member_drawer(4, 5, state)(0, 11), whole)  # another seed
    assert np.isfinite(whole).all()


def test_files_deterministic_by_seed_and_batching(tmp_path, monkeypatch):
    a = synth(tmp_path / "a", **TINY, oracle_members=3)
    b = synth(tmp_path / "b", **TINY, members=4, oracle_members=3)  # other forecast members
    monkeypatch.setattr(synth_build, "BLOCK_INITS", 1)  # drawn one init per task
    c = synth(tmp_path / "c", **TINY, oracle_members=3)
    d = synth(tmp_path / "d", **TINY, seed=1, oracle_members=3)
    xa = xr.open_dataset(a["oracle_members"])
    for other in (b, c):
        xr.testing.assert_identical(xa.drop_attrs(), xr.open_dataset(other["oracle_members"]).drop_attrs())
    assert not np.array_equal(xa.z.values, xr.open_dataset(d["oracle_members"]).z.values)


# -- (d) the file, and nothing else changes ------------------------------------------------------------


def test_other_files_unchanged_bit_for_bit(tmp_path):
    without = synth(tmp_path / "without", **TINY, surface=True)
    paths = synth(tmp_path / "with", **TINY, surface=True, oracle_members=5)
    assert list(paths) == ["forecast", "analysis", "oracle", "oracle_members"]
    assert paths["oracle_members"] == tmp_path / "with" / "oracle_members.nc"
    assert _array_digests({k: p for k, p in paths.items() if k != "oracle_members"}) == TINY_SHA256
    for key, path in without.items():  # and their attributes, but for the history's time and call
        a, b = xr.open_dataset(path), xr.open_dataset(paths[key])
        for ds in (a, b):
            ds.attrs.pop("history")
        xr.testing.assert_identical(a, b)


def test_file_layout_like_the_forecast(tmp_path):
    paths = synth(tmp_path / "o", **TINY, surface=True, oracle_members=5)
    fc, om = xr.open_dataset(paths["forecast"]), xr.open_dataset(paths["oracle_members"])
    assert set(om.data_vars) == {"z", "t", "t2m"}
    for v in om.data_vars:
        assert om[v].dtype == np.float32
        assert om[v].dims == fc[v].dims
        for key in ("units", "standard_name", "long_name"):
            assert om[v].attrs[key] == fc[v].attrs[key] == names.VARIABLE_ATTRS[v][key]
        assert "oracle" in om[v].attrs["comment"]
        assert om[v].encoding["chunksizes"][:3] == (1, 1, 1)
    assert om.z.dims == names.FORECAST_DIMS
    assert list(om.member.values) == [1, 2, 3, 4, 5]
    for c in fc.coords:
        if c != names.MEMBER:
            xr.testing.assert_identical(om[c], fc[c])
    assert om.attrs["Conventions"] == "CF-1.8" and om.attrs["synth_oracle_members"] == 5
    assert om.attrs["synth_seed"] == 0 and "oracle_members=5" in om.attrs["history"]


def test_overwrite_without_removes_them_and_zarr_writes_them(tmp_path):
    out = tmp_path / "out"
    synth(out, **TINY, oracle_members=2)
    synth(out, **TINY, overwrite=True)
    assert not (out / "oracle_members.nc").exists() and (out / "forecast.nc").exists()
    z = synth(tmp_path / "zarr", **TINY, oracle_members=2, format="zarr")
    assert z["oracle_members"].name == "oracle_members.zarr"
    assert xr.open_zarr(z["oracle_members"], consolidated=False).sizes[names.MEMBER] == 2


def test_a_failed_write_of_them_leaves_the_folder_as_it_was(tmp_path, monkeypatch):
    out = tmp_path / "out"
    synth(out, **TINY)
    before = {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".ensml"}
    real = OutputFolder.write_netcdf

    def fail_on_oracle_members(self, ds, name, *args, **kw):
        if name == "oracle_members.nc":
            raise OSError("disk full")
        return real(self, ds, name, *args, **kw)

    monkeypatch.setattr(OutputFolder, "write_netcdf", fail_on_oracle_members)
    with pytest.raises(OSError, match="disk full"):
        synth(out, **TINY, seed=5, oracle_members=2, overwrite=True)
    assert {p.name: p.read_bytes() for p in out.iterdir() if p.name != ".ensml"} == before
    assert list((out / ".ensml" / "staging").iterdir()) == []


def test_cli_writes_them(tmp_path, capsys):
    tiny = [f"--{k}={v}" for k, v in TINY.items()]
    assert main(["data", "synth", "--out_dir", str(tmp_path / "o"), *tiny, "--oracle_members", "3"]) == 0
    assert "oracle_members.nc" in capsys.readouterr().out
    assert xr.open_dataset(tmp_path / "o" / "oracle_members.nc").sizes[names.MEMBER] == 3


# -- (e) impossible values ----------------------------------------------------------------------------


@pytest.mark.parametrize(("bad", "says"), [(-1, "oracle_members"), (1001, "0..1000"), ("many", "'many'")])
def test_bad_count_is_one_line_and_writes_nothing(tmp_path, bad, says):
    with pytest.raises(EnsmlError) as err:
        synth(tmp_path / "out", **TINY, oracle_members=bad)
    assert says in str(err.value) and "\n" not in str(err.value)
    assert not (tmp_path / "out").exists()


def test_cli_bad_count_is_one_line_exit_1(tmp_path, capsys):
    # the CLI row of tests/cli/test_cli_table.py, here with the folder checked as well
    (tmp_path / "out").mkdir()
    assert main(["data", "synth", "--out_dir", str(tmp_path / "out"), "--oracle_members", "-1"]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "--oracle_members" in lines[0] and "is out of range" in lines[0]
    assert list((tmp_path / "out").iterdir()) == []
