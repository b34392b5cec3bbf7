"""Load imbalance on demand: a callback that makes chosen ranks slow, to study stragglers on one machine.

``trainer.callbacks: [{class_path: ensml.train.stragglers.Stragglers, init_args: {ranks: [1],
slowdown: 2.0}}]`` makes rank 1 take twice as long as its own compute for every batch it
computes: after the backward pass it sleeps ``(slowdown - 1) ×`` the time since the batch began,
plus a random delay drawn per batch from ``delay`` (``fixed``: ``delay_s``; ``exponential`` and
``lognormal`` with mean ``delay_s``; ``pareto``, heavy-tailed, with scale ``delay_s`` and shape
``shape``). ``ranks: random`` slows one rank per batch, drawn with the same seed on every rank so
they agree on which. A batch a decentralised strategy skips (its round already started) is not
computed, so it is not delayed either.
"""

from __future__ import annotations

import time
from typing import Any, Literal

import lightning as L
import numpy as np

from ensml.errors import EnsmlError
from ensml.seeds import Seed

DELAYS = ("none", "fixed", "exponential", "lognormal", "pareto")


class Stragglers(L.Callback):
    """Slow down chosen ranks' training steps (see the module docstring).

    Parameters
    ----------
    ranks
        Global ranks to slow down, or ``"random"`` for one rank per batch.
    slowdown
        Factor on the rank's own compute time of each batch (1: no stretch, 2: twice as slow).
    delay
        Distribution of an extra sleep per batch: ``none``, ``fixed``, ``exponential``,
        ``lognormal`` (sigma 1) or ``pareto``.
    delay_s
        Its scale in seconds (the mean, except ``pareto``: the minimum).
    shape
        Pareto's shape (smaller: heavier tail; the mean is finite above 1).
    seed
        Seed of the random draws (the same on every rank), 0 … 2**32 - 1.
    """

    def __init__(
        self,
        ranks: tuple[int, ...] | Literal["random"] = (0,),
        slowdown: float = 2.0,
        delay: Literal["none", "fixed", "exponential", "lognormal", "pareto"] = "none",
        delay_s: float = 0.0,
        shape: float = 1.5,
        seed: Seed = 0,
    ) -> None:
        if slowdown < 1 or delay_s < 0 or shape <= 0:
            raise EnsmlError(
                f"stragglers need slowdown >= 1, delay_s >= 0 and shape > 0, "
                f"got slowdown={slowdown}, delay_s={delay_s}, shape={shape}"
            )
        if delay not in DELAYS:
            raise EnsmlError(f"stragglers delay must be one of {', '.join(DELAYS)}, got {delay!r}")
        if ranks != "random" and any(int(r) < 0 for r in ranks):
            raise EnsmlError(f"stragglers ranks must be >= 0, got {list(ranks)}")
        self.ranks = ranks if ranks == "random" else [int(r) for r in ranks]
        self.slowdown, self.delay, self.delay_s, self.shape = slowdown, delay, delay_s, shape
        self.rng = np.random.default_rng(int(seed))
        self.slept_s = 0.0
        self._start = self._extra = 0.0  # this batch's start and random delay
        self._slow = False

    def draw(self) -> float:
        """One random delay (seconds) from the configured distribution."""
        scale = self.delay_s
        if self.delay == "fixed":
            return scale
        if self.delay == "exponential":
            return float(self.rng.exponential(scale))
        if self.delay == "lognormal":  # mean scale: exp(mu + 1/2) = scale
            return float(self.rng.lognormal(np.log(scale) - 0.5, 1.0)) if scale > 0 else 0.0
        if self.delay == "pareto":
            return float(scale * (1 + self.rng.pareto(self.shape)))
        return 0.0

    def on_train_batch_start(
        self, trainer: L.Trainer, pl_module: L.LightningModule, batch: Any, batch_idx: int
    ) -> None:
        world = trainer.world_size
        chosen = [int(self.rng.integers(world))] if self.ranks == "random" else self.ranks
        self._extra = self.draw()  # drawn on every rank, so the streams stay in step
        self._slow = trainer.global_rank in chosen
        self._start = time.perf_counter()

    def on_after_backward(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not self._slow:
            return
        own = time.perf_counter() - self._start
        wait = (self.slowdown - 1) * own + self._extra
        if wait > 0:
            time.sleep(wait)
            self.slept_s += wait
