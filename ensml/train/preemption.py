"""Preemption of ``ensml fit`` on SLURM: SIGUSR1 → checkpoint at a batch boundary → requeue → exact resume.

A batch script with ``#SBATCH --signal=USR1@120`` gets SIGUSR1 two minutes before its time limit
(``scancel --signal=USR1 JOB`` sends it by hand). :class:`Preemption` turns it into:

1. a flag (the signal handler only sets it: nothing is saved in the middle of a step);
2. at the end of a training batch, every rank asks whether any rank has the flag (one
   ``all_reduce`` of a boolean, every batch under DDP, every ``sigterm_every`` batches under the
   decentralised strategies, whose ranks must not wait for each other at every batch). Batches
   that end an epoch, precede a validation or sit inside a gradient accumulation are passed over,
   so the stop never falls where Lightning's restart would skip or repeat work;
3. ``checkpoints/preempted.ckpt`` written through the run folder (atomic), holding the loops'
   state and where in the epoch the ranks stopped; then :class:`Preempted` ends the run and the
   run folder is closed as after a finished fit, so the requeued job finds it ensml's;
4. rank 0 requeues the job (``scontrol requeue``); SLURM runs the batch script again, with the
   same job id and ``SLURM_RESTART_COUNT`` one higher.

The requeued ``ensml fit`` (the same command, no ``--ckpt_path``) finds its job's latest
checkpoint, ``preempted.ckpt`` here (:func:`requeued_checkpoint`), and resumes from it as
``--ckpt_path`` would: the same checks, and the first epoch's loader skips the batches each rank
had trained on (:class:`SkipFirst`), so that the run goes on with the batch it stopped before.
The training order being a function of seed and epoch only (:mod:`ensml.data.sampling`), the
resumed run ends with the weights of the uninterrupted one. That resume works in every fit, on
SLURM or not (``--ckpt_path .../preempted.ckpt``); the signal is handled under SLURM only.
"""

from __future__ import annotations

import itertools
import signal
import threading
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import lightning as L
from lightning.pytorch.callbacks import Callback

from ensml.compat import log_batch_now, restart_train_iterator
from ensml.errors import EnsmlError
from ensml.train.checkpoint_file import peek_checkpoint
from ensml.train.run_folder import checkpoint_dirs
from ensml.train.slurm import SlurmJob

#: The preemption checkpoint's name, in the run's checkpoint folder.
PREEMPTED = "preempted.ckpt"
#: The signal SLURM sends before the time limit (``#SBATCH --signal=USR1@120``).
SIGNAL = signal.SIGUSR1


class Preempted(EnsmlError):
    """The run stopped at a checkpoint (``path``) on SLURM's signal: exit status 2 (part done, resumable)."""

    exit_code = 2

    def __init__(self, message: str, path: Path) -> None:
        super().__init__(message)
        self.path = path  # known here: after the stop, asking the trainer would be a collective


def checkpoint_folder(trainer: L.Trainer) -> Path | None:
    """Where the preemption checkpoint goes: the first checkpoint folder of the run, or None."""
    return next(iter(checkpoint_dirs(trainer)), None)


def requeued_checkpoint(trainer: L.Trainer, job: SlurmJob | None) -> Path | None:
    """The checkpoint a requeued ``job`` resumes from, or None.

    Only a job that SLURM requeued (``SLURM_RESTART_COUNT`` ≥ 1) resumes by itself, and only from
    a checkpoint its own job id wrote (every checkpoint of a SLURM job records it): the latest
    (highest step) of them, ``preempted.ckpt`` after SIGUSR1, or ``last.ckpt`` after a requeue
    without warning (a node lost). A new job in the same folder starts anew (or resumes with
    ``--ckpt_path``, as any run).
    """
    if job is None or job.restarts < 1:
        return None
    found = []
    for folder in checkpoint_dirs(trainer):
        for path in sorted(folder.glob("*.ckpt")) if folder.is_dir() else []:
            saved = peek_checkpoint(path)
            state = saved.get("callbacks", {}).get(Preemption.__qualname__, {})
            if state.get("job") == job.id:
                found.append((int(saved.get("global_step", 0)), path.name in (PREEMPTED, "last.ckpt"), path))
    return max(found)[2] if found else None


def start_helpers_ignoring(signum: int) -> None:
    """Start multiprocessing's forkserver (and its resource tracker) with ``signum`` ignored.

    SLURM signals every process of a job step, not only the ranks: DataLoader workers, which
    ensml forks from the forkserver, would die of SIGUSR1's default action (and the loader with
    them). An ignored signal stays ignored across fork and exec, so the server and every worker
    it forks ignore it; the rank itself then gets its own handler.
    """
    from multiprocessing import forkserver

    previous = signal.signal(signum, signal.SIG_IGN)
    try:
        forkserver.ensure_running()  # starts the resource tracker first
    finally:
        signal.signal(signum, previous)


class SkipFirst:
    """A sampler whose iteration of ``epoch`` leaves out its first ``n`` indices (other epochs whole)."""

    def __init__(self, sampler: Any, n: int, epoch: int) -> None:
        self.sampler, self.n, self.epoch = sampler, n, epoch

    def __iter__(self) -> Iterator[Any]:
        it = iter(self.sampler)
        resumed = getattr(self.sampler, "epoch", None) == self.epoch
        return itertools.islice(it, self.n, None) if resumed else it

    def __len__(self) -> int:
        return len(self.sampler)


class Preemption(Callback):
    """Stop at a checkpoint on SLURM's signal; resume exactly where the ranks stopped.

    Parameters
    ----------
    job
        The SLURM job (its id goes into every checkpoint); None outside SLURM: no signal is
        handled, a preemption checkpoint is still resumed exactly.
    every
        Check for the signal at every ``every``-th batch (every rank checks at the same ones).
    """

    def __init__(self, job: SlurmJob | None, every: int = 1) -> None:
        self.job, self.every = job, max(1, int(every))
        self.requested = False
        self._saving: dict[str, Any] | None = None  # what the preemption checkpoint records
        self._resume: dict[str, Any] | None = None  # read from it on resume
        self._loader: Any = None  # the batch sampler whose sampler skips, in the resumed epoch
        self._previous_sampler: Any = None
        self._previous: Any = None  # the signal's handler before this one
        # Outside SLURM (job None) only the resume: a run goes on from a preemption checkpoint
        # exactly wherever it runs (``--ckpt_path .../preempted.ckpt``).
        if (
            job is not None and threading.current_thread() is threading.main_thread()
        ):  # the main thread gets signals
            start_helpers_ignoring(SIGNAL)
            self._previous = signal.signal(SIGNAL, self._on_signal)

    def _on_signal(self, signum: int, frame: Any) -> None:
        self.requested = True

    @property
    def state_key(self) -> str:
        return type(self).__qualname__

    # -- the stop ---------------------------------------------------------------------------------
    def _may_stop(self, trainer: L.Trainer, batch_idx: int) -> bool:
        """Whether this batch's end is a point to stop at (the same answer on every rank)."""
        if self.job is None:
            return False
        done, total = batch_idx + 1, trainer.fit_loop.epoch_loop.total_batch_idx + 1
        if total % self.every or done >= trainer.num_training_batches:
            return False
        if done % max(1, trainer.accumulate_grad_batches):
            return False
        val = trainer.val_check_batch  # a validation follows this batch: Lightning's restart skips it
        count = total if trainer.check_val_every_n_epoch is None else done
        return not (isinstance(val, int | float) and val != float("inf") and count % int(val) == 0)

    def on_train_batch_end(
        self, trainer: L.Trainer, pl_module: L.LightningModule, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        if not self._may_stop(trainer, batch_idx):
            return
        if not trainer.strategy.reduce_boolean_decision(self.requested, all=False):
            return
        folder = checkpoint_folder(trainer)
        assert folder is not None  # the callback is installed only with a checkpoint folder
        path = folder / PREEMPTED
        self._saving = {"job": self.job.id, "epoch": trainer.current_epoch, "batches": batch_idx + 1}
        log_batch_now(trainer)  # the batch's row, which the loop would log after this hook
        try:
            trainer.save_checkpoint(path, weights_only=False)
        finally:
            self._saving = None
        raise Preempted(
            f"fit: SLURM job {self.job.id} preempted (SIGUSR1) at epoch {trainer.current_epoch}, "
            f"batch {batch_idx + 1} of {trainer.num_training_batches}: saved {path}",
            path,
        )

    def state_dict(self) -> dict[str, Any]:
        # Every checkpoint of the job says whose it is; the preemption checkpoint also where the
        # ranks stopped.
        return {"job": self.job.id, **(self._saving or {})} if self.job is not None else {}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        self._resume = dict(state_dict) if state_dict.get("batches") else None
        if self._resume:  # Lightning warns that the epoch's first batches come again: they do not
            warnings.filterwarnings("ignore", message="You.re resuming from a checkpoint that ended before")

    # -- the resume -------------------------------------------------------------------------------
    def on_train_start(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        # Resumed mid-epoch, Lightning calls no on_train_epoch_start: the training iterator made
        # before the restore is replaced here by one of the resumed epoch without its first batches.
        resume, self._resume = self._resume, None
        if not resume or trainer.current_epoch != resume["epoch"]:
            return
        loader = trainer.train_dataloader
        batches = getattr(loader, "batch_sampler", None)
        sampler = getattr(batches, "sampler", None)
        if sampler is None or not hasattr(sampler, "set_epoch"):
            raise EnsmlError(
                f"fit: cannot resume mid-epoch from the preemption checkpoint: the training loader "
                f"({type(loader).__name__}) has no epoch sampler to skip the {resume['batches']} batches "
                "already trained on"
            )
        sampler.set_epoch(resume["epoch"])  # as Lightning does next (the same epoch)
        self._loader, self._previous_sampler = batches, sampler
        batches.sampler = SkipFirst(sampler, resume["batches"] * batches.batch_size, resume["epoch"])
        restart_train_iterator(trainer)

    def on_train_epoch_end(self, trainer: L.Trainer, pl_module: L.LightningModule) -> None:
        if self._loader is not None:
            self._loader.sampler, self._loader = self._previous_sampler, None

    def teardown(self, trainer: L.Trainer, pl_module: L.LightningModule, stage: str) -> None:
        if self._previous is not None and threading.current_thread() is threading.main_thread():
            signal.signal(SIGNAL, self._previous)
            self._previous = None
