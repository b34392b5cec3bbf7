"""Converting single-process networks into spatially partitioned ones with the same parameters.

:func:`parallelize` swaps layers for their partitioned versions in a copy of any module;
:class:`SpatialUNet3d` does that for :class:`~ensml.models.unet3d.UNet3d` and adds what its
``forward`` does globally: padding lat/lon to a multiple of ``2**depth`` (periodic in longitude,
edge-replicated at the south end), one collective shape check up front, and the final crop.
A ``state_dict`` of one loads into the other.
"""

from __future__ import annotations

import copy

import torch
from torch import nn

from ensml.errors import EnsmlError
from ensml.models.layers import SphereConv3d
from ensml.models.spatial.collectives import consistency_error, gather_shapes, split_sizes
from ensml.models.spatial.grid import LAT, LON, ProcessGrid, shard_sizes, shard_slice
from ensml.models.spatial.halo import halo_exchange
from ensml.models.spatial.layers import (
    SpatialConv3d,
    SpatialGroupNorm,
    SpatialPool3d,
    SpatialSphereConv3d,
    SpatialUpsample,
)
from ensml.models.unet3d import UNet3d, encode_decode


def _convert(m: nn.Module, grid: ProcessGrid, name: str) -> nn.Module | None:
    if isinstance(m, SphereConv3d):
        return SpatialSphereConv3d(m, grid, label=name)
    if isinstance(m, nn.Conv3d):
        return SpatialConv3d(m, grid, label=name)
    if isinstance(m, nn.GroupNorm):
        return SpatialGroupNorm(m, grid)
    if isinstance(m, nn.MaxPool3d | nn.AvgPool3d):
        return SpatialPool3d(m, grid, label=name)
    if isinstance(m, nn.Upsample):
        return SpatialUpsample(m, grid, label=name)
    if isinstance(m, nn.ConvTranspose3d):
        local = tuple(m.kernel_size[1:]) == tuple(m.stride[1:]) and not any(m.padding[1:])
        if not local or any(m.output_padding[1:]) or any(d != 1 for d in m.dilation[1:]):
            raise NotImplementedError(f"{name}: only non-overlapping transposed convs (kernel = stride)")
        return m  # each output cell depends on one input cell: no halo
    if isinstance(
        m, nn.BatchNorm1d | nn.BatchNorm2d | nn.BatchNorm3d | nn.SyncBatchNorm | nn.Conv1d | nn.Conv2d
    ):
        raise NotImplementedError(f"{name}: {type(m).__name__} has no spatial-parallel version")
    return None


def parallelize(module: nn.Module, grid: ProcessGrid) -> nn.Module:
    """A copy of ``module`` with its layers replaced by partitioned ones (same ``state_dict``).

    Elementwise layers and channel concatenation work on shards as they are; the caller handles
    anything the module's own ``forward`` does globally (padding, cropping, loss reduction).
    """
    module = copy.deepcopy(module)

    def visit(m: nn.Module, prefix: str) -> None:
        for name, child in list(m.named_children()):
            path = f"{prefix}{name}"
            new = _convert(child, grid, path)
            if new is None:
                visit(child, path + ".")
            elif new is not child:
                setattr(m, name, new)

    new = _convert(module, grid, "")
    if new is not None:
        return new
    visit(module, "")
    return module


def unet_shard_sizes(n_lat: int, n_lon: int, depth: int, grid: ProcessGrid) -> tuple[list[int], list[int]]:
    """Default latitude/longitude shard sizes of an unpadded ``n_lat × n_lon`` field for a U-Net
    of ``depth`` pooling levels: each padded shard is a multiple of ``2**depth``."""
    m = 2**depth
    return (
        shard_sizes(n_lat, grid.n_lat, m, (-n_lat) % m),
        shard_sizes(n_lon, grid.n_lon, m, (-n_lon) % m),
    )


def local_slices(n_lat: int, n_lon: int, depth: int, grid: ProcessGrid) -> tuple[slice, slice]:
    """(latitude, longitude) slices of this rank's slab of the unpadded field (for reading I/O)."""
    lat, lon = unet_shard_sizes(n_lat, n_lon, depth, grid)
    return shard_slice(lat, grid.lat_index), shard_slice(lon, grid.lon_index)


class SpatialUNet3d(nn.Module):
    """:class:`UNet3d` on lat/lon shards; input and output are this rank's unpadded slab.

    Use :func:`local_slices` (or :func:`unet_shard_sizes`) for the split; any split whose padded
    shards are multiples of ``2**depth`` works. Parameters are copied from ``unet``.
    """

    def __init__(self, unet: UNet3d, grid: ProcessGrid) -> None:
        super().__init__()
        net = parallelize(unet, grid)
        self.grid, self.depth, self.periodic_lon = grid, unet.depth, unet.periodic_lon
        self.encoders, self.pool = net.encoders, net.pool
        self.upsamplers, self.decoders, self.head = net.upsamplers, net.decoders, net.head
        first = self.encoders[0][0].conv
        self.in_channels, self.halo = first.weight.shape[1], first.k[1] // 2

    pad_amounts = UNet3d.pad_amounts

    def _layout_error(self, shapes: list[tuple[int, ...]]) -> str | None:
        grid, m = self.grid, 2**self.depth
        msg = consistency_error(shapes, grid)
        if msg:
            return msg
        if shapes[0][1] != self.in_channels:
            return f"input has {shapes[0][1]} channels, the model expects {self.in_channels}"
        pads = self.pad_amounts(*(sum(s) for s in split_sizes(shapes, grid)))
        for name, sizes, pad in zip(("latitude", "longitude"), split_sizes(shapes, grid), pads):
            padded = [*sizes[:-1], sizes[-1] + pad]
            if len(sizes) > 1 and any(n % m or n // m < self.halo for n in padded):
                return (
                    f"{name} shards {sizes} (+{pad} padding on the last) must be multiples of "
                    f"2**depth = {m} with at least {self.halo} cells at the deepest level; "
                    "use ensml.models.spatial.unet_shard_sizes"
                )
        if self.periodic_lon and grid.n_lon > 1 and split_sizes(shapes, grid)[1][0] < pads[1]:
            return "the first longitude shard is narrower than the periodic padding"
        return None

    def _check(self, x: torch.Tensor) -> tuple[int, int]:
        """Validate all replicas' shards together; return the global (n_lat, n_lon)."""
        grid = self.grid
        shapes = gather_shapes(x, grid, world=True)
        errors = []
        for r in range(grid.n_data):
            msg = self._layout_error(shapes[r * grid.n_spatial : (r + 1) * grid.n_spatial])
            if msg:
                errors.append(f"replica {r}: {msg}" if grid.n_data > 1 else msg)
        if errors:
            raise EnsmlError(
                f"spatial-parallel UNet3d: {errors[0]} (grid lat={grid.n_lat} × lon={grid.n_lon})"
            )
        mine = shapes[grid.replica * grid.n_spatial : (grid.replica + 1) * grid.n_spatial]
        return tuple(sum(s) for s in split_sizes(mine, grid))  # type: ignore[return-value]

    def _pad(self, x: torch.Tensor, pad_lat: int, pad_lon: int) -> torch.Tensor:
        grid = self.grid
        if pad_lon and grid.n_lon == 1:
            n = x.shape[LON]
            if self.periodic_lon:
                x = torch.cat([x, *([x] * -(-pad_lon // n))], dim=-1)[..., : n + pad_lon]
            else:
                x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], pad_lon)], dim=-1)
        elif pad_lon and self.periodic_lon:
            # The last shard's padding is the first pad_lon columns of the globe: rank 0's edge.
            first, last = grid.is_first(LON), grid.is_last(LON)
            lo = grid.neighbour(LON, -1, True) if first else None
            hi = grid.neighbour(LON, +1, True) if last else None
            x = halo_exchange(x, LON, lo, hi, pad_lon, 0, 0, pad_lon, grid.p2p_group, "input_pad")
        elif pad_lon and grid.is_last(LON):
            x = torch.cat([x, x[..., -1:].expand(*x.shape[:-1], pad_lon)], dim=-1)
        if pad_lat and grid.is_last(LAT):
            x = torch.cat([x, x[..., -1:, :].expand(*x.shape[:-2], pad_lat, x.shape[-1])], dim=-2)
        return x

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Local slab ``(B, C, level, lat_local, lon_local)`` → local slab of the output."""
        h, w = x.shape[-2:]
        x = self._pad(x, *self.pad_amounts(*self._check(x)))
        with self.grid.shapes_checked():
            return encode_decode(self, x)[..., :h, :w]
