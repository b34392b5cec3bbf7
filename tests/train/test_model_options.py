"""The tasks' model options: location and static inputs, the per-point layer, the two-stage
scheme, the research's spread loss, and the validation scores that early stopping follows."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError
from ensml.scores.gaussian import crps_gaussian
from ensml.train.tasks import MixedTask, SpreadTask
from tests.conftest import TINY_PERIODS


@pytest.fixture(scope="module")
def data(tiny_data: dict[str, Path]) -> tuple[EnsembleDataModule, dict]:
    dm = EnsembleDataModule(
        str(tiny_data["forecast"]), str(tiny_data["analysis"]), batch_size=3, **TINY_PERIODS
    )
    dm.setup("fit")
    return dm, next(iter(dm.val_dataloader()))


@pytest.mark.slow
def test_location_inputs_are_four_channels_of_the_grid(data) -> None:
    dm, batch = data
    plain = MixedTask.from_data(dm, width=4, depth=2)
    task = MixedTask.from_data(dm, width=4, depth=2, location_inputs=True)
    x0, x = plain.features(batch), task.features(batch)
    assert x.shape[1] == x0.shape[1] + 4
    torch.testing.assert_close(x[:, :-4], x0)
    lat = np.deg2rad(dm.coords["latitude"])
    for level in range(2):  # repeated along the level axis
        np.testing.assert_allclose(x[0, -4, level, :, 0].numpy(), np.sin(lat), atol=1e-6)
    assert task.net.encoders[0][0].conv.in_channels == x.shape[1]


def test_local_affine_starts_as_the_model_without_it(data) -> None:
    dm, batch = data
    torch.manual_seed(0)
    plain = MixedTask.from_data(dm, width=4, depth=2)
    torch.manual_seed(0)
    task = MixedTask.from_data(dm, width=4, depth=2, local_affine=True)
    assert task.local.a.shape == (4, 2, 16, 32)  # (μ and log σ) × (z, t), levels, grid
    for a, b in zip(plain(batch), task(batch)):
        torch.testing.assert_close(a, b)
    with torch.no_grad():  # then per point: μ = clim + anom_std · (a + b · standardised μ)
        task.local.a[0, 1, 3, 5] = 0.5
    mu = task(batch)[0]
    shift = (mu - plain(batch)[0])[:, 0, 1]
    assert torch.count_nonzero(shift) == 3  # one point, three samples
    torch.testing.assert_close(shift[:, 3, 5], torch.full((3,), 0.5) * task.anom_std[0, 1])


def test_local_affine_needs_the_grid() -> None:
    with pytest.raises(EnsmlError, match="local_affine needs the grid"):
        MixedTask(local_affine=True)


def test_local_weights_train_at_their_own_rate_without_decay(data) -> None:
    dm, _ = data
    task = MixedTask.from_data(dm, width=4, depth=2, local_affine=True, lr=1e-3, local_lr_factor=10.0)
    opt = task.configure_optimizers()["optimizer"]
    local = opt.param_groups[1]
    assert local["initial_lr"] == pytest.approx(1e-2) and local["weight_decay"] == 0.0
    assert opt.param_groups[0]["initial_lr"] == pytest.approx(1e-3)
    assert {id(p) for p in local["params"]} == {id(task.local.a), id(task.local.b)}


def test_two_stage_mean_learns_from_the_squared_error_alone(data) -> None:
    """Stage 2's CRPS does not reach the mean network: its gradient stops at μ."""
    dm, batch = data
    task = MixedTask.from_data(dm, width=4, depth=2, scheme="two_stage")
    assert task.net.head.conv.out_channels == task.net_sigma.head.conv.out_channels == 2
    mu, sigma = task(batch)
    s = task.scale()
    crps = task.area_mean(crps_gaussian(mu.detach() / s, sigma / s, batch["obs"] / s, check=False))
    mse = task.area_mean(((mu - batch["obs"]) / s) ** 2)
    torch.testing.assert_close(task.loss(batch), mse + crps)
    task.loss(batch).backward()
    grads = [p.grad.clone() for p in task.net.parameters()]
    task.zero_grad()
    mse.backward()
    for g, p in zip(grads, task.net.parameters()):
        torch.testing.assert_close(g, p.grad)  # the mean network saw the MSE only
    assert any(p.grad is None or not p.grad.any() for p in task.net_sigma.parameters())


def test_mixed_quality_is_the_normalised_crps(data) -> None:
    dm, batch = data
    task = MixedTask.from_data(dm, width=4, depth=2, scheme="two_stage")
    mu, sigma = task(batch)
    s = task.scale()
    expected = task.area_mean(crps_gaussian(mu / s, sigma / s, batch["obs"] / s, check=False))
    torch.testing.assert_close(task.quality(batch), expected)


def test_spread_msssim_loss(data) -> None:
    """0.16·L1 + 0.84·(1 − MS-SSIM) of σ̂/s against σ_M/s; a perfect estimate scores 0."""
    dm, batch = data
    task = SpreadTask.from_data(dm, width=4, depth=2, loss="l1_msssim")
    loss = task.loss(batch)
    assert 0 < float(loss) < 1
    task.loss(batch).backward()
    assert all(torch.isfinite(p.grad).all() for p in task.parameters() if p.grad is not None)
    perfect = SpreadTask.from_data(dm, width=4, depth=2, loss="l1_msssim")
    perfect.forward = lambda b: b["std_m"]  # type: ignore[method-assign]
    assert float(perfect.loss(batch)) == pytest.approx(0.0, abs=1e-6)
    torch.testing.assert_close(
        task.quality(batch), task.area_mean(((task(batch) - batch["std_m"]) / task.scale()) ** 2)
    )


@pytest.mark.parametrize(
    ("cls", "option", "message"),
    [
        (MixedTask, {"scheme": "three_stage"}, "MixedTask scheme must be 'joint' or 'two_stage'"),
        (SpreadTask, {"loss": "ssim"}, "SpreadTask loss must be 'mse' or 'l1_msssim'"),
    ],
)
def test_impossible_options(cls, option, message) -> None:
    with pytest.raises(EnsmlError, match=message):
        cls(**option)


def test_static_variables_without_their_fields(data) -> None:
    dm, _ = data
    task = MixedTask(static_variables=["orog"], width=4, depth=2)
    with pytest.raises(
        EnsmlError, match=r"the model takes 1 static field\(s\) \['orog'\], the data gives none"
    ):
        task.set_stats(dm.stats, dm.coords["latitude"], dm.coords["longitude"])
