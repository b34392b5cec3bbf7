"""Progress of ``ensml fit|validate|test|predict`` where Lightning's bar cannot be drawn.

On a terminal Lightning's own bar runs. Otherwise (a batch job's log, a pipe) its bar would
write thousands of carriage-return updates, so ``ensml`` turns it off and :class:`LogProgress`
prints a line per training epoch (with the epoch's metrics) and, for validation, test and
prediction, a line every 30 s and one at the end; see :mod:`ensml.progress`.
"""

from __future__ import annotations

import math
import sys
import time

import lightning as L

from ensml.logs import quiet
from ensml.progress import EVERY_S, Progress


def use_lightning_bar() -> bool:
    """Whether Lightning's bar can be drawn (it writes to stdout) and is wanted."""
    return sys.stdout.isatty() and not quiet()


def _metrics(trainer: L.Trainer) -> str:
    shown = []
    for name, value in sorted(trainer.callback_metrics.items()):
        try:
            number = float(value)
        except (TypeError, ValueError):
            continue
        if not name.endswith("_step") and math.isfinite(number):
            shown.append(f"{name} {number:.4g}")
    return ", ".join(shown)


class LogProgress(L.Callback):
    """A line per training epoch; a line every 30 s and at the end of validate, test and predict."""

    def __init__(self) -> None:
        self._fit: Progress | None = None
        self._eval: Progress | None = None

    # --- fit: one line per epoch --------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.is_global_zero and trainer.max_epochs and trainer.max_epochs > 0:
            self._fit = Progress("fit", trainer.max_epochs, "epochs", start=trainer.current_epoch)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._fit is not None:
            self._fit.advance(_metrics(trainer))

    def on_train_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._fit = None

    # --- validate / test / predict: a line every 30 s ----------------------------------------
    def _start(self, trainer: L.Trainer, what: str, batches: list[int | float]) -> None:
        total = sum(int(b) for b in batches if math.isfinite(b))
        if trainer.is_global_zero and not trainer.sanity_checking and self._fit is None:
            self._eval = Progress(what, total, "batches", every_s=EVERY_S)

    def _step(self, *args: object, **kwargs: object) -> None:
        if self._eval is not None:
            self._eval.advance()

    def _end(self, *args: object, **kwargs: object) -> None:
        self._eval = None

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(trainer, "validate", trainer.num_val_batches)

    def on_test_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(trainer, "test", trainer.num_test_batches)

    def on_predict_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._start(trainer, "predict", trainer.num_predict_batches)

    on_validation_batch_end = on_test_batch_end = on_predict_batch_end = _step
    on_validation_end = on_test_end = on_predict_end = _end


class TrainingClock(L.Callback):
    """Log ``time/train_s``, the wall time spent training so far (validation excluded), with each
    validation, so a metric's curve can be read against time (``benchmarks/decentralised.py``).

    Under eager-SGD or WAGMA (:mod:`ensml.train.decentralised`) it logs their counts too:
    ``dist/fresh`` and ``dist/stale`` contributions in the rounds rank 0 took part in, and
    ``dist/computed_all``, the batches all ranks computed (as of the last round or average).
    """

    def __init__(self) -> None:
        self.train_s = 0.0
        self._since: float | None = None

    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        self._since = time.perf_counter()

    def on_validation_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._since is not None:
            self.train_s += time.perf_counter() - self._since
            self._since = None

    def on_validation_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.sanity_checking:
            return
        pl_module.log("time/train_s", self.train_s, on_step=False, on_epoch=True)
        stats = getattr(trainer.strategy, "stats", None) or {}
        for key in ("fresh", "stale", "computed_all"):
            if key in stats:
                pl_module.log(f"dist/{key}", float(stats[key]), on_step=False, on_epoch=True)

    def on_validation_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if trainer.state.fn == "fit" and not trainer.sanity_checking:
            self._since = time.perf_counter()


__all__ = ["LogProgress", "TrainingClock", "use_lightning_bar"]
