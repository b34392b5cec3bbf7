"""The 3D U-Net: shapes, sphere boundary conditions, pooling over lat/lon only, gradients."""

from __future__ import annotations

import pytest
import torch

from ensml.errors import EnsmlError
from ensml.models import build_network
from ensml.models.layers import pad_sphere
from ensml.models.unet3d import UNet3d


@pytest.mark.parametrize("shape", [(2, 3, 2, 16, 32), (1, 3, 1, 13, 30), (1, 3, 3, 19, 36)])
def test_output_keeps_the_grid(shape) -> None:
    torch.manual_seed(0)
    net = UNet3d(3, 2, width=4, depth=2)
    out = net(torch.randn(*shape))
    assert out.shape == (shape[0], 2, *shape[2:])


def test_longitude_is_periodic() -> None:
    torch.manual_seed(0)
    net = UNet3d(2, 1, width=4, depth=2).double()
    x = torch.randn(1, 2, 2, 16, 32, dtype=torch.float64)
    # shifting the input by a multiple of 2**depth in longitude shifts the output alike
    torch.testing.assert_close(net(x.roll(8, dims=-1)), net(x).roll(8, dims=-1))


def test_latitude_is_not_periodic() -> None:
    x = torch.arange(4.0).reshape(1, 1, 1, 4, 1).expand(1, 1, 1, 4, 3)
    padded = pad_sphere(x, level=0, lat=1, lon=1)
    assert padded[0, 0, 0, 0].abs().sum() == 0 and padded[0, 0, 0, -1].abs().sum() == 0  # zeros at poles
    y = torch.arange(3.0).reshape(1, 1, 1, 1, 3)
    assert pad_sphere(y, 0, 0, 1)[0, 0, 0, 0].tolist() == [2.0, 0.0, 1.0, 2.0, 0.0]  # wrap in longitude


def test_levels_are_never_pooled() -> None:
    net = UNet3d(1, 1, width=2, depth=3)
    shapes = []
    net.pool.register_forward_hook(lambda m, i, o: shapes.append(o.shape))
    net(torch.randn(1, 1, 3, 16, 16))
    assert [s[2] for s in shapes] == [3, 3, 3] and [s[-1] for s in shapes] == [8, 4, 2]


def test_every_parameter_gets_a_gradient() -> None:
    net = UNet3d(3, 2, width=4, depth=2, norm_groups=2)
    net(torch.randn(2, 3, 2, 8, 16)).square().mean().backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in net.parameters())


def test_registry() -> None:
    assert isinstance(build_network("unet3d", 3, 1, width=2, depth=1), UNet3d)
    with pytest.raises(EnsmlError, match="unknown model arch 'vit'"):
        build_network("vit", 3, 1)
