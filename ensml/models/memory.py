"""What a U-Net keeps for its backward pass: keep, recompute or swap each level's activations.

A training step keeps every activation that backward needs until backward reaches it; for a 3D
U-Net on a global grid that, not the weights, is what fills memory. A :class:`MemoryPolicy`
says, per U-Net level, what to do with the tensors autograd saves there:

``keep``
    Leave them in memory (the default, and the fastest).
``recompute``
    Keep only the level's inputs and run its forward again just before its backward
    (non-reentrant :func:`torch.utils.checkpoint.checkpoint`). With ``checkpointing: all`` the
    recomputation is itself checkpointed per convolution, so that rebuilding a level holds only
    one convolution's activations at a time: less memory, one more forward of the level.
``swap``
    Move them out of core as they are saved (to pinned host memory from an accelerator, or to
    a scratch file from the CPU) and bring them back, prefetched in the order backward needs
    them (:mod:`ensml.models.offload`).

A level is a *segment* of the U-Net: on the way down, the pooling of the level above and the
level's convolution block (so a recomputed level keeps only the skip connection it starts
from); on the way up, the upsampling, the concatenation with the skip and the block. The same
segments exist in :class:`~ensml.models.UNet3d`, its spatial-parallel twin, the U-Net inside
:class:`~ensml.models.TimeUNet` and the per-lead encoder and GRU of
:class:`~ensml.models.ConvGRUUNet`. Policies only change what is stored, never the arithmetic:
gradients are equal to the last bit (``tests/models/test_memory.py``). Under ``torch.no_grad``
(prediction) every policy is ``keep``.

Use :func:`apply_policy` on a network, or the ``checkpointing`` / ``offload`` / ``swap_levels``
options of the tasks.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

from ensml.errors import EnsmlError

KEEP, RECOMPUTE, SWAP = "keep", "recompute", "swap"
#: Values of :attr:`MemoryPolicy.checkpointing`.
CHECKPOINTING = ("none", "levels", "all")
#: Values of :attr:`MemoryPolicy.offload`.
OFFLOAD = ("none", "host", "disk")


@dataclass(frozen=True)
class MemoryPolicy:
    """How a U-Net stores what its backward pass needs.

    Parameters
    ----------
    checkpointing
        ``none``: keep every activation; ``levels``: recompute every level (every segment)
        in backward; ``all``: as ``levels``, and each recomputation checkpointed per convolution.
    offload
        Where swapped levels go: ``none``, ``host`` (pinned CPU memory; from an accelerator
        only) or ``disk`` (a scratch file, deleted as it is created so that nothing is left on
        disk even after a kill).
    swap_levels
        The U-Net levels (0 = full resolution) whose activations are swapped; empty with an
        ``offload`` means every level. With ``checkpointing``, the other levels are recomputed
        (the seed research's mix: swap the large levels, recompute the cheap ones).
    scratch_dir
        Folder of the scratch file of ``offload: disk`` (``ensml fit`` uses its run folder's
        staging area).
    prefetch
        Swapped tensors read back ahead of backward.
    checkpoint_levels
        With ``checkpointing``, the levels to recompute (0 = full resolution); empty means every
        level. The finest levels hold most of the saved bytes for the same arithmetic as the
        coarse ones, so recomputing only them keeps most of the saving for less time.
    """

    checkpointing: str = "none"
    offload: str = "none"
    swap_levels: tuple[int, ...] = ()
    scratch_dir: str | None = None
    prefetch: int = 2
    checkpoint_levels: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.checkpointing not in CHECKPOINTING:
            raise EnsmlError(
                f"checkpointing must be one of {', '.join(CHECKPOINTING)}, got {self.checkpointing!r}"
            )
        if self.offload not in OFFLOAD:
            raise EnsmlError(f"offload must be one of {', '.join(OFFLOAD)}, got {self.offload!r}")
        if self.swap_levels and self.offload == "none":
            raise EnsmlError("swap_levels needs an offload target: set offload to host or disk")
        if any(int(level) < 0 for level in self.swap_levels):
            raise EnsmlError(f"swap_levels must be U-Net levels >= 0, got {list(self.swap_levels)}")
        if self.checkpoint_levels and self.checkpointing == "none":
            raise EnsmlError("checkpoint_levels needs checkpointing: set it to levels or all")
        if any(int(level) < 0 for level in self.checkpoint_levels):
            raise EnsmlError(
                f"checkpoint_levels must be U-Net levels >= 0, got {list(self.checkpoint_levels)}"
            )
        if self.prefetch < 0:
            raise EnsmlError(f"prefetch must be >= 0, got {self.prefetch}")
        for name in ("swap_levels", "checkpoint_levels"):
            object.__setattr__(self, name, tuple(int(level) for level in getattr(self, name)))

    @property
    def name(self) -> str:
        """A short label: ``none``, ``levels``, ``all``, ``swap disk``, ``swap disk [0] + levels`` …"""
        recompute = self.checkpointing + (
            f" {list(self.checkpoint_levels)}" if self.checkpoint_levels else ""
        )
        if self.offload == "none":
            return recompute
        where = f"swap {self.offload}" + (f" {list(self.swap_levels)}" if self.swap_levels else "")
        return where if self.checkpointing == "none" else f"{where} + {recompute}"

    def modes(self, n_levels: int) -> list[str]:
        """What to do at each of ``n_levels`` U-Net levels: ``keep``, ``recompute`` or ``swap``."""
        out = []
        for level in range(n_levels):
            swapped = self.offload != "none" and (not self.swap_levels or level in self.swap_levels)
            recomputed = self.checkpointing != "none" and (
                not self.checkpoint_levels or level in self.checkpoint_levels
            )
            out.append(SWAP if swapped else RECOMPUTE if recomputed else KEEP)
        return out

    def check_levels(self, n_levels: int) -> None:
        """Refuse ``swap_levels`` or ``checkpoint_levels`` that the network does not have."""
        for name in ("swap_levels", "checkpoint_levels"):
            bad = [level for level in getattr(self, name) if level >= n_levels]
            if bad:
                raise EnsmlError(f"{name} {bad}: the U-Net has levels 0 to {n_levels - 1} only")

    def check_device(self, device: torch.device | str) -> None:
        """Refuse ``offload: host`` where the activations already live on the host."""
        if self.offload == "host" and torch.device(device).type == "cpu":
            raise EnsmlError(
                "offload: host moves activations off an accelerator; on the CPU use offload: disk"
            )


def unets(net: nn.Module) -> Iterator[nn.Module]:
    """The U-Nets in ``net``: every module with ``encoders`` and ``decoders`` (itself included)."""
    for m in net.modules():
        if isinstance(getattr(m, "encoders", None), nn.ModuleList) and hasattr(m, "decoders"):
            yield m


def apply_policy(net: nn.Module, policy: MemoryPolicy | None, offloader: Any = None) -> nn.Module:
    """Set ``policy`` on every U-Net in ``net`` (in place; parameters and ``state_dict`` unchanged).

    ``None`` or the default policy restores ``keep`` everywhere. A swapping policy gets a new
    :class:`~ensml.models.offload.Offloader` unless one is given. Returns ``net``.
    """
    from ensml.models.layers import ConvBlock
    from ensml.models.offload import Offloader

    policy = policy or MemoryPolicy()
    if policy.offload == "none":
        offloader = None
    elif offloader is None:
        offloader = Offloader(policy.offload, policy.scratch_dir, policy.prefetch)
    units = policy.checkpointing == "all"
    for block in net.modules():
        if isinstance(block, ConvBlock):
            block.unit_checkpoint = units
    for unet in unets(net):
        n_levels = len(unet.encoders)
        policy.check_levels(n_levels)
        unet.memory_modes = policy.modes(n_levels)
        unet.memory_offloader = offloader
        # encoder i is level i, decoder j level n_levels - 2 - j; a kept level keeps its units
        parts = [*enumerate(unet.encoders), *((n_levels - 2 - j, d) for j, d in enumerate(unet.decoders))]
        for level, part in parts:
            for block in part.modules():
                if isinstance(block, ConvBlock):
                    block.unit_checkpoint = units and unet.memory_modes[level] != KEEP
    return net


def policy_of(net: nn.Module) -> list[str]:
    """The modes set on the first U-Net in ``net``, level by level (``keep`` if none was set)."""
    for unet in unets(net):
        return list(getattr(unet, "memory_modes", [KEEP] * len(unet.encoders)))
    return []


def run_segment(net: nn.Module, level: int, fn: Callable[..., Any], *args: Any) -> Any:
    """``fn(*args)``, level ``level`` of U-Net ``net``, storing for backward as its policy says."""
    modes = getattr(net, "memory_modes", None)
    mode = modes[level] if modes else KEEP
    if SEGMENT_HOOK is not None:
        SEGMENT_HOOK(net, level, args)
    if mode == KEEP or not torch.is_grad_enabled():
        return fn(*args)
    if mode == RECOMPUTE:
        return checkpoint(fn, *args, use_reentrant=False)
    with net.memory_offloader.saving():
        return fn(*args)


#: Called as ``hook(net, level, args)`` at the start of every segment (the memory planner's
#: per-level accounting); ``None`` outside a measurement.
SEGMENT_HOOK: Callable[[nn.Module, int, tuple], None] | None = None


def run_units(block: nn.Sequential, x: torch.Tensor) -> torch.Tensor:
    """A convolution block's layers on ``x``, each convolution and what follows it checkpointed."""
    layers = list(block)
    starts = [i for i, m in enumerate(layers) if hasattr(m, "conv")] + [len(layers)]
    for a, b in itertools.pairwise(starts):
        x = checkpoint(_run_layers, layers[a:b], x, use_reentrant=False)
    return x


def _run_layers(layers: list[nn.Module], x: torch.Tensor) -> torch.Tensor:
    for layer in layers:
        x = layer(x)
    return x


__all__ = [
    "CHECKPOINTING",
    "KEEP",
    "OFFLOAD",
    "RECOMPUTE",
    "SWAP",
    "MemoryPolicy",
    "apply_policy",
    "policy_of",
    "run_segment",
    "run_units",
    "unets",
]
