"""Every use of a private (``_``-prefixed) name of Lightning or torch, in one place.

ensml uses public APIs only, except where an upstream gap leaves no public way; each such use
is a function here, and ``tests/test_compat.py`` fails when upstream changes the name, so an
upgrade breaks a test, not a user's run. Calls:

- :func:`uses_distributed_sampler` / :func:`set_distributed_sampler`: the Trainer's
  ``use_distributed_sampler`` setting lives on its private accelerator connector; the data module
  reads it, and the spatial-parallel strategy turns it off for spatial ranks of one replica.
- :func:`restart_train_iterator`: re-creates the training iterator of the epoch that just started
  (Lightning's own call at an epoch start), so a resumed run does not replay epoch 0's order.
- :func:`log_batch_now`: the metrics of the training batch that just ended, logged from an
  ``on_train_batch_end`` hook (Lightning logs them after its hooks): a run preempted there
  (:mod:`ensml.train.preemption`) keeps the row of its last batch, as the uninterrupted run has it.
- :func:`thin_sigterm_broadcast`: Lightning 2.6 broadcasts rank 0's SIGTERM flag before every
  training batch (``_broadcast_sigterm_tensor`` of the training epoch loop; no setting turns it
  down until its PR #21640). A broadcast waits for every rank, so it ties all ranks to the
  slowest at every batch, which the decentralised strategies exist to avoid; they keep it every
  ``n``-th batch.
- :func:`view_base`: the tensor a view shares memory with (torch's ``Tensor._base``), to count
  the bytes autograd saves once per storage.
- :func:`dispatch_mode`: torch's ``TorchDispatchMode`` (documented in "Extending PyTorch", but
  in the private module ``torch.utils._python_dispatch``), the base of the live-tensor count of
  the memory planner (:class:`ensml.models.memory_profile.LiveBytes`).
- :func:`terminate_workers`: stop a ``concurrent.futures.ProcessPoolExecutor``'s workers now,
  their running tasks lost (Python 3.14's ``terminate_workers``; before it, its ``_processes``),
  so that Ctrl-C or SIGTERM ends a run in seconds instead of after the tasks in flight.

Overrides of protected hooks, which subclasses are meant to implement (checked to exist by the
same test): ``LightningCLI._parse_ckpt_path`` (a broken checkpoint as one line),
``LightningCLI._run_subcommand`` (``fit --sbatch`` parses the job's options and runs nothing),
``ParallelStrategy._configure_launcher`` (the spatial split checked before launch) and
``nn.Module._load_from_state_dict`` (data-shaped buffers sized from the checkpoint).
"""

from __future__ import annotations

from typing import Any


def uses_distributed_sampler(trainer: Any) -> bool:
    """Whether ``trainer`` wraps its training loaders in a DistributedSampler (its setting)."""
    return bool(trainer._accelerator_connector.use_distributed_sampler)


def set_distributed_sampler(trainer: Any, use: bool) -> None:
    """Turn ``trainer``'s DistributedSampler wrapping on or off (after it was built)."""
    trainer._accelerator_connector.use_distributed_sampler = bool(use)


def restart_train_iterator(trainer: Any) -> None:
    """Create the training iterator of the current epoch anew (drops prefetched batches)."""
    iter(trainer.fit_loop._data_fetcher)


def log_batch_now(trainer: Any) -> None:
    """Log the ending training batch's metrics now (the loop's own two calls after its hooks)."""
    trainer._logger_connector.on_batch_end()
    trainer._logger_connector.update_train_step_metrics()


def thin_sigterm_broadcast(trainer: Any, every: int) -> None:
    """Let ``trainer``'s per-batch SIGTERM broadcast run only on every ``every``-th batch.

    Every rank runs the same batches, so every rank broadcasts at the same ones (the collective
    stays matched). A rank that receives SIGTERM itself still stops at the end of its batch.
    """
    loop = trainer.fit_loop.epoch_loop
    broadcast = type(loop)._broadcast_sigterm_tensor
    calls = [0]

    def thinned() -> None:
        if calls[0] % every == 0:
            broadcast(loop)
        calls[0] += 1

    loop._broadcast_sigterm_tensor = thinned


def view_base(tensor: Any) -> Any:
    """The tensor whose memory ``tensor`` views (``tensor`` itself if it is not a view)."""
    base = tensor._base
    return tensor if base is None else base


def dispatch_mode() -> type:
    """``torch.utils._python_dispatch.TorchDispatchMode``: sees every operator call, backward too."""
    from torch.utils._python_dispatch import TorchDispatchMode

    return TorchDispatchMode


def terminate_workers(pool: Any) -> None:
    """Terminate the worker processes of the ``ProcessPoolExecutor`` ``pool`` (tasks in flight lost)."""
    if hasattr(pool, "terminate_workers"):  # Python 3.14
        pool.terminate_workers()
        return
    for process in list((pool._processes or {}).values()):
        process.terminate()


#: Protected hooks ensml overrides: (module, class, method).
OVERRIDDEN_HOOKS = (
    ("lightning.pytorch.cli", "LightningCLI", "_parse_ckpt_path"),
    ("lightning.pytorch.cli", "LightningCLI", "_run_subcommand"),
    ("lightning.pytorch.strategies", "DDPStrategy", "_configure_launcher"),
    ("torch.nn", "Module", "_load_from_state_dict"),
)

__all__ = [
    "OVERRIDDEN_HOOKS",
    "dispatch_mode",
    "restart_train_iterator",
    "set_distributed_sampler",
    "terminate_workers",
    "thin_sigterm_broadcast",
    "uses_distributed_sampler",
    "view_base",
]
