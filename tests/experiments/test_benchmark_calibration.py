"""The benchmark's columns without an oracle, on tiny arrays, against numpy and scipy by hand
(:mod:`ensml.experiments.benchmark_calibration`), and the choice of the map's network."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr
from scipy import stats

from ensml.experiments.benchmark_calibration import (
    LOCAL_EMOS,
    add_emos_skill,
    calibration_columns,
    emos_intervals,
)
from ensml.experiments.benchmark_maps import best_network
from ensml.scores.significance import block_bootstraps, skill_test

N, M, LAT, LON = 16, 4, 3, 5
INITS = np.datetime64("2000-01-01") + np.arange(N) * np.timedelta64(1, "D")


def fields(rng: np.random.Generator) -> tuple[xr.DataArray, xr.DataArray, xr.DataArray]:
    """Members (init_time, member, level, latitude, longitude), analysis and latitude weights."""
    coords = {
        "init_time": INITS,
        "level": [500.0],
        "latitude": [60.0, 0.0, -60.0],
        "longitude": np.arange(LON) * 72.0,
    }
    y = xr.DataArray(rng.normal(size=(N, 1, LAT, LON)), dims=list(coords), coords=coords)
    x = y.expand_dims(member=M, axis=1) + 0.7 * rng.normal(size=(N, M, 1, LAT, LON)) + 0.2
    w = xr.DataArray([0.5, 1.0, 0.5], dims="latitude", coords={"latitude": coords["latitude"]})
    return x.assign_coords(member=np.arange(M)), y, w


def test_columns_of_an_ensemble_and_a_gaussian_by_hand() -> None:
    x, y, w = fields(np.random.default_rng(0))
    mu, sd = x.mean("member"), x.std("member", ddof=1) * 1.5
    out = calibration_columns({"ens": x, "gauss": (mu, sd)}, y, w, [500.0], bins=M + 1)
    assert set(out) == {("ens", 500.0), ("gauss", 500.0)}

    xv, yv = x.values[:, :, 0], y.values[:, 0]  # (N, M, LAT, LON), (N, LAT, LON)
    wv = np.broadcast_to(w.values[:, None], (LAT, LON))
    per_init = lambda a: (a * wv).sum((1, 2)) / wv.sum()  # noqa: E731
    se = (xv.mean(1) - yv) ** 2
    spread = {"ens": xv.var(1, ddof=1) * (M + 1) / M, "gauss": sd.values[:, 0] ** 2}
    ranks = {"ens": (xv < yv[:, None]).sum(1)}
    pit = stats.norm.cdf(yv, mu.values[:, 0], sd.values[:, 0])
    ranks["gauss"] = np.minimum((pit * (M + 1)).astype(int), M)
    for name in ("ens", "gauss"):
        hist = np.stack([per_init(ranks[name] == r) for r in range(M + 1)], axis=1)  # (N, bins) per init
        total = hist.sum(0)
        flat = np.mean(np.abs(total / total.mean() - 1))
        ssr = np.sqrt(per_init(spread[name]).mean() / per_init(se).mean())
        got = out[name, 500.0]
        assert got["spread_skill_ratio"] == pytest.approx(ssr, rel=1e-6)
        assert got["flatness"] == pytest.approx(flat, rel=1e-9)
        # the intervals: one moving-block bootstrap of these per-init series
        ref = block_bootstraps(
            lambda v, e, h: (np.sqrt(v.mean() / e.mean()), np.mean(np.abs(h.sum(0) / h.sum(0).mean() - 1))),
            per_init(spread[name]),
            per_init(se),
            hist,
        )
        assert got["ssr_low"] == pytest.approx(ref[0].low, rel=1e-6)
        assert got["ssr_high"] == pytest.approx(ref[0].high, rel=1e-6)
        assert got["flatness_low"] == pytest.approx(ref[1].low, rel=1e-6)
        assert got["flatness_high"] == pytest.approx(ref[1].high, rel=1e-6)
        assert got["ssr_low"] <= got["spread_skill_ratio"] <= got["ssr_high"]


def test_a_gaussian_with_the_truths_spread_is_calibrated() -> None:
    rng = np.random.default_rng(1)
    coords = {
        "init_time": INITS,
        "level": [850.0],
        "latitude": np.linspace(-80, 80, 9),
        "longitude": np.arange(12.0),
    }
    mu = xr.DataArray(rng.normal(size=(N, 1, 9, 12)), dims=list(coords), coords=coords)
    sigma = xr.full_like(mu, 2.0)
    y = mu + sigma * rng.standard_normal(mu.shape)
    out = calibration_columns({"g": (mu, sigma)}, y, xr.ones_like(y.latitude), [850.0], bins=11)["g", 850.0]
    assert out["spread_skill_ratio"] == pytest.approx(1.0, abs=0.05)
    assert out["ssr_low"] < out["spread_skill_ratio"] < out["ssr_high"]
    assert out["flatness"] < 0.15  # the sampling noise of 1728 points in 11 bins: about 0.06


def test_skill_against_local_emos() -> None:
    rng = np.random.default_rng(2)
    dims = ("init_time", "level", "latitude")
    coords = {"init_time": INITS, "level": [500.0, 850.0], "latitude": [10.0, 20.0]}
    emos = xr.DataArray(1 + rng.random((N, 2, 2)), dims=dims, coords=coords)
    net = emos * 0.9 + 0.05 * rng.random((N, 2, 2))
    w = xr.DataArray([1.0, 1.0], dims="latitude", coords={"latitude": [10.0, 20.0]})
    out = emos_intervals({LOCAL_EMOS: emos, "net": net}, w, [500.0, 850.0], np.timedelta64(24, "h"))
    assert np.isnan(out[LOCAL_EMOS, 500.0]["emos_skill_low"]) and np.isnan(
        out[LOCAL_EMOS, 850.0]["emos_skill_high"]
    )
    t = skill_test(
        net.sel(level=850.0).mean("latitude").values, emos.sel(level=850.0).mean("latitude").values, 1
    )
    assert out["net", 850.0] == {"emos_skill_low": t.low, "emos_skill_high": t.high}
    assert emos_intervals({"net": net}, w, [500.0], np.timedelta64(24, "h")) == {}

    table = pd.DataFrame(
        {
            "model": [LOCAL_EMOS, "net", LOCAL_EMOS, "net", "spread model"],
            "variable": ["z", "z", "t", "t", "z"],
            "level_hPa": [500.0] * 5,
            "lead_h": [24] * 5,
            "crps": [2.0, 1.5, 4.0, 5.0, np.nan],
        }
    )
    skill = add_emos_skill(table)["skill_vs_local_emos"].tolist()
    assert skill[:4] == [0.0, 0.25, 0.0, -0.25] and np.isnan(skill[4])


def test_best_network_has_the_highest_skill_over_local_emos() -> None:
    summary = pd.DataFrame(
        {
            "model": ["a (Gaussian)", "b (Gaussian)", LOCAL_EMOS, "c (Gaussian)"],
            "mean_skill_vs_local_emos": [-0.1, 0.05, 0.0, np.nan],
        }
    )
    assert best_network(summary, ["a (Gaussian)", "b (Gaussian)", "c (Gaussian)"]) == "b (Gaussian)"
    assert best_network(summary, ["c (Gaussian)"]) is None
    assert best_network(summary.drop(columns="mean_skill_vs_local_emos"), ["a (Gaussian)"]) is None
