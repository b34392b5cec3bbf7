"""``evaluate --multivariate``: the whole-field scores against scoringrules and hand computations,
and their power to tell a calibrated ensemble with the truth's spatial structure from one with the
right margins and the wrong structure."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import scoringrules as sr
import xarray as xr

from ensml.cli.main import main
from ensml.errors import EnsmlError
from ensml.names import INIT_TIME, LATITUDE, LONGITUDE, MEMBER
from ensml.scores.spectra import zonal_power_spectrum
from ensml.verify.multivariate import MultivariateScores, field_scores, shown_table

N_LAT, N_LON, N_INIT, M = 8, 16, 60, 9


def _grid() -> dict[str, np.ndarray]:
    return {
        LATITUDE: np.linspace(70.0, -70.0, N_LAT),
        LONGITUDE: np.arange(N_LON) * 360.0 / N_LON,
    }


def _smooth_fields(rng: np.random.Generator, n: int) -> np.ndarray:
    """n fields (n, lat, lon) of unit variance, correlated over about 3 grid points (periodic in
    longitude): white noise smoothed by a Gaussian kernel."""
    white = rng.normal(size=(n, N_LAT + 8, N_LON))
    k = np.exp(-0.5 * (np.arange(-4, 5) / 2.0) ** 2)
    out = sum(k[i] * np.roll(white, i - 4, axis=2) for i in range(9))
    out = sum(k[i] * out[:, i : i + N_LAT] for i in range(9))
    return out / out.std()


def _hook(fair: bool = False) -> MultivariateScores:
    coords = _grid()
    weights = xr.DataArray(
        np.cos(np.deg2rad(coords[LATITUDE])), dims=[LATITUDE], coords={LATITUDE: coords[LATITUDE]}
    )
    forecast = xr.Dataset(coords=coords).expand_dims({MEMBER: 1})
    forecast["x"] = xr.zeros_like(forecast[LATITUDE] * forecast[LONGITUDE])
    inits = np.datetime64("2020-01-01", "ns") + np.arange(N_INIT) * np.timedelta64(1, "D")
    frame = SimpleNamespace(forecast=forecast, weights=weights / weights.mean(), inits=inits)
    return MultivariateScores(frame, subset=None, fair=fair)  # type: ignore[arg-type]


def _as_arrays(members: np.ndarray, truth: np.ndarray) -> tuple[xr.DataArray, xr.DataArray]:
    coords = {INIT_TIME: np.arange(N_INIT), **_grid()}
    y = xr.DataArray(truth, dims=[INIT_TIME, LATITUDE, LONGITUDE], coords=coords)
    x = xr.DataArray(members, dims=[INIT_TIME, MEMBER, LATITUDE, LONGITUDE], coords=coords)
    return x, y


@pytest.fixture(scope="module")
def cases() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    rng = np.random.default_rng(0)
    truth = _smooth_fields(rng, N_INIT)
    structured = _smooth_fields(rng, N_INIT * M).reshape(N_INIT, M, N_LAT, N_LON)
    # the same margins (unit normal at every point), no spatial correlation
    independent = rng.normal(size=(N_INIT, M, N_LAT, N_LON))
    return {"structured": (structured, truth), "independent": (independent, truth)}


def test_the_energy_score_is_scoringrules_on_area_weighted_fields(cases) -> None:
    hook = _hook()
    x, y = _as_arrays(*cases["structured"])
    scored = field_scores(x, y, hook.frame.weights)
    w = np.sqrt(hook.frame.weights.values)[:, None]
    fc = (x.values * w).reshape(N_INIT, M, -1)
    ob = (y.values * w).reshape(N_INIT, -1)
    np.testing.assert_allclose(scored.energy, sr.es_ensemble(ob, fc), rtol=1e-10)
    vs = sr.vs_ensemble(y.values.reshape(N_INIT, -1), x.values.reshape(N_INIT, M, -1), p=0.5)
    np.testing.assert_allclose(scored.variogram, vs, rtol=1e-8)
    fair = field_scores(x, y, hook.frame.weights, fair=True)
    np.testing.assert_allclose(fair.energy, sr.es_ensemble(ob, fc, estimator="fair"), rtol=1e-10)


def test_the_spectra_are_the_members_mean_and_the_truths(cases) -> None:
    x, y = _as_arrays(*cases["structured"])
    scored = field_scores(x, y, _hook().frame.weights)
    np.testing.assert_allclose(scored.truth_spectrum, zonal_power_spectrum(y).values)
    np.testing.assert_allclose(scored.spectrum, zonal_power_spectrum(x).mean(MEMBER).values)


def test_structure_tells_the_ensembles_apart(cases) -> None:
    # both have the truth's margins; only the structured one has its spatial correlation: its
    # energy and variogram scores are lower, its area-mean histogram near flat, its spectrum right
    hook = _hook()
    for name, (members, truth) in cases.items():
        hook.cells[(24, "x", None, name)] = {
            name: field_scores(*_as_arrays(members, truth), hook.frame.weights)
        }
    table = hook.table().set_index("region")
    good, bad = table.loc["structured"], table.loc["independent"]
    assert good["energy"] < bad["energy"] and good["variogram"] < bad["variogram"]
    assert good["area_mean_flatness"] < 2 * good["flatness_if_calibrated"]
    assert bad["area_mean_flatness"] > 3 * bad["flatness_if_calibrated"]
    assert bad["area_mean_low"] > good["area_mean_high"]  # the intervals part
    assert good["spectrum_error"] < 0.25 < bad["spectrum_error"]
    assert np.isfinite(good[["area_mean_low", "spectrum_low"]].astype(float)).all()
    shown = shown_table(hook.table())
    assert shown["area_mean flatness"].str.contains(r"\[").all()


def test_the_skill_is_over_the_first_ensemble_with_its_interval(cases) -> None:
    hook = _hook()
    structured, truth = cases["structured"]
    independent, _ = cases["independent"]
    hook.cells[(24, "x", None, "globe")] = {
        "raw ensemble (9 members)": field_scores(*_as_arrays(independent, truth), hook.frame.weights),
        "generated members (9)": field_scores(*_as_arrays(structured, truth), hook.frame.weights),
    }
    rows = hook.table().set_index("forecast")
    assert rows.loc["raw ensemble (9 members)", "energy_skill"] == 0.0
    gen = rows.loc["generated members (9)"]
    ref = rows.loc["raw ensemble (9 members)"]
    assert gen["energy_skill"] == pytest.approx(1 - gen["energy"] / ref["energy"])
    assert gen["energy_skill_low"] < gen["energy_skill"] < gen["energy_skill_high"]
    # the variogram score sees the missing correlation clearly; the energy score hardly does (its
    # known weakness, Pinson & Tastu 2013): a skill above 0 whose interval still holds 0 here
    assert 0 < gen["variogram_skill_low"] < gen["variogram_skill"] < gen["variogram_skill_high"]
    assert gen["variogram_dm_p"] < 0.01 and gen["energy_skill"] > 0
    hist = hook.histograms()
    counts = hist[(hist["forecast"] == "generated members (9)") & (hist["prerank"] == "area_mean")]
    assert counts["count"].sum() == N_INIT and len(counts) == M + 1


def test_a_projected_grid_is_refused() -> None:
    forecast = xr.Dataset({"x": (("member", "y", "x"), np.zeros((1, 2, 2)))})
    frame = SimpleNamespace(forecast=forecast)
    with pytest.raises(EnsmlError, match="needs a latitude-longitude grid"):
        MultivariateScores(frame, subset=None)  # type: ignore[arg-type]


@pytest.mark.slow
def test_evaluate_writes_the_multivariate_files(tiny_data, tmp_path: Path) -> None:
    out = tmp_path / "ev"
    args = ["evaluate", "--forecast", str(tiny_data["forecast"]), "--analysis", str(tiny_data["analysis"])]
    assert (
        main([*args, "--leads", "48", "--variables", "t", "--multivariate", "true", "--out_dir", str(out)])
        == 0
    )
    table = pd.read_csv(out / "multivariate.csv")
    assert set(table["region"]) == {"globe", "northern extratropics", "tropics", "southern extratropics"}
    assert set(table["forecast"]) == {"raw ensemble (10 members)", "raw subset (5 members)"}
    assert (table["level_hPa"].unique() == [500.0, 850.0]).all()
    assert (out / "rank_histograms_t.png").read_bytes()[:4] == b"\x89PNG"
    assert "| globe |" in (out / "multivariate.md").read_text()
    # the raw ensemble's energy score at 500 hPa over the globe, by hand with scoringrules
    fc = xr.open_dataset(tiny_data["forecast"])["t"].sel(level=500.0, lead_time=np.timedelta64(48, "h"))
    an = xr.open_dataset(tiny_data["analysis"])["t"].sel(level=500.0)
    inits = fc["init_time"].values
    an = an.sel(time=inits + np.timedelta64(48, "h"))
    lat = fc["latitude"].values
    edges = np.deg2rad(np.clip(np.concatenate([[90], (lat[1:] + lat[:-1]) / 2, [-90]]), -90, 90))
    area = np.abs(np.sin(edges[:-1]) - np.sin(edges[1:]))
    w = np.sqrt(area / area.mean())[:, None]
    x = (fc.transpose("init_time", "member", "latitude", "longitude").values * w).reshape(len(inits), 10, -1)
    y = (an.values * w).reshape(len(inits), -1)
    row = table[(table["region"] == "globe") & (table["level_hPa"] == 500.0)].set_index("forecast")
    np.testing.assert_allclose(
        row.loc["raw ensemble (10 members)", "energy"], sr.es_ensemble(y, x).mean(), rtol=1e-5
    )


def test_the_calibrated_flatness_is_what_uniform_ranks_give() -> None:
    # the 'flatness_if_calibrated' column, sqrt(2 (B - 1) / (pi N)), against simulated uniform ranks
    from ensml.scores.calibration import histogram_flatness
    from ensml.verify.multivariate import compare

    rng = np.random.default_rng(5)
    m, n = 10, 183
    simulated = np.mean(
        [histogram_flatness(np.bincount(rng.integers(0, m + 1, n), minlength=m + 1)) for _ in range(4000)]
    )
    ranks = {"area_mean": rng.integers(1, m + 2, n), "band_depth": rng.integers(1, m + 2, n)}
    fs = SimpleNamespace(
        members=m,
        energy=np.ones(n),
        variogram=np.ones(n),
        ranks=ranks,
        spectrum=np.ones((n, 3)),
        truth_spectrum=np.ones((n, 3)),
    )
    row = compare({"x": fs}, h=1)[0]
    assert row["flatness_if_calibrated"] == pytest.approx(simulated, rel=0.05)
