"""Spatial-parallel 3D U-Net: activation memory, step time, halo share; performance model check.

Run by hand (CPU, gloo):  python benchmarks/spatial.py
GPU (one process per GPU): python benchmarks/spatial.py --backend nccl --device cuda \
    --lat 361 --lon 720 --levels 11 --channels 8 --width 16 --depth 5 --ranks 1 2

Each rank runs one thread. Activation memory is the bytes autograd saves in one forward pass
(plus, on CUDA, the allocator's peak); the halo share is the time inside halo exchanges (forward
and backward, including waiting for the neighbour) over the step time, per U-Net level. Step
time is the slowest rank's, min and median over ``--steps`` steps (the median is quoted).

Model check, as ``ensml plan-parallel --machine measured`` plans: before the layouts of each
rank count, ``measure_machine`` measures this machine (compute rates, backend latency and
bandwidth, contention of that many ranks), and before each layout ``measure_shard_step`` times
the busiest rank's shard step with every rank at once, without and with its halo exchanges (as
many alternating repetitions as ``--steps``, random weights and inputs, no loss all-reduce and
no gradient all-reduce); then ``predict`` gives every layout's step and halo time, printed
against the run's with the relative error of the step time and whether all layouts are within
the 15% target. The run's halo time counts every wait inside an exchange, also the time a rank
sleeps while a time-sliced neighbour computes; the model's counts only what the exchanges add
to the step.
"""

from __future__ import annotations

import argparse
import re
import statistics
import time
from collections import defaultdict

import torch

from ensml.models.spatial import ProcessGrid, SpatialUNet3d, global_mean, reduce_gradients
from ensml.models.spatial.calibrate import measure_machine
from ensml.models.spatial.halo import HALO_STATS, enable_halo_timing
from ensml.models.spatial.perfmodel import H100_NCCL, predict, saved_bytes, saved_hooks
from ensml.models.spatial.shard_step import measure_shard_step
from ensml.models.spatial.testing import run_distributed
from ensml.models.spatial.unet import unet_shard_sizes
from ensml.models.unet3d import UNet3d

MIB = 2.0**20
#: The model's step time must be within this relative error of the measured median.
TARGET = 0.15


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _level(label: str, depth: int) -> str:
    m = re.match(r"(encoders|decoders)\.(\d+)", label)
    if not m:
        return label
    i = int(m.group(2))
    return f"level {i if m.group(1) == 'encoders' else depth - 1 - i}"


def _net(a):
    return UNet3d(a.channels, a.channels, width=a.width, depth=a.depth)


def worker(a, lat: int, lon: int) -> dict:
    """One rank: memory of a forward pass, mean step time, time in halo exchanges per level."""
    device = (
        torch.device(a.device, torch.cuda.current_device()) if a.device == "cuda" else torch.device("cpu")
    )
    grid = ProcessGrid(lat=lat, lon=lon)
    torch.manual_seed(0)
    unet = _net(a)
    model = (unet if grid.world_size == 1 else SpatialUNet3d(unet, grid)).to(device)
    hs, ws = unet_shard_sizes(a.lat, a.lon, a.depth, grid)
    shape = (a.batch, a.channels, a.levels, hs[grid.lat_index], ws[grid.lon_index])
    x, t = torch.randn(shape, device=device), torch.randn(shape, device=device)
    opt = torch.optim.SGD(model.parameters(), lr=1e-6)

    def step():
        opt.zero_grad()
        global_mean((model(x) - t) ** 2, grid).backward()
        reduce_gradients(model, grid)
        opt.step()

    step()
    saved: dict = {}
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
    base = torch.cuda.memory_allocated(device) if device.type == "cuda" else 0
    with saved_hooks(saved):
        y = model(x)
    act = saved_bytes(saved)
    peak = torch.cuda.max_memory_allocated(device) - base if device.type == "cuda" else 0
    del y, saved
    times = []
    for _ in range(a.steps):
        _sync(device)
        t0 = time.perf_counter()
        step()
        _sync(device)
        times.append(time.perf_counter() - t0)
    enable_halo_timing(True)
    t0 = time.perf_counter()
    for _ in range(a.steps):
        step()
    _sync(device)
    timed = (time.perf_counter() - t0) / a.steps
    halo: dict[str, float] = defaultdict(float)
    for label, (sec, _) in HALO_STATS.items():
        halo[_level(label, a.depth)] += sec / a.steps
    enable_halo_timing(False)
    return dict(act=act, peak=peak, steps=times, timed=timed, halo=dict(halo))


def _step_stats(out: list[dict]) -> tuple[float, float]:
    """Min and median over steps of the slowest rank's step time (s)."""
    per_step = sorted(max(r["steps"][i] for r in out) for i in range(len(out[0]["steps"])))
    return per_step[0], statistics.median(per_step)


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="gloo", choices=["gloo", "nccl"])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--lat", type=int, default=96)
    p.add_argument("--lon", type=int, default=192)
    p.add_argument("--levels", type=int, default=3)
    p.add_argument("--channels", type=int, default=4)
    p.add_argument("--width", type=int, default=8)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=7, help="timed steps per layout (min and median)")
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    p.add_argument("--no-model", dest="model", action="store_false", help="skip the model check")
    return p.parse_args(argv)


def _report(a, res: dict) -> None:
    """Memory, step time and halo share of every layout."""
    single = res[(1, 1)][0] if (1, 1) in res else None
    for (lat, lon), out in res.items():
        act = max(r["act"] for r in out)
        fastest, step = _step_stats(out)
        line = f"ranks {lat * lon} (lat {lat} x lon {lon}): activations {act / MIB:7.1f} MiB/rank"
        if single:
            line += f" -> {act / single['act']:.2f}x single"
        line += f", step {step:.3f} s (median; min {fastest:.3f} s)"
        if single:
            line += f" ({_step_stats(res[(1, 1)])[1] / step:.2f}x speed-up)"
        if a.device == "cuda":
            line += f", CUDA peak {max(r['peak'] for r in out) / MIB:.1f} MiB/rank"
        print(line)
        if lat * lon > 1:
            halo = defaultdict(float)
            for r in out:
                for k, v in r["halo"].items():
                    halo[k] += v / len(out)
            timed = sum(r["timed"] for r in out) / len(out)
            shares = ", ".join(f"{k} {100 * v / timed:.1f}%" for k, v in sorted(halo.items()))
            total = 100 * sum(halo.values()) / timed
            print(f"  halo share of step time ({timed:.3f} s): {shares}; total {total:.1f}%")


def _model_check(a, res: dict, machines: dict, probes: dict) -> None:
    """Predicted vs measured step and halo time of every layout, and the 15% verdict."""
    sample = (a.channels, a.levels, a.lat, a.lon)
    worst = (0.0, "")
    for n, machine in machines.items():
        print(f"machine model, {n} rank(s): {machine.describe()}")
    for (lat, lon), out in res.items():
        # one rank runs the plain UNet3d (with level padding), more ranks the partitioned one
        probe = probes[(lat, lon)]
        machine = machines[lat * lon]
        pr = predict(_net(a), sample, (1, lat, lon), machine, a.batch, plain=lat * lon == 1, measured=probe)
        _, step = _step_stats(out)
        halo = sum(sum(r["halo"].values()) for r in out) / len(out)
        act = max(r["act"] for r in out)
        err = pr.step_s / step - 1
        worst = max(worst, (abs(err), f"{lat}x{lon}"))
        print(
            f"model vs measured, ranks {lat}x{lon}: step {pr.step_s:.3f} vs {step:.3f} s ({err:+.0%}), "
            f"halo {pr.halo_s * 1e3:.1f} vs {halo * 1e3:.1f} ms, "
            f"activations {pr.activation_bytes / MIB:.1f} vs {act / MIB:.1f} MiB"
        )
    verdict = "every layout within" if worst[0] <= TARGET else "NOT every layout within"
    print(f"target: step time within {TARGET:.0%}: {verdict} (worst {worst[1]}: {worst[0]:.0%})")


def main(argv: list[str] | None = None) -> None:
    a = _parse(argv)
    size = f"{a.batch}x{a.channels}x{a.levels}x{a.lat}x{a.lon} float32, width {a.width}, depth {a.depth}"
    splits = {1: [(1, 1)], 2: [(1, 2)], 4: [(1, 4), (2, 2)]}
    res, machines, probes = {}, {}, {}
    sample = (a.channels, a.levels, a.lat, a.lon)
    for n in a.ranks:
        if a.model:  # measured just before this rank count's layouts, under the same load
            machines[n] = measure_machine(n, a.backend, a.device, threads_per_rank=1)
        for lat, lon in splits.get(n, [(1, n)]):
            if a.model:  # the short probe of the shard step that plan-parallel --machine measured runs
                probes[(lat, lon)] = measure_shard_step(
                    _net(a), sample, (1, lat, lon), a.batch, threads=1, repeats=a.steps, device=a.device
                )
            res[(lat, lon)] = run_distributed(worker, n, a, lat, lon, backend=a.backend, timeout=600)
    print(f"U-Net {size}, backend {a.backend}, device {a.device}, 1 thread per rank, {a.steps} steps")
    one = predict(_net(a), (a.channels, a.levels, a.lat, a.lon), (1, 1, 1), H100_NCCL, a.batch)
    print(f"(partitioned layers on one rank save {one.activation_bytes / MIB:.1f} MiB: no level padding)")
    _report(a, res)
    if a.model:
        _model_check(a, res, machines, probes)


if __name__ == "__main__":
    main()
