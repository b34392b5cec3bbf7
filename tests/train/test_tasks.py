"""The LightningModules: parametrisation, loss against an independent reference, learning."""

from __future__ import annotations

import numpy as np
import properscoring as ps
import pytest
import torch
import torch.nn.functional as F

from ensml.data.datamodule import EnsembleDataModule
from ensml.errors import EnsmlError
from ensml.train.tasks import MixedTask, SpreadTask, check_compatible, inverse_softplus
from tests.conftest import TINY_PERIODS


@pytest.fixture(scope="module")
def data(tiny_data):
    dm = EnsembleDataModule(tiny_data["forecast"], tiny_data["analysis"], batch_size=4, **TINY_PERIODS)
    dm.setup("fit")
    return dm, next(iter(dm.train_dataloader()))


def make(cls, dm):
    torch.manual_seed(0)
    task = cls(width=4, depth=2)
    task.set_stats(dm.stats, dm.coords["latitude"])
    return task


def test_inverse_softplus() -> None:
    x = torch.tensor([1e-3, 0.5, 3.0, 40.0])
    torch.testing.assert_close(F.softplus(inverse_softplus(x)), x)


@pytest.mark.slow
def test_untrained_spread_model_starts_at_subset_std(data) -> None:
    dm, batch = data
    task = make(SpreadTask, dm)
    torch.nn.init.zeros_(task.net.head.conv.weight)
    torch.nn.init.zeros_(task.net.head.conv.bias)
    torch.testing.assert_close(
        task(batch), batch["std_k"][:, :, 2].clamp_min(1e-4 * task.scale()), rtol=1e-4, atol=1e-6
    )


def test_mixed_loss_is_scaled_gaussian_crps(data) -> None:
    dm, batch = data
    task = make(MixedTask, dm)
    mu, sigma = task(batch)
    assert (sigma > 0).all()
    s = task.scale().expand_as(mu)
    ref = ps.crps_gaussian(
        (batch["obs"] / s).double().numpy(),
        (mu / s).detach().double().numpy(),
        (sigma / s).detach().double().numpy(),
    )
    w = task.lat_weights.double().numpy()[:, None]
    expected = (ref * w).mean()
    np.testing.assert_allclose(task.loss(batch).item(), expected, rtol=1e-5)


@pytest.mark.slow
@pytest.mark.parametrize("cls", [SpreadTask, MixedTask])
def test_loss_decreases_on_one_batch(cls, data) -> None:
    dm, batch = data
    task = make(cls, dm)
    opt = torch.optim.Adam(task.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        loss = task.loss(batch)
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.9 * losses[0], losses


def test_compatibility_check() -> None:
    saved = {"variables": ["z", "t"], "levels": [500, 850], "k": 5}
    check_compatible(saved, {"variables": ["z", "t"], "levels": [500.0, 850.0], "k": 5}, "ckpt")
    with pytest.raises(EnsmlError, match=r"ckpt was trained with k=5 but the data has k=3"):
        check_compatible(saved, {"variables": ["z", "t"], "levels": [500, 850], "k": 3}, "ckpt")
