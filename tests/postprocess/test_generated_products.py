"""Generated members as products: the members' own statistics by hand, and ``ensml postprocess``
of a generative checkpoint (members for the init, reproducible, in netCDF and zarr alike),
scored by ``ensml evaluate``."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import torch
import xarray as xr

from ensml.cli.main import main
from ensml.data.open import open_forecast
from ensml.data.sample_read import subset_moments
from ensml.data.samples import to_tensors
from ensml.errors import EnsmlError
from ensml.postprocess.generated import GeneratedMembers, init_index, members_to_draw
from ensml.postprocess.options import Products, ThresholdSet
from ensml.postprocess.products import placeholder_params, product_dataset
from ensml.predictions import RunMeta
from ensml.train.checkpoint_file import read_checkpoint
from tests.postprocess.conftest import pp_args

INIT = np.datetime64("2017-11-03T00:00", "ns")
LEADS = (np.timedelta64(48, "h"),)
SHAPE = (1, 1, 2, 3)  # (L, D, H, W)


def _meta(variables=("z", "tp")) -> RunMeta:
    return RunMeta(
        task="GenerativeTask",
        k=5,
        members=range(5),
        ensemble_size=10,
        variables=variables,
        levels=(500.0,),
        leads=LEADS,
        surface=("tp",) if "tp" in variables else (),
    )


def test_the_members_statistics_by_hand() -> None:
    # four members at one point: 0, 0, 1, 3 (tp, bounded at 0)
    x = np.array([0.0, 0.0, 1.0, 3.0], np.float32).reshape(1, 4, 1, 1, 1)
    dist = GeneratedMembers.of(_meta(), "tp", {"members": x}, (1, 10, 1, 1, 1), INIT)
    assert dist.mean().item() == 1.0
    assert dist.std().item() == pytest.approx(np.sqrt((1 + 1 + 0 + 4) / 3))
    assert dist.probability_of_zero().item() == 0.5
    # P(tp > 0.5) = 2/4, P(tp > 3) = 0 (strictly above)
    np.testing.assert_allclose(dist.exceedance(np.array([0.5, 3.0]), axis=1).ravel(), [0.5, 0.0])
    # hazen: the members are the quantiles at (i − ½)/4 = 0.125, 0.375, 0.625, 0.875; 0.5 lies
    # halfway between the 2nd and 3rd: 0.5; below 0.125 the smallest, above 0.875 the largest
    q = dist.quantiles(np.array([0.125, 0.5, 0.875, 0.05, 0.99]), axis=1).ravel()
    np.testing.assert_allclose(q, [0.0, 0.5, 3.0, 0.0, 3.0])


def test_a_variable_without_a_bound_has_no_probability_of_zero() -> None:
    x = np.zeros((1, 3, 1, 1, 1), np.float32)
    assert (
        GeneratedMembers.of(_meta(), "z", {"members": x}, (1, 10, 1, 1, 1), INIT).probability_of_zero()
        is None
    )


def test_members_of_the_wrong_shape_or_not_finite_are_refused_in_one_line() -> None:
    with pytest.raises(EnsmlError, match=r"generated members of z at init 2017-11-03T00:00 have shape"):
        GeneratedMembers.of(_meta(), "z", {"members": np.zeros((1, 3, 1, 2, 2))}, (1, 10, 1, 1, 1), INIT)
    bad = np.full((1, 3, 1, 1, 1), np.nan)
    with pytest.raises(EnsmlError, match="NaN or infinite"):
        GeneratedMembers.of(_meta(), "z", {"members": bad}, (1, 10, 1, 1, 1), INIT)
    with pytest.raises(EnsmlError, match="are missing"):
        GeneratedMembers.of(_meta(), "z", {"mean": bad}, (1, 10, 1, 1, 1), INIT)


def test_members_drawn_and_the_seed_of_an_init() -> None:
    assert members_to_draw(Products(members=None), 10) == 10
    assert members_to_draw(Products(members=0), 10) == 10  # none written, the products made of 10
    assert members_to_draw(Products(members=50), 10) == 50
    assert init_index(INIT) == init_index(INIT) != init_index(INIT + np.timedelta64(1, "D"))


def test_the_generated_members_in_the_raw_rank_order() -> None:
    # ecc_members: at every point the same values as the members, ordered as the raw members are
    rng = np.random.default_rng(1)
    n = 5
    members = [{"members": rng.normal(5e4, 50, (1, 8, *SHAPE[1:])).astype(np.float32)}]
    members.append({"members": np.maximum(rng.normal(0, 1, (1, 8, *SHAPE[1:])), 0).astype(np.float32)})
    raw = rng.normal(0, 1, (2, 1, n, *SHAPE[1:])).astype(np.float32)  # distinct: no ties
    lat, lon = np.array([40.0, 50.0]), np.array([0.0, 5.0, 10.0])
    ds = product_dataset(INIT, _meta(), lat, lon, members, raw, Products(members=n, ecc_members=True), [])
    for i, var in enumerate(("z", "tp")):
        ordered, own = ds[f"{var}_ecc"].values[0], ds[var].values[0]  # (L, N, …)
        np.testing.assert_array_equal(np.sort(ordered, axis=1), np.sort(own, axis=1))
        # member j has the rank of raw member j (tp's dry members tie: their order is random,
        # the others keep the raw ranks; z has no ties)
        if var == "z":
            np.testing.assert_array_equal(ordered.argsort(1).argsort(1), raw[i].argsort(1).argsort(1))
        assert ds[f"{var}_ecc"].attrs["ecc_template"] == f"rank order of the {n} raw members"
    wet = ds["tp_ecc"].values[0] > 0
    assert wet.any() and (~wet).any()


def test_a_later_option_left_alone_keeps_earlier_products_current() -> None:
    # a unit's identity at the defaults is what it was before ecc_members existed, so a folder
    # post-processed then is not made again; set, the option is part of it
    before = {"quantiles", "thresholds", "members", "ecc_spacing"}
    assert set(Products().identity()) == before
    assert Products(ecc_members=True).identity()["ecc_members"] is True


def test_the_product_dataset_of_generated_members() -> None:
    rng = np.random.default_rng(0)
    members = [{"members": rng.normal(5e4, 50, (1, 6, *SHAPE[1:])).astype(np.float32)}]
    members.append({"members": np.maximum(rng.normal(0, 1, (1, 6, *SHAPE[1:])), 0).astype(np.float32)})
    raw = np.zeros((2, 1, 10, *SHAPE[1:]), np.float32)
    lat, lon = np.array([40.0, 50.0]), np.array([0.0, 5.0, 10.0])
    thresholds = [ThresholdSet("tp", "tp", None, (0.5,))]
    ds = product_dataset(
        INIT, _meta(), lat, lon, members, raw, Products(quantiles=[0.5], members=4), thresholds
    )
    assert {"z_mean", "z_std", "z_quantile", "z", "tp", "tp_probability_of_zero", "tp_exceedance"} <= set(ds)
    assert "z_shape" not in ds and "ecc_template" not in ds["z"].attrs and "z_ecc" not in ds
    np.testing.assert_array_equal(ds["z"].values[0, 0], members[0]["members"][0, :4])  # the first 4
    np.testing.assert_allclose(ds["z_mean"].values[0, 0], members[0]["members"][0].mean(0), rtol=1e-6)
    assert ds["tp"].dims == ("init_time", "lead_time", "member", "latitude", "longitude")
    assert ds["member"].attrs["long_name"] == "generated member number"
    assert ds["z"].attrs["long_name"].endswith("generated member")
    structure = product_dataset(
        INIT, _meta(), lat, lon, placeholder_params(_meta(), SHAPE, 4), raw, Products(members=4), []
    )
    assert structure["z"].shape == ds["z"].shape


@pytest.fixture(scope="module")
def generated_run(checkpoints, archive_dir: Path, tiny_data, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("generated")
    extra = ("--products={members: 12, thresholds: {t850: [273.15]}, ecc_members: true}",)
    assert (
        main(
            pp_args(
                [checkpoints["generative48"]],
                archive_dir / "*.nc",
                out,
                *extra,
                analysis=tiny_data["analysis"],
            )
        )
        == 0
    )
    return out


@pytest.mark.slow
def test_postprocess_writes_the_networks_members_for_each_init(
    generated_run: Path, checkpoints, archive_dir: Path, tiny_data
) -> None:
    files = sorted(generated_run.glob("*.nc"))
    assert len(files) == len(list(archive_dir.glob("*.nc")))
    ds = xr.open_mfdataset(files).load()
    assert ds.attrs["ensml_task"] == "GenerativeTask" and "Chen, Janke" in ds.attrs["references"]
    assert ds.sizes["member"] == 12 and {"t_mean", "t_std", "t_quantile", "t850_exceedance"} <= set(ds)
    # the members are the network's own, for this init's noise: draw them again with the task
    task = read_checkpoint(checkpoints["generative48"]).build().eval()
    init = ds["init_time"].values[0]
    fc = open_forecast(str(files[0]).replace(str(generated_run), str(archive_dir)), ["z", "t"])
    block = np.stack(
        [
            fc[v]
            .sel(init_time=init)
            .transpose("lead_time", "member", "level", "latitude", "longitude")
            .values
            for v in ("z", "t")
        ]
    )
    an = xr.open_dataset(tiny_data["analysis"]).sel(time=init)
    item = subset_moments(block, np.arange(5), 5)
    item["analysis_init"] = np.stack([an[v].values for v in ("z", "t")])
    batch = {k: v[None] for k, v in to_tensors(item, 0).items()}
    batch["index"] = torch.tensor([init_index(init)])
    with torch.no_grad():
        members = task.draw(batch, 12)[0].numpy()  # (N, F, D, H, W)
    np.testing.assert_allclose(ds["t"].values[0, 0], members[:, 1], rtol=1e-6)
    # ecc_members: the same values at every point, in another order (the raw members')
    np.testing.assert_array_equal(np.sort(ds["t_ecc"].values, axis=2), np.sort(ds["t"].values, axis=2))
    assert not np.array_equal(ds["t_ecc"].values, ds["t"].values)
    # another init draws other noise: the standardised members are not the same
    anomaly = (ds["t"] - ds["t_mean"]) / ds["t_std"]
    assert not np.allclose(anomaly.values[0], anomaly.values[1], atol=1e-2)


@pytest.mark.slow
def test_generated_members_are_reproducible_and_the_same_in_zarr(
    generated_run: Path, checkpoints, archive_dir: Path, tiny_data, tmp_path: Path
) -> None:
    extra = ("--products={members: 12, thresholds: {t850: [273.15]}, ecc_members: true}", "--format=zarr")
    args = pp_args(
        [checkpoints["generative48"]], archive_dir / "*.nc", tmp_path, *extra, analysis=tiny_data["analysis"]
    )
    assert main(args) == 0
    store = xr.open_zarr(tmp_path / "products.zarr")
    nc = xr.open_mfdataset(sorted(generated_run.glob("*.nc")))
    for name in ("t", "t_ecc", "z_quantile", "t850_exceedance"):
        np.testing.assert_array_equal(store[name].values, nc[name].values)


@pytest.mark.slow
def test_evaluate_scores_the_generated_members(generated_run: Path, tiny_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "evaluate",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--members={generated_run / '*.nc'}",
        "--out_dir=eval",
    ]
    assert main(args) == 0
    table = pd.read_csv(tmp_path / "eval/scores.csv")
    assert "generated members (12)" in set(table["forecast"])


@pytest.mark.slow
def test_report_draws_the_generated_members(generated_run: Path, tiny_data, tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    args = [
        "report",
        f"--forecast={tiny_data['forecast']}",
        f"--analysis={tiny_data['analysis']}",
        f"--members={generated_run / '*.nc'}",
        "--out_dir=report",
    ]
    assert main(args) == 0
    page = (tmp_path / "report" / "report.md").read_text()
    # in the global table and in the table by lead, with its spread, RMSE and spread-skill ratio
    rows = [line for line in page.splitlines() if "| generated members (12) |" in line]
    assert len(rows) == 2 * 4, rows  # z, t at 500 and 850 hPa, in both tables
    by_lead = [row.split("|") for row in rows if row.count("|") == 11]
    assert by_lead and all(cell.strip() for row in by_lead for cell in row[5:9])
