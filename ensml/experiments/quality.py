"""Time to quality: how long and how many samples a network needs to reach a baseline's score.

MLPerf HPC reports time-to-train: the wall time until a model first reaches a quality target on
held-out data. ``ensml benchmark`` does the same with a baseline as the target: local EMOS's
validation CRPS for the post-processing networks, the K-member sample std's validation error
for the spread networks, both in the tasks' own normalised units (``val/crps``,
``val/spread_mse``). The clock
runs from the start of ``fit`` and includes the validation passes, as MLPerf's does.
"""

from __future__ import annotations

import signal
import time
from dataclasses import dataclass, field

import lightning as L

from ensml.errors import signal_as_interrupted


@dataclass
class Checkpoint:
    """One validation pass: when it ended, the training samples seen, the validation loss."""

    epoch: int
    seconds: float
    samples: int
    val_loss: float


@dataclass
class QualityLog(L.Callback):
    """Records (seconds, training samples, validation score) at the end of every validation pass.

    The score is the task's ``val/<quality_name>`` (``val/crps`` of a mixed task, ``val/spread_mse``
    of a spread task), whatever loss trains it; the weights of the best pass are kept.
    """

    history: list[Checkpoint] = field(default_factory=list)
    _start: float = 0.0
    _samples: int = 0
    _best_state: dict | None = None

    def on_fit_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self.history, self._samples, self._start, self._best_state = [], 0, time.perf_counter(), None

    def on_train_batch_end(self, trainer, pl_module, outputs, batch, batch_idx) -> None:
        self._samples += int(batch["mean_k"].shape[0])

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        key = f"val/{pl_module.quality_name}"
        if trainer.sanity_checking or key not in trainer.callback_metrics:
            return
        loss = float(trainer.callback_metrics[key])
        best = self.best
        self.history.append(
            Checkpoint(trainer.current_epoch, time.perf_counter() - self._start, self._samples, loss)
        )
        if best is None or loss < best.val_loss:  # keep the best weights, as ModelCheckpoint would
            self._best_state = {k: v.detach().clone() for k, v in pl_module.state_dict().items()}

    def restore_best(self, pl_module: L.LightningModule) -> None:
        """Load the weights of the best validation pass into ``pl_module`` (if any was recorded)."""
        if self._best_state is not None:
            pl_module.load_state_dict(self._best_state)

    def first_reaching(self, target: float) -> Checkpoint | None:
        """The first validation pass whose loss is at most ``target`` (None if none was)."""
        return next((c for c in self.history if c.val_loss <= target), None)

    @property
    def best(self) -> Checkpoint | None:
        """The validation pass with the lowest loss."""
        return min(self.history, key=lambda c: c.val_loss, default=None)


def quality_trainer(
    task: L.LightningModule, max_epochs: int, patience: int | None, limit: int | None = None
) -> tuple[L.Trainer, QualityLog]:
    """The benchmark's trainer of ``task`` on the CPU (deterministic, quiet, gradients clipped
    at 1) and its :class:`QualityLog`: at most ``max_epochs``, stopping early after ``patience``
    epochs without a better ``val/<quality_name>`` (None: never), ``limit`` batches an epoch."""
    from lightning.pytorch.callbacks import EarlyStopping

    log = QualityLog()
    callbacks: list[L.Callback] = [log]
    if patience is not None:
        callbacks.append(EarlyStopping(f"val/{task.quality_name}", patience=patience, check_finite=True))
    trainer = L.Trainer(
        accelerator="cpu",
        devices=1,
        max_epochs=max_epochs,
        deterministic=True,
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
        num_sanity_val_steps=0,
        limit_train_batches=limit,
        limit_val_batches=limit,
        callbacks=callbacks,
        gradient_clip_val=1.0,
    )
    return trainer, log


def fit_best(
    task: L.LightningModule,
    datamodule: L.LightningDataModule,
    max_epochs: int,
    patience: int | None,
    seed: int,
    limit: int | None = None,
) -> float:
    """Train ``task`` on ``datamodule`` with :func:`quality_trainer` (seeded, Ctrl-C one line),
    keep the best validation epoch's weights; the training's wall time in seconds."""
    trainer, log = quality_trainer(task, max_epochs, patience, limit)
    L.seed_everything(seed, verbose=False)
    start = time.perf_counter()
    with signal_as_interrupted(signal.SIGINT):  # one line on Ctrl-C, not Lightning's
        trainer.fit(task, datamodule=datamodule)
    took = time.perf_counter() - start
    log.restore_best(task)
    return took


__all__ = ["Checkpoint", "QualityLog", "fit_best", "quality_trainer"]
