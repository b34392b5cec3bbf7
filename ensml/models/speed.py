"""Data-movement switches for a training step: memory layout, compilation, bf16, fused norm/act.

Each switch is off by default and changes only how the step runs, never what it computes (up to
rounding; the tolerances are stated in ``tests/models/test_speed.py``). The caller does::

    options = SpeedOptions(channels_last=True)
    options.check(device_type)            # one-line EnsmlError for impossible combinations
    net = apply_speed(net, options)       # before building the optimiser
    with autocast(options, device_type):
        loss = loss_fn(net(to_layout(x, options)), y)
    loss.backward()

State-dict keys never change: the fused norm/act module keeps ``weight``/``bias`` under the
GroupNorm's name (the GELU becomes a parameterless ``Identity``), so checkpoints load into a
plain or a fused network alike; a compiled network is an ``OptimizedModule`` whose own keys
gain a ``_orig_mod.`` prefix, so save and load through :func:`unwrap` (the same parameters).
"""

from __future__ import annotations

import contextlib
import itertools
import shutil
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ensml.errors import EnsmlError

CHANNELS_LAST = torch.channels_last_3d


@dataclass(frozen=True)
class SpeedOptions:
    """How a training step runs; every switch off gives the plain step."""

    channels_last: bool = False
    """Store 5-D parameters and activations as ``channels_last_3d`` (channels innermost), the
    layout oneDNN's and cuDNN's 3-D convolutions use natively, so no layout copy per call."""

    compile: bool = False
    """``torch.compile`` the network (inductor): pads, concatenations, norms and activations
    fuse into generated kernels around the library convolutions. The first step compiles."""

    bf16: bool = False
    """Run the step under ``torch.autocast(dtype=bfloat16)``; needs bf16 hardware (CPU:
    avx512_bf16 or AMX; CUDA: compute capability 8.0+). Parameters stay float32."""

    fused_norm_act: bool = False
    """Replace each GroupNorm followed by a GELU by one autograd function that saves only its
    input and the per-group statistics (eager mode; inductor fuses them itself under compile)."""

    def check(self, device_type: str) -> None:
        """Raise a one-line :class:`EnsmlError` if these options cannot run on ``device_type``."""
        if device_type not in ("cpu", "cuda"):
            raise EnsmlError(f"speed options: device type {device_type!r} is not supported (cpu, cuda)")
        if self.bf16 and not bf16_supported(device_type):
            raise EnsmlError(
                f"speed options: bf16=True but this {device_type} has no bf16 support "
                "(CPU: avx512_bf16 or amx_bf16; CUDA: compute capability 8.0+); set bf16=False"
            )
        if self.compile and self.fused_norm_act:
            raise EnsmlError(
                "speed options: fused_norm_act=True with compile=True: inductor already fuses "
                "GroupNorm+GELU into one kernel each way; set one of them to False"
            )
        if self.compile and device_type == "cpu" and not _have_cxx():
            raise EnsmlError("speed options: compile=True on CPU needs a C++ compiler (g++ or clang++)")


def bf16_supported(device_type: str) -> bool:
    """Whether ``device_type`` ("cpu", "cuda") computes in bfloat16 natively (not by emulation)."""
    if device_type == "cuda":
        return torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False)
    if device_type == "cpu":
        return bool({"avx512_bf16", "amx_bf16"} & _cpu_flags())
    return False


def _cpu_flags() -> set[str]:
    """The CPU feature flags of ``/proc/cpuinfo`` (empty where there is none, e.g. macOS)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    for line in text.splitlines():
        if line.startswith("flags"):
            return set(line.split(":", 1)[1].split())
    return set()


def _have_cxx() -> bool:
    return any(shutil.which(c) for c in ("g++", "clang++", "c++"))


def apply_speed(net: nn.Module, options: SpeedOptions) -> nn.Module:
    """Apply ``options`` to ``net`` in place and return the module to call.

    Layout and fusion change ``net`` itself (same parameter objects, same state-dict keys);
    compile returns a wrapper whose ``_orig_mod`` is ``net`` (see :func:`unwrap`). Call it before
    building the optimiser (it would still work after: parameters are the same objects).
    """
    if options.fused_norm_act:
        fuse_norm_act(net)
    if options.channels_last:
        net.to(memory_format=CHANNELS_LAST)
    if options.compile:
        return torch.compile(net)
    return net


def unwrap(net: nn.Module) -> nn.Module:
    """The plain module under a compiled one (``net`` itself if not compiled): save/load this."""
    return getattr(net, "_orig_mod", net)


def to_layout(x: torch.Tensor, options: SpeedOptions) -> torch.Tensor:
    """``x`` in the memory layout the network expects (a copy only for 5-D inputs when needed)."""
    if options.channels_last and x.dim() == 5:
        return x.contiguous(memory_format=CHANNELS_LAST)
    return x


def autocast(options: SpeedOptions, device_type: str) -> contextlib.AbstractContextManager:
    """``torch.autocast`` to bfloat16 when ``options.bf16``, else a context that does nothing."""
    if options.bf16:
        return torch.autocast(device_type=device_type, dtype=torch.bfloat16)
    return contextlib.nullcontext()


class FusedGroupNormGELU(nn.Module):
    """``GELU(GroupNorm(x))`` as one autograd function; same ``weight``/``bias`` as the GroupNorm.

    Saves only ``x`` and the (batch, group) mean and inverse standard deviation for backward,
    where the normalised value is recomputed (the plain pair also saves the GroupNorm output).
    Output is float32 under autocast, as GroupNorm's is. Accepts any memory layout.
    """

    def __init__(self, norm: nn.GroupNorm, approximate: str = "none") -> None:
        super().__init__()
        self.num_groups, self.num_channels, self.eps = norm.num_groups, norm.num_channels, norm.eps
        self.approximate = approximate
        if norm.affine:
            self.weight, self.bias = norm.weight, norm.bias
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        ones = x.new_ones(self.num_channels, dtype=torch.float32)
        w = ones if self.weight is None else self.weight
        b = torch.zeros_like(ones) if self.bias is None else self.bias
        return _GroupNormGELU.apply(x, w, b, self.num_groups, self.eps, self.approximate)

    def extra_repr(self) -> str:
        return f"{self.num_groups}, {self.num_channels}, eps={self.eps}, approximate={self.approximate!r}"


def _group_stats(x: torch.Tensor, groups: int, eps: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean and 1/std over each (batch, group): per-channel Welford moments, then combined.

    Per-channel reductions keep any memory layout (no reshape copy); the group variance is the
    mean of the channel variances plus the variance of the channel means (equal counts).
    """
    n, c = x.shape[:2]
    var_c, mean_c = torch.var_mean(x, dim=tuple(range(2, x.dim())), correction=0)
    mean_c, var_c = mean_c.reshape(n, groups, c // groups), var_c.reshape(n, groups, c // groups)
    mean = mean_c.mean(-1)
    var = var_c.mean(-1) + (mean_c - mean[..., None]).square().mean(-1)
    return mean, (var + eps).rsqrt()


def _scale_shift(mean, rstd, weight, bias, shape):
    """Per-(batch, channel) ``a``, ``b`` with ``GroupNorm(x) = a * x + b``, shaped to broadcast."""
    n, c = shape[:2]
    groups = mean.shape[1]
    rstd_c = rstd.repeat_interleave(c // groups, dim=1)
    mean_c = mean.repeat_interleave(c // groups, dim=1)
    a = rstd_c * weight
    b = bias - mean_c * a
    tail = (1,) * (len(shape) - 2)
    return a.reshape(n, c, *tail), b.reshape(n, c, *tail)


class _GroupNormGELU(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, groups: int, eps: float, approximate: str):
        xf = x.float()
        mean, rstd = _group_stats(xf, groups, eps)
        a, b = _scale_shift(mean, rstd, weight.float(), bias.float(), x.shape)
        ctx.save_for_backward(x, weight, bias, mean, rstd)
        ctx.approximate = approximate
        return F.gelu(torch.addcmul(b, xf, a), approximate=approximate)

    @staticmethod
    def backward(ctx, grad_out):
        x, weight, bias, mean, rstd = ctx.saved_tensors
        xf, w = x.float(), weight.float()
        n, c = x.shape[:2]
        groups, dims = mean.shape[1], tuple(range(2, x.dim()))
        a, b = _scale_shift(mean, rstd, w, bias.float(), x.shape)
        with torch.enable_grad():
            z = torch.addcmul(b, xf, a).requires_grad_()
            (gz,) = torch.autograd.grad(F.gelu(z, approximate=ctx.approximate), z, grad_out)
        del z
        # Sums over space per (batch, channel): sum(gz) and sum(gz * x); xhat = (x - mean) * rstd.
        s_gz = gz.sum(dims)
        s_gzx = (gz * xf).sum(dims)
        rstd_c = rstd.repeat_interleave(c // groups, dim=1)
        mean_c = mean.repeat_interleave(c // groups, dim=1)
        s_gzxhat = (s_gzx - mean_c * s_gz) * rstd_c
        grad_w, grad_b = s_gzxhat.sum(0), s_gz.sum(0)
        # dx = rstd * (w*gz - mean_g(w*gz) - xhat * mean_g(w*gz*xhat)), means over each group.
        m = x[0, 0].numel() * (c // groups)
        k1 = (w * s_gz).reshape(n, groups, -1).sum(-1) / m
        k2 = (w * s_gzxhat).reshape(n, groups, -1).sum(-1) / m
        beta = (-k2 * rstd * rstd).repeat_interleave(c // groups, dim=1)
        gamma = (-k1 * rstd).repeat_interleave(c // groups, dim=1) - beta * mean_c
        tail = (1,) * len(dims)
        grad_x = torch.addcmul(gamma.reshape(n, c, *tail), xf, beta.reshape(n, c, *tail))
        grad_x.addcmul_(gz, (rstd_c * w).reshape(n, c, *tail))
        return grad_x.to(x.dtype), grad_w.to(weight.dtype), grad_b.to(bias.dtype), None, None, None


def fuse_norm_act(net: nn.Module) -> int:
    """Replace, in every ``nn.Sequential`` of ``net``, a GroupNorm directly followed by a GELU.

    The GroupNorm's slot gets a :class:`FusedGroupNormGELU` sharing its parameters and the GELU's
    slot an ``nn.Identity``, so module names and state-dict keys stay the same. Returns the count.
    """
    count = 0
    for seq in [m for m in net.modules() if isinstance(m, nn.Sequential)]:
        children = list(seq.named_children())
        for (first, norm), (second, act) in itertools.pairwise(children):
            if isinstance(norm, nn.GroupNorm) and isinstance(act, nn.GELU):
                setattr(seq, first, FusedGroupNormGELU(norm, act.approximate))
                setattr(seq, second, nn.Identity())
                count += 1
    return count
