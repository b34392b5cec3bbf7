"""Station models from fit to postprocess: ``ensml fit`` with a station config, the station
model file, and ``ensml postprocess`` of it into station products (netCDF and CSV).

On synthetic stations with a known truth (``synth --stations``). The scores the fit writes are
checked against scoringrules (``crps_ensemble`` of the raw members, ``crps_normal`` of the
model's distribution); the products against the model applied in this process and the normal's
closed-form quantiles (scipy).
"""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import scoringrules as sr
import torch
import xarray as xr
import yaml
from scipy import stats

from ensml import names
from ensml.cli.main import main
from ensml.data.station_frame import build_station_frame
from ensml.data.station_table import station_table
from ensml.data.stations import read_stations, station_set_id
from ensml.data.subset import Subset
from ensml.data.synth.generate import synth
from ensml.errors import EnsmlError
from ensml.train.station_fit import fit_stations
from ensml.train.station_model import read_station_model
from ensml.verify.charts import station_plume
from tests.conftest import CONFIGS

SYNTH = {
    "n_lat": 8,
    "n_lon": 16,
    "start": "2019-01-01",
    "end": "2019-12-31",
    "members": 4,
    "surface": True,
    "stations": 30,
}
DIMS = (names.LEAD_TIME, names.INIT_TIME, names.STATION)
TEST_PERIOD = ["2019-11-01", "2019-12-31"]
#: The flow at 500 hPa as the DRN's further input (its mean and gradient at the station).
PREDICTORS = ["z500"]


def station_config(paths: dict[str, Path], out_dir: Path, **extra: object) -> dict:
    """``configs/stations.yaml`` pointed at the synthetic data: t2m, k = 2, a small DRN."""
    config = yaml.safe_load((CONFIGS / "stations.yaml").read_text())
    config.update(
        forecast=str(paths["forecast"]),
        observations=str(paths["stations"]),
        model_height=str(paths["orography"]),
        variables=["t2m"],
        k=2,
        radius_km=2000,
        predictors=PREDICTORS,
        train_period=["2019-01-01", "2019-10-31"],
        test_period=TEST_PERIOD,
        hidden=[16],
        epochs=40,
        batch_size=256,
        patience=5,
        out_dir=str(out_dir),
    )
    return {**config, **extra}


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("station_fit")
    paths = synth(work / "data", **SYNTH)
    config = work / "stations.yaml"
    config.write_text(yaml.safe_dump(station_config(paths, work / "runs" / "stations")))
    torch.set_num_threads(1)
    assert main(["fit", "--config", str(config)]) == 0
    test_fc = work / "inputs" / "forecast_test.nc"
    test_fc.parent.mkdir()
    with xr.open_dataset(paths["forecast"]) as fc:
        fc.sel({names.INIT_TIME: slice("2019-11-01", "2019-12-31")}).to_netcdf(test_fc)
    return {
        "paths": paths,
        "run": work / "runs" / "stations",
        "config": config,
        "work": work,
        "test_fc": test_fc,
    }


def _test_table(fitted: dict) -> xr.Dataset:
    paths = fitted["paths"]
    frame = build_station_frame(
        str(paths["forecast"]),
        str(paths["stations"]),
        k=2,
        model_height=str(paths["orography"]),
        predictors=PREDICTORS,
    )
    table = station_table(frame, Subset.first(2), radius_km=2000)
    inits = table[names.INIT_TIME].values
    lo, hi = (np.datetime64(d) for d in TEST_PERIOD)
    return table.sel({names.INIT_TIME: inits[(inits >= lo) & (inits <= hi + np.timedelta64(1, "D"))]})


@pytest.mark.slow
def test_fit_writes_the_model_and_scores_checked_by_scoringrules(fitted: dict) -> None:
    run = fitted["run"]
    assert sorted(p.name for p in run.iterdir() if not p.name.startswith(".")) == [
        "scores.csv",
        "station_model.pt",
    ]
    model = read_station_model(run / "station_model.pt")
    assert model.variables == ("t2m",) and model.families == ("normal",) and model.k == 2
    assert model.model_height is not None and model.radius_km == 2000 and model.predictors == ("z500",)
    assert {"z500_mean", "z500_grad_east", "z500_grad_north"} <= set(model.features)
    assert model.stations.sizes[names.STATION] == 30
    test = _test_table(fitted)
    params = model.distribution(test)["t2m"]
    rows = list(csv.DictReader((run / "scores.csv").open()))
    assert [int(r["lead_hours"]) for r in rows] == [24, 48]
    for i, row in enumerate(rows):
        y = test["t2m_obs"].transpose(*DIMS).values[i]
        raw = test["t2m"].transpose(*DIMS, names.MEMBER).values[i]
        mu, sd = (params[k].transpose(*DIMS).values[i] for k in ("mean", "std"))
        ok = np.isfinite(y)
        assert int(row["n"]) == ok.sum()
        np.testing.assert_allclose(float(row["crps_raw"]), sr.crps_ensemble(y[ok], raw[ok]).mean(), rtol=1e-5)
        np.testing.assert_allclose(
            float(row["crps_drn"]), sr.crps_normal(y[ok], mu[ok], sd[ok]).mean(), rtol=1e-5
        )
        # the stations' known height offsets and biases: the DRN learns what the raw members lack
        assert float(row["skill_vs_raw"]) > 0.05


@pytest.mark.slow
def test_the_model_file_gives_back_the_same_distribution(fitted: dict, tmp_path: Path) -> None:
    model = read_station_model(fitted["run"] / "station_model.pt")
    copy = tmp_path / "copy.pt"
    copy.write_bytes(model.to_bytes())
    again = read_station_model(copy)
    test = _test_table(fitted).isel({names.INIT_TIME: slice(0, 5)})
    a, b = model.distribution(test)["t2m"], again.distribution(test)["t2m"]
    for k in ("mean", "std"):
        np.testing.assert_array_equal(a[k].values, b[k].values)
    assert (
        again.station_set == model.station_set == station_set_id(read_stations(fitted["paths"]["stations"]))
    )


@pytest.mark.slow
def test_postprocess_writes_station_products_once(fitted: dict, capsys: pytest.CaptureFixture) -> None:
    out = fitted["work"] / "products"
    model_file = fitted["run"] / "station_model.pt"
    args = ["postprocess", "--checkpoints", f"[{model_file}]", "--forecasts", str(fitted["test_fc"])]
    args += ["--out_dir", str(out), "--cluster", "none"]
    assert main(args) == 0
    ds = xr.load_dataset(out / "forecast_test.nc")
    assert ds.attrs["featureType"] == "timeSeries" and ds.attrs["ensml_task"] == "StationDRN"
    assert ds[names.STATION].attrs["cf_role"] == "timeseries_id"
    assert ds["elevation"].attrs["units"] == "m"
    assert ds.attrs["ensml_station_set"] == station_set_id(ds.drop_vars(list(ds.data_vars)))
    model = read_station_model(model_file)
    assert ds.attrs["ensml_checkpoint_sha256"] == model.sha256
    assert ds["t2m_mean"].dims == (names.INIT_TIME, names.LEAD_TIME, names.STATION)
    # the model applied here, to the station table of the same file
    frame = build_station_frame(
        str(fitted["test_fc"]),
        str(fitted["paths"]["stations"]),
        variables=["t2m"],
        k=2,
        model_height=str(fitted["paths"]["orography"]),
        observed=False,
        predictors=PREDICTORS,
    )
    table = station_table(frame, Subset.first(2), radius_km=2000)
    params = model.distribution(table)["t2m"]
    order = (names.INIT_TIME, names.LEAD_TIME, names.STATION)
    mean, std = (params[k].transpose(*order).values for k in ("mean", "std"))
    np.testing.assert_allclose(ds["t2m_mean"].values, mean, rtol=1e-6)
    np.testing.assert_allclose(ds["t2m_std"].values, std, rtol=1e-6)
    q = ds["quantile"].values
    expected = stats.norm.ppf(q[None, None, :, None], mean[:, :, None, :], std[:, :, None, :])
    np.testing.assert_allclose(ds["t2m_quantile"].values, expected, rtol=1e-5, atol=1e-3)
    # ECC members: as many as the model read (the K that exist), in the raw members' rank order
    assert ds["t2m"].sizes[names.MEMBER] == 2
    raw = table["t2m"].transpose(names.INIT_TIME, names.LEAD_TIME, names.MEMBER, names.STATION).values
    calibrated = ds["t2m"].values
    np.testing.assert_array_equal(np.argsort(raw, axis=2), np.argsort(calibrated, axis=2))
    # exactly once: a second run finds the output current
    capsys.readouterr()
    assert main(args) == 0
    assert "up to date │     1" in capsys.readouterr().out


@pytest.mark.slow
def test_csv_products_hold_the_netcdf_values_at_new_stations(fitted: dict, tmp_path: Path) -> None:
    stations = read_stations(fitted["paths"]["stations"])
    known = stations.isel({names.STATION: 0})
    listed = tmp_path / "places.csv"
    listed.write_text(
        "station,latitude,longitude,elevation\n"
        f"{known.station.item()},{known.latitude.item():.6f},{known.longitude.item():.6f},{known.elevation.item()}\n"
        "AIRPORT,47.45,8.56,432\n"
    )
    model_file = fitted["run"] / "station_model.pt"
    common = ["--checkpoints", f"[{model_file}]", "--forecasts", str(fitted["test_fc"]), "--cluster", "none"]
    common += ["--stations", str(listed)]
    assert main(["postprocess", *common, "--out_dir", str(tmp_path / "nc")]) == 0
    assert main(["postprocess", *common, "--out_dir", str(tmp_path / "csv"), "--format", "csv"]) == 0
    ds = xr.load_dataset(tmp_path / "nc" / "forecast_test.nc")
    assert list(ds[names.STATION].values) == [known.station.item(), "AIRPORT"]
    assert list(ds["embedding"].values) == ["own", "nearest"]  # stated in the products
    rows = list(csv.DictReader((tmp_path / "csv" / "forecast_test.csv").open()))
    assert [r["embedding"] for r in rows[:2]] == ["own", "nearest"]
    assert len(rows) == ds.sizes[names.INIT_TIME] * ds.sizes[names.LEAD_TIME] * 2
    first = rows[1]  # init 0, lead 0, the second station
    assert first["station"] == "AIRPORT" and first["lead_hours"] == "24"
    np.testing.assert_allclose(float(first["t2m_mean"]), ds["t2m_mean"].values[0, 0, 1], rtol=1e-5)
    np.testing.assert_allclose(
        float(first["t2m_quantile_0.5"]), ds["t2m_quantile"].values[0, 0, 3, 1], rtol=1e-5
    )
    np.testing.assert_allclose(float(first["t2m_member_1"]), ds["t2m"].values[0, 0, 1, 1], rtol=1e-5)
    # the new station has the nearest trained station's embedding
    model = read_station_model(model_file)
    nearest = model.nets["t2m"].nearest_trained(np.array([47.45]), np.array([8.56]))[0]
    net = model.nets["t2m"].with_new_stations(np.array([47.45]), np.array([8.56]))
    np.testing.assert_array_equal(
        net.embedding.weight[-1].detach().numpy(),
        model.nets["t2m"].embedding.weight[nearest].detach().numpy(),
    )


@pytest.mark.slow
def test_evaluate_scores_station_products_on_the_same_pairs(fitted: dict, tmp_path: Path) -> None:
    """The products' CRPS (scoringrules' closed form on the file's parameters) beside the raw
    ensemble's on the same station-times, pooled and per station, with intervals and DM tests."""
    out = tmp_path / "products"
    model_file = fitted["run"] / "station_model.pt"
    args = ["postprocess", "--checkpoints", f"[{model_file}]", "--forecasts", str(fitted["test_fc"])]
    assert main([*args, "--out_dir", str(out), "--cluster", "none"]) == 0
    paths = fitted["paths"]
    args = ["evaluate", "--forecast", str(paths["forecast"]), "--observations", str(paths["stations"])]
    args += ["--model_height", str(paths["orography"]), "--predictions", str(out / "forecast_test.nc")]
    args += ["--oracle", str(paths["stations_oracle"])]
    assert main([*args, "--variables", "t2m", "--out_dir", str(tmp_path / "eval")]) == 0
    table = pd.read_csv(tmp_path / "eval" / "scores.csv")
    products = xr.load_dataset(out / "forecast_test.nc")
    obs = xr.load_dataset(paths["stations"])
    oracle = xr.load_dataset(paths["stations_oracle"])
    for lead_h in (24, 48):
        lead = np.timedelta64(lead_h, "h")
        valid = products[names.INIT_TIME].values + lead
        y = obs["t2m"].sel({names.STATION: products[names.STATION].values}).reindex({names.TIME: valid})
        y = y.transpose(names.TIME, names.STATION).values
        at = products.sel({names.LEAD_TIME: lead})
        mu, sd = at["t2m_mean"].values, at["t2m_std"].values
        ok = np.isfinite(y)
        rows = table[table["lead_h"] == lead_h].set_index("forecast")
        drn = rows.loc["station DRN (normal)"]
        np.testing.assert_allclose(drn["crps"], sr.crps_normal(y[ok], mu[ok], sd[ok]).mean(), rtol=1e-5)
        assert drn["n_pairs"] == ok.sum()
        raw = rows.loc["raw ensemble (4 members)"]
        assert raw["n_pairs"] == ok.sum()  # the same station-times
        assert drn["skill_low"] <= drn["skill_vs_raw_ensemble"] <= drn["skill_high"] or np.isnan(
            drn["skill_low"]
        )
        assert 0 <= drn["dm_p"] <= 1
        best = oracle.sel({names.LEAD_TIME: lead, names.STATION: products[names.STATION].values})
        best = best.sel({names.INIT_TIME: products[names.INIT_TIME].values})
        om, osd = best["t2m_mean"].values, best["t2m_std"].values
        oracle_crps = sr.crps_normal(y[ok], om[ok], osd[ok]).mean()
        np.testing.assert_allclose(rows.loc["station oracle (normal)"]["crps"], oracle_crps, rtol=1e-5)
        gap = (raw["crps"] - drn["crps"]) / (raw["crps"] - oracle_crps)
        np.testing.assert_allclose(drn["gap_closed"], gap, rtol=1e-4)
    per_station = pd.read_csv(tmp_path / "eval" / "stations.csv")
    drn_rows = per_station[per_station["forecast"] == "station DRN (normal)"]
    assert set(drn_rows["station"]) <= set(products[names.STATION].values)
    assert (drn_rows["embedding"] == "own").all()  # every station was trained on
    skill_map = tmp_path / "eval" / "figures" / "station_skill_t2m.png"
    assert skill_map.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plume = station_plume(products, obs, str(products[names.STATION].values[0]), "t2m", "24h")
    assert plume[:8] == b"\x89PNG\r\n\x1a\n" and len(plume) > 10_000


@pytest.mark.slow
def test_features_can_be_left_out(fitted: dict, tmp_path: Path) -> None:
    """``drop_features``: the model reads the others (in its order) wherever it is applied."""
    config = station_config(fitted["paths"], tmp_path / "run", drop_features=["doy_sin", "doy_cos"], epochs=2)
    fit = fit_stations(**config)
    assert "doy_sin" not in fit.model.features and "z500_mean" in fit.model.features
    again = read_station_model(tmp_path / "run" / "station_model.pt")
    test = _test_table(fitted).isel({names.INIT_TIME: slice(0, 3)})
    np.testing.assert_array_equal(
        again.distribution(test)["t2m"]["mean"].values, fit.model.distribution(test)["t2m"]["mean"].values
    )
    with pytest.raises(EnsmlError, match="'doy' is no feature of the station table"):
        fit_stations(**{**config, "drop_features": ["doy"], "out_dir": str(tmp_path / "other")})
    assert not (tmp_path / "other").exists()


@pytest.mark.slow
def test_the_quantile_head_through_fit_postprocess_and_evaluate(fitted: dict, tmp_path: Path) -> None:
    """``distribution: {t2m: bqn}``: the DRN's distribution-free head fitted by ``ensml fit``, its
    products' quantiles those of the file's Bernstein coefficients, and evaluate's CRPS equal to
    scoringrules' quantile CRPS on the 100 midpoint levels of the family's integral."""
    from ensml.scores.distributions import family_for

    config = tmp_path / "bqn.yaml"
    extra = {"distribution": {"t2m": "bqn"}, "epochs": 5, "test_period": None}
    config.write_text(yaml.safe_dump(station_config(fitted["paths"], tmp_path / "run", **extra)))
    assert main(["fit", "--config", str(config)]) == 0
    model_file = tmp_path / "run" / "station_model.pt"
    assert read_station_model(model_file).families == ("bqn",)
    args = ["postprocess", "--checkpoints", f"[{model_file}]", "--forecasts", str(fitted["test_fc"])]
    assert main([*args, "--out_dir", str(tmp_path / "products"), "--cluster", "none"]) == 0
    products = xr.load_dataset(tmp_path / "products" / "forecast_test.nc")
    family = family_for("t2m", "bqn")
    alpha = {k: products[f"t2m_{k}"].values for k in family.params}
    assert (np.diff(np.stack(list(alpha.values())), axis=0) >= 0).all()
    q = products["quantile"].values
    expected = family.ppf({k: v[..., None, :] for k, v in alpha.items()}, q[None, None, :, None])
    np.testing.assert_allclose(products["t2m_quantile"].values, expected, rtol=1e-5, atol=1e-3)
    paths = fitted["paths"]
    args = ["evaluate", "--forecast", str(paths["forecast"]), "--observations", str(paths["stations"])]
    args += ["--model_height", str(paths["orography"]), "--predictions", str(tmp_path / "products" / "*.nc")]
    assert main([*args, "--variables", "t2m", "--out_dir", str(tmp_path / "eval")]) == 0
    table = pd.read_csv(tmp_path / "eval" / "scores.csv")
    obs = xr.load_dataset(paths["stations"])
    levels = (np.arange(100) + 0.5) / 100
    for lead_h in (24, 48):
        lead = np.timedelta64(lead_h, "h")
        valid = products[names.INIT_TIME].values + lead
        y = obs["t2m"].sel({names.STATION: products[names.STATION].values}).reindex({names.TIME: valid})
        y = y.transpose(names.TIME, names.STATION).values
        at = {k: products[f"t2m_{k}"].sel({names.LEAD_TIME: lead}).values for k in family.params}
        ok = np.isfinite(y)
        quantiles = family.ppf({k: v[ok][:, None] for k, v in at.items()}, levels[None, :])
        crps = sr.crps_quantile(y[ok], quantiles, levels).mean()
        row = table[(table["lead_h"] == lead_h) & (table["forecast"] == "station DRN (bqn)")]
        assert len(row) == 1 and row["n_pairs"].item() == ok.sum()
        np.testing.assert_allclose(row["crps"].item(), crps, rtol=1e-5)


@pytest.mark.slow
def test_report_at_stations_shows_evaluates_scores_maps_and_a_plume(fitted: dict, tmp_path: Path) -> None:
    """``ensml report --observations``: evaluate's station tables (the same numbers), the charts by
    lead, the skill map by station and one station's plume, in report.md and the HTML."""
    out = tmp_path / "products"
    model_file = fitted["run"] / "station_model.pt"
    args = ["postprocess", "--checkpoints", f"[{model_file}]", "--forecasts", str(fitted["test_fc"])]
    assert main([*args, "--out_dir", str(out), "--cluster", "none"]) == 0
    paths = fitted["paths"]
    common = ["--forecast", str(paths["forecast"]), "--observations", str(paths["stations"])]
    common += ["--model_height", str(paths["orography"]), "--predictions", str(out / "forecast_test.nc")]
    common += ["--oracle", str(paths["stations_oracle"]), "--variables", "t2m"]
    assert main(["evaluate", *common, "--out_dir", str(tmp_path / "eval")]) == 0
    assert main(["report", *common, "--lead", "24", "--out_dir", str(tmp_path / "report")]) == 0
    report = tmp_path / "report"
    pd.testing.assert_frame_equal(
        pd.read_csv(report / "tables" / "scores.csv"), pd.read_csv(tmp_path / "eval" / "scores.csv")
    )
    page = (report / "report.md").read_text()
    assert "## Scores pooled over the stations" in page and "station DRN (normal)" in page
    assert "station oracle (normal)" in page and "gap_closed" in page
    for name in ("crps_by_lead", "crps_skill_by_lead", "station_skill_t2m", "station_plume_t2m"):
        assert (report / "figures" / f"{name}.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n", name
        assert f"figures/{name}.png" in page
    assert "A station's forecast at +24 h" in page
    html = (report / "report.html").read_text()
    assert html.count("data:image/png;base64,") == 4
