"""``ensml report`` and the case studies score and draw each predictive distribution in its family.

On the tiny dataset of :mod:`tests.verify.family_inputs` (precipitation as a censored shifted
gamma, wind speed as a truncated normal, 2 m temperature as a normal), with predictions and an
oracle that hold only each family's parameters (no ``tp_mean``/``tp_std``, ``si10_mean``/
``si10_std``): the CRPS of every distribution row equals its family's CRPS computed here by
hand, the labels say the family (the normal's keep ``(Gaussian)``), spread and RMSE are those
of the family's mean and standard deviation, the reliability of precipitation and wind speed is
at evaluate's thresholds from the family's P(Y > t), and surface cases (no ``level``) score
in the family too. On the synthetic data with precipitation and wind, z and t come out as on
the same data without them.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml
from scipy import special, stats
from scipy.stats import norm

from ensml.data.weights import area_weights
from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.report.assemble import report
from ensml.report.scores import scores_by_lead
from ensml.scores.crps import crps_ensemble
from ensml.scores.distributions import get_family
from ensml.scores.gaussian import crps_gaussian_xr
from ensml.scores.twcrps import twcrps_ensemble
from ensml.verify.cases import case_from_dict, load_cases
from ensml.verify.casestudy import score_case
from ensml.verify.events import RELIABILITY_BINS
from ensml.verify.families import family_members, family_moments, gaussian_members, label
from ensml.verify.frame_scores import grid_frame
from ensml.verify.options import Selection, Sources
from ensml.verify.thresholds import PRECIPITATION, WIND_SPEED
from tests.verify.family_inputs import FAMILIES, MEMBERS, VARIABLES, make_inputs
from tests.verify.test_cases import CASE

#: The Gaussian stand-ins of the bounded variables that family_inputs also writes: left out here.
GAUSSIAN_STAND_INS = ["tp_mean", "tp_std", "si10_mean", "si10_std"]
RAW = f"raw ensemble ({MEMBERS} members)"
SOURCES = {"predictions": "post-processed", "oracle": "oracle"}
WET = {
    "name": "wet days",
    "variable": "tp",
    "lead": "24h",
    "region": {"lat": [5, 65], "lon": [0, 350]},  # every point of the grid
    "window": ["2020-02-16", "2020-02-21"],  # every valid date
    "threshold": {"value": 5.0, "tail": "upper"},
}
WINDY = {**WET, "name": "windy days", "variable": "si10", "threshold": {"quantile": 0.9, "tail": "upper"}}


def _without(src: Path, dst: Path, names: list[str]) -> Path:
    with xr.open_dataset(src) as ds:
        ds.load().drop_vars(names).to_netcdf(dst)
    return dst


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """family_inputs, the predictions and oracle with only each family's parameters."""
    root = tmp_path_factory.mktemp("report_families")
    paths = make_inputs(root / "inputs")
    for name in ("predictions", "oracle"):
        paths[name] = _without(paths[name], root / f"{name}_params.nc", GAUSSIAN_STAND_INS)
    return paths


@pytest.fixture(scope="module")
def by_lead(inputs: dict[str, Path]) -> tuple:
    """The report's scores by lead time (table, rank histograms, reliability, threshold events)."""
    sources = Sources(predictions=str(inputs["predictions"]), oracle=str(inputs["oracle"]))
    _, scores = scores_by_lead(grid_frame(str(inputs["forecast"]), str(inputs["analysis"]), sources))
    return scores


@pytest.fixture(scope="module")
def written(inputs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("report_families_out")
    cases = root / "cases.yaml"
    cases.write_text(yaml.safe_dump(WINDY))  # a climatological threshold; WET is scored alone below
    out = root / "report"
    report(
        str(inputs["forecast"]),
        str(inputs["analysis"]),
        predictions=str(inputs["predictions"]),
        oracle=str(inputs["oracle"]),
        cases=str(cases),
        out_dir=str(out),
    )
    return out


def _fields(paths: dict[str, Path], source: str) -> tuple[xr.Dataset, xr.Dataset, np.ndarray]:
    """The source's fields at +24 h, the analysis at their valid times, the area weights (lat, 1)."""
    ds = xr.open_dataset(paths[source]).isel(lead_time=0).load()
    an = xr.open_dataset(paths["analysis"]).load()
    y = an.sel(time=ds["init_time"].values + np.timedelta64(24, "h"))
    weights = area_weights(xr.open_dataset(paths["forecast"]), note=False).values[:, None]
    return ds, y, weights


def _mean(field: np.ndarray, weights: np.ndarray) -> float:
    """The area-weighted mean over init times and points, in float64."""
    w = np.broadcast_to(weights, field.shape)
    return float((np.asarray(field, np.float64) * w).sum() / w.sum())


def _row(table: pd.DataFrame, var: str, forecast: str) -> pd.Series:
    rows = table[(table["variable"] == var) & (table["forecast"] == forecast)]
    assert len(rows) == 1, (var, forecast, table[["variable", "forecast"]])
    return rows.iloc[0]


@pytest.mark.parametrize("source", ["predictions", "oracle"])
@pytest.mark.slow  # report end to end (module fixtures)
def test_scores_by_lead_in_each_family(inputs, by_lead, source: str) -> None:
    table = by_lead[0]
    ds, y, weights = _fields(inputs, source)
    for var, name in zip(VARIABLES, FAMILIES):
        family = get_family(name)
        row = _row(table, var, label(SOURCES[source], family))
        assert row["forecast"].endswith("(Gaussian)" if name == "normal" else f"({name})")
        params = {p: ds[f"{var}_{p}"].values for p in family.params}
        crps = family.crps(params, y[var].values)
        np.testing.assert_allclose(row["crps"], _mean(crps, weights), rtol=1e-6)
        # spread and RMSE: of the family's mean and standard deviation (quadrature for the others)
        if name == "normal":
            mean, std = params["mean"], params["std"]
        else:
            u = np.linspace(-14.0, 14.0, 100)
            tau = special.expit(u)
            w = tau * (1 - tau)
            w[[0, -1]] /= 2
            q = family.quantiles(params, tau, axis=0)
            mean = np.tensordot(w / w.sum(), q, axes=1)
            std = np.sqrt(np.tensordot(w / w.sum(), (q - mean) ** 2, axes=1))
        np.testing.assert_allclose(row["spread"], np.sqrt(_mean(std**2, weights)), rtol=1e-5)
        np.testing.assert_allclose(
            row["rmse"], np.sqrt(_mean((mean - y[var].values) ** 2, weights)), rtol=1e-5
        )
        np.testing.assert_allclose(row["ssr"], row["spread"] / row["rmse"], rtol=1e-12)


@pytest.mark.slow  # report end to end (module fixtures)
def test_normal_rows_are_those_of_the_gaussian(inputs, by_lead) -> None:
    """t2m (normal) is scored as before the families: the closed-form Gaussian CRPS of mean/std."""
    ds, y, _ = _fields(inputs, "predictions")
    ds = ds.drop_vars(["lead_time", "valid_time"], errors="ignore")
    obs = y["t2m"].rename(time="init_time").assign_coords(init_time=ds["init_time"].values)
    weights = area_weights(xr.open_dataset(inputs["forecast"]), note=False)
    before = crps_gaussian_xr(ds["t2m_mean"], ds["t2m_std"], obs, weights=weights)
    row = _row(by_lead[0], "t2m", "post-processed (Gaussian)")
    # evaluate's CRPS: each point's mean over init times first, then the area mean (float32 rounding)
    np.testing.assert_allclose(row["crps"], float(before), rtol=1e-7)


@pytest.mark.slow  # report end to end (module fixtures)
def test_reliability_of_the_bounded_variables_at_evaluates_thresholds(inputs, by_lead) -> None:
    _, _, rel, events = by_lead
    assert {var for _, var, _ in rel} == {"t2m"}  # the climatological event: the unbounded ones
    forecasts = [RAW, "post-processed (csg0)", "oracle (csg0)"]
    for var, thresholds in (("tp", PRECIPITATION.events), ("si10", WIND_SPEED.events)):
        own = events[events["variable"] == var]
        assert sorted(own["threshold"].unique()) == sorted(thresholds)
        names = [n.replace("csg0", "truncnormal") if var == "si10" else n for n in forecasts]
        assert list(dict.fromkeys(own["forecast"])) == names
        counts = own.groupby(["forecast", "threshold"])["count"].sum()
        assert (counts == 6 * 48).all()  # every init and point, in one bin each
    # the bins of P(tp > 1) of the post-processed csg0, by hand
    ds, y, weights = _fields(inputs, "predictions")
    family = get_family("csg0")
    p = family.exceedance({k: ds[f"tp_{k}"].values for k in family.params}, 1.0)
    k = np.minimum(np.floor(p * RELIABILITY_BINS + 1e-9), RELIABILITY_BINS - 1).astype(int)
    rows = events[(events["variable"] == "tp") & (events["threshold"] == 1.0)]
    rows = rows[rows["forecast"] == "post-processed (csg0)"].set_index("bin")
    np.testing.assert_array_equal(rows["count"], np.bincount(k.ravel(), minlength=RELIABILITY_BINS))
    w = np.broadcast_to(weights, p.shape)
    observed = (y["tp"].values > 1.0).astype(float)
    for b in np.flatnonzero(rows["count"].to_numpy()):
        inside = k == b
        np.testing.assert_allclose(
            rows.loc[b, "forecast_probability"], (p * w)[inside].sum() / w[inside].sum()
        )
        np.testing.assert_allclose(
            rows.loc[b, "observed_frequency"], (observed * w)[inside].sum() / w[inside].sum()
        )


@pytest.mark.slow  # report end to end (module fixtures)
def test_report_names_and_draws_the_families(written: Path) -> None:
    md = (written / "report.md").read_text()
    labels = ["post-processed (csg0)", "oracle (truncnormal)", "post-processed (Gaussian)"]
    texts = ["csg0 closed form", "truncnormal closed form", "windy days", "si10 (surface) at +24 h"]
    for text in [*labels, *texts]:
        assert text in md, text
    cases = md[md.index("## Case studies") :]
    assert "| windy days | 6 | oracle (truncnormal) |" in cases
    assert "Gaussian twCRPS" not in md and "Gaussian forecasts (post-processed, oracle)" not in md
    figures = {p.name for p in (written / "figures").iterdir()}
    expected = {f"reliability_tp_gt{t:g}.png" for t in PRECIPITATION.events}
    expected |= {f"reliability_si10_gt{t:g}.png" for t in WIND_SPEED.events}
    assert expected | {"reliability.png", "case_windy_days.png"} <= figures
    for name in figures:
        assert (written / "figures" / name).read_bytes().startswith(b"\x89PNG")
    html = (written / "report.html").read_text()
    assert html.count("data:image/png;base64,") == len(figures)


@pytest.mark.slow  # report end to end (module fixtures)
def test_surface_case_scores_each_family(inputs) -> None:
    wet = case_from_dict(WET)
    assert wet.level is None and "level" not in wet.to_dict()
    assert case_from_dict(wet.to_dict()) == wet
    files = {k: str(inputs[k]) for k in ("forecast", "analysis", "predictions", "oracle")}
    ds, y, weights = _fields(inputs, "predictions")
    result = score_case(wet, **files)
    table = result.table.set_index("forecast")
    assert list(table.index) == [RAW, "raw subset (5 members)", "post-processed (csg0)", "oracle (csg0)"]
    assert table["level_hPa"].isna().all() and result.n_inits == 6
    row = table.loc["post-processed (csg0)"]
    family = get_family("csg0")
    params = {p: ds[f"tp_{p}"].values for p in family.params}
    assert row["estimator"] == "csg0 closed form"
    np.testing.assert_allclose(row["crps"], _mean(family.crps(params, y["tp"].values), weights), rtol=1e-6)
    # twCRPS of the family's 100 quantiles as an ensemble
    q = family.quantiles(params, (np.arange(100) + 0.5) / 100, axis=0).astype(np.float32)
    dims = ("init_time", "latitude", "longitude")
    obs = xr.DataArray(y["tp"].values, dims=dims)
    w = xr.DataArray(weights[:, 0], dims="latitude")
    expected = twcrps_ensemble(xr.DataArray(q, dims=(MEMBER, *dims)), obs, 5.0, weights=w)
    np.testing.assert_allclose(row["twcrps"], float(expected), rtol=1e-6)
    assert result.figure.startswith(b"\x89PNG")


def test_case_level_for_a_variable_with_levels(tiny_data, tmp_path) -> None:
    no_level = {k: v for k, v in CASE.items() if k != "level"}
    with pytest.raises(EnsmlError, match="has pressure levels; give the case's level"):
        score_case(case_from_dict(no_level), tiny_data["forecast"], tiny_data["analysis"])
    bad = tmp_path / "bad.yaml"
    bad.write_text(yaml.safe_dump({**CASE, "level": -5}))
    with pytest.raises(EnsmlError, match="level must be a pressure > 0"):
        load_cases(bad)


def test_family_members_of_the_normal_are_those_of_before() -> None:
    rng = np.random.default_rng(0)
    mu = xr.DataArray(rng.normal(5.5e4, 300.0, (3, 4)).astype(np.float32), dims=("x", "y"))
    sd = xr.DataArray(rng.uniform(0.0, 50.0, (3, 4)).astype(np.float32), dims=("x", "y"))
    mu[0, 0] = np.nan
    z = xr.DataArray(norm.ppf((np.arange(100) + 0.5) / 100), dims=[MEMBER])
    before = (mu + sd * z).transpose(MEMBER, ...).astype(mu.dtype)  # gaussian_members before families
    normal = get_family("normal")
    for now in (gaussian_members(mu, sd), family_members(normal, {"mean": mu, "std": sd})):
        assert now.dtype == np.float32 and now.dims == before.dims
        np.testing.assert_array_equal(now.values, before.values)


def test_family_members_rank_like_an_ensemble() -> None:
    """A csg0's 100 quantiles as an ensemble: its CRPS close to the closed form, 0 below the bound."""
    rng = np.random.default_rng(1)
    family = get_family("csg0")
    params = {
        "shape": xr.DataArray(rng.uniform(0.5, 2.0, 400), dims="x"),
        "scale": xr.DataArray(rng.uniform(1.0, 4.0, 400), dims="x"),
        "shift": xr.DataArray(rng.uniform(0.0, 2.0, 400), dims="x"),
    }
    y = xr.DataArray(np.maximum(rng.gamma(1.0, 3.0, 400) - 1.0, 0.0), dims="x")
    members = family_members(family, params)
    assert members.dims == (MEMBER, "x") and float(members.min()) == 0.0
    exact = float(family.crps(params, y).mean())
    assert float(crps_ensemble(members, y)) == pytest.approx(exact, rel=5e-3)


def test_family_moments_against_closed_forms() -> None:
    rng = np.random.default_rng(2)
    n = 500
    loc, scale = rng.normal(2.0, 5.0, n), rng.uniform(0.5, 5.0, n)
    mean, std = family_moments(get_family("truncnormal"), _arrays(loc=loc, scale=scale))
    m, v = stats.truncnorm.stats(-loc / scale, np.inf, loc=loc, scale=scale, moments="mv")
    np.testing.assert_allclose(mean, m, rtol=1e-4)
    np.testing.assert_allclose(std, np.sqrt(v), rtol=1e-4)
    k, theta, d = rng.uniform(0.3, 3.0, n), rng.uniform(0.5, 6.0, n), rng.uniform(0.0, 3.0, n)
    csg0 = get_family("csg0")
    mean, std = family_moments(csg0, _arrays(shape=k, scale=theta, shift=d))
    exact = csg0.mean({"shape": k, "scale": theta, "shift": d})

    def tail(a: np.ndarray) -> np.ndarray:  # P(X > d) of a gamma of shape a, scale theta
        return special.gammaincc(a, d / theta)

    # E[max(0, X - d)²] = θ²k(k+1) Q(k+2) − 2dθk Q(k+1) + d² Q(k), Q(a) = P(Gamma(a, θ) > d)
    second = theta**2 * k * (k + 1) * tail(k + 2) - 2 * d * theta * k * tail(k + 1) + d**2 * tail(k)
    sd = np.sqrt(second - exact**2)
    wet = csg0.cdf({"shape": k, "scale": theta, "shift": d}, 0.0) < 0.95
    np.testing.assert_allclose(mean, exact, atol=2e-3 * sd.max())
    np.testing.assert_allclose(std[wet], sd[wet], rtol=2e-3)
    normal = get_family("normal")
    mu, sigma = _arrays(mean=loc, std=scale).values()
    assert all(a is b for a, b in zip(family_moments(normal, {"mean": mu, "std": sigma}), (mu, sigma)))


def _arrays(**values: np.ndarray) -> dict[str, xr.DataArray]:
    return {k: xr.DataArray(v, dims="x") for k, v in values.items()}


@pytest.mark.slow
def test_z_and_t_unchanged_beside_precipitation_and_wind(tmp_path) -> None:
    """The synthetic data with precipitation and wind: z and t as on the same data without them."""
    from ensml.data.synth.generate import synth

    grid = {"n_lat": 8, "n_lon": 16, "start": "2017-01-01", "end": "2017-03-31", "every_days": 3, "seed": 1}
    tables = []
    for precip_wind, variables in ((False, ["z", "t"]), (True, ["z", "t", "tp", "si10"])):
        data = synth(tmp_path / str(precip_wind), **grid, precip_wind=precip_wind)
        files = {"forecast": str(data["forecast"]), "analysis": str(data["analysis"])}
        scored = grid_frame(
            **files, sources=Sources(oracle=str(data["oracle"])), selection=Selection(variables, [500.0], k=5)
        )
        tables.append(scores_by_lead(scored)[1])
    (before, _, rel_before, no_events), (now, _, rel_now, events) = tables
    z_t = now[now["variable"].isin(["z", "t"])].reset_index(drop=True)
    pd.testing.assert_frame_equal(z_t, before, check_exact=True)
    assert set(rel_now) == set(rel_before) and no_events.empty
    for key, sources in rel_before.items():
        for name, ds in sources.items():
            xr.testing.assert_identical(rel_now[key][name], ds)
    oracle = now[now["forecast"].str.startswith("oracle")]
    assert set(oracle[oracle["variable"] == "tp"]["forecast"]) == {"oracle (csg0)"}
    assert set(oracle[oracle["variable"] == "si10"]["forecast"]) == {"oracle (truncnormal)"}
    assert set(events["variable"]) == {"tp", "si10"}
