"""``ensml postprocess`` end to end on the tiny dataset: products, equality with predict, formats."""

from __future__ import annotations

import hashlib
from pathlib import Path
from statistics import NormalDist

import netCDF4
import numpy as np
import pandas as pd
import properscoring as ps
import pytest
import xarray as xr

from ensml.cli.main import main
from ensml.postprocess.ecc import ecc_levels
from tests.conftest import cell_area_weights
from tests.postprocess.conftest import pp_args

H48 = np.timedelta64(48, "h")
THRESHOLDS = "--products.thresholds={t850: [270.0, 280.0], z: [54000.0]}"


@pytest.fixture(scope="module")
def mixed_run(checkpoints, archive_dir: Path, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("pp") / "out"
    args = pp_args(
        [checkpoints["mixed48"]], archive_dir / "*.nc", out, THRESHOLDS, analysis=tiny_data["analysis"]
    )
    assert main(args) == 0
    return out


@pytest.mark.slow
def test_one_output_per_input_with_cf_products(mixed_run: Path, archive_dir: Path, checkpoints) -> None:
    inputs = sorted(archive_dir.glob("*.nc"))
    outputs = sorted(mixed_run.glob("*.nc"))
    assert [p.name for p in outputs] == [p.name for p in inputs]
    assert not list(mixed_run.glob(".*.tmp"))
    with netCDF4.Dataset(outputs[0]) as nc:  # readable without xarray or ensml
        assert nc.Conventions == "CF-1.8"
        assert (
            nc.variables["t_mean"].units == "K" and nc.variables["t_mean"].standard_name == "air_temperature"
        )
        assert nc.variables["z_std"].units == "m2 s-2"
        assert nc.variables["t850_exceedance"].units == "1"
        assert nc.variables["t850_threshold"].units == "K"
        assert nc.variables["member"].standard_name == "realization"
        sha = hashlib.sha256(Path(checkpoints["mixed48"]).read_bytes()).hexdigest()
        assert sha in nc.ensml_checkpoints
        assert nc.ensml_input == str(inputs[0].resolve())
        assert "ensml postprocess" in nc.ensml_command and "ensml postprocess" in nc.history
    ds = xr.open_dataset(outputs[0])
    assert ds["z"].dims == ("init_time", "lead_time", "member", "level", "latitude", "longitude")
    assert ds["z_quantile"].dims == ("init_time", "lead_time", "quantile", "level", "latitude", "longitude")
    assert ds["t850_exceedance"].dims == ("init_time", "lead_time", "t850_threshold", "latitude", "longitude")
    assert ds["z_exceedance"].dims[2:4] == ("z_threshold", "level")
    assert ds.sizes["member"] == 10 and list(ds["lead_time"].values) == [H48]
    np.testing.assert_array_equal(ds["valid_time"].values, ds["init_time"].values[:, None] + H48)


def test_products_follow_the_predictive_gaussian(mixed_run: Path, archive_dir: Path) -> None:
    ds = xr.open_dataset(sorted(mixed_run.glob("*.nc"))[3]).isel(init_time=0, lead_time=0)
    raw = xr.open_dataset(sorted(archive_dir.glob("*.nc"))[3]).isel(init_time=0).sel(lead_time=H48)
    for lev, lat, lon in [(500.0, 3, 5), (850.0, 10, 30)]:
        at = dict(level=lev, latitude=ds.latitude[lat], longitude=ds.longitude[lon])
        mu, sd = float(ds["t_mean"].sel(at)), float(ds["t_std"].sel(at))
        dist = NormalDist(mu, sd)
        q = ds["t_quantile"].sel(at).values
        np.testing.assert_allclose(q, [dist.inv_cdf(p) for p in ds["quantile"].values], rtol=1e-6)
        members = ds["t"].sel(at).values
        np.testing.assert_allclose(np.sort(members), [dist.inv_cdf(p) for p in ecc_levels(10)], rtol=1e-6)
        np.testing.assert_array_equal(np.argsort(members), np.argsort(raw["t"].sel(at).values, kind="stable"))
        if lev == 850.0:
            p = ds["t850_exceedance"].sel(latitude=at["latitude"], longitude=at["longitude"]).values
            np.testing.assert_allclose(p, [1 - dist.cdf(270.0), 1 - dist.cdf(280.0)], atol=1e-6)


@pytest.mark.slow
def test_means_and_stds_equal_ensml_predict(mixed_run: Path, fitted: Path) -> None:
    pred = xr.open_dataset(fitted / "runs/smoke/predictions.nc")
    pp = xr.open_mfdataset(sorted(mixed_run.glob("*.nc"))).sel(lead_time=H48)
    assert np.isin(pred["init_time"].values, pp["init_time"].values).all()
    pp = pp.sel(init_time=pred["init_time"].values)
    for name in ("z_mean", "z_std", "t_mean", "t_std"):
        scale = float(np.abs(pred[name]).max())
        np.testing.assert_allclose(pp[name].values, pred[name].values, rtol=1e-5, atol=1e-6 * scale)


@pytest.mark.slow
def test_evaluate_scores_gaussian_and_members(
    mixed_run: Path, tiny_data, tmp_path: Path, monkeypatch
) -> None:
    monkeypatch.chdir(tmp_path)
    glob = str(mixed_run / "*.nc")
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--predictions={glob}",
        f"--members={glob}",
        "--out_dir=eval",
    ]
    assert main(args) == 0
    table = pd.read_csv(tmp_path / "eval/scores.csv")
    rows = table[(table["variable"] == "t") & (table["level_hPa"] == 850)].set_index("forecast")["crps"]
    # Independent reference: properscoring on the ECC members, cell-area weights by hand.
    pp = xr.open_mfdataset(sorted(mixed_run.glob("*.nc"))).sel(lead_time=H48, level=850.0).load()
    an = xr.open_dataset(tiny_data["analysis"]).sel(level=850.0, time=pp["valid_time"].values)
    x = pp["t"].transpose("init_time", "latitude", "longitude", "member").values.astype(np.float64)
    y = an["t"].values.astype(np.float64)
    w = cell_area_weights(pp["latitude"].values)
    crps = ps.crps_ensemble(y, x).mean(axis=0).mean(axis=1)
    np.testing.assert_allclose(rows["post-processed members (10)"], (crps * w).sum() / w.sum(), rtol=1e-5)
    gauss = ps.crps_gaussian(y, pp["t_mean"].values, pp["t_std"].values).mean(axis=0).mean(axis=1)
    np.testing.assert_allclose(rows["post-processed (Gaussian)"], (gauss * w).sum() / w.sum(), rtol=1e-5)
    # ECC members of 10 cost little against the Gaussian they sample (the bound: 2%)
    ratio = rows["post-processed members (10)"] / rows["post-processed (Gaussian)"]
    assert 1.0 < ratio < 1.02


@pytest.mark.slow
def test_one_checkpoint_per_lead(
    checkpoints, archive_dir: Path, tiny_data, mixed_run: Path, tmp_path: Path
) -> None:
    ckpts = [checkpoints["mixed48"], checkpoints["mixed24"]]
    assert main(pp_args(ckpts, archive_dir / "*.nc", tmp_path, analysis=tiny_data["analysis"])) == 0
    name = sorted(archive_dir.glob("*.nc"))[0].name
    both = xr.open_dataset(tmp_path / name)
    assert list(both["lead_time"].values) == [np.timedelta64(24, "h"), H48]
    only48 = xr.open_dataset(mixed_run / name)
    np.testing.assert_array_equal(both["z_mean"].sel(lead_time=H48), only48["z_mean"].sel(lead_time=H48))
    raw = xr.open_dataset(archive_dir / name)
    for lead in both["lead_time"].values:  # at each lead, the members follow that lead's raw ranks
        a = both["z"].sel(lead_time=lead).isel(init_time=0).values
        b = raw["z"].sel(lead_time=lead).isel(init_time=0).values
        np.testing.assert_array_equal(np.argsort(a, axis=0), np.argsort(b, axis=0, kind="stable"))


@pytest.mark.slow
def test_a_checkpoint_of_several_leads(checkpoints, archive_dir: Path, tiny_data, tmp_path: Path) -> None:
    """One model trained on target leads [24, 48]: both leads in the products, each equal to the
    model's own forward pass; with another checkpoint of 48 h it is refused, one line."""
    import torch

    from ensml.data.samples import EnsembleSamples, SampleSpec
    from ensml.postprocess.models import ModelSet, load_models

    ckpt = checkpoints["mixed2448"]
    assert main(pp_args([ckpt], archive_dir / "*.nc", tmp_path / "pp", analysis=tiny_data["analysis"])) == 0
    path = sorted(archive_dir.glob("*.nc"))[1]
    out = xr.open_dataset(tmp_path / "pp" / path.name).isel(init_time=0)
    assert list(out["lead_time"].values) == [np.timedelta64(24, "h"), H48]
    task = load_models(ModelSet.from_paths([str(ckpt)]))[0]
    spec = SampleSpec(("z", "t"), (500.0, 850.0), (0, 24, 48), (24, 48), 5, 10)
    inits = xr.open_dataset(path)["init_time"].values
    sample = EnsembleSamples(path, tiny_data["analysis"], inits, spec, targets=False)[0]
    with torch.inference_mode():
        mu, sigma = task({k: v[None] for k, v in sample.items()})
    for t, lead in enumerate(out["lead_time"].values):  # fields lead-major: (t, var)
        at = out.sel(lead_time=lead)
        np.testing.assert_allclose(at["z_mean"].values, mu[0, 2 * t].numpy(), rtol=1e-6)
        np.testing.assert_allclose(at["t_std"].values, sigma[0, 2 * t + 1].numpy(), rtol=1e-6)
    both = pp_args([ckpt, checkpoints["mixed48"]], archive_dir / "*.nc", tmp_path / "x")
    assert main(both) == 1
    assert not (tmp_path / "x").exists()


@pytest.mark.slow
def test_spread_checkpoint_recovers_the_full_ensemble(checkpoints, archive_dir: Path, tmp_path: Path) -> None:
    assert (
        main(pp_args([checkpoints["spread48"]], archive_dir / "*.nc", tmp_path, "--products.members=20")) == 0
    )
    name = sorted(archive_dir.glob("*.nc"))[2].name
    ds = xr.open_dataset(tmp_path / name).isel(init_time=0, lead_time=0)
    raw = xr.open_dataset(archive_dir / name).isel(init_time=0).sel(lead_time=H48)
    np.testing.assert_allclose(ds["z_mean"], raw["z"].isel(member=slice(0, 5)).mean("member"), rtol=1e-6)
    assert (ds["z_std"] > 0).all() and "estimated 10-member spread" in ds["z_std"].attrs["long_name"]
    assert ds.sizes["member"] == 20
    np.testing.assert_allclose(ds["z"].std("member"), ds["z_std"], rtol=0.1)


@pytest.mark.slow
def test_a_temporal_network_matches_its_own_task(
    checkpoints, archive_dir: Path, tiny_data, tmp_path: Path
) -> None:
    """Any architecture: the products of a temporal U-Net equal its task's forward pass."""
    import torch

    from ensml.data.samples import EnsembleSamples, SampleSpec
    from ensml.postprocess.models import ModelSet, load_models

    ckpt = checkpoints["temporal48"]
    assert main(pp_args([ckpt], archive_dir / "*.nc", tmp_path, analysis=tiny_data["analysis"])) == 0
    path = sorted(archive_dir.glob("*.nc"))[1]
    task = load_models(ModelSet.from_paths([str(ckpt)]))[0]
    assert task.hparams.arch == "unet3d_time"
    spec = SampleSpec(("z", "t"), (500.0, 850.0), (0, 24, 48), 48, 5, 10)
    inits = xr.open_dataset(path)["init_time"].values
    sample = EnsembleSamples(path, tiny_data["analysis"], inits, spec, targets=False)[0]
    with torch.inference_mode():
        mu, sigma = task({k: v[None] for k, v in sample.items()})
    out = xr.open_dataset(tmp_path / path.name).isel(init_time=0, lead_time=0)
    np.testing.assert_allclose(out["t_mean"].values, mu[0, 1].numpy(), rtol=1e-6)
    np.testing.assert_allclose(out["z_std"].values, sigma[0, 0].numpy(), rtol=1e-6)


@pytest.mark.slow
def test_model_without_analysis_runs_on_forecasts_alone(
    checkpoints, archive_dir: Path, tmp_path: Path
) -> None:
    assert main(pp_args([checkpoints["noanalysis48"]], archive_dir / "*.nc", tmp_path / "a")) == 0
    assert len(list((tmp_path / "a").glob("*.nc"))) == len(list(archive_dir.glob("*.nc")))


@pytest.mark.slow
def test_zarr_store_holds_the_same_products(
    mixed_run: Path, checkpoints, archive_dir: Path, tiny_data, tmp_path
) -> None:
    args = pp_args(
        [checkpoints["mixed48"]],
        archive_dir / "*.nc",
        tmp_path,
        THRESHOLDS,
        "--format=zarr",
        analysis=tiny_data["analysis"],
    )
    assert main(args) == 0
    store = xr.open_zarr(tmp_path / "products.zarr")
    nc = xr.open_mfdataset(sorted(mixed_run.glob("*.nc")))
    np.testing.assert_array_equal(store["init_time"].values, nc["init_time"].values)
    for name in ("z_mean", "t_std", "t", "z_quantile", "t850_exceedance"):
        np.testing.assert_array_equal(store[name].values, nc[name].values)
    assert store.attrs["Conventions"] == "CF-1.8" and store["t"].attrs["units"] == "K"
    first = pd.read_json(tmp_path / "manifest.jsonl", lines=True)
    assert len(first) == nc.sizes["init_time"] and (first["status"] == "done").all()
    assert main(args) == 0  # a rerun finds every region current and rewrites none
    again = pd.read_json(tmp_path / "manifest.jsonl", lines=True)
    assert (again["finished"] == first["finished"]).all()
