"""How a task's networks run: what a step keeps for backward, and how it moves data.

:class:`TaskRunning` is a mixin of :class:`~ensml.train.task_base.EnsembleTask`. It holds the
task's :class:`~ensml.models.memory.MemoryPolicy` (``checkpointing``, ``checkpoint_levels``,
``offload``, ``swap_levels``) and :class:`~ensml.models.speed.SpeedOptions` (``channels_last``, ``compile``,
``bf16``, ``fused_norm_act``), applies them to every network the task builds
(:meth:`prepare_net`); :func:`ensml.train.tasks.network` runs a network as they say (in the
training spine's module, docs/architecture.md). Neither changes the
parameters or their ``state_dict`` keys: checkpoints load whatever options trained them.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ensml.errors import EnsmlError
from ensml.models.memory import MemoryPolicy, apply_policy, unets
from ensml.models.speed import SpeedOptions, apply_speed


class TaskRunning:
    """Memory policy and speed options of a task (a mixin of ``EnsembleTask``; see the module)."""

    def set_running(self, policy: MemoryPolicy, speed: SpeedOptions) -> None:
        """Keep ``policy`` and ``speed`` for the networks built next (refusing what cannot combine)."""
        if speed.compile and policy.offload != "none":
            raise EnsmlError("compile cannot trace swapped activations; set offload: none")
        self.memory_policy, self.speed = policy, speed
        self.compiled: dict[int, torch.nn.Module] = {}  # networks compiled for training, built lazily

    def prepare_net(self, net: torch.nn.Module) -> torch.nn.Module:
        """``net`` with the speed options' layout and fusion (in place) and the memory policy."""
        net = apply_speed(net, replace(self.speed, compile=False))
        return apply_policy(net, self.memory_policy)

    def check_device(self, device: torch.device | str) -> None:
        """Refuse options this device cannot honour (``offload: host`` on a CPU, bf16 where the
        hardware has none), before any output."""
        self.memory_policy.check_device(device)
        self.speed.check(torch.device(device).type)

    def on_fit_start(self) -> None:
        # A disk swap's scratch file goes in the run folder (it is unlinked as it is created).
        if self.memory_policy.offload == "disk" and self.memory_policy.scratch_dir is None:
            folder = self.trainer.log_dir or self.trainer.default_root_dir
            for unet in unets(self):
                if unet.memory_offloader is not None:
                    unet.memory_offloader.scratch_dir = folder


__all__ = ["TaskRunning"]
