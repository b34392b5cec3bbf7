"""MixedTask in every family: parameters in range, the loss is the family's CRPS, it learns,
and ``ensml fit``/``predict`` write each variable's family into the file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch
import xarray as xr

from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError
from ensml.predictions import RunMeta
from ensml.scores.distributions import get_family
from ensml.train.tasks import MixedTask
from tests.conftest import SMOKE, TINY_PERIODS, tiny_data_args


@pytest.fixture(scope="module")
def data(tiny_data):
    dm = EnsembleDataModule(tiny_data["forecast"], tiny_data["analysis"], batch_size=4, **TINY_PERIODS)
    dm.setup("fit")
    return dm, next(iter(dm.train_dataloader()))


def make(dm, distribution, **options):
    torch.manual_seed(0)
    task = MixedTask(width=4, depth=2, distribution=distribution, **options)
    task.set_stats(dm.stats, dm.coords["latitude"])
    return task


# t (about 250 K) is far above 0, so a family bounded at 0 fits it as well as the normal does
FAMILIES = ["truncnormal", "trunclogistic", "cnormal", "clogistic", "csg0", "bqn:4"]


@pytest.mark.parametrize("name", FAMILIES)
def test_parameters_and_loss_are_the_familys(name, data) -> None:
    dm, batch = data
    task = make(dm, {"t": name})
    params = task.distributions(batch)
    assert set(params) == {"z", "t"} and set(params["z"]) == {"mean", "std"}
    family = get_family(name)
    assert tuple(params["t"]) == family.params
    numpy = {k: v.detach().double().numpy() for k, v in params["t"].items()}
    family.check_params(numpy, "the prediction")  # in range: the link keeps them there
    # the loss: each field's CRPS in units of the spread scale, area-weighted
    obs, s, w = batch["obs"], task.scale(), task.lat_weights[:, None]
    crps_t = family.crps(numpy, obs[:, 1::2].double().numpy()) / s[:, 1::2].double().numpy()
    z = params["z"]
    crps_z = (
        get_family("normal").crps(
            {k: v.detach().double().numpy() for k, v in z.items()}, obs[:, 0::2].double().numpy()
        )
        / s[:, 0::2].double().numpy()
    )
    expected = (np.concatenate([crps_z, crps_t], axis=1) * w.double().numpy()).mean()
    np.testing.assert_allclose(task.loss(batch).item(), expected, rtol=1e-5)


@pytest.mark.parametrize("name", ["csg0", "bqn:4", "truncnormal"])
def test_family_loss_decreases_on_one_batch(name, data) -> None:
    dm, batch = data
    task = make(dm, {"t": name, "z": name if name != "csg0" else "normal"})
    opt = torch.optim.Adam(task.parameters(), lr=1e-2)
    losses = []
    for _ in range(25):
        loss = task.loss(batch)
        opt.zero_grad()
        loss.backward()
        assert all(torch.isfinite(p.grad).all() for p in task.parameters() if p.grad is not None)
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses


def test_untrained_bqn_starts_at_the_subset_normal(data) -> None:
    dm, batch = data
    task = make(dm, {"z": "bqn"})
    torch.nn.init.zeros_(task.net.head.conv.weight)
    torch.nn.init.zeros_(task.net.head.conv.bias)
    params = {k: v.detach().double().numpy() for k, v in task.distributions(batch)["z"].items()}
    median = get_family("bqn").quantiles(params, [0.5], axis=0)[0]
    mean_k = task.at_targets(batch["mean_k"])[:, 0::2].double().numpy()
    np.testing.assert_allclose(median, mean_k, rtol=1e-6)


@pytest.mark.parametrize(
    ("distribution", "message"),
    [
        ({"q": "normal"}, r"model.distribution names q, not among the variables \(z, t\)"),
        ({"t": "gamma"}, r"model.distribution.t: unknown distribution 'gamma' \(known: normal, .*bqn\)"),
        ({"t": "bqn:1"}, r"model.distribution.t: bqn degree must be 2 … 30, got 1"),
    ],
)
def test_bad_distribution_is_one_line(distribution, message) -> None:
    with pytest.raises(EnsmlError, match=message):
        MixedTask(width=4, depth=2, distribution=distribution)


def test_two_stage_needs_location_scale_families() -> None:
    with pytest.raises(
        EnsmlError, match=r"two_stage .* needs location-scale families, got z: normal, t: csg0"
    ):
        MixedTask(width=4, depth=2, scheme="two_stage", distribution={"t": "csg0"})


@pytest.mark.slow
def test_fit_and_predict_write_the_families(tiny_data, tmp_path: Path, monkeypatch) -> None:
    from ensml.cli.main import main

    monkeypatch.chdir(tmp_path)
    args = [*tiny_data_args(tiny_data), "--model.init_args.distribution={t: truncnormal, z: bqn:3}"]
    assert main(["fit", "--config", SMOKE, *args, "--trainer.max_epochs=1"]) == 0
    ckpt = "--ckpt_path=runs/smoke/checkpoints/best.ckpt"
    assert main(["predict", "--config", SMOKE, *args, ckpt]) == 0
    with xr.open_dataset(tmp_path / "runs/smoke/predictions.nc") as ds:
        meta = RunMeta.from_attrs(ds.attrs, "predictions.nc")
        assert meta.families == ("bqn:3", "truncnormal")
        assert ds.attrs["ensml_distribution"] == "z:bqn:3 t:truncnormal"
        assert {"z_alpha0", "z_alpha3", "t_loc", "t_scale"} <= set(ds.data_vars)
        assert "truncnormal" in ds["t_scale"].attrs["long_name"] and ds["t_scale"].attrs["units"] == "K"
        assert (np.diff(np.stack([ds[f"z_alpha{j}"].values for j in range(4)]), axis=0) >= 0).all()
        assert (ds["t_scale"] > 0).all()
