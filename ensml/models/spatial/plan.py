"""Recommend a spatial × data split of a device count from the performance model."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from ensml.errors import EnsmlError
from ensml.models.spatial.perfmodel import H100_NCCL, MachineModel, Prediction, predict

GIB = 2.0**30


@dataclass
class ParallelPlan:
    """All evaluated splits (best first) and the recommended one (None if nothing fits)."""

    recommended: Prediction | None
    candidates: list[Prediction]
    machine: MachineModel
    batch_size: int

    def throughput(self, p: Prediction) -> float:
        """Predicted samples per second of the whole machine for split ``p``."""
        return p.data * self.batch_size / p.step_s

    def table(self) -> str:
        """One line per split: memory, compute, halo and all-reduce time, throughput."""
        lines = [f"machine: {self.machine.name}, {self.batch_size} sample(s) per replica per step"]
        lines.append("data×lat×lon  act.mem/rank  compute   halo      allreduce  step      samples/s  fits")
        for p in self.candidates:
            fits = p.activation_bytes + p.state_bytes <= self.machine.memory_gib * GIB
            lines.append(
                f"{p.data:>4}×{p.lat}×{p.lon:<5}  {p.activation_bytes / GIB:8.2f} GiB  "
                f"{p.compute_s * 1e3:7.2f} ms {p.halo_s * 1e3:7.2f} ms {p.grad_allreduce_s * 1e3:7.2f} ms  "
                f"{p.step_s * 1e3:7.2f} ms {self.throughput(p):9.2f}  {'yes' if fits else 'no'}"
            )
        if self.recommended is None:
            lines.append("no split fits in memory: use more devices or a smaller batch")
        else:
            r = self.recommended
            lines.append(f"recommended: data={r.data}, spatial lat={r.lat} × lon={r.lon}")
        return "\n".join(lines)


def _splits(devices: int) -> list[tuple[int, int, int]]:
    return [
        (devices // s, lat, s // lat)
        for s in range(1, devices + 1)
        if devices % s == 0
        for lat in range(1, s + 1)
        if s % lat == 0
    ]


def plan_parallel(
    model: nn.Module,
    n_level: int,
    n_lat: int,
    n_lon: int,
    devices: int,
    *,
    batch_size: int = 1,
    machine: MachineModel = H100_NCCL,
    memory_gib: float | None = None,
    dtype: torch.dtype = torch.float32,
    compute: Callable[[tuple[int, int, int], Prediction], float | None] | None = None,
) -> ParallelPlan:
    """Predict every ``data × lat × lon`` split of ``devices`` and recommend the fastest that fits.

    Parameters
    ----------
    model
        The single-process network (e.g. ``UNet3d``); only traced on the meta device.
    n_level, n_lat, n_lon
        Size of one unpadded sample (levels, latitudes, longitudes); channels come from the model.
    devices
        Total number of ranks (GPUs).
    batch_size
        Samples per replica per step.
    machine, memory_gib
        Rates of one rank, and its memory in GiB (default: ``machine.memory_gib``) for activations
        plus parameters, gradients and Adam moments.
    compute
        ``compute(split, prediction)``: the measured step of one rank's shard for a
        ``(data, lat, lon)`` split (a :class:`~ensml.models.spatial.perfmodel.ShardStep`, e.g.
        from :func:`~ensml.models.spatial.shard_step.measure_shard_step`), or None to keep the
        FLOP-rate estimate and the machine's wait of ``prediction``.
    """
    if devices < 1:
        raise EnsmlError(f"plan-parallel: need at least one device, got {devices}")
    if memory_gib is not None:
        machine = MachineModel(**{**machine.__dict__, "memory_gib": memory_gib})
    first = next(m for m in model.modules() if isinstance(m, nn.Conv3d))
    sample = (first.in_channels, n_level, n_lat, n_lon)
    block = 2 ** getattr(model, "depth", 0)
    preds = []
    for data, lat, lon in _splits(devices):
        if -(-n_lat // block) < lat or -(-n_lon // block) < lon:
            continue  # fewer pooling blocks than shards
        pred = predict(model, sample, (data, lat, lon), machine, batch_size, dtype)
        step = compute((data, lat, lon), pred) if compute is not None else None
        if step is not None:
            pred = predict(model, sample, (data, lat, lon), machine, batch_size, dtype, measured=step)
        preds.append(pred)
    plan = ParallelPlan(None, [], machine, batch_size)
    preds.sort(key=lambda p: -plan.throughput(p))
    plan.candidates = preds
    fitting = [p for p in preds if p.activation_bytes + p.state_bytes <= machine.memory_gib * GIB]
    plan.recommended = fitting[0] if fitting else None
    return plan
