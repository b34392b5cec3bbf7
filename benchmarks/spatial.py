"""Spatial-parallel 3D U-Net: activation memory, step time, halo share; performance model check.

Run by hand (CPU, gloo):  python benchmarks/spatial.py
GPU (one process per GPU): python benchmarks/spatial.py --backend nccl --device cuda \
    --lat 361 --lon 720 --levels 11 --channels 8 --width 16 --depth 5 --ranks 1 2

Each rank runs one thread. Activation memory is the bytes autograd saves in one forward pass
(plus, on CUDA, the allocator's peak); the halo share is the time inside halo exchanges (forward
and backward, including waiting for the neighbour) over the step time, per U-Net level.
"""

from __future__ import annotations

import argparse
import re
import time
from collections import defaultdict

import torch

from ensml.models.spatial import ProcessGrid, SpatialUNet3d, global_mean, halo_exchange, reduce_gradients
from ensml.models.spatial.grid import LON
from ensml.models.spatial.halo import HALO_STATS, enable_halo_timing
from ensml.models.spatial.perfmodel import H100_NCCL, MachineModel, predict, saved_bytes, saved_hooks
from ensml.models.spatial.testing import run_distributed
from ensml.models.spatial.unet import unet_shard_sizes
from ensml.models.unet3d import UNet3d

MIB = 2.0**20


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
    return dict(act=act, peak=peak, step=sorted(times)[len(times) // 2], timed=timed, halo=dict(halo))


def calibrate(a) -> dict:
    """Two ranks: halo latency and bandwidth from exchanges of two sizes (medians of 30)."""
    grid = ProcessGrid(lon=2)
    device = "cuda" if a.device == "cuda" else "cpu"
    out = {}
    for n in (1, 2**20):
        x = torch.randn(n, device=device).view(1, 1, 1, 1, n)
        lo, hi = grid.neighbour(LON, -1, False), grid.neighbour(LON, 1, False)
        times = []
        for _ in range(33):
            t0 = time.perf_counter()
            halo_exchange(x, LON, lo, hi, n, n, n, n)
            times.append(time.perf_counter() - t0)
        out[n * 4] = sorted(times[3:])[15]
    (b0, t_small), (b1, t_big) = sorted(out.items())
    return dict(latency=t_small, bandwidth=(b1 - b0) / max(t_big - t_small, 1e-9))


def compute_rates(a, step_s: float) -> tuple[float, float]:
    """FLOP/s of convolutions (from the measured one-rank step) and elements/s of GELU."""
    torch.set_num_threads(1)
    unet = _net(a)
    ref = MachineModel("unit", 1.0, 1e300, 1e300, 0, 0)
    pred = predict(unet, (a.channels, a.levels, a.lat, a.lon), (1, 1, 1), ref, a.batch)
    flops = sum(c.flops for c in pred.layers)
    elems = sum(c.elements for c in pred.layers)
    xe = torch.randn(a.batch, a.width, a.levels, a.lat, a.lon, requires_grad=True)
    times = []
    for _ in range(7):
        t0 = time.perf_counter()
        torch.nn.functional.gelu(xe).sum().backward()
        times.append(time.perf_counter() - t0)
    t_elem = sorted(times)[3] / (3 * xe.numel())
    return flops / max(step_s - elems * t_elem, 1e-9), 1.0 / t_elem


def main(argv: list[str] | None = None) -> None:
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
    p.add_argument("--steps", type=int, default=5)
    p.add_argument("--ranks", type=int, nargs="+", default=[1, 2, 4])
    a = p.parse_args(argv)
    size = f"{a.batch}x{a.channels}x{a.levels}x{a.lat}x{a.lon} float32, width {a.width}, depth {a.depth}"
    splits = {1: [(1, 1)], 2: [(1, 2)], 4: [(1, 4), (2, 2)]}
    res = {}
    for n in a.ranks:
        for lat, lon in splits.get(n, [(1, n)]):
            out = run_distributed(worker, n, a, lat, lon, backend=a.backend, timeout=600)
            res[(lat, lon)] = out
    single = res[(1, 1)][0] if (1, 1) in res else None
    print(f"U-Net {size}, backend {a.backend}, device {a.device}, 1 thread per rank")
    one = predict(_net(a), (a.channels, a.levels, a.lat, a.lon), (1, 1, 1), H100_NCCL, a.batch)
    print(f"(partitioned layers on one rank save {one.activation_bytes / MIB:.1f} MiB: no level padding)")
    for (lat, lon), out in res.items():
        act = max(r["act"] for r in out)
        step = max(r["step"] for r in out)
        line = f"ranks {lat * lon} (lat {lat} x lon {lon}): activations {act / MIB:7.1f} MiB/rank"
        if single:
            line += f" -> {act / single['act']:.2f}x single"
            line += f", step {step:.3f} s ({single['step'] / step:.2f}x speed-up)"
        else:
            line += f", step {step:.3f} s"
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
    if a.device == "cpu" and single:
        comm = run_distributed(calibrate, 2, a, timeout=120)[0]
        flops, elem = compute_rates(a, single["step"])
        cpu = MachineModel(
            "CPU gloo (calibrated)", flops, elem, comm["bandwidth"], comm["latency"], 2 * comm["latency"]
        )
        print(
            f"calibration: conv {flops / 1e9:.1f} GFLOP/s, elementwise {elem / 1e6:.0f} Melem/s, "
            f"halo latency {comm['latency'] * 1e6:.0f} us, bandwidth {comm['bandwidth'] / 1e9:.2f} GB/s"
        )
        for (lat, lon), out in res.items():
            # one rank runs the plain UNet3d (with level padding), more ranks the partitioned one
            sample = (a.channels, a.levels, a.lat, a.lon)
            pr = predict(_net(a), sample, (1, lat, lon), cpu, a.batch, plain=lat * lon == 1)
            act = max(r["act"] for r in out)
            step = max(r["step"] for r in out)
            halo = sum(sum(r["halo"].values()) for r in out) / len(out)
            print(
                f"model vs measured, ranks {lat}x{lon}: step {pr.step_s:.3f} vs {step:.3f} s, "
                f"halo {pr.halo_s * 1e3:.1f} vs {halo * 1e3:.1f} ms, "
                f"activations {pr.activation_bytes / MIB:.1f} vs {act / MIB:.1f} MiB"
            )


if __name__ == "__main__":
    main()
