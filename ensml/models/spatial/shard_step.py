"""One rank's training step on its shard of a spatial split, measured: the input of
:func:`~ensml.models.spatial.perfmodel.predict` on a measured machine (``plan-parallel
--machine measured``, ``plan-memory``'s spatial rows, ``benchmarks/spatial.py``)."""

from __future__ import annotations

import copy
import statistics
import time
from collections.abc import Callable

import torch
import torch.distributed as dist

from ensml.models.spatial.calibrate import cores, sync_device
from ensml.models.spatial.grid import ProcessGrid
from ensml.models.spatial.perfmodel import ShardStep, shard_shape
from ensml.models.spatial.testing import run_distributed
from ensml.models.spatial.unet import SpatialUNet3d, unet_shard_sizes
from ensml.models.unet3d import UNet3d


def measure_shard_step(
    model: torch.nn.Module,
    sample: tuple[int, int, int, int],
    grid: tuple[int, int, int],
    batch_size: int = 1,
    threads: int = 1,
    repeats: int = 5,
    device: str = "cpu",
) -> ShardStep:
    """Time one rank's training step on its shard of ``grid`` = (data, lat, lon) (medians).

    ``model`` (a single-process U-Net, not modified) runs a forward, backward and SGD step on
    the padded shard that the busiest rank holds of ``sample`` = (channels, level, lat, lon), on
    ``threads`` threads. A measured step, not FLOPs over a rate: a CPU's 3D convolution changes
    algorithm with the tensor's size (oneDNN above about 2**24 elements, a direct path up to 10x
    slower below), so no single rate fits every shard.

    On the CPU with several ranks, every rank's process runs the step at once, as training
    does, so the shared caches and memory bandwidth are in the time; with a spatial split, steps
    with local padding and steps through the real halo exchanges alternate, and their difference
    is :attr:`ShardStep.exchange_s`, from which :func:`~ensml.models.spatial.perfmodel.predict`
    calibrates the wait at each exchange. That wait depends on the compute between exchanges
    and on the scheduler (where ranks time-slice the cores, a waiting rank is woken only when a
    core is free), which the machine's millisecond round does not reproduce: on 2 cores, 4
    one-thread ranks wait 3-4 ms per exchange in ``benchmarks/spatial.py``'s U-Net step,
    against 0.6-2 ms in the round.
    """
    world = grid[0] * grid[1] * grid[2]
    args = (model, sample, grid, batch_size, threads, repeats, device)
    if device != "cpu" or world == 1:
        return ShardStep(statistics.median(_shard_step_times(*args)[0]))
    ranks = run_distributed(_shard_step_times, world, *args, threads=threads)
    free, real = (_slowest([r[k] for r in ranks]) for k in (0, 1))
    slicing = max(1.0, world * threads / cores(device))
    return ShardStep(free / slicing, None if real is None else max(real - free, 0.0))


def _slowest(times: list[list[float]]) -> float | None:
    """Median over repetitions of the slowest rank's time (a step lasts until its slowest rank,
    with time-slicing until all the work is done); None without times."""
    per_step = [max(t) for t in zip(*times)]
    return statistics.median(per_step) if per_step else None


def _shard_step_times(
    model, sample, grid, batch_size, threads, repeats, device
) -> tuple[list[float], list[float]]:
    """Times (s) of the step with local padding and of the step through the real exchanges (an
    empty list where there are none) on this rank, alternating."""
    dev = torch.device(device)
    spatial = grid[1] * grid[2] > 1 and isinstance(model, UNet3d)
    net = copy.deepcopy(model)
    if spatial:  # the partitioned layers, padding locally
        net = SpatialUNet3d(net, ProcessGrid(local=True))
    steps = [_train_step(net.to(dev), shard_shape(model, sample, grid, batch_size), dev)]
    if spatial and dist.is_initialized():  # the same layers exchanging halos with the neighbours
        real = ProcessGrid(lat=grid[1], lon=grid[2], data=grid[0])
        hs, ws = unet_shard_sizes(sample[2], sample[3], model.depth, real)
        shape = (batch_size, *sample[:2], hs[real.lat_index], ws[real.lon_index])
        steps.append(_train_step(SpatialUNet3d(copy.deepcopy(model), real).to(dev), shape, dev))
    previous = torch.get_num_threads()
    torch.set_num_threads(max(1, int(threads)))
    try:
        times = _alternating_times(steps, repeats, dev)
    finally:
        torch.set_num_threads(previous)
    return times[0], (times[1] if len(times) > 1 else [])


def _train_step(net: torch.nn.Module, shape: tuple[int, ...], dev: torch.device) -> Callable[[], None]:
    x = torch.randn(shape, device=dev)
    opt = torch.optim.SGD(net.parameters(), lr=1e-9)

    def step() -> None:
        opt.zero_grad(set_to_none=True)
        net(x).square().mean().backward()
        opt.step()

    return step


def _alternating_times(fns: list[Callable[[], None]], repeats: int, dev: torch.device) -> list[list[float]]:
    """Times of each of ``fns``, run in turn ``repeats`` times after one untimed round (the same
    load on each); with several ranks, they start each call together."""
    times: list[list[float]] = [[] for _ in fns]
    for i in range(repeats + 1):
        for fn, out in zip(fns, times):
            if dist.is_initialized():
                dist.barrier()
            sync_device(dev)
            t0 = time.perf_counter()
            fn()
            sync_device(dev)
            if i:
                out.append(time.perf_counter() - t0)
    return times
