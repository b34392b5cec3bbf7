"""Measure the :class:`~ensml.models.spatial.perfmodel.MachineModel` of this machine in seconds.

:func:`measure_machine` runs three probes:

- **compute** (in this process, with the thread count one rank will have): 3-D convolutions,
  forward and backward, with many channels (bound by FLOPs) and with few (bound by the
  im2col/col2im memory traffic of CPU convolutions), in and beyond the last-level cache, give the
  sustained FLOP rate and the bandwidths of that traffic; a GELU gives the elementwise rate;
- **communication** (``ranks`` spawned processes, a ring as a longitude split makes it): halo
  exchanges of two sizes give the latency and bandwidth of the backend, small all-reduces their
  latency (medians);
- **contention** (the same processes): a convolution timed while all ranks compute at once,
  against the same convolution alone, gives the slowdown of sharing the machine, and
  bulk-synchronous rounds (a millisecond of compute, then an exchange) give the wait of a
  synchronisation: the round's wall time beyond its compute (time-sliced where ranks exceed
  cores) and the message latency. ``cores`` is what ``os.sched_getaffinity`` allows (on CUDA,
  the number of GPUs).

:func:`~ensml.models.spatial.shard_step.measure_shard_step` (per model and split, as
``plan-parallel --machine measured`` runs it) times one rank's step on its shard, without and
with the real halo exchanges, for :func:`~ensml.models.spatial.perfmodel.predict`'s
``compute_s`` and ``exchange_s``.

The probes are small on purpose: a whole run takes a few seconds on two CPU cores. What they
measure is the machine *now*, load of other users included; measure again when that changes.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch
import torch.distributed as dist

from ensml.errors import EnsmlError
from ensml.models.spatial.grid import LON, ProcessGrid
from ensml.models.spatial.halo import halo_exchange
from ensml.models.spatial.perfmodel import MachineModel
from ensml.models.spatial.testing import DistributedError, run_distributed

#: Channel counts of the two convolution probes (memory-bound and FLOP-bound on CPU).
PROBE_CHANNELS = (8, 48)
#: The convolution of one bulk-synchronous round (about a millisecond on one core) and how many
#: rounds the wait at a synchronisation is the median of.
ROUND_GRID, ROUNDS = (3, 16, 32), 60


def sync_device(device: torch.device) -> None:
    """Wait for ``device``'s queued work (CUDA); nothing on the CPU."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _median_time(fn: Callable[[], object], repeats: int, device: torch.device, warmup: int = 1) -> float:
    """Median wall time (s) of ``fn()`` over ``repeats`` calls after ``warmup`` untimed ones."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(repeats):
        sync_device(device)
        t0 = time.perf_counter()
        fn()
        sync_device(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def _conv_step(channels: int, grid: tuple[int, int, int], device: torch.device):
    """A 3×3×3 convolution's forward and backward, its FLOPs and its im2col bytes (one pass)."""
    d, h, w = grid
    conv = torch.nn.Conv3d(channels, channels, 3, padding=(1, 0, 0)).to(device)
    x = torch.randn(1, channels, d, h + 2, w + 2, device=device, requires_grad=True)

    def run() -> None:
        conv(x).sum().backward()

    cells = d * h * w
    return run, 3 * 2 * channels * cells * channels * 27, 4 * channels * 27 * cells


def cache_bytes() -> float:
    """Bytes of the largest CPU cache (Linux sysfs; 32 MiB where it cannot be read)."""
    sizes = []
    for f in Path("/sys/devices/system/cpu/cpu0/cache").glob("index*/size"):
        text = f.read_text().strip().upper()
        scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
        digits = text.rstrip("KMG")
        if digits.isdigit():
            sizes.append(int(digits) * scale)
    return float(max(sizes)) if sizes else 32.0 * 2**20


def _probe_grid(col_bytes: float, channels: int) -> tuple[int, int, int]:
    """(3, h, 2h) output cells whose im2col buffer of ``channels`` is about ``col_bytes``."""
    h = max(4, round(math.sqrt(col_bytes / (4 * channels * 27 * 3 * 2))))
    return 3, h, 2 * h


def compute_rates(threads: int = 1, device: str = "cpu", repeats: int = 5) -> dict[str, float]:
    """Sustained rates of one rank, as :class:`MachineModel` fields.

    Three convolutions, forward and backward: many channels in cache (FLOP-bound), few channels in
    cache, few channels with an im2col buffer three times the cache (capped at 256 MiB). Fits
    ``time = flops / conv_flops + 3 × (in-cache bytes / conv_bandwidth + bytes beyond /
    conv_memory_bandwidth)`` (see :meth:`MachineModel.conv_traffic_s`); where the traffic is not
    measurably slower (GPUs, noise), its bandwidth is infinite. A GELU forward and backward gives
    ``elem_rate``.
    """
    dev = torch.device(device)
    cache = cache_bytes() if dev.type == "cpu" else math.inf
    few, many = PROBE_CHANNELS
    small = min(cache, 2**30) / 4
    probes = [(many, _probe_grid(small, many)), (few, _probe_grid(small, few))]
    probes.append((few, _probe_grid(min(3 * cache, 2**28), few)))
    old = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        measured = []
        for c, grid in probes:
            run, flops, col = _conv_step(c, grid, dev)
            measured.append((_median_time(run, repeats, dev), flops, col))
        xe = torch.randn(1, few, *probes[1][1], device=dev, requires_grad=True)
        t_elem = _median_time(lambda: torch.nn.functional.gelu(xe).sum().backward(), 5, dev)
    finally:
        torch.set_num_threads(old)
    (t1, f1, c1), (t2, f2, c2), (t3, f3, c3) = measured
    rates = dict(conv_flops=f1 / t1, conv_bandwidth=math.inf, conv_memory_bandwidth=math.inf)
    rates.update(cache_bytes=cache, elem_rate=3 * xe.numel() / t_elem)
    if dev.type != "cpu":
        rates["conv_flops"] = max(f / t for t, f, _ in measured)
        return rates
    # t = f x + 3 c y for the two in-cache probes: x = 1 / conv_flops, y = 1 / conv_bandwidth
    y = (t2 / f2 - t1 / f1) / (3 * (c2 / f2 - c1 / f1))
    x = t1 / f1 - 3 * c1 / f1 * y
    if y <= 0 or x <= 0:
        return rates
    rates.update(conv_flops=1 / x, conv_bandwidth=1 / y)
    beyond = max(c3 - cache, 0.0)
    z = (t3 - f3 * x - 3 * min(c3, cache) * y) / (3 * beyond) if beyond else y
    rates["conv_memory_bandwidth"] = 1 / max(z, y)
    return rates


def _exchange(x: torch.Tensor, grid: ProcessGrid) -> None:
    n = x.shape[LON]
    lo, hi = grid.neighbour(LON, -1, True), grid.neighbour(LON, 1, True)
    halo_exchange(x, LON, lo, hi, n, n, n, n, group=grid.p2p_group)


def _comm_probe(device: str, sizes: tuple[int, int], repeats: int) -> dict[str, float]:
    """One rank of the communication and contention probes (run by :func:`measure_machine`)."""
    dev = torch.device(device, torch.cuda.current_device()) if device == "cuda" else torch.device(device)
    grid = ProcessGrid(lon=dist.get_world_size())
    out: dict[str, float] = {}
    for n in sizes:  # halo exchange alone: latency and bandwidth
        x = torch.randn(1, 1, 1, 1, n, device=dev)
        dist.barrier()
        out[f"x{n}"] = _median_time(lambda x=x: _exchange(x, grid), repeats, dev, warmup=3)
    small = torch.zeros(8, device=dev)
    dist.barrier()
    out["allreduce"] = _median_time(lambda: dist.all_reduce(small), repeats, dev, warmup=3)
    run, _, _ = _conv_step(PROBE_CHANNELS[0], (3, 32, 64), dev)
    out["alone"] = _alone(run, grid, repeats, dev)
    dist.barrier()
    out["together"] = _median_time(run, repeats, dev)
    # bulk-synchronous rounds of a short compute then an exchange, as the U-Net's layers run
    tick, _, _ = _conv_step(PROBE_CHANNELS[0], ROUND_GRID, dev)
    out["tick"] = _alone(tick, grid, repeats, dev)
    x = torch.randn(1, 1, 1, 1, sizes[0], device=dev)
    dist.barrier()
    out["round"] = _median_time(lambda: (tick(), sync_device(dev), _exchange(x, grid)), ROUNDS, dev, warmup=3)
    return out


def _alone(run: Callable[[], object], grid: ProcessGrid, repeats: int, dev: torch.device) -> float:
    """Median time of ``run`` on this rank while the others wait in a receive (one at a time)."""
    chunk, alone = torch.zeros(1, device=dev), 0.0
    for r in range(grid.world_size):
        dist.barrier()
        if r == grid.rank:
            chunk[0] = _median_time(run, repeats, dev)
        dist.broadcast(chunk, r)
        if r == grid.rank:
            alone = float(chunk[0])
    return alone


def cores(device: str) -> int:
    """Cores this process may run on (``os.sched_getaffinity``), or GPUs on CUDA."""
    if device == "cuda":
        return max(torch.cuda.device_count(), 1)
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        return os.cpu_count() or 1


def measure_machine(
    ranks: int,
    backend: str = "gloo",
    device: str = "cpu",
    threads_per_rank: int = 1,
    *,
    repeats: int = 9,
    sizes: tuple[int, int] = (16, 2**18),
    timeout: float = 120.0,
) -> MachineModel:
    """Measure the machine model of ``ranks`` processes on this machine (a few seconds).

    Parameters
    ----------
    ranks
        Processes that will train together (``devices`` of ``plan-parallel``), 1 … 64. With one,
        only the compute probe runs (no communication, no contention).
    backend, device
        ``gloo`` with ``cpu`` or ``nccl`` with ``cuda`` (one process per GPU).
    threads_per_rank
        Intra-op threads of each rank (``torch.set_num_threads``).
    repeats, sizes
        Timed repetitions of each probe (medians are kept) and the two halo sizes (float32
        elements per message).

    Returns
    -------
    MachineModel
        Named ``"<device> <backend>, <ranks> ranks × <threads> thread(s), <cores> cores (measured)"``
        with the measured rates, ``cores``, ``threads_per_rank``, ``contention`` and ``sync_s``.

    Raises
    ------
    EnsmlError
        Bad arguments (checked before anything runs), or a probe process that failed.
    """
    ranks, threads_per_rank = int(ranks), int(threads_per_rank)  # plain ints: they are pickled
    if not 1 <= ranks <= 64:
        raise EnsmlError(f"measure_machine: ranks must be 1 … 64, got {ranks}")
    if not 1 <= threads_per_rank <= 1024:
        raise EnsmlError(f"measure_machine: threads_per_rank must be 1 … 1024, got {threads_per_rank}")
    if (backend, device) not in {("gloo", "cpu"), ("nccl", "cuda")}:
        raise EnsmlError(f"measure_machine: use gloo with cpu or nccl with cuda, got {backend} with {device}")
    if device == "cuda" and not torch.cuda.is_available():
        raise EnsmlError("measure_machine: device cuda, but no GPU on this machine")
    n_cores = cores(device)
    name = f"{device} {backend}, {ranks} rank(s) × {threads_per_rank} thread(s), {n_cores} cores (measured)"
    fields: dict = dict(name=name, **compute_rates(threads_per_rank, device, repeats=min(repeats, 5)))
    # CPU ranks share the host's memory; a GPU rank has its device's
    memory = _memory_gib(device) / (ranks if device == "cpu" else 1)
    fields.update(cores=n_cores, threads_per_rank=threads_per_rank, memory_gib=memory)
    if ranks == 1:
        return MachineModel(**fields, bandwidth=math.inf, latency=0.0, allreduce_latency=0.0)
    args = (_comm_probe, ranks, device, tuple(map(int, sizes)), int(repeats))
    try:
        res = run_distributed(*args, backend=backend, timeout=timeout, threads=threads_per_rank)
    except DistributedError as e:  # one line: the failure and, if any, the rank's exception
        lines = [line.strip() for line in str(e).splitlines() if line.strip()]
        why = lines[0] if len(lines) == 1 else f"{lines[0]} {lines[-1]}"
        raise EnsmlError(f"measure_machine: the {backend} probe of {ranks} ranks failed: {why}") from None
    med = {k: statistics.median(r[k] for r in res) for k in res[0]}
    small, big = (med[f"x{n}"] for n in sizes)
    moved = 2 * 4 * (sizes[1] - sizes[0])  # both directions, float32
    bandwidth = moved / (big - small) if big > small else math.inf
    latency = max(small - 2 * 4 * sizes[0] / bandwidth, 1e-7)
    # alone: each rank by itself; together: all at once (time-slicing when ranks exceed cores)
    slowdown = med["together"] / statistics.median(r["alone"] for r in res)
    share = max(1.0, ranks * threads_per_rank / n_cores)
    return MachineModel(
        **fields,
        bandwidth=bandwidth,
        latency=latency,
        allreduce_latency=med["allreduce"] / max(math.ceil(math.log2(ranks)), 1),
        contention=max(slowdown / share, 1.0),
        # a round's wall time beyond its compute (time-sliced when ranks exceed cores) and latency
        sync_s=max(med["round"] - share * med["tick"] - small, 0.0),
    )


def _memory_gib(device: str) -> float:
    if device == "cuda":
        return torch.cuda.get_device_properties(0).total_memory / 2.0**30
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2.0**30
    except (ValueError, OSError, AttributeError):
        return 16.0
