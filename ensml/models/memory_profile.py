"""Measuring a training step's memory and time under each :class:`~ensml.models.memory.MemoryPolicy`.

- :class:`LiveBytes` counts the bytes of every tensor alive while a step runs, forward and
  backward, and their peak: on the CPU what a CUDA allocator's ``max_memory_allocated`` is on
  a GPU (storages counted once, freed when their last tensor dies).
- :func:`saved_activation_bytes` counts exactly the bytes a forward pass leaves for backward
  under a policy: the tensors autograd saves (through the saved-tensor hooks) plus the inputs
  that a recomputed level holds.
- :func:`measure_steps` runs AdamW steps of a network on random data under several policies,
  interleaved, and returns each one's median step time, saved bytes, peak and bytes swapped.
"""

from __future__ import annotations

import math
import statistics
import time
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import torch
from torch import nn

from ensml.compat import dispatch_mode, view_base
from ensml.models import memory
from ensml.models.memory import MemoryPolicy, apply_policy
from ensml.models.offload import Offloader


class LiveBytes(dispatch_mode()):  # type: ignore[misc]
    """Bytes of the tensors alive while the mode is on (forward and backward), and their peak.

    Storages are counted once, however many views share them; a storage stops counting when
    its last tensor is freed. Tensors that exist before the mode starts (weights, the batch)
    are not counted: add them yourself.
    """

    def __init__(self) -> None:
        super().__init__()
        self.live = 0
        self.peak = 0
        self._count: dict[int, list[int]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for t in out if isinstance(out, tuple | list) else (out,):
            if isinstance(t, torch.Tensor) and t.device.type != "meta":
                self._track(t)
        return out

    def _track(self, t: torch.Tensor) -> None:
        storage = t.untyped_storage()
        key = storage.data_ptr()
        if not key or storage.nbytes() == 0:
            return
        entry = self._count.get(key)
        if entry is None:
            entry = self._count[key] = [storage.nbytes(), 0]
            self.live += entry[0]
            self.peak = max(self.peak, self.live)
        entry[1] += 1
        weakref.finalize(t, self._drop, key)

    def _drop(self, key: int) -> None:
        entry = self._count.get(key)
        if entry is None:
            return
        entry[1] -= 1
        if entry[1] == 0:
            self.live -= entry[0]
            del self._count[key]


@contextmanager
def _per_segment(inputs: dict[int, int]) -> Iterator[None]:
    """Record the tensor inputs of every recomputed segment (storage id -> bytes)."""

    def hook(net: nn.Module, level: int, args: tuple) -> None:
        modes = getattr(net, "memory_modes", None)
        if not modes or modes[level] != memory.RECOMPUTE:
            return
        for a in args:
            if isinstance(a, torch.Tensor):
                base = view_base(a)
                inputs[id(base)] = base.numel() * base.element_size()

    previous, memory.SEGMENT_HOOK = memory.SEGMENT_HOOK, hook
    try:
        yield
    finally:
        memory.SEGMENT_HOOK = previous


def saved_activation_bytes(net: nn.Module, x: torch.Tensor, policy: MemoryPolicy) -> int:
    """Bytes a forward pass of ``net`` on ``x`` keeps in memory for backward under ``policy``.

    The tensors autograd saves (parameters excluded, each storage once), swapped ones excluded,
    plus the inputs of recomputed levels, which their checkpoints hold. Counted exactly, through
    the saved-tensor hooks, on the real tensors.
    """
    from ensml.models.spatial.perfmodel import saved_hooks

    apply_policy(net, policy)
    saved: dict[int, tuple] = {}
    recomputed: dict[int, int] = {}
    with saved_hooks(saved), _per_segment(recomputed):
        y = net(x)
    del y
    saved_sizes = {key: n for key, (_, n) in saved.items()}
    return sum({**saved_sizes, **recomputed}.values())


@dataclass
class StepMeasure:
    """One policy on one input: step time (median, min of the timed steps, s), bytes."""

    policy: str
    step_s: float
    min_s: float
    saved_bytes: int
    peak_bytes: int  # tensors alive at the peak of a step, beyond weights, optimiser and batch
    swapped_bytes: int
    wait_s: float  # time backward waited for swapped tensors


def _step(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor) -> None:
    opt.zero_grad(set_to_none=True)
    ((net(x) - target) ** 2).mean().backward()
    opt.step()


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_step(
    net: nn.Module, x: torch.Tensor, policy: MemoryPolicy, steps: int = 3, warmup: int = 1
) -> StepMeasure:
    """Time ``steps`` AdamW steps (MSE against a random target) of ``net`` under ``policy``.

    ``net`` and ``x`` on the device to measure. The peak is the allocator's on CUDA and the
    live-tensor count of :class:`LiveBytes` on the CPU (one extra, untimed step).
    """
    return measure_steps(net, x, [policy], steps, warmup)[0]


def measure_steps(
    net: nn.Module,
    x: torch.Tensor,
    policies: list[MemoryPolicy],
    steps: int = 3,
    warmup: int = 1,
    min_time_s: float = 1.0,
) -> list[StepMeasure]:
    """:func:`measure_step` for several policies, their timed steps interleaved (round-robin), so
    that a machine that slows down or speeds up during the measurement affects all alike.

    Short steps get more rounds than ``steps`` (up to 25), so that each policy is timed for about
    ``min_time_s``: a median of three 40 ms steps moves by 20% on a busy machine.
    """
    device = x.device
    saved = [saved_activation_bytes(net, x, p) for p in policies]
    offloaders = [
        Offloader(p.offload, p.scratch_dir, p.prefetch) if p.offload != "none" else None for p in policies
    ]
    with torch.no_grad():
        target = torch.randn_like(apply_policy(net, None)(x))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-6)
    times: list[list[float]] = [[] for _ in policies]
    rounds, r = warmup + steps, 0
    while r < rounds:
        for i, (policy, off) in enumerate(zip(policies, offloaders)):
            apply_policy(net, policy, off)
            if off is not None and r == warmup:
                off.reset_stats()
            _sync(device)
            t0 = time.perf_counter()
            _step(net, opt, x, target)
            _sync(device)
            times[i].append(time.perf_counter() - t0)
        if r == warmup:  # the first timed round sets how many rounds make min_time_s
            longest = max(t[-1] for t in times)
            rounds = warmup + min(25, max(steps, math.ceil(min_time_s / max(longest, 1e-6))))
        r += 1
    times = [t[warmup:] for t in times]
    steps = rounds - warmup
    out = []
    for i, (policy, off) in enumerate(zip(policies, offloaders)):
        apply_policy(net, policy, off)
        peak = _peak(net, opt, x, target)
        swapped = off.swapped_bytes // max(steps, 1) if off else 0
        wait = off.wait_s / max(steps, 1) if off else 0.0
        t = times[i]
        out.append(StepMeasure(policy.name, statistics.median(t), min(t), saved[i], peak, swapped, wait))
        if off is not None:
            off.close()
    apply_policy(net, None)
    return out


def _peak(net: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, target: torch.Tensor) -> int:
    device = x.device
    if device.type == "cuda":
        torch.cuda.synchronize(device)
        base = torch.cuda.memory_allocated(device)
        torch.cuda.reset_peak_memory_stats(device)
        _step(net, opt, x, target)
        torch.cuda.synchronize(device)
        return torch.cuda.max_memory_allocated(device) - base
    opt.zero_grad(set_to_none=True)
    mode = LiveBytes()
    with mode:
        ((net(x) - target) ** 2).mean().backward()
    opt.step()
    return mode.peak  # activations, their gradients and the weights' gradients


def state_bytes(net: nn.Module) -> int:
    """What a step needs besides its own tensors: the weights and AdamW's two moments."""
    return 3 * sum(p.numel() * p.element_size() for p in net.parameters())


__all__ = [
    "LiveBytes",
    "StepMeasure",
    "measure_step",
    "measure_steps",
    "saved_activation_bytes",
    "state_bytes",
]
