"""The physics testbed's cost: what batching the members buys, and the whole default dataset.

1. One time step of the forecast model (:data:`ensml.data.physics.runs.FORECAST`, T21, 8
   layers) on 1 state and on a batch of ``CHUNK_INITS × 10`` states (how ``ensml data
   physics`` runs the members): ms per state and step, min and median over ``--repeats``
   rounds of ``--steps`` steps after one untimed round, 1 torch thread. The ratio is what the
   batching buys; the truth (one state) pays the unbatched price.
2. ``--compile``: the same batch through ``torch.compile`` (first call excluded), against eager.
3. ``--full``: ``ensml data physics`` with its defaults (360 inits, 10 members, leads 0-48 h,
   120 days of spin-up) into a temporary folder, all cores, once: the wall time the issue's
   15-minute budget is about.

Usage: ``python benchmarks/physics.py [--repeats 5] [--steps 10] [--compile] [--full]``; run on
a quiet machine (about 1 minute, plus about 10 with ``--full``).
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time

import numpy as np
import torch

from ensml.data.physics.core import Core
from ensml.data.physics.runs import CHUNK_INITS, FORECAST

MEMBERS = 10


def _batch(core: Core, size: int):
    """``size`` different states: an atmosphere at rest, perturbed, a day into its spin-up."""
    state = core.perturb(core.rest(1), 1.0, 1e-5, torch.Generator().manual_seed(0))
    state = core.advance(state, 24)
    arrays = {k: np.repeat(v, size, 0) for k, v in core.state_arrays(state).items()}
    return core.perturb(core.from_arrays(arrays), 0.1, 1e-6, torch.Generator().manual_seed(1))


def _per_state_step(step, state, size: int, steps: int, repeats: int) -> list[float]:
    """ms per state and step, one value per round (after an untimed round)."""
    times = []
    for r in range(repeats + 1):
        start = time.perf_counter()
        for _ in range(steps):
            state = step(state)
        if r:
            times.append((time.perf_counter() - start) / steps / size * 1e3)
    return times


def _line(name: str, times: list[float]) -> str:
    return f"{name}: min {min(times):.2f}, median {statistics.median(times):.2f} ms per state and step"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    parser.add_argument("--compile", action="store_true")
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)
    core = Core(FORECAST)
    size = CHUNK_INITS * MEMBERS
    one = _per_state_step(core._step, _batch(core, 1), 1, args.steps, args.repeats)
    many = _per_state_step(core._step, _batch(core, size), size, args.steps, args.repeats)
    print(_line("T21 step, 1 state (1 thread)", one))
    print(_line(f"T21 step, batch of {size} (1 thread)", many))
    print(f"batching: {statistics.median(one) / statistics.median(many):.2f}x less time per state (medians)")
    if args.compile:
        compiled = torch.compile(core._step)
        state = _batch(core, size)
        compiled(state)  # compile outside the timing
        fast = _per_state_step(compiled, state, size, args.steps, args.repeats)
        print(_line(f"T21 step, batch of {size}, torch.compile", fast))
        print(f"torch.compile: {statistics.median(many) / statistics.median(fast):.2f}x (medians)")
    if args.full:
        from ensml.data.physics.generate import physics

        with tempfile.TemporaryDirectory() as tmp:
            start = time.perf_counter()
            physics(f"{tmp}/physics")
            took = time.perf_counter() - start
        print(
            f"ensml data physics, defaults (360 inits x 10 members): {took:.0f} s = {took / 60:.1f} min "
            f"(budget 15 min: {took / 900:.0%} of it)"
        )


if __name__ == "__main__":
    main()
