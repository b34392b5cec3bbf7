"""Spatially partitioned layers on ``(batch, channel, level, lat, lon)`` shards.

Each layer takes the local lat/lon shard and returns the local shard of the output that the
single-process layer would give, with the same parameters (same names and shapes). Level is never
split. Halo widths for kernel ``k``, dilation ``d``, stride ``s``, padding ``p`` along one dim:
``lo = p`` and ``hi = d(k − 1) − s − p + 1`` (negative: trim), except on the last shard, whose ``hi``
follows from its own size. Strided layers need every shard but the last to be a multiple of ``s``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ensml.models.spatial.collectives import check_shards, spatial_all_reduce, split_sizes
from ensml.models.spatial.grid import LAT, LON, ProcessGrid
from ensml.models.spatial.halo import halo_exchange


def _fill(x: torch.Tensor, dim: int, width: int, at_start: bool, fill: str | float) -> torch.Tensor:
    if width <= 0:
        return x
    if fill == "replicate":
        edge = x.narrow(dim, 0 if at_start else x.shape[dim] - 1, 1)
        pad = edge.expand(*[width if i == dim else s for i, s in enumerate(x.shape)])
    else:
        pad = x.new_full([width if i == dim else s for i, s in enumerate(x.shape)], float(fill))
    return torch.cat([pad, x] if at_start else [x, pad], dim)


def spatial_pad(
    x: torch.Tensor,
    grid: ProcessGrid,
    dim: int,
    lo: int,
    hi_interior: int,
    hi_edge: int,
    periodic: bool = False,
    fill: str | float = 0.0,
    label: str = "halo",
) -> torch.Tensor:
    """Extend the local shard by ``lo`` cells below and ``hi`` above along ``dim`` (LAT or LON).

    Cells owned by neighbours come by halo exchange; beyond the global domain they wrap
    (``periodic``, which requires ``hi_edge`` to be the same on every shard) or are filled with
    ``fill`` (a number, or ``"replicate"``). ``hi`` is ``hi_edge`` on the last shard and
    ``hi_interior`` elsewhere; a negative ``hi`` trims the shard.
    """
    last = grid.is_last(dim)
    need_hi = hi_edge if last else hi_interior
    if grid.parts(dim) == 1:
        if periodic:
            n = x.shape[dim]
            parts = [x.narrow(dim, n - lo, lo)] if lo > 0 else []
            parts.append(x if need_hi >= 0 else x.narrow(dim, 0, n + need_hi))
            parts += [x.narrow(dim, 0, need_hi)] if need_hi > 0 else []
            return torch.cat(parts, dim) if len(parts) > 1 else parts[0]
    else:
        lo_rank = grid.neighbour(dim, -1, periodic)
        hi_rank = grid.neighbour(dim, +1, periodic)
        lower_needs = hi_edge if grid.is_first(dim) else hi_interior  # what my lower neighbour needs
        x = halo_exchange(x, dim, lo_rank, hi_rank, lower_needs, lo, lo, need_hi, grid.p2p_group, label)
        if lo_rank is not None:
            lo = 0
        if hi_rank is not None and need_hi > 0:
            need_hi = 0
    x = _fill(x, dim, lo, True, fill)
    if need_hi < 0:
        return x.narrow(dim, 0, x.shape[dim] + need_hi)
    return _fill(x, dim, need_hi, False, fill)


def _widths(n: int, k: int, s: int, d: int, p: int) -> tuple[int, int, int]:
    """(lo, hi_interior, hi_edge) for a shard of ``n`` cells (hi_edge: if it is the last shard)."""
    span = d * (k - 1)
    n_out = (n + 2 * p - span - 1) // s + 1
    return p, span - s - p + 1, (n_out - 1) * s - p + span - (n - 1)


def _window_check(grid: ProcessGrid, k, s, d, p, periodic_lon: bool):
    """Shard-size checks for a windowed layer, evaluated identically on every rank."""

    def check(shapes):
        for dim, sizes in zip((LAT, LON), split_sizes(shapes, grid)):
            i = dim - 2
            name = "latitude" if dim == LAT else "longitude"
            for r, n in enumerate(sizes):
                lo, hi_int, hi_edge = _widths(n, k[i], s[i], d[i], p[i])
                if len(sizes) == 1:
                    continue
                if r < len(sizes) - 1 and n % s[i]:
                    return f"{name} shard {r} has {n} cells, not a multiple of the stride {s[i]}"
                need = max(lo, hi_int, hi_edge if (dim == LON and periodic_lon) else 0)
                if n < need:
                    return f"{name} shard {r} has {n} cells, fewer than the halo width {need}"
                if r == len(sizes) - 1 and (n + 2 * p[i] - d[i] * (k[i] - 1) - 1) // s[i] < 0:
                    return f"last {name} shard has {n} cells, too few for a window of {k[i]}"
        return None

    return check


class _Windowed(nn.Module):
    """Shared halo logic of convolution and pooling (kernel/stride/dilation/padding as 3-tuples)."""

    fill: str | float = 0.0

    def _setup(self, grid, kernel, stride, dilation, padding, periodic_lon, label):
        self.grid, self.periodic_lon, self.label = grid, periodic_lon, label
        t3 = lambda v: tuple(v) if isinstance(v, tuple | list) else (v,) * 3  # noqa: E731
        self.k, self.s, self.d, self.p = t3(kernel), t3(stride), t3(dilation), t3(padding)
        if periodic_lon and self.s[2] != 1:
            raise ValueError("periodic longitude needs stride 1 along longitude")

    def _halo(self, x: torch.Tensor) -> torch.Tensor:
        k, s, d, p = self.k, self.s, self.d, self.p
        check = _window_check(self.grid, k, s, d, p, self.periodic_lon)
        check_shards(x, self.grid, type(self).__name__, check)
        for dim in (LAT, LON):
            i = dim - 2
            lo, hi_int, hi_edge = _widths(x.shape[dim], k[i], s[i], d[i], p[i])
            periodic = self.periodic_lon and dim == LON
            x = spatial_pad(x, self.grid, dim, lo, hi_int, hi_edge, periodic, self.fill, self.label)
        return x


class SpatialConv3d(_Windowed):
    """Partitioned ``nn.Conv3d`` sharing the parameters (``weight``, ``bias``) of ``conv``.

    ``padding`` (per dim) defaults to the conv's own zero padding; ``periodic_lon`` wraps
    longitude around the globe (stride 1 only).
    """

    def __init__(self, conv: nn.Conv3d, grid: ProcessGrid, padding=None, periodic_lon=False, label="conv"):
        super().__init__()
        if isinstance(conv.padding, str) or conv.padding_mode != "zeros":
            raise NotImplementedError("SpatialConv3d supports numeric zero padding only")
        self._setup(
            grid, conv.kernel_size, conv.stride, conv.dilation, padding or conv.padding, periodic_lon, label
        )
        self.groups = conv.groups
        self.weight = conv.weight
        self.bias = conv.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._halo(x)
        return F.conv3d(x, self.weight, self.bias, self.s, (self.p[0], 0, 0), self.d, self.groups)


class SpatialSphereConv3d(nn.Module):
    """Partitioned :class:`~ensml.models.layers.SphereConv3d` (same ``conv.weight``/``conv.bias``)."""

    def __init__(self, sphere: nn.Module, grid: ProcessGrid, label: str = "conv") -> None:
        super().__init__()
        p = sphere.pad
        self.conv = SpatialConv3d(sphere.conv, grid, (p, p, p), sphere.periodic_lon, label)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv(x)


class SpatialPool3d(_Windowed):
    """Partitioned ``nn.MaxPool3d`` / ``nn.AvgPool3d`` (−∞ resp. zeros beyond the globe)."""

    def __init__(self, pool: nn.MaxPool3d | nn.AvgPool3d, grid: ProcessGrid, label: str = "pool") -> None:
        super().__init__()
        self.is_max = isinstance(pool, nn.MaxPool3d)
        if pool.ceil_mode or (not self.is_max and (not pool.count_include_pad or pool.divisor_override)):
            raise NotImplementedError("SpatialPool3d: ceil_mode/count_include_pad=False/divisor_override")
        stride = pool.stride if pool.stride is not None else pool.kernel_size
        dilation = pool.dilation if self.is_max else 1
        self._setup(grid, pool.kernel_size, stride, dilation, pool.padding, False, label)
        self.fill = float("-inf") if self.is_max else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self._halo(x)
        pad = (self.p[0], 0, 0)
        if self.is_max:
            return F.max_pool3d(x, self.k, self.s, pad, self.d)
        return F.avg_pool3d(x, self.k, self.s, pad)


class SpatialUpsample(nn.Module):
    """Partitioned ``nn.Upsample`` by integer factors: nearest, or (tri)linear with
    ``align_corners=False`` (one halo cell each side, replicated at the global edges)."""

    def __init__(self, up: nn.Upsample, grid: ProcessGrid, label: str = "upsample") -> None:
        super().__init__()
        f = up.scale_factor
        f = tuple(f) if isinstance(f, tuple | list) else (f,) * 3
        if up.size is not None or any(float(v) != int(v) for v in f):
            raise NotImplementedError("SpatialUpsample needs integer scale factors")
        if up.mode not in ("nearest", "trilinear") or up.align_corners:
            raise NotImplementedError("SpatialUpsample: nearest or trilinear with align_corners=False")
        self.grid, self.mode, self.f, self.label = grid, up.mode, tuple(int(v) for v in f), label

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.mode == "nearest":
            return F.interpolate(x, scale_factor=self.f, mode="nearest")
        check_shards(x, self.grid, "SpatialUpsample")
        for dim in (LAT, LON):
            x = spatial_pad(x, self.grid, dim, 1, 1, 1, False, "replicate", self.label)
        y = F.interpolate(x, scale_factor=self.f, mode="trilinear", align_corners=False)
        fh, fw = self.f[1], self.f[2]
        return y[..., fh : y.shape[LAT] - fh, fw : y.shape[LON] - fw]


class SpatialGroupNorm(nn.Module):
    """``nn.GroupNorm`` with statistics over the global domain (two passes: mean, then the
    sum of squared deviations; no E[x²] − E[x]²). Shares ``weight``/``bias`` with ``norm``."""

    def __init__(self, norm: nn.GroupNorm, grid: ProcessGrid) -> None:
        super().__init__()
        self.grid, self.num_groups, self.eps = grid, norm.num_groups, norm.eps
        self.weight = norm.weight
        self.bias = norm.bias

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, c = x.shape[:2]
        xg = x.reshape(b, self.num_groups, -1)
        count = torch.full((b, self.num_groups), float(xg.shape[-1]), dtype=x.dtype, device=x.device)
        sums = spatial_all_reduce(torch.stack([xg.sum(-1), count]), self.grid)
        mean = sums[0] / sums[1]
        dev = xg - mean[..., None]
        var = spatial_all_reduce((dev * dev).sum(-1), self.grid) / sums[1]
        y = (dev * torch.rsqrt(var + self.eps)[..., None]).view_as(x)
        if self.weight is not None:
            shape = (1, c) + (1,) * (x.dim() - 2)
            y = y * self.weight.view(shape) + self.bias.view(shape)
        return y
