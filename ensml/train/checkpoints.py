"""What an exact resume needs: atomic checkpoints, ``last.ckpt`` every epoch, logs kept whole.

A run killed at any moment (SIGKILL included) after its first checkpoint and resumed from
``last.ckpt`` ends as the uninterrupted run: the checkpoint file is replaced atomically (never
truncated), ``metrics.csv`` is flushed before each checkpoint is written, so it holds every row
the checkpoint's training produced, and a resume keeps those rows. (The training order itself
depends only on seed and epoch, see :mod:`ensml.data.sampling`.)
"""

from __future__ import annotations

import csv
from pathlib import Path
from typing import TYPE_CHECKING, Any

import lightning as L
import torch
from lightning.fabric.plugins.io.torch_io import TorchCheckpointIO
from lightning.pytorch.callbacks import Callback, ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from lightning.pytorch.utilities.rank_zero import rank_zero_only

from ensml.compat import restart_train_iterator
from ensml.data.sampling import EpochSampler

if TYPE_CHECKING:
    from ensml.train.run_folder import RunFolder


class AtomicCheckpointIO(TorchCheckpointIO):
    """Write each checkpoint through the run folder: staged in its ``.ensml``, fsync'ed, renamed.

    Lightning's own save goes through an fsspec transaction whose temporary lies in the system
    temp folder and is moved (copied, across filesystems) onto the checkpoint: a kill during
    that copy leaves a truncated ``last.ckpt``. Here a kill leaves the previous checkpoint
    whole (the next run that opens the folder removes the abandoned temporary), and a full disk
    is one line naming the checkpoint. Checkpoints go only to the run's reserved checkpoint
    folder (:class:`~ensml.train.run_folder.RunFolder`).
    """

    def __init__(self, run: RunFolder) -> None:
        super().__init__()
        self.run = run

    def save_checkpoint(self, checkpoint: dict[str, Any], path: Any, storage_options: Any = None) -> None:
        if storage_options is not None:
            raise TypeError(f"{type(self).__name__} takes no storage_options, got {storage_options!r}")
        with self.run.write(path) as tmp:
            torch.save(checkpoint, tmp)


def use_atomic_checkpoints(trainer: L.Trainer, run: RunFolder) -> None:
    """Give ``trainer`` an :class:`AtomicCheckpointIO` writing through ``run`` unless a custom
    checkpoint IO is set."""
    if type(trainer.strategy.checkpoint_io) is TorchCheckpointIO:
        trainer.strategy.checkpoint_io = AtomicCheckpointIO(run)


class FollowResumedEpoch(Callback):
    """Restart the training iterator of a resumed run once the resumed epoch is known.

    Lightning creates the first training iterator (whose DataLoader workers prefetch at once)
    before it restores the epoch from the checkpoint and calls ``set_epoch``, and does not
    create a new one for the first epoch after a resume: that epoch would replay epoch 0's
    order. A stale :class:`~ensml.data.sampling.EpochSampler` is detected here and the
    iterator recreated (the prefetched batches are discarded).
    """

    def on_train_epoch_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        loaders = trainer.train_dataloader
        for loader in loaders.values() if isinstance(loaders, dict) else [loaders]:
            if isinstance(getattr(loader, "sampler", None), EpochSampler) and loader.sampler.stale:
                restart_train_iterator(trainer)
                return


class FlushLogs(Callback):
    """Write the loggers' buffered rows before each checkpoint, so a resume finds them on disk."""

    def on_save_checkpoint(self, trainer: L.Trainer, pl_module: L.LightningModule, checkpoint: dict) -> None:
        for logger in trainer.loggers:
            logger.save()


class KeepLoggedMetrics(Callback):
    """On resume, keep the rows of ``metrics.csv`` that the checkpoint's training produced.

    Lightning's CSVLogger deletes ``metrics.csv`` when a run starts in its folder. For a resumed
    fit, :meth:`keep` (called before ``trainer.fit``) puts the earlier rows back at once; when
    training starts from the restored step, the rows of that step and later, which the run logs
    again (a resume from a checkpoint older than the log, such as ``best.ckpt``), are dropped.
    """

    def __init__(self, run: RunFolder) -> None:
        self.run = run
        self._files: list[tuple[CSVLogger, Path]] = []

    def keep(self, trainer: L.Trainer) -> None:
        if rank_zero_only.rank != 0:  # other ranks of a re-executed command (before launch)
            return
        for logger in trainer.loggers:
            path = Path(logger.log_dir) / "metrics.csv" if isinstance(logger, CSVLogger) else None
            if path is None or not path.is_file():
                continue
            rows, _ = _read_rows(path)
            writer = logger.experiment  # deletes metrics.csv (its warning: quiet_lightning)
            for row in rows:
                step = row.pop("step")
                writer.log_metrics(row, step=int(float(step)))
            writer.save()
            self._files.append((logger, path))

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if not trainer.is_global_zero:
            return
        for logger, path in self._files:
            logger.experiment.save()
            rows, header = _read_rows(path)
            keep = [row for row in rows if int(float(row["step"])) < trainer.global_step]
            if len(keep) < len(rows):
                with self.run.write(path) as tmp, tmp.open("w", newline="") as f:
                    out = csv.DictWriter(f, fieldnames=header)
                    out.writeheader()
                    out.writerows(keep)


def _read_rows(path: Path) -> tuple[list[dict[str, str]], list[str]]:
    with path.open(newline="") as f:
        reader = csv.DictReader(f)
        return list(reader), list(reader.fieldnames or [])


def last_every_epoch(trainer: L.Trainer) -> None:
    """Make ``save_last`` write ``last.ckpt`` after every epoch, beside a monitored best.

    Lightning's ``ModelCheckpoint(monitor=..., save_last=True)`` writes ``last.ckpt`` only when it
    writes a new best, so ``last.ckpt`` is the best epoch, not the last. Each such callback gets
    a companion without monitor that writes ``last.ckpt`` at the end of every training epoch.
    """
    for cb in list(trainer.callbacks):
        if isinstance(cb, ModelCheckpoint) and cb.save_last and cb.monitor is not None:
            cb.save_last = False
            last = ModelCheckpoint(
                dirpath=cb.dirpath,
                filename=cb.CHECKPOINT_NAME_LAST,
                save_weights_only=cb.save_weights_only,
                save_on_train_epoch_end=True,
                enable_version_counter=getattr(cb, "_enable_version_counter", True),
            )
            trainer.callbacks.insert(trainer.callbacks.index(cb) + 1, last)
