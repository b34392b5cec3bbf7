"""Memory policies of the 3D U-Net: saved activations, peak memory, step time; the planner checked.

Run by hand (CPU):  python benchmarks/memory.py
GPU:                python benchmarks/memory.py --device cuda --batch 1

For each grid (the demo's 32 x 64, and 361 x 720, the research's 0.5 degree globe) and each policy
(keep everything, recompute levels, recompute all, swap every level, swap level 0 + recompute the
rest): the bytes saved for backward (counted exactly through the saved-tensor hooks), the peak of
live tensors in a step, the peak resident memory of a fresh process running the step, and the step
time (median over interleaved repeats; min beside it). The planner of ``ensml plan-memory``
predicts each policy at each grid from two smaller grids (ensml.models.memory_plan); the table
shows predicted against measured step time and peak. Last, the largest grid of the globe's
aspect each policy trains within --budget_gib, on one rank and on a 2-rank spatial split.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time

import torch

from ensml.experiments.memory_plan import spatial_scales
from ensml.models import UNet3d
from ensml.models.memory import apply_policy
from ensml.models.memory_plan import (
    candidate_policies,
    fit_policies,
    measure_grids,
    padded_points,
    plan_memory,
)
from ensml.models.memory_profile import measure_steps, state_bytes

GIB, MIB = 2.0**30, 2.0**20


def _net(a) -> UNet3d:
    torch.manual_seed(0)
    return UNet3d(a.channels, a.out, width=a.width, depth=a.depth)


def _status_kib(field: str) -> int:
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _resident(a, grid, policy, queue) -> None:
    """In a fresh process: peak resident memory of one step beyond what existed before it."""
    torch.set_num_threads(a.threads)
    net = _net(a).to(a.device)
    x = torch.randn(a.batch, a.channels, a.levels, *grid, device=a.device)
    target = torch.randn(a.batch, a.out, a.levels, *grid, device=a.device)
    opt = torch.optim.AdamW(net.parameters(), lr=1e-6)
    apply_policy(net, policy)
    for p in net.parameters():  # the optimiser state exists before the measured step
        opt.state[p]["step"] = torch.tensor(0.0)
        opt.state[p]["exp_avg"] = torch.zeros_like(p)
        opt.state[p]["exp_avg_sq"] = torch.zeros_like(p)
    for step in range(2):  # a warm-up step, then the measured one
        if step:
            with open("/proc/self/clear_refs", "w") as f:  # Linux: restart the peak (VmHWM) now
                f.write("5")
            before = _status_kib("VmRSS")
        opt.zero_grad()
        ((net(x) - target) ** 2).mean().backward()
        opt.step()
    queue.put((_status_kib("VmHWM") - before) * 1024)


def resident_peak(a, grid, policy) -> float:
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    p = ctx.Process(target=_resident, args=(a, grid, policy, queue))
    # Large blocks straight from (and back to) the kernel, so that resident memory follows the
    # tensors alive rather than what glibc's heap keeps after a free.
    os.environ["MALLOC_MMAP_THRESHOLD_"] = str(256 * 1024)
    try:
        p.start()
    finally:
        del os.environ["MALLOC_MMAP_THRESHOLD_"]
    out = queue.get(timeout=1800)
    p.join()
    return out


def run_grid(a, grid, policies) -> list:
    device = torch.device(a.device)
    net = _net(a).to(device)
    shape = lambda h, w: (a.batch, a.channels, a.levels, h, w)  # noqa: E731
    t0 = time.perf_counter()
    points = padded_points(net, *grid)
    io, fixed = 4.0 * (a.channels + a.out) * a.levels * a.batch, state_bytes(net)
    budget = a.budget_gib * GIB
    fits, anchor = fit_policies(lambda: _net(a), shape, grid, policies, budget, fixed, io, device, a.steps)
    plan_s = time.perf_counter() - t0
    spatial = spatial_scales(_net(a), (a.channels, a.levels, *grid), a.batch, [2], device)
    plan = plan_memory(fits, grid, points, budget, fixed, io, spatial)
    x = torch.randn(shape(*grid), device=device)
    measured = measure_steps(net, x, policies, steps=a.steps)
    print(
        f"\ngrid {grid[0]} x {grid[1]} (x {a.levels} levels, {a.channels} channels, batch {a.batch}); "
        f"planner measured {measure_grids(grid, 2**a.depth)}"
        f"{f' and {a.steps} steps of {len(anchor)} policies at the grid' if anchor else ''} in {plan_s:.0f} s"
    )
    base = measured[0]
    print(
        f"{'policy':<24} {'saved MiB':>10} {'x none':>7} {'live peak MiB':>14} {'resident MiB':>13} "
        f"{'step s (min)':>15} {'x none':>7} {'predicted s':>12} {'err':>6} {'pred. peak MiB':>15}"
    )
    errors = []
    for m, policy, row in zip(measured, policies, plan.rows):
        rss = resident_peak(a, grid, policy) if a.resident else float("nan")
        err = row.step_s / m.step_s - 1
        errors.append(abs(err))
        pred_peak = row.total_bytes - state_bytes(net) - io * points
        print(
            f"{m.policy:<24} {m.saved_bytes / MIB:10.1f} {m.saved_bytes / base.saved_bytes:7.2f} "
            f"{m.peak_bytes / MIB:14.1f} {rss / MIB:13.1f} {m.step_s:8.3f} ({m.min_s:.3f}) "
            f"{m.step_s / base.step_s:7.2f} {row.step_s:12.3f} {100 * err:+5.0f}% {pred_peak / MIB:15.1f}"
        )
    for m, policy in zip(measured, policies):
        if policy.checkpointing == "none" or policy.offload != "none":
            continue  # the target is about recomputation alone
        ok = m.saved_bytes <= 0.5 * base.saved_bytes and m.step_s <= 1.35 * base.step_s
        print(
            f"target: checkpointing ({policy.name}) <= 0.5x saved bytes at <= 1.35x step time: "
            f"{m.saved_bytes / base.saved_bytes:.2f}x at {m.step_s / base.step_s:.2f}x -> "
            f"{'met' if ok else 'NOT met'}"
        )
    print(
        f"target: planner step time within 15% of measured: worst {100 * max(errors):.0f}% -> "
        f"{'met' if max(errors) <= 0.15 else 'NOT met'}"
    )
    print(f"largest grid (lat x lon, aspect {grid[0]}:{grid[1]}) within {a.budget_gib:g} GiB:")
    for row in plan.rows:
        print(f"  {row.policy.name:<24} ranks {row.ranks}: {row.largest[0]} x {row.largest[1]}")
    return measured


def plot(results: dict, path: str) -> None:
    """Peak memory against step time, one panel per grid, one marker per policy."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(results), figsize=(5 * len(results), 4), squeeze=False)
    for ax, (grid, measured) in zip(axes[0], results.items()):
        for m in measured:
            ax.plot(m.step_s, m.peak_bytes / MIB, "o", ms=8, label=m.policy)
            ax.annotate(m.policy, (m.step_s, m.peak_bytes / MIB), xytext=(5, 5), textcoords="offset points")
        ax.set(
            title=f"{grid[0]} x {grid[1]} grid",
            xlabel="step time (s, median)",
            ylabel="peak of live tensors (MiB)",
        )
        ax.set_ylim(bottom=0)
        ax.grid(alpha=0.3)
    fig.suptitle("Memory policies of the 3D U-Net: memory against time (benchmarks/memory.py)")
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--grids", default="32x64,361x720")
    p.add_argument("--levels", type=int, default=2)
    p.add_argument("--channels", type=int, default=18, help="the demo's mixed task: 3 leads x 2 x 2 + 2 + 4")
    p.add_argument("--out", type=int, default=8, help="2 target leads x 2 variables x (mean, std)")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=3)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--budget_gib", type=float, default=20.0)
    p.add_argument("--scratch", default=None, help="folder of the disk swap file (default: /tmp)")
    p.add_argument("--no_resident", dest="resident", action="store_false")
    p.add_argument("--plot", default=None, help="write the memory-against-time figure here (PNG)")
    a = p.parse_args(argv)
    torch.set_num_threads(a.threads)
    policies = candidate_policies(a.device, a.scratch)
    print(
        f"U-Net width {a.width}, depth {a.depth}, float32, {torch.get_num_threads()} threads, "
        f"device {a.device}; "
        f"timings: median (min) of {a.steps} interleaved steps after one warm-up"
    )
    results = {}
    for text in a.grids.split(","):
        h, w = (int(v) for v in text.split("x"))
        results[(h, w)] = run_grid(a, (h, w), policies)
    if a.plot:
        plot(results, a.plot)


if __name__ == "__main__":
    main()
