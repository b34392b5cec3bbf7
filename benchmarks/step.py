"""One training step of the U-Net: plain against the data-movement switches of ensml.models.speed.

A step is forward, area-weighted MSE, backward and an AdamW update of ``UNet3d(width 16, depth
3)``, for (a) the demo size (batch 8 as in ``configs/data.yaml``, 14 channels in, 4 out, 3 levels,
32 x 64) and (b) a 0.5-degree-like grid (batch 1, 3 levels x 181 x 360). Every variant starts from
the same weights and batch; they run in interleaved rounds (a burst of load hits all alike)
after ``--warmup`` untimed steps, and one line each gives the min and median step time, the
ratio of medians against plain (of the same norm), the compile time, the bytes the step
allocates (torch.profiler's self-memory columns summed over ops: a lower bound on the bytes
written, since each new tensor is written once), the bytes autograd saves for backward (eager
only), and the first step's loss against plain's. The ``ng=4`` rows add GroupNorm(4 groups),
which the fused switch needs; under compile inductor fuses norm and GELU itself. DRAM traffic
proper needs hardware counters (ncu/perf), which the torch profiler does not read.

Usage: ``python benchmarks/step.py [--device cuda] [--repeats N] [--threads T] [--sizes demo,large]
[--variants plain,channels_last,...]``. On CPU the large grid (2-7 s a step on 2 cores) runs
plain, channels_last, channels_last+compile and channels_last+bf16 only, 2 timed steps, unless
``--variants`` names others; the whole run takes about 4 minutes (more when inductor's on-disk
cache is cold). Run by hand on a quiet machine; tests never time.
"""

from __future__ import annotations

import argparse
import math
import statistics
import time
import warnings
from dataclasses import dataclass, field

import torch
from torch.profiler import ProfilerActivity, profile

from ensml.models.speed import SpeedOptions, apply_speed, autocast, bf16_supported, to_layout
from ensml.models.unet3d import UNet3d

TARGET = 1.2
SIZES = {  # name: (batch, in channels, out channels, levels, lat, lon)
    "demo": (8, 14, 4, 3, 32, 64),
    "large": (1, 14, 4, 3, 181, 360),
    "tiny": (2, 14, 4, 3, 16, 32),  # a smoke test of this script
}
VARIANTS = {  # name: (norm groups, options)
    "plain": (0, SpeedOptions()),
    "channels_last": (0, SpeedOptions(channels_last=True)),
    "compile": (0, SpeedOptions(compile=True)),
    "channels_last+compile": (0, SpeedOptions(channels_last=True, compile=True)),
    "channels_last+bf16": (0, SpeedOptions(channels_last=True, bf16=True)),
    "channels_last+compile+bf16": (0, SpeedOptions(channels_last=True, compile=True, bf16=True)),
    "plain ng=4": (4, SpeedOptions()),
    "fused ng=4": (4, SpeedOptions(fused_norm_act=True)),
    "channels_last+fused ng=4": (4, SpeedOptions(channels_last=True, fused_norm_act=True)),
    "compile ng=4": (4, SpeedOptions(compile=True)),
}
DEFAULT = {
    "cpu": "plain,channels_last,compile,channels_last+compile,channels_last+bf16,"
    "plain ng=4,fused ng=4,channels_last+fused ng=4",
    "cuda": ",".join(VARIANTS),
}
LARGE_CPU = ("plain", "channels_last", "channels_last+compile", "channels_last+bf16")


@dataclass
class Runner:
    """One variant: its network, optimiser, batch and the times of its steps."""

    name: str
    groups: int
    options: SpeedOptions
    device: torch.device
    net: torch.nn.Module = None
    opt: torch.optim.Optimizer = None
    batch: tuple[torch.Tensor, torch.Tensor, torch.Tensor] = None
    times: list[float] = field(default_factory=list)
    compile_s: float = 0.0
    first_loss: float = math.nan
    mem: float = math.nan
    saved: float = math.nan

    def build(self, size: tuple[int, ...]) -> None:
        b, cin, cout, lev, lat, lon = size
        torch.manual_seed(0)
        net = UNet3d(cin, cout, width=16, depth=3, norm_groups=self.groups).to(self.device)
        self.net = apply_speed(net, self.options)
        self.opt = torch.optim.AdamW(net.parameters(), lr=1e-4)
        gen = torch.Generator().manual_seed(1)
        x = torch.randn(b, cin, lev, lat, lon, generator=gen).to(self.device)
        y = torch.randn(b, cout, lev, lat, lon, generator=gen).to(self.device)
        w = torch.cos(torch.deg2rad(torch.linspace(-90 + 90 / lat, 90 - 90 / lat, lat)))
        w = (w / w.mean()).reshape(lat, 1).to(self.device)
        self.batch = (to_layout(x, self.options), to_layout(y, self.options), w)

    def step(self) -> float:
        """One training step; returns the loss (synchronised on CUDA)."""
        x, y, w = self.batch
        with autocast(self.options, self.device.type):
            out = self.net(x)
        loss = ((out.float() - y).square() * w).mean()  # area-weighted MSE, in float32
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return loss.item()  # .item() waits for the device

    def timed_step(self) -> float:
        sync(self.device)
        t = time.perf_counter()
        loss = self.step()
        self.times.append(time.perf_counter() - t)
        return loss


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def allocated_bytes(runner: Runner) -> float:
    """Bytes allocated during one step, from torch.profiler's memory columns (CPU or device)."""
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if runner.device.type == "cuda" else [])
    with profile(activities=activities, profile_memory=True) as prof:
        runner.step()
    cuda = runner.device.type == "cuda"
    # Each op's own net allocation (what it allocated less what it freed, children excluded).
    mems = (e.self_device_memory_usage if cuda else e.self_cpu_memory_usage for e in prof.events())
    return float(sum(m for m in mems if m > 0))


def saved_bytes(runner: Runner) -> float:
    """Bytes autograd keeps for backward in one forward (distinct storages; eager only)."""
    if runner.options.compile:
        return math.nan
    seen: dict[tuple[int, int], int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        s = t.untyped_storage()
        seen[(s.data_ptr(), s.nbytes())] = s.nbytes()
        return t

    x, _, _ = runner.batch
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with autocast(runner.options, runner.device.type):
            runner.net(x)
    return float(sum(seen.values()))


def run_size(name: str, size: tuple[int, ...], variants: list[str], args, device) -> list[Runner]:
    runners = [Runner(v, *VARIANTS[v], device) for v in variants]
    for r in runners:
        r.build(size)
        if r.options.compile:
            torch.compiler.reset()  # each compiled variant pays its own compile
        sync(device)
        t = time.perf_counter()
        r.first_loss = r.step()
        r.compile_s = time.perf_counter() - t if r.options.compile else 0.0
        for _ in range(args.warmup):
            r.step()
    for r in runners:
        r.mem, r.saved = allocated_bytes(r), saved_bytes(r)
    for _ in range(args.repeats):
        for r in runners:
            r.timed_step()
    report(name, size, runners, args, device)
    return runners


def report(name: str, size: tuple[int, ...], runners: list[Runner], args, device) -> None:
    b, cin, cout, lev, lat, lon = size
    print(
        f"{name}: batch {b}, {cin}->{cout} channels, {lev}x{lat}x{lon}, {device.type}, "
        f"{args.repeats} timed steps after {args.warmup} warm-up",
        flush=True,
    )
    base = {r.groups: r for r in runners if not any(vars(r.options).values())}
    for r in runners:
        ref = base.get(r.groups)
        med = statistics.median(r.times)
        ratio = statistics.median(ref.times) / med if ref else math.nan
        dloss = abs(r.first_loss - ref.first_loss) / abs(ref.first_loss) if ref else math.nan
        comp = f", compile {r.compile_s:.1f} s" if r.options.compile else ""
        saved = "n/a" if math.isnan(r.saved) else f"{r.saved / 2**20:.0f} MiB"
        print(
            f"  {name} {r.name:<27s} min {min(r.times):.4f} / median {med:.4f} s -> {ratio:.2f}x "
            f"plain{comp}; allocated {r.mem / 2**20:.0f} MiB/step, saved for backward {saved}; "
            f"first loss rel diff {dloss:.1e}",
            flush=True,
        )


def best(runners: list[Runner]) -> tuple[str, float]:
    """The fastest non-plain variant without a norm (the networks the demo trains) and its ratio."""
    plain = statistics.median(next(r for r in runners if r.name == "plain").times)
    others = [r for r in runners if r.groups == 0 and r.name != "plain"]
    if not others:
        return "none", math.nan
    top = min(others, key=lambda r: statistics.median(r.times))
    return top.name, plain / statistics.median(top.times)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--repeats", type=int, default=7, help="timed steps per variant (default 7)")
    p.add_argument("--warmup", type=int, default=2, help="untimed steps after the first (default 2)")
    p.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's)")
    p.add_argument("--sizes", default="demo,large", help=f"comma list of {', '.join(SIZES)}")
    p.add_argument("--variants", default=None, help=f"comma list of: {', '.join(VARIANTS)}")
    p.add_argument("--large-repeats", type=int, default=2, help="timed steps, large size on CPU (default 2)")
    args = p.parse_args(argv)
    warnings.filterwarnings("ignore")
    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    torch.backends.cudnn.benchmark = True  # every variant picks its fastest convolutions
    variants = (args.variants or DEFAULT[device.type]).split(",")
    if "plain" not in variants:
        variants.insert(0, "plain")
    if not bf16_supported(device.type):
        variants = [v for v in variants if "bf16" not in v]
    gpu = f", {torch.cuda.get_device_name(device)}" if device.type == "cuda" else ""
    print(
        f"torch {torch.__version__}, {device.type}{gpu}, {torch.get_num_threads()} threads, "
        f"bf16 {'supported' if bf16_supported(device.type) else 'not supported'}",
        flush=True,
    )
    for name in args.sizes.split(","):
        size_args = argparse.Namespace(**{**vars(args), "repeats": args.repeats})
        chosen = variants
        if name == "large" and device.type == "cpu":  # ~2-7 s a step on 2 cores: the main ones
            size_args.repeats, size_args.warmup = args.large_repeats, 1
            chosen = [v for v in variants if v in LARGE_CPU] if args.variants is None else variants
        runners = run_size(name, SIZES[name], chosen, size_args, device)
        top, ratio = best(runners)
        verdict = f": target {TARGET}x {'met' if ratio >= TARGET else 'not met'}" if name == "demo" else ""
        print(f"  {name}: best data-movement variant {top} {ratio:.2f}x plain{verdict}", flush=True)


if __name__ == "__main__":
    main()
