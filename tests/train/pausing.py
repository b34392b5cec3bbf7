"""Callbacks for the tests of real runs: stop a run at a known point (to SIGKILL it or run a
second one beside it), or fill the disk under it."""

from __future__ import annotations

import time
from pathlib import Path

import lightning as L
from lightning.pytorch.callbacks import Callback

from tests.data.outputs_sandbox import fill_disk


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


class PauseAtPredict(Callback):
    """When prediction starts, write ``ready`` and wait until the file ``go`` exists.

    A test starts a second run meanwhile (which finds the first holding the output folder), then
    writes ``go``; the wait is bounded so a forgotten run ends by itself.
    """

    def __init__(self, ready: str = "ready", go: str = "go", wait_s: float = 120.0) -> None:
        self.ready, self.go, self.wait_s = Path(ready), Path(go), wait_s

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.ready.write_text("predicting\n")
        deadline = time.monotonic() + self.wait_s
        while not self.go.exists():
            if time.monotonic() > deadline:
                raise SystemExit(f"PauseAtPredict: no {self.go} within {self.wait_s} s")
            time.sleep(0.05)


class FillDisk(Callback):
    """At ``setup``, fill the file system of the working folder (``filler``): the writes after it,
    ``config.yaml`` first, meet a full disk. For the tests of a full disk in a tmpfs."""

    def __init__(self, filler: str = "filler") -> None:
        self.filler = Path(filler)

    def setup(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        fill_disk(self.filler)
