"""Performance model of spatial × data-parallel training, in the spirit of Dryden et al. (2019).

Per layer and rank: compute = FLOPs of the local shard / sustained FLOP rate, plus, on CPU, the
im2col/col2im memory traffic of the convolution / its bandwidth (convolutions), or elements /
elementwise rate (norms, activations, pooling); communication = halo messages (latency + bytes /
bandwidth + the wait for a late neighbour, forward and backward) and the small all-reduces of
global normalisation statistics; per step: the gradient all-reduce over the world. Ranks that
share cores time-slice: compute grows by ``ranks × threads / cores`` (at least 1) and by the
measured contention of ranks computing at once. Activation memory per rank is the bytes autograd
saves when the partitioned model runs on one rank's padded shard with local padding in place of
halos (traced on the ``meta`` device: nothing is allocated).
:func:`~ensml.models.spatial.plan.plan_parallel` ranks all ``data × lat × lon`` splits of a
device count by predicted samples per second among those that fit;
:func:`~ensml.models.spatial.calibrate.measure_machine` measures the :class:`MachineModel` of
this machine.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field, replace

import torch
from torch import nn

from ensml.compat import view_base
from ensml.models.layers import SphereConv3d
from ensml.models.spatial.grid import ProcessGrid
from ensml.models.unet3d import UNet3d


@dataclass(frozen=True)
class MachineModel:
    """Sustained rates of one rank and how ranks share the machine.

    Attributes
    ----------
    name
        Shown in the plan's table.
    conv_flops
        FLOP/s of convolutions (forward + backward FLOPs over their time).
    elem_rate
        Elements/s of elementwise layers (GELU, norms, pooling), forward + backward.
    bandwidth, latency
        Halo bandwidth (B/s) and latency (s) per message exchange.
    allreduce_latency
        Latency (s) per step of a tree all-reduce.
    memory_gib
        Memory of one rank (GiB) for activations, parameters, gradients and Adam moments.
    conv_bandwidth, conv_memory_bandwidth, cache_bytes
        B/s of the im2col/col2im traffic of CPU convolutions (three passes of an
        ``in_channels × kernel × output`` buffer per layer, forward and backward) while that
        buffer fits in the last-level cache (``cache_bytes``, shared by the ranks that run at
        once), and beyond it; infinite where convolutions are FLOP-bound (GPUs).
    cores
        Cores (CPU) or devices (GPU) the ranks run on; ranks × ``threads_per_rank`` beyond it
        time-slice, which multiplies compute. Infinite: every rank has its own.
    threads_per_rank
        Intra-op threads of each rank.
    contention
        Measured slowdown of compute when all ranks compute at once, beyond time-slicing
        (shared caches and memory bandwidth, other users' load); 1 on one rank.
    sync_s
        Measured extra wall time (s) of each synchronisation (a layer's halo exchange, an
        all-reduce) when ranks run at once, beyond their compute and the message latency: a
        neighbour late, or, where ranks time-slice the cores, woken only when a core is free.
    """

    name: str
    conv_flops: float
    elem_rate: float
    bandwidth: float
    latency: float
    allreduce_latency: float
    memory_gib: float = 80.0
    conv_bandwidth: float = math.inf
    conv_memory_bandwidth: float = math.inf
    cache_bytes: float = math.inf
    cores: float = math.inf
    threads_per_rank: int = 1
    contention: float = 1.0
    sync_s: float = 0.0

    def share(self, world: int) -> float:
        """Compute slowdown of ``world`` ranks computing at once: time-slicing × contention."""
        if world <= 1:
            return 1.0
        return max(1.0, world * self.threads_per_rank / self.cores) * self.contention

    def sync_wait(self, world: int) -> float:
        """Wait (s) charged at each synchronisation of ``world`` ranks (none on one rank)."""
        return self.sync_s if world > 1 else 0.0

    def conv_traffic_s(self, col_bytes: float, world: int) -> float:
        """Time (s) of the three im2col/col2im passes over a ``col_bytes`` buffer on one rank."""
        if math.isinf(self.conv_bandwidth) and math.isinf(self.conv_memory_bandwidth):
            return 0.0
        sharers = 1 if world <= 1 else max(1, min(world, int(min(self.cores, 1e9)) // self.threads_per_rank))
        cache = self.cache_bytes / sharers
        inside, beyond = min(col_bytes, cache), max(col_bytes - cache, 0.0)
        return 3 * (inside / self.conv_bandwidth + beyond / self.conv_memory_bandwidth)

    def describe(self) -> str:
        """One line of the rates, with units."""
        bw, dram = self.conv_bandwidth / 1e9, self.conv_memory_bandwidth / 1e9
        mem = "" if math.isinf(bw) else f", conv traffic {bw:.1f} GB/s in cache, {dram:.1f} GB/s beyond"
        cores = "" if math.isinf(self.cores) else f", {self.cores:g} cores"
        return (
            f"conv {self.conv_flops / 1e9:.1f} GFLOP/s{mem}, elementwise {self.elem_rate / 1e6:.0f} Melem/s, "
            f"halo latency {self.latency * 1e6:.0f} us, bandwidth {self.bandwidth / 1e9:.2f} GB/s, "
            f"all-reduce {self.allreduce_latency * 1e6:.0f} us/step, sync wait {self.sync_s * 1e6:.0f} us, "
            f"{self.threads_per_rank} thread(s)/rank{cores}, contention {self.contention:.2f}x"
        )


# Nominal GPU figures (not measured here): TF32 convolutions at ~40% of peak, NVLink 4 at a
# fraction of its 450 GB/s per direction, and typical NCCL latencies.
H100_NCCL = MachineModel("H100 + NCCL (nominal)", 150e12, 3e11, 150e9, 15e-6, 30e-6, 80.0)


@dataclass(frozen=True)
class ShardStep:
    """One rank's training step on its shard of a split, measured (seconds), as
    :func:`~ensml.models.spatial.shard_step.measure_shard_step` gives it and :func:`predict` takes it.

    ``compute_s``: the step with local padding in place of halo exchanges, with every rank's
    process computing at once, divided by the time-slicing factor that
    :meth:`MachineModel.share` multiplies back.
    ``exchange_s``: the same step through the real exchanges with the neighbours, minus the
    step without them: messages and waits (None where not measured: one rank, no spatial split,
    or a GPU, where the ranks of a split are other devices).
    """

    compute_s: float
    exchange_s: float | None = None


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
    comm_s: float = 0.0  # halo exchanges, forward + backward
    reduce_s: float = 0.0  # all-reduces of normalisation statistics


@dataclass
class Prediction:
    """Predicted cost of one training step on one rank for one (data, lat, lon) split.

    ``compute_s`` (s) includes time-slicing and contention; ``halo_s`` is the time in halo
    exchanges (forward and backward, waits included), ``norm_s`` in all-reduces of normalisation
    statistics, ``grad_allreduce_s`` in the gradient all-reduce; ``step_s`` is their sum.
    ``activation_bytes`` and ``state_bytes`` are per rank.
    """

    data: int
    lat: int
    lon: int
    layers: list[LayerCost]
    grad_allreduce_s: float
    activation_bytes: float
    state_bytes: float  # parameters, gradients and two Adam moments
    compute_s: float = field(init=False)
    halo_s: float = field(init=False)
    norm_s: float = field(init=False)
    step_s: float = field(init=False)

    def __post_init__(self) -> None:
        self.compute_s = sum(c.compute_s for c in self.layers)
        self.halo_s = sum(c.comm_s for c in self.layers)
        self.norm_s = sum(c.reduce_s for c in self.layers)
        self.step_s = self.compute_s + self.halo_s + self.norm_s + self.grad_allreduce_s


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


def shard_shape(
    model: nn.Module, sample: tuple[int, int, int, int], grid: tuple[int, int, int], batch_size: int = 1
) -> tuple[int, int, int, int, int]:
    """(batch, channels, level, lat, lon) of the busiest rank's padded shard of ``sample``."""
    _, p_lat, p_lon = grid
    c, d, n_lat, n_lon = sample
    m = 2 ** getattr(model, "depth", 0)
    return (batch_size, c, d, _padded(n_lat, p_lat, m), _padded(n_lon, p_lon, m))


def predict(
    model: nn.Module,
    sample: tuple[int, int, int, int],
    grid: tuple[int, int, int],
    machine: MachineModel,
    batch_size: int = 1,
    dtype: torch.dtype = torch.float32,
    plain: bool = False,
    measured: ShardStep | None = None,
) -> Prediction:
    """Predict one training step on the busiest rank.

    ``sample`` is (channels, level, lat, lon) of one unpadded sample; ``grid`` is (data, lat, lon);
    ``batch_size`` counts samples per replica. ``model`` is a single-process UNet3d (not modified);
    ``plain`` estimates the memory of that model itself rather than of its partitioned version.
    ``measured``, when given, is one rank's shard step as measured
    (:func:`~ensml.models.spatial.shard_step.measure_shard_step`): its ``compute_s`` replaces the
    FLOP-rate estimate of compute, spread over the layers in proportion to it, before
    time-slicing and contention; from its ``exchange_s`` (if any), the wait charged at each
    synchronisation is calibrated so that the modelled exchanges add up to it (latency and bytes
    stay the machine's).
    """
    data, p_lat, p_lon = grid
    c, d = sample[:2]
    _, _, _, h, w = shard_shape(model, sample, grid, batch_size)
    item = torch.empty((), dtype=dtype).element_size()
    records, act = _trace(copy.deepcopy(model), (batch_size, c, d, h, w), dtype)
    if isinstance(model, UNet3d) and not plain:  # the partitioned layers save less (no level padding)
        from ensml.models.spatial.unet import SpatialUNet3d

        _, act = _trace(SpatialUNet3d(model, ProcessGrid(local=True)), (batch_size, c, d, h, w), dtype)
    world = data * p_lat * p_lon
    if measured is not None and measured.exchange_s is not None:
        machine = calibrated_wait(records, (p_lat, p_lon, world), item, machine, measured.exchange_s)
    layers = [
        _layer_cost(name, mod, i, o, (p_lat, p_lon, world), item, machine) for name, mod, i, o in records
    ]
    if measured is not None:
        total = sum(c.compute_s for c in layers) or 1.0
        for cost in layers:
            cost.compute_s *= measured.compute_s * machine.share(world) / total
    n_param = sum(p.numel() for p in model.parameters()) * item
    grad = 0.0
    if world > 1:
        grad = (
            2 * (world - 1) / world * n_param / machine.bandwidth
            + 2 * math.log2(world) * machine.allreduce_latency
            + machine.sync_wait(world)
        )
    return Prediction(data, p_lat, p_lon, layers, grad, float(act), 4.0 * n_param)


def calibrated_wait(records, split, item: int, machine: MachineModel, exchange_s: float) -> MachineModel:
    """``machine`` with which the exchanges and all-reduces of the traced layers ``records`` take
    ``exchange_s`` seconds in all: time beyond their latency and bytes is an equal wait at each
    synchronisation (``sync_s``); less time than that scales latency and bytes down, no wait."""
    bare = replace(machine, sync_s=0.0)
    costs = [_layer_cost(name, mod, i, o, split, item, bare) for name, mod, i, o in records]
    syncs = sum(2 * (c.messages > 0) + c.allreduces for c in costs)
    modelled = sum(c.comm_s + c.reduce_s for c in costs)
    if not syncs or modelled <= 0:
        return machine
    if exchange_s >= modelled:
        return replace(bare, sync_s=(exchange_s - modelled) / syncs)
    f = exchange_s / modelled
    return replace(
        bare,
        latency=bare.latency * f,
        allreduce_latency=bare.allreduce_latency * f,
        bandwidth=bare.bandwidth / f if f > 0 else math.inf,
    )


def _layer_cost(name, mod, i, o, split: tuple[int, int, int], item: int, machine: MachineModel):
    """Cost of one traced layer on one rank (input shape ``i``, output shape ``o``; ``split`` is
    lat shards, lon shards, world size)."""
    p_lat, p_lon, world = split
    flops = elements = halo = conv_s = 0.0
    msgs = reds = 0
    if isinstance(mod, SphereConv3d | nn.Conv3d | nn.ConvTranspose3d):
        conv = mod.conv if isinstance(mod, SphereConv3d) else mod
        k = math.prod(conv.kernel_size)
        flops = 3 * 2 * math.prod(o) * conv.in_channels * k / conv.groups
        # im2col (forward, weight gradient) and col2im (input gradient) of in × k × out cells
        conv_s = flops / machine.conv_flops + machine.conv_traffic_s(
            flops * item / (6 * conv.out_channels), world
        )
        p = mod.pad if isinstance(mod, SphereConv3d) else 0
        if p:
            plane = i[0] * i[1] * i[2]
            halo = 2 * p * plane * ((i[4] if p_lat > 1 else 0) + ((i[3] + 2 * p) if p_lon > 1 else 0))
            msgs = 2 * ((p_lat > 1) + (p_lon > 1))
    else:
        elements = 3 * math.prod(o)
        reds = 4 if isinstance(mod, nn.GroupNorm) and p_lat * p_lon > 1 else 0
    cost = LayerCost(name, type(mod).__name__, flops, elements, halo * item, msgs, reds)
    cost.compute_s = (conv_s + elements / machine.elem_rate) * machine.share(world)
    # Forward and backward: one exchange per split dimension (its messages overlap), each a
    # latency; the bytes of all of them; one wait for the neighbours (the first exchange finds
    # them late, the next finds them there).
    sync = machine.sync_wait(world)
    if msgs:
        cost.comm_s = 2 * (msgs // 2 * machine.latency + sync + cost.halo_bytes / machine.bandwidth)
    steps = math.ceil(math.log2(p_lat * p_lon)) if reds else 0
    cost.reduce_s = reds * (steps * machine.allreduce_latency + sync)
    return cost
