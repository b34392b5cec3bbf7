"""The modified 3D U-Net of the ensemble research (Grönquist et al. 2021).

The third convolution axis is pressure level; pooling and upsampling act on latitude and
longitude only. Variables and lead times are stacked as channels by the caller. Unlike the
research code, the globe is not cropped to a multiple of ``2**depth``: inputs are padded
(periodically in longitude, by edge replication in latitude) and the output is cropped back.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

from ensml.models.layers import ConvBlock, LatLonPool, LatLonUpsample, SphereConv3d
from ensml.models.memory import run_segment


class UNet3d(nn.Module):
    """3D U-Net on ``(batch, channel, level, latitude, longitude)`` tensors.

    Parameters
    ----------
    in_channels, out_channels
        Number of input and output channels.
    width
        Channels of the first level; doubled at each pooling level.
    depth
        Number of 2 × 2 lat/lon pooling steps (the research used 5 at 0.5°).
    kernel_size
        Odd convolution kernel size (3 in the research).
    periodic_lon
        Wrap longitude (global grids). Set False for limited-area domains.
    norm_groups
        GroupNorm groups after each convolution (0: none, as in the research).
    """

    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        width: int = 16,
        depth: int = 3,
        kernel_size: int = 3,
        periodic_lon: bool = True,
        norm_groups: int = 0,
    ) -> None:
        super().__init__()
        build_layers(self, in_channels, out_channels, width, depth, kernel_size, periodic_lon, norm_groups)

    def pad_amounts(self, n_lat: int, n_lon: int) -> tuple[int, int]:
        """Cells added (south, east) so that latitude/longitude divide by ``2**depth``."""
        m = 2**self.depth
        return (-n_lat) % m, (-n_lon) % m

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        n_lat, n_lon = x.shape[-2:]
        x = pad_to_multiple(x, self.depth, self.periodic_lon)
        return encode_decode(self, x)[..., :n_lat, :n_lon]


def build_layers(
    net: nn.Module,
    in_channels: int,
    out_channels: int,
    width: int,
    depth: int,
    kernel_size: int,
    periodic_lon: bool,
    norm_groups: int,
    beside_encoder: Callable[[int], None] | None = None,
) -> None:
    """Give ``net`` the U-Net's layers: ``encoders``, ``pool``, ``upsamplers``, ``decoders``, ``head``.

    Shared by :class:`UNet3d` and the temporal :class:`~ensml.models.temporal.ConvGRUUNet`;
    ``beside_encoder(width)`` is called after each encoder is built (the GRU of that resolution),
    so that parameters are drawn in the same order as when the two were written out.
    """
    if depth < 0 or width < 1:
        raise ValueError(f"need depth >= 0 and width >= 1, got depth={depth}, width={width}")
    net.depth, net.periodic_lon = depth, periodic_lon
    widths = [width * 2**i for i in range(depth + 1)]
    block = dict(kernel_size=kernel_size, periodic_lon=periodic_lon, norm_groups=norm_groups)
    net.encoders = nn.ModuleList()
    cin = in_channels
    for w in widths:
        net.encoders.append(ConvBlock(cin, w, **block))
        if beside_encoder is not None:
            beside_encoder(w)
        cin = w
    net.pool = LatLonPool()
    net.upsamplers = nn.ModuleList()
    net.decoders = nn.ModuleList()
    for w in reversed(widths[:-1]):
        net.upsamplers.append(LatLonUpsample(2 * w, w))
        net.decoders.append(ConvBlock(2 * w, w, **block))
    net.head = SphereConv3d(widths[0], out_channels, kernel_size=1)


def pad_to_multiple(x: torch.Tensor, depth: int, periodic_lon: bool = True) -> torch.Tensor:
    """Pad the last two dims (latitude, longitude) of ``x`` so they divide by ``2**depth``.

    Longitude is extended periodically (or by edge replication when not periodic), latitude by
    replicating the southernmost row; callers crop the output back to the input's size.
    """
    n_lat, n_lon = x.shape[-2:]
    m = 2**depth
    pad_lat, pad_lon = (-n_lat) % m, (-n_lon) % m
    if pad_lon:
        if periodic_lon:
            reps = -(-pad_lon // n_lon)
            x = torch.cat([x, *([x] * reps)], dim=-1)[..., : n_lon + pad_lon]
        else:
            x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], pad_lon)], dim=-1)
    if pad_lat:
        x = torch.cat([x, x[..., -1:, :].expand(*x.shape[:-2], pad_lat, x.shape[-1])], dim=-2)
    return x


def encode_decode(net: UNet3d, x: torch.Tensor) -> torch.Tensor:
    """The U-Net pass on an input whose latitude/longitude divide by ``2**net.depth``.

    Shared by :class:`UNet3d` and its spatial-parallel twin, whose submodules have the same names.
    Each level down and each level up is one segment of :mod:`ensml.models.memory`, which
    keeps, recomputes or swaps what it saves for backward as the network's policy says.
    """
    skips = []
    for i in range(len(net.encoders)):
        x = run_segment(net, i, down_level, net, i, x)
        skips.append(x)
    y = skips.pop()
    for j in range(len(net.decoders)):
        y = run_segment(net, net.depth - 1 - j, up_level, net, j, y, skips.pop())
    return net.head(y)


def down_level(net: UNet3d, i: int, x: torch.Tensor) -> torch.Tensor:
    """Level ``i`` on the way down: pool the level above's output (unless ``i`` is 0), then its block."""
    return net.encoders[i](net.pool(x) if i else x)


def up_level(net: UNet3d, j: int, y: torch.Tensor, skip: torch.Tensor) -> torch.Tensor:
    """Decoder ``j`` on the way up: upsample ``y``, put the skip connection before it, its block."""
    return net.decoders[j](torch.cat([skip, net.upsamplers[j](y)], dim=1))
