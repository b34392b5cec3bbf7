"""Halo exchange along one split dimension, as an autograd function with an exact adjoint.

Forward: each rank sends its first ``send_lo`` cells to the lower neighbour and its last
``send_hi`` cells to the upper one, and receives ``recv_lo``/``recv_hi`` cells from them, which
are concatenated around the local shard. Backward is the adjoint: the halos' gradients travel back
and are added to the owners' edge cells. Boundary padding of the *global* domain (zeros, −∞,
replicate) is not done here but by the caller, so one function serves all layers.

Message order and tags: with two ranks and a periodic dimension the lower and upper neighbour are
the same rank. Downward messages use tag ``base`` and upward ones ``base + 1`` (gloo matches tags),
and every rank posts send-down, send-up, receive-from-upper, receive-from-lower, so the n-th
message between two ranks is the n-th receive posted for it (NCCL ignores tags, keeps order).
"""

from __future__ import annotations

import time
from collections import defaultdict

import torch
import torch.distributed as dist

# Wall time (s) and bytes spent in halo exchanges per label; filled only while enabled.
HALO_STATS: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
_timing = {"on": False}


def enable_halo_timing(on: bool = True) -> None:
    """Record per-label halo exchange time in :data:`HALO_STATS` (synchronises CUDA when on)."""
    _timing["on"] = on
    HALO_STATS.clear()


def _p2p(
    lo_slab: torch.Tensor | None,
    hi_slab: torch.Tensor | None,
    lo_rank: int | None,
    hi_rank: int | None,
    recv_lo: tuple[int, ...] | None,
    recv_hi: tuple[int, ...] | None,
    like: torch.Tensor,
    group,
    tag: int,
    label: str,
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """Send slabs to the neighbours and receive theirs (None: nothing on that side)."""
    t0 = time.perf_counter() if _timing["on"] else 0.0
    ops, got_lo, got_hi, nbytes = [], None, None, 0
    if lo_slab is not None:
        ops.append(dist.P2POp(dist.isend, lo_slab.contiguous(), lo_rank, group, tag))
        nbytes += lo_slab.numel() * lo_slab.element_size()
    if hi_slab is not None:
        ops.append(dist.P2POp(dist.isend, hi_slab.contiguous(), hi_rank, group, tag + 1))
        nbytes += hi_slab.numel() * hi_slab.element_size()
    if recv_hi is not None:
        got_hi = like.new_empty(recv_hi)
        ops.append(dist.P2POp(dist.irecv, got_hi, hi_rank, group, tag))
    if recv_lo is not None:
        got_lo = like.new_empty(recv_lo)
        ops.append(dist.P2POp(dist.irecv, got_lo, lo_rank, group, tag + 1))
    if ops and like.is_cuda:
        for req in dist.batch_isend_irecv(ops):  # NCCL: one fused group of sends and receives
            req.wait()
    elif ops:  # gloo: plain isend/irecv are about twice as fast as batch_isend_irecv
        for req in [op.op(op.tensor, op.peer, op.group, op.tag) for op in ops]:
            req.wait()
    if _timing["on"]:
        if like.is_cuda:
            torch.cuda.synchronize(like.device)
        stats = HALO_STATS[label]
        stats[0] += time.perf_counter() - t0
        stats[1] += nbytes
    return got_lo, got_hi


def _shape(x: torch.Tensor, dim: int, width: int) -> tuple[int, ...] | None:
    if width <= 0:
        return None
    s = list(x.shape)
    s[dim] = width
    return tuple(s)


class HaloExchange(torch.autograd.Function):
    """``cat([halo_from_lower, x, halo_from_upper], dim)``; see the module docstring."""

    @staticmethod
    def forward(ctx, x, dim, lo_rank, hi_rank, send_lo, send_hi, recv_lo, recv_hi, group, tag, label):
        n = x.shape[dim]
        ctx.args = (dim, lo_rank, hi_rank, send_lo, send_hi, recv_lo, recv_hi, group, tag, label)
        lo, hi = _p2p(
            x.narrow(dim, 0, send_lo) if send_lo > 0 else None,
            x.narrow(dim, n - send_hi, send_hi) if send_hi > 0 else None,
            lo_rank,
            hi_rank,
            _shape(x, dim, recv_lo),
            _shape(x, dim, recv_hi),
            x,
            group,
            tag,
            label,
        )
        return torch.cat([t for t in (lo, x, hi) if t is not None], dim)

    @staticmethod
    def backward(ctx, g):
        dim, lo_rank, hi_rank, send_lo, send_hi, recv_lo, recv_hi, group, tag, label = ctx.args
        n = g.shape[dim] - recv_lo - recv_hi
        gx = g.narrow(dim, recv_lo, n).clone()
        # The adjoint: halo gradients go back where the halos came from (the roles swap).
        back_lo, back_hi = _p2p(
            g.narrow(dim, 0, recv_lo) if recv_lo > 0 else None,
            g.narrow(dim, recv_lo + n, recv_hi) if recv_hi > 0 else None,
            lo_rank,
            hi_rank,
            _shape(gx, dim, send_lo),
            _shape(gx, dim, send_hi),
            gx,
            group,
            tag + 2,
            label,
        )
        if back_lo is not None:
            gx.narrow(dim, 0, send_lo).add_(back_lo)
        if back_hi is not None:
            gx.narrow(dim, n - send_hi, send_hi).add_(back_hi)
        return gx, *[None] * 10


def halo_exchange(
    x: torch.Tensor,
    dim: int,
    lo_rank: int | None,
    hi_rank: int | None,
    send_lo: int,
    send_hi: int,
    recv_lo: int,
    recv_hi: int,
    group=None,
    label: str = "halo",
) -> torch.Tensor:
    """Differentiable halo exchange along ``dim`` (widths in cells; a None neighbour means none).

    Widths must agree between neighbours: my ``send_lo`` is my lower neighbour's ``recv_hi``.
    """
    send_lo, recv_lo = (send_lo, recv_lo) if lo_rank is not None else (0, 0)
    send_hi, recv_hi = (send_hi, recv_hi) if hi_rank is not None else (0, 0)
    if max(send_lo, send_hi, recv_lo, recv_hi) <= 0:
        return x
    tag = 8 * dim
    args = (dim, lo_rank, hi_rank, max(send_lo, 0), max(send_hi, 0), max(recv_lo, 0), max(recv_hi, 0))
    return HaloExchange.apply(x, *args, group, tag, label)
