"""Pruning of the networks with :mod:`torch.nn.utils.prune`: magnitude, channels, a slim copy.

Two ways to make a network sparse, both made permanent (:func:`make_permanent`: the masks are
multiplied in and removed), so that the state dict keeps its keys and shapes and only holds zeros:

- :func:`global_magnitude`: unstructured, global L1 (Han et al. 2015): the ``sparsity`` fraction
  of all convolution and linear weights with the smallest ``|w|``, wherever they are.
- :func:`channel_prune`: structured, per layer (Li et al. 2017): in each convolution, the
  ``sparsity`` fraction of output channels with the smallest L2 norm, with their biases, so
  that a pruned channel's output is exactly zero. The output projection (the U-Net's ``head``)
  keeps its channels (each one is an output field) and every layer keeps at least one channel.

Zeros are as slow as any weight; :func:`slim_unet` builds a physically smaller copy of a
:class:`~ensml.models.unet3d.UNet3d` without the channels that are exactly zero, which gives the
same outputs. :func:`prune_schedule` spreads a target over iterative prune–retrain steps (the
masks of :func:`mask_magnitude` / :func:`mask_channels` stay in place while retraining).
"""

from __future__ import annotations

import copy
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

import torch
from torch import nn
from torch.nn.utils import prune

from ensml.models.unet3d import UNet3d

#: The convolutions (their output channels are pruned by :func:`channel_prune`).
TRANSPOSED = (nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)
CONVOLUTIONS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, *TRANSPOSED)
#: The layers pruning acts on (their ``weight``): convolutions (transposed ones included) and linear.
PRUNABLE = (*CONVOLUTIONS, nn.Linear)


def check_sparsity(sparsity: float) -> float:
    """``sparsity`` as a float in [0, 1), or a ValueError."""
    s = float(sparsity)
    if not 0.0 <= s < 1.0:
        raise ValueError(f"sparsity must be >= 0 and < 1, got {sparsity}")
    return s


def weighted_layers(net: nn.Module) -> list[tuple[str, nn.Module]]:
    """``(name, module)`` of every prunable layer of ``net``, in module order."""
    return [(name, m) for name, m in net.named_modules() if isinstance(m, PRUNABLE)]


def output_layers(net: nn.Module) -> list[str]:
    """Names of the output projections: the ``head`` of the U-Net builder (every ensml arch has one),
    else the last prunable layer. Their channels are output fields and are never pruned."""
    layers = [name for name, _ in weighted_layers(net)]
    heads = [n for n in layers if "head" in n.split(".")]
    return heads or layers[-1:]


def _out_dim(module: nn.Module) -> int:
    """The output-channel dimension of ``module.weight`` (1 for transposed convolutions)."""
    return 1 if isinstance(module, TRANSPOSED) else 0


def mask_magnitude(net: nn.Module, sparsity: float) -> None:
    """Mask (reparametrise) the ``sparsity`` fraction of smallest-``|w|`` weights over all layers."""
    s = check_sparsity(sparsity)
    params = [(m, "weight") for _, m in weighted_layers(net)]
    if params and s > 0:
        prune.global_unstructured(params, pruning_method=prune.L1Unstructured, amount=s)


def mask_channels(net: nn.Module, sparsity: float, keep: Iterable[str] | None = None) -> None:
    """Mask, in every convolution but the ``keep`` ones (default: :func:`output_layers`), the
    ``sparsity`` fraction (rounded, at most all but one) of output channels with the smallest L2
    norm, and their biases."""
    s = check_sparsity(sparsity)
    keep = set(output_layers(net) if keep is None else keep)
    for name, m in weighted_layers(net):
        if name in keep or not isinstance(m, CONVOLUTIONS):
            continue
        dim = _out_dim(m)
        n = m.weight.shape[dim]
        amount = min(round(s * n), n - 1)
        if amount <= 0:
            continue
        prune.ln_structured(m, "weight", amount=amount, n=2, dim=dim)
        if m.bias is not None:
            others = [d for d in range(m.weight_mask.ndim) if d != dim]
            prune.custom_from_mask(m, "bias", m.weight_mask.amax(dim=others))


def make_permanent(net: nn.Module) -> nn.Module:
    """Multiply every pruning mask of ``net`` into its parameter and drop the reparametrisation."""
    for m in net.modules():
        masked = [name for name, _ in m.named_buffers(recurse=False) if name.endswith("_mask")]
        for name in masked:
            if hasattr(m, name[: -len("_mask")] + "_orig"):  # the reparametrisation of torch's prune
                prune.remove(m, name[: -len("_mask")])
    return net


def global_magnitude(net: nn.Module, sparsity: float) -> nn.Module:
    """Zero the ``sparsity`` fraction of ``net``'s convolution and linear weights with the smallest
    ``|w|`` (global L1, ``prune.global_unstructured``), in place; keys and shapes unchanged."""
    mask_magnitude(net, sparsity)
    return make_permanent(net)


def channel_prune(net: nn.Module, sparsity: float, keep: Iterable[str] | None = None) -> nn.Module:
    """Zero, in place, the ``sparsity`` fraction of each convolution's output channels with the
    smallest L2 norm (``prune.ln_structured``, n=2) and their biases; see :func:`mask_channels`."""
    mask_channels(net, sparsity, keep)
    return make_permanent(net)


#: The pruning methods by the name ``ensml prune --method`` gives.
MASKS = {"magnitude": mask_magnitude, "channel": mask_channels}


@dataclass(frozen=True)
class Sparsity:
    """Zeros among the prunable weights (:func:`weighted_layers`) of a network.

    ``overall``: zero fraction of all those weights; ``layers``: per layer name; ``nonzero``:
    non-zero entries of every parameter (biases and other layers included); ``total``: entries.
    """

    overall: float
    layers: dict[str, float]
    nonzero: int
    total: int

    def table(self) -> str:
        rows = [f"  {name:<32} {frac:6.1%}" for name, frac in self.layers.items()]
        head = f"sparsity {self.overall:.1%}; {self.nonzero:,} of {self.total:,} parameters non-zero"
        return "\n".join([head, *rows])


def sparsity(net: nn.Module) -> Sparsity:
    """The :class:`Sparsity` of ``net`` (reads the masked weights while masks are in place)."""
    zeros = count = 0
    layers = {}
    for name, m in weighted_layers(net):
        w = m.weight.detach()
        z = int((w == 0).sum())
        layers[name] = z / w.numel()
        zeros, count = zeros + z, count + w.numel()
    params = [
        (getattr(m, name[: -len("_orig")]) if name.endswith("_orig") else p).detach()
        for m in net.modules()
        for name, p in m.named_parameters(recurse=False)
    ]
    nonzero = sum(int((p != 0).sum()) for p in params)
    return Sparsity(zeros / max(count, 1), layers, nonzero, sum(p.numel() for p in params))


def prune_schedule(target: float, steps: int, kind: Literal["cubic", "geometric"] = "cubic") -> list[float]:
    """Sparsity after each of ``steps`` prune–retrain steps, ending at ``target``.

    ``cubic`` (Zhu & Gupta 2017): ``s_t = target · (1 − (1 − t/n)³)``, fast at first, when many
    weights are redundant, slow near the end. ``geometric``: each step keeps the same fraction of
    the remaining weights, ``1 − s_t = (1 − target)^(t/n)``.
    """
    s = check_sparsity(target)
    if steps < 1:
        raise ValueError(f"steps must be >= 1, got {steps}")
    ts = [t / steps for t in range(1, steps + 1)]
    if kind == "cubic":
        return [s * (1 - (1 - t) ** 3) for t in ts]
    if kind == "geometric":
        return [1 - (1 - s) ** t for t in ts]
    raise ValueError(f"schedule must be 'cubic' or 'geometric', got {kind!r}")


# -- a physically slimmer copy ---------------------------------------------------------------
def _alive(m: nn.Module) -> torch.Tensor:
    """Indices of ``m``'s output channels whose weights or bias are not all zero (at least one)."""
    dim = _out_dim(m)
    w = m.weight.detach().transpose(0, dim).flatten(1)
    alive = (w != 0).any(1)
    if m.bias is not None:
        alive |= m.bias.detach() != 0
    idx = torch.nonzero(alive).flatten()
    return idx if idx.numel() else torch.zeros(1, dtype=torch.long)


def _slice(m: nn.Module, out_idx: torch.Tensor, in_idx: torch.Tensor) -> nn.Module:
    """A copy of convolution ``m`` with output channels ``out_idx`` and input channels ``in_idx``."""
    w = m.weight.detach()
    w = w[in_idx][:, out_idx] if _out_dim(m) else w[out_idx][:, in_idx]
    new = copy.deepcopy(m)
    new.weight = nn.Parameter(w.clone())
    if m.bias is not None:
        new.bias = nn.Parameter(m.bias.detach()[out_idx].clone())
    new.in_channels, new.out_channels = len(in_idx), len(out_idx)
    return new


def _slim_block(block: nn.Sequential, in_idx: torch.Tensor) -> torch.Tensor:
    """Slim the convolutions of ``block`` (a ConvBlock) in place; returns its kept output channels."""
    for layer in block:
        if hasattr(layer, "conv"):
            out_idx = _alive(layer.conv)
            layer.conv = _slice(layer.conv, out_idx, in_idx)
            in_idx = out_idx
    return in_idx


def slim_unet(net: UNet3d) -> UNet3d:
    """A copy of ``net`` without its output channels that are exactly zero (weights and bias),
    and without the matching input channels of the layers that read them (the next convolution,
    the upsampler, the decoder after a skip concatenation): the same function, fewer operations.

    Exact because a zero channel stays zero through GELU, max pooling and the sphere padding.
    Not for networks with GroupNorm (``norm_groups > 0``): a group's normalisation mixes its
    channels, so a zeroed channel is not zero after it and dropping one changes the others.
    """
    if type(net) is not UNet3d:
        raise ValueError(f"a slim copy is built for UNet3d only, not {type(net).__name__}")
    if any(isinstance(m, nn.GroupNorm) or hasattr(m, "num_groups") for m in net.modules()):
        raise ValueError("a slim copy is not exact with GroupNorm (norm_groups > 0): a norm mixes channels")
    slim = make_permanent(copy.deepcopy(net))
    idx = torch.arange(slim.encoders[0][0].conv.in_channels)
    skips = []
    for block in slim.encoders:
        idx = _slim_block(block, idx)
        skips.append(idx)
    idx = skips.pop()
    for j, block in enumerate(slim.decoders):
        up = slim.upsamplers[j]
        up_idx = _alive(up)
        slim.upsamplers[j] = _slice(up, up_idx, idx)
        idx = _slim_block(block, torch.cat([skips.pop(), up.out_channels + up_idx]))
    head = slim.head.conv
    slim.head.conv = _slice(head, torch.arange(head.out_channels), idx)
    return slim


__all__ = [
    "CONVOLUTIONS",
    "MASKS",
    "PRUNABLE",
    "Sparsity",
    "channel_prune",
    "check_sparsity",
    "global_magnitude",
    "make_permanent",
    "mask_channels",
    "mask_magnitude",
    "output_layers",
    "prune_schedule",
    "slim_unet",
    "sparsity",
    "weighted_layers",
]
