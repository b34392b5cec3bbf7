"""The straggler injector: its delays follow the documented distributions (closed-form means),
and with ``ranks: random`` the ranks agree on one slow rank per batch."""

from __future__ import annotations

from types import SimpleNamespace

import numpy as np
import pytest

from ensml.train.stragglers import Stragglers


@pytest.mark.parametrize(
    ("delay", "scale", "mean"),
    [
        ("fixed", 0.02, 0.02),
        ("exponential", 0.02, 0.02),
        ("lognormal", 0.02, 0.02),
        ("pareto", 0.01, 0.01 * 3.0 / 2.0),
        ("none", 0.5, 0.0),
    ],  # pareto: scale * shape / (shape - 1), shape 3
)
def test_delay_means(delay: str, scale: float, mean: float) -> None:
    s = Stragglers(delay=delay, delay_s=scale, shape=3.0, seed=2)
    draws = np.array([s.draw() for _ in range(40000)])
    assert draws.mean() == pytest.approx(mean, rel=0.03, abs=1e-12)
    if delay == "pareto":
        assert draws.min() >= scale  # the scale is the minimum


def test_ranks_agree_on_one_random_straggler_per_batch() -> None:
    callbacks = [Stragglers(ranks="random", delay="exponential", delay_s=0.1, seed=3) for _ in range(4)]
    chosen = []
    for batch in range(200):
        slow = []
        for rank, cb in enumerate(callbacks):  # each rank's own callback, as in a real run
            cb.on_train_batch_start(SimpleNamespace(world_size=4, global_rank=rank), None, None, batch)
            slow.append(cb._slow)
        assert sum(slow) == 1 and len({cb._extra for cb in callbacks}) == 1
        chosen.append(slow.index(True))
    assert set(chosen) == {0, 1, 2, 3}
