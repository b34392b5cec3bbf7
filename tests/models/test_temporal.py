"""Temporal networks: shapes, gradients, a few-step loss decrease, and the task hook."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ensml.errors import EnsmlError
from ensml.models import ConvGRUUNet, TimeUNet, is_sequence_arch
from ensml.train.tasks import MixedTask, SpreadTask

V, D, H, W = 2, 2, 8, 16
LEADS = [0, 24, 48]


@pytest.fixture(autouse=True)
def one_thread():
    # Tiny tensors: one thread is faster, above all on a shared machine.
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


def make(net_cls, **kw):
    torch.manual_seed(0)
    return net_cls(in_channels=4, out_channels=3, width=4, depth=2, n_levels=D, n_leads=3, **kw)


@pytest.mark.parametrize("net_cls", [ConvGRUUNet, TimeUNet])
@pytest.mark.parametrize("grid", [(8, 16), (7, 13)])
def test_shapes_and_gradients(net_cls, grid) -> None:
    net = make(net_cls)
    x = torch.randn(2, 3, 4, D, *grid, requires_grad=True)
    y = net(x)
    assert y.shape == (2, 3, D, *grid)
    y.square().mean().backward()
    assert torch.isfinite(x.grad).all() and x.grad.abs().sum() > 0
    for name, p in net.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
    # Every input lead influences the output (the sequence is really used).
    for t in range(3):
        assert x.grad[:, t].abs().sum() > 0


def test_convgru_is_periodic_in_longitude() -> None:
    net = make(ConvGRUUNet).eval()
    x = torch.randn(1, 3, 4, D, H, W)
    shifted = net(torch.roll(x, 4, dims=-1))
    torch.testing.assert_close(shifted, torch.roll(net(x), 4, dims=-1), atol=1e-5, rtol=1e-4)


def _batch(b: int = 2, leads: int = 3) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    obs = torch.randn(b, V, D, H, W, generator=g)
    std_k = 0.3 + torch.rand(b, V, leads, D, H, W, generator=g)
    return {
        "mean_k": obs[:, :, None] + 0.5 * torch.randn(b, V, leads, D, H, W, generator=g),
        "std_k": std_k,
        "std_m": 1.5 * std_k[:, :, -1],  # learnable: the subset spread, under-dispersed
        "analysis_init": torch.randn(b, V, D, H, W, generator=g),
        "obs": obs,
    }


def _task(cls, arch: str, leads=LEADS):
    torch.manual_seed(0)
    task = cls(input_leads=leads, target_leads=48, arch=arch, width=4, depth=2, lr=3e-3)
    stats = {
        "clim_mean": np.zeros((V, D, H, W)),
        "anom_std": np.ones((V, D)),
        "spread_scale": np.ones((V, D)),
    }
    task.set_stats(stats, np.linspace(80, -80, H))
    return task


@pytest.mark.parametrize("arch", ["convgru", "unet3d_time"])
@pytest.mark.parametrize("cls", [MixedTask, SpreadTask])
def test_task_feeds_sequence_and_learns(cls, arch) -> None:
    assert is_sequence_arch(arch)
    task = _task(cls, arch)
    batch = _batch()
    feats = task.features(batch)
    per_lead = 3 * V if cls is MixedTask else 2 * V
    assert feats.shape == (2, len(LEADS), per_lead, D, H, W)
    opt = torch.optim.Adam(task.parameters(), lr=1e-2)
    losses = []
    for _ in range(10):
        opt.zero_grad()
        loss = task.loss(batch)
        loss.backward()
        opt.step()
        losses.append(float(loss))
    assert losses[-1] < 0.95 * losses[0]


def test_unet_keeps_leads_as_channels() -> None:
    task = _task(MixedTask, "unet3d")
    assert task.features(_batch()).shape == (2, 2 * V * len(LEADS) + V, D, H, W)


@pytest.mark.parametrize("arch", ["convgru", "unet3d_time"])
def test_temporal_needs_two_leads(arch) -> None:
    with pytest.raises(EnsmlError, match="temporal and needs at least 2 input lead times"):
        MixedTask(input_leads=[48], target_leads=48, arch=arch)
