"""A callback for the resume tests: it stops a run at a known point so a test can SIGKILL it."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback


class PauseAtEpoch(Callback):
    """At the start of ``epoch`` (earlier epochs checkpointed), write ``ready`` and wait.

    The test that started the run waits for ``ready`` and kills the run's process group; the
    wait is bounded so a forgotten run ends by itself.
    """

    def __init__(self, epoch: int, ready: str = "ready", wait_s: float = 120.0) -> None:
        self.epoch, self.ready, self.wait_s = epoch, Path(ready), wait_s

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.current_epoch != self.epoch:
            return
        if trainer.is_global_zero:
            self.ready.write_text(f"epoch {self.epoch}\n")
        time.sleep(self.wait_s)
        raise SystemExit(f"PauseAtEpoch: not killed within {self.wait_s} s")
