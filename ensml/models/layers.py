"""Building blocks of the 3D U-Net on a (level, latitude, longitude) grid.

Tensors are ``(batch, channel, level, latitude, longitude)``. Convolutions pad explicitly so that
the boundary conditions of the sphere are visible in one place (and can be swapped for halo
exchanges by the spatial-parallel layers): longitude is periodic on a global grid, latitude and
level are padded with zeros. Pooling and upsampling act on latitude/longitude only, never on level.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn


def pad_sphere(x: torch.Tensor, level: int, lat: int, lon: int, periodic_lon: bool = True) -> torch.Tensor:
    """Pad ``x`` (B, C, D, H, W) by ``level``/``lat``/``lon`` cells on each side.

    Longitude wraps around when ``periodic_lon`` (zeros otherwise); latitude and level get zeros.
    """
    if lon:
        if periodic_lon:
            x = torch.cat([x[..., -lon:], x, x[..., :lon]], dim=-1)
        else:
            x = F.pad(x, (lon, lon))
    if lat or level:
        x = F.pad(x, (0, 0, lat, lat, level, level))
    return x


class SphereConv3d(nn.Module):
    """``nn.Conv3d`` with "same" output size and sphere boundary conditions (odd kernels only)."""

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        periodic_lon: bool = True,
        bias: bool = True,
    ) -> None:
        super().__init__()
        if kernel_size % 2 != 1:
            raise ValueError(f"kernel_size must be odd, got {kernel_size}")
        self.pad = kernel_size // 2
        self.periodic_lon = periodic_lon
        self.conv = nn.Conv3d(in_channels, out_channels, kernel_size, padding=0, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        p = self.pad
        return self.conv(pad_sphere(x, p, p, p, self.periodic_lon))


class ConvBlock(nn.Sequential):
    """Two sphere convolutions, each followed by an optional GroupNorm and a GELU.

    With ``unit_checkpoint`` (set by :func:`ensml.models.memory.apply_policy` for
    ``checkpointing: all``), each convolution and what follows it is recomputed in backward.
    """

    unit_checkpoint = False

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int = 3,
        periodic_lon: bool = True,
        norm_groups: int = 0,
    ) -> None:
        layers: list[nn.Module] = []
        for cin in (in_channels, out_channels):
            layers.append(SphereConv3d(cin, out_channels, kernel_size, periodic_lon))
            if norm_groups:
                layers.append(nn.GroupNorm(norm_groups, out_channels))
            layers.append(nn.GELU())
        super().__init__(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.unit_checkpoint and torch.is_grad_enabled():
            from ensml.models.memory import run_units

            return run_units(self, x)
        return super().forward(x)


class LatLonPool(nn.MaxPool3d):
    """2 × 2 max pooling over latitude/longitude; level is untouched."""

    def __init__(self) -> None:
        super().__init__(kernel_size=(1, 2, 2), stride=(1, 2, 2))


class LatLonUpsample(nn.ConvTranspose3d):
    """Learned 2 × 2 upsampling over latitude/longitude (stride = kernel, so no overlap)."""

    def __init__(self, in_channels: int, out_channels: int) -> None:
        super().__init__(in_channels, out_channels, kernel_size=(1, 2, 2), stride=(1, 2, 2))
