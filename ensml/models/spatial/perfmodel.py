"""Performance model of spatial × data-parallel training, in the spirit of Dryden et al. (2019).

Per layer and rank: compute = FLOPs of the local shard / sustained FLOP rate (convolutions) or
elements / elementwise rate (norms, activations, pooling); communication = halo messages
(latency + bytes / bandwidth, forward and backward) and the small all-reduces of global
normalisation statistics; per step: the gradient all-reduce over the world. Activation memory
per rank is the bytes autograd saves when the partitioned model runs on one rank's padded
shard with local padding in place of halos (traced on the ``meta`` device: nothing is
allocated). :func:`~ensml.models.spatial.plan.plan_parallel` ranks all ``data × lat × lon``
splits of a device count by predicted samples per second among those that fit.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch
from torch import nn

from ensml.compat import view_base
from ensml.models.layers import SphereConv3d
from ensml.models.spatial.grid import ProcessGrid
from ensml.models.unet3d import UNet3d


@dataclass(frozen=True)
class MachineModel:
    """Sustained rates of one rank: FLOP/s of convolutions, elements/s of elementwise layers,
    halo bandwidth (B/s) and latency (s) per message, all-reduce latency (s) per step of a tree."""

    name: str
    conv_flops: float
    elem_rate: float
    bandwidth: float
    latency: float
    allreduce_latency: float
    memory_gib: float = 80.0


# Nominal GPU figures (not measured here): TF32 convolutions at ~40% of peak, NVLink 4 at a
# fraction of its 450 GB/s per direction, and typical NCCL latencies.
H100_NCCL = MachineModel("H100 + NCCL (nominal)", 150e12, 3e11, 150e9, 15e-6, 30e-6, 80.0)


@dataclass
class LayerCost:
    name: str
    kind: str
    flops: float  # forward + backward, one rank
    elements: float  # output elements, one rank (elementwise work, forward + backward)
    halo_bytes: float  # sent per exchange (both directions, all split dims), forward
    messages: int  # halo messages per exchange
    allreduces: int  # small all-reduces (norm statistics), forward + backward
    compute_s: float = 0.0
    comm_s: float = 0.0


@dataclass
class Prediction:
    """Predicted cost of one training step on one rank for one (data, lat, lon) split."""

    data: int
    lat: int
    lon: int
    layers: list[LayerCost]
    grad_allreduce_s: float
    activation_bytes: float
    state_bytes: float  # parameters, gradients and two Adam moments
    compute_s: float = field(init=False)
    halo_s: float = field(init=False)
    step_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.compute_s = sum(c.compute_s for c in self.layers)
        self.halo_s = sum(c.comm_s for c in self.layers)
        self.step_s = self.compute_s + self.halo_s + self.grad_allreduce_s


def _trace(model: nn.Module, shape: tuple[int, ...], dtype: torch.dtype):
    """Run ``model`` on a meta tensor: per-layer (name, module, in shape, out shape), saved bytes."""
    records, saved, hooks = [], {}, []
    kinds = (SphereConv3d, nn.Conv3d, nn.ConvTranspose3d, nn.GroupNorm, nn.GELU, nn.ReLU, nn.MaxPool3d)
    for name, m in model.named_modules():
        if isinstance(m, kinds) and not (isinstance(m, nn.Conv3d) and name.endswith(".conv")):
            hooks.append(
                m.register_forward_hook(lambda m, i, o, n=name: records.append((n, m, i[0].shape, o.shape)))
            )

    meta = model.to("meta")
    x = torch.empty(shape, dtype=dtype, device="meta", requires_grad=True)
    try:
        with saved_hooks(saved):
            meta(x)
    finally:
        for h in hooks:
            h.remove()
    return records, saved_bytes(saved)


def saved_bytes(saved: dict) -> int:
    """Total bytes of the distinct tensors in ``{key: (tensor, nbytes)}`` (see :func:`saved_hooks`)."""
    return sum(n for _, n in saved.values())


def saved_hooks(saved: dict) -> torch.autograd.graph.saved_tensors_hooks:
    """Context recording every tensor autograd saves (parameters excluded) into ``saved``."""

    def pack(t: torch.Tensor) -> torch.Tensor:
        base = view_base(t)
        if not isinstance(base, nn.Parameter):
            saved[id(base)] = (base, base.numel() * base.element_size())
        return t

    return torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t)


def _padded(n: int, parts: int, m: int) -> int:
    """Largest padded shard of ``n`` cells in ``parts`` shards of whole blocks of ``m``."""
    return math.ceil(math.ceil(n / m) / parts) * m


def predict(
    model: nn.Module,
    sample: tuple[int, int, int, int],
    grid: tuple[int, int, int],
    machine: MachineModel,
    batch_size: int = 1,
    dtype: torch.dtype = torch.float32,
    plain: bool = False,
) -> Prediction:
    """Predict one training step on the busiest rank.

    ``sample`` is (channels, level, lat, lon) of one unpadded sample; ``grid`` is (data, lat, lon);
    ``batch_size`` counts samples per replica. ``model`` is a single-process UNet3d (not modified);
    ``plain`` estimates the memory of that model itself rather than of its partitioned version.
    """
    data, p_lat, p_lon = grid
    c, d, n_lat, n_lon = sample
    m = 2 ** getattr(model, "depth", 0)
    h, w = _padded(n_lat, p_lat, m), _padded(n_lon, p_lon, m)
    item = torch.empty((), dtype=dtype).element_size()
    records, act = _trace(copy.deepcopy(model), (batch_size, c, d, h, w), dtype)
    if isinstance(model, UNet3d) and not plain:  # the partitioned layers save less (no level padding)
        from ensml.models.spatial.unet import SpatialUNet3d

        _, act = _trace(SpatialUNet3d(model, ProcessGrid(local=True)), (batch_size, c, d, h, w), dtype)
    layers = []
    for name, mod, i, o in records:
        flops = elements = halo = 0.0
        msgs = reds = 0
        if isinstance(mod, SphereConv3d | nn.Conv3d | nn.ConvTranspose3d):
            conv = mod.conv if isinstance(mod, SphereConv3d) else mod
            k = math.prod(conv.kernel_size)
            flops = 3 * 2 * math.prod(o) * conv.in_channels * k / conv.groups
            p = mod.pad if isinstance(mod, SphereConv3d) else 0
            if p:
                plane = i[0] * i[1] * i[2]
                halo = 2 * p * plane * ((i[4] if p_lat > 1 else 0) + ((i[3] + 2 * p) if p_lon > 1 else 0))
                msgs = 2 * ((p_lat > 1) + (p_lon > 1))
        else:
            elements = 3 * math.prod(o)
            reds = 4 if isinstance(mod, nn.GroupNorm) and p_lat * p_lon > 1 else 0
        cost = LayerCost(name, type(mod).__name__, flops, elements, halo * item, msgs, reds)
        cost.compute_s = flops / machine.conv_flops + elements / machine.elem_rate
        steps = math.ceil(math.log2(p_lat * p_lon)) if reds else 0
        # Forward and backward exchange; messages of one exchange overlap, latencies do not.
        cost.comm_s = (
            2 * (msgs // 2 * machine.latency + cost.halo_bytes / machine.bandwidth)
            + reds * steps * machine.allreduce_latency
        )
        layers.append(cost)
    world = data * p_lat * p_lon
    n_param = sum(p.numel() for p in model.parameters()) * item
    grad = 0.0
    if world > 1:
        grad = (
            2 * (world - 1) / world * n_param / machine.bandwidth
            + 2 * math.log2(world) * machine.allreduce_latency
        )
    return Prediction(data, p_lat, p_lon, layers, grad, float(act), 4.0 * n_param)
