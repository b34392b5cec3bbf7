"""Collectives over the spatial group: differentiable sums, shape checks, gradients, assembly.

Gradient convention: every spatial rank calls ``backward`` on its own copy of the (replicated)
global loss. :func:`global_sum` therefore sends back only the local share of the gradient, while
sums *inside* the network (normalisation statistics) use :class:`AllReduceSum`, whose backward is
again an all-reduce. Weight gradients then hold each rank's share; :func:`reduce_gradients` sums
them over the spatial ranks of a replica and averages over replicas.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.distributed as dist
from torch import nn

from ensml.errors import EnsmlError
from ensml.models.spatial.grid import LAT, LON, ProcessGrid


def _all_reduce(t: torch.Tensor, group) -> torch.Tensor:
    t = t.contiguous().clone()
    dist.all_reduce(t, group=group)
    return t


class AllReduceSum(torch.autograd.Function):
    """Sum over the spatial group; backward sums the gradients (each rank used the sum)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        ctx.group = group
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return _all_reduce(g, ctx.group), None


class _ReplicatedSum(torch.autograd.Function):
    """Sum over the spatial group for a replicated loss: backward passes the local share only."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, group) -> torch.Tensor:
        return _all_reduce(x, group)

    @staticmethod
    def backward(ctx, g: torch.Tensor):
        return g, None


def spatial_all_reduce(x: torch.Tensor, grid: ProcessGrid) -> torch.Tensor:
    """Differentiable sum of ``x`` over the spatial group (identity on one spatial rank)."""
    return x if grid.n_spatial == 1 else AllReduceSum.apply(x, grid.spatial_group)


def global_sum(x: torch.Tensor, grid: ProcessGrid) -> torch.Tensor:
    """Sum of the local shards of ``x`` over the whole spatial domain (same value on all ranks).

    Call ``backward`` on the result on every spatial rank; each gets its local share of the
    gradient (see the module docstring).
    """
    s = x.sum()
    return s if grid.n_spatial == 1 else _ReplicatedSum.apply(s, grid.spatial_group)


def global_mean(x: torch.Tensor, grid: ProcessGrid) -> torch.Tensor:
    """Mean of ``x`` over the global domain of all spatial shards (a loss reduction)."""
    n = torch.tensor(float(x.numel()), dtype=torch.float64, device=x.device)
    if grid.n_spatial > 1:
        dist.all_reduce(n, group=grid.spatial_group)
    return global_sum(x, grid) / n.to(x.dtype)


def gather_shapes(x: torch.Tensor, grid: ProcessGrid, world: bool = False) -> list[tuple[int, ...]]:
    """Local shapes of all ranks of the spatial group (or of the world), in rank order."""
    group = None if world else grid.spatial_group
    n = grid.world_size if world else grid.n_spatial
    if n == 1:
        return [tuple(x.shape)]
    mine = torch.tensor([x.dim(), *x.shape, *[0] * (8 - x.dim())], dtype=torch.int64, device=x.device)
    out = [torch.empty_like(mine) for _ in range(n)]
    dist.all_gather(out, mine, group=group)
    return [tuple(int(v) for v in t[1 : 1 + int(t[0])]) for t in out]


Checker = Callable[[list[tuple[int, ...]]], str | None]


def check_shards(x: torch.Tensor, grid: ProcessGrid, what: str, check: Checker | None = None) -> None:
    """Validate the shards of all spatial ranks together, raising the same error on every rank.

    Shapes are gathered first (one small collective), then each rank evaluates the same checks
    on all shapes, so a bad split fails everywhere before any halo exchange could hang.
    ``check`` gets the shapes in spatial-rank order and returns an error message or None.
    """
    if grid.trusted or grid.n_spatial == 1:
        return
    shapes = gather_shapes(x, grid)
    msg = consistency_error(shapes, grid) or (check(shapes) if check else None)
    if msg:
        raise EnsmlError(f"{what}: {msg} (process grid lat={grid.n_lat} × lon={grid.n_lon})")


def consistency_error(shapes: Sequence[tuple[int, ...]], grid: ProcessGrid) -> str | None:
    """Shards must agree on all but lat/lon, on lat along a grid row and on lon along a column."""
    if any(len(s) != 5 for s in shapes):
        return f"expected 5-d (batch, channel, level, lat, lon) shards, got shapes {list(shapes)}"
    if len({s[:3] for s in shapes}) > 1:
        return f"shards differ in batch/channel/level: {sorted({s[:3] for s in shapes})}"
    for r, s in enumerate(shapes):
        i, j = divmod(r, grid.n_lon)
        if s[LAT] != shapes[i * grid.n_lon][LAT] or s[LON] != shapes[j][LON]:
            return f"shard sizes do not form a grid: {[s[3:] for s in shapes]}"
    return None


def split_sizes(shapes: Sequence[tuple[int, ...]], grid: ProcessGrid) -> tuple[list[int], list[int]]:
    """Latitude sizes of the grid rows and longitude sizes of the grid columns."""
    lat = [shapes[i * grid.n_lon][LAT] for i in range(grid.n_lat)]
    lon = [shapes[j][LON] for j in range(grid.n_lon)]
    return lat, lon


def gather_field(x: torch.Tensor, grid: ProcessGrid) -> torch.Tensor:
    """Assemble the full field from the shards of the spatial group (on every rank; no autograd)."""
    if grid.n_spatial == 1:
        return x.detach().clone()
    shapes = gather_shapes(x, grid)
    lat, lon = split_sizes(shapes, grid)
    hmax, wmax = max(lat), max(lon)
    buf = x.new_zeros(*x.shape[:3], hmax, wmax)
    buf[..., : x.shape[LAT], : x.shape[LON]] = x.detach()
    parts = [torch.empty_like(buf) for _ in range(grid.n_spatial)]
    dist.all_gather(parts, buf, group=grid.spatial_group)
    rows = [
        torch.cat([parts[i * grid.n_lon + j][..., : lat[i], : lon[j]] for j in range(grid.n_lon)], LON)
        for i in range(grid.n_lat)
    ]
    return torch.cat(rows, LAT)


def broadcast_parameters(module: nn.Module, grid: ProcessGrid) -> None:
    """Copy rank 0's parameters and buffers to all ranks (all ranks must start identical)."""
    if grid.world_size == 1:
        return
    with torch.no_grad():
        for t in [*module.parameters(), *module.buffers()]:
            dist.broadcast(t.data, src=0)


def reduce_gradients(module: nn.Module, grid: ProcessGrid) -> None:
    """Sum weight gradients over spatial ranks of a replica and average over replicas (in place)."""
    grads = [p.grad for p in module.parameters() if p.grad is not None]
    if grid.world_size == 1 or not grads:
        return
    flat = torch.cat([g.reshape(-1) for g in grads])
    dist.all_reduce(flat)
    flat /= grid.n_data
    offset = 0
    for g in grads:
        g.copy_(flat[offset : offset + g.numel()].view_as(g))
        offset += g.numel()
