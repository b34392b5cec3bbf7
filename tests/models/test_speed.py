"""Speed switches: each gives the plain step's outputs and gradients within a stated tolerance.

Tolerances (|a - b| <= atol + rtol * |b|, torch.testing.assert_close):
- channels_last, fused norm/act, compile: float32 rounding only (the same sums in another order),
  rtol 1e-5 and atol 1e-4 times the tensor's largest magnitude (scale-free). Measured: <= 2e-6
  of the scale for outputs and most gradients; 1.6e-5 for a conv bias ahead of a GroupNorm, whose
  gradient is a sum of terms that nearly cancel (the norm removes most of a bias's effect);
- bf16 autocast: outputs max |difference| <= 2e-2 of their largest magnitude; all gradients as one
  vector, ||difference|| <= 5e-2 ||plain|| (bf16 keeps 8 significant bits, ~4e-3 per rounding;
  measured here 8e-3 and 1e-2; single small tensors, e.g. one norm's bias, can differ by 15%).
"""

from __future__ import annotations

import copy

import pytest
import torch
from torch import nn

from ensml.errors import EnsmlError
from ensml.models import speed
from ensml.models.layers import ConvBlock
from ensml.models.speed import (
    CHANNELS_LAST,
    FusedGroupNormGELU,
    SpeedOptions,
    apply_speed,
    autocast,
    bf16_supported,
    to_layout,
    unwrap,
)
from ensml.models.unet3d import UNet3d

SHAPE = (2, 3, 3, 16, 32)  # (batch, channel, level, lat, lon), lat/lon divide by 2**depth


def tiny_net(norm_groups: int = 2, depth: int = 2) -> UNet3d:
    torch.manual_seed(0)
    net = UNet3d(3, 2, width=4, depth=depth, norm_groups=norm_groups)
    with torch.no_grad():  # non-trivial affine parameters, so that their gradients are checked
        for m in net.modules():
            if isinstance(m, nn.GroupNorm):
                m.weight.uniform_(0.5, 1.5)
                m.bias.uniform_(-0.5, 0.5)
    return net


def run_step(net: nn.Module, options: SpeedOptions, shape=SHAPE) -> tuple[torch.Tensor, dict]:
    """Output and parameter gradients of one forward/backward with ``options`` applied."""
    net = copy.deepcopy(net)
    run = apply_speed(net, options)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(*shape, generator=gen) * 2 + 1
    with autocast(options, "cpu"):
        out = run(to_layout(x, options))
    target = torch.randn(out.shape, generator=gen)
    loss = (out.float() - target).square().mean()
    loss.backward()
    grads = {k: p.grad.clone() for k, p in unwrap(run).named_parameters()}
    return out.detach().float(), grads


def assert_close_scaled(actual: torch.Tensor, expected: torch.Tensor, rtol: float, atol_rel: float) -> None:
    scale = expected.abs().max().item()
    torch.testing.assert_close(actual, expected, rtol=rtol, atol=atol_rel * scale)


def assert_same_step(a, b, rtol: float = 1e-5, atol_rel: float = 1e-4) -> None:
    (out_a, grads_a), (out_b, grads_b) = a, b
    assert_close_scaled(out_a, out_b, rtol, atol_rel)
    assert grads_a.keys() == grads_b.keys()
    for k in grads_b:
        assert_close_scaled(grads_a[k], grads_b[k], rtol, atol_rel)


@pytest.mark.parametrize(
    "options",
    [
        SpeedOptions(channels_last=True),
        SpeedOptions(fused_norm_act=True),
        SpeedOptions(channels_last=True, fused_norm_act=True),
    ],
    ids=["channels_last", "fused", "channels_last+fused"],
)
def test_eager_switches_match_the_plain_step(options: SpeedOptions) -> None:
    net = tiny_net()
    assert_same_step(run_step(net, options), run_step(net, SpeedOptions()))


def test_switches_match_on_a_grid_that_needs_padding() -> None:
    net = tiny_net()
    shape = (1, 3, 2, 13, 30)  # padded to 16 x 32 inside the U-Net
    plain = run_step(net, SpeedOptions(), shape)
    assert_same_step(run_step(net, SpeedOptions(channels_last=True, fused_norm_act=True), shape), plain)


@pytest.mark.slow  # torch.compile
def test_compile_matches_the_plain_step() -> None:
    # One conv block (conv, norm, GELU twice): its forward and backward compile in ~15 s cold on
    # 2 cores (a depth-1 U-Net takes ~45 s); later runs hit inductor's on-disk cache.
    torch.manual_seed(0)
    net = ConvBlock(3, 4, norm_groups=2)
    try:
        compiled = run_step(net, SpeedOptions(compile=True))
    finally:
        torch.compiler.reset()
    assert_same_step(compiled, run_step(net, SpeedOptions()))


@pytest.mark.skipif(not bf16_supported("cpu"), reason="this CPU has no bf16 instructions")
def test_bf16_is_close_to_the_plain_step() -> None:
    net = tiny_net()
    (out, grads), (out_ref, grads_ref) = run_step(net, SpeedOptions(bf16=True)), run_step(net, SpeedOptions())
    assert (out - out_ref).abs().max() <= 2e-2 * out_ref.abs().max()
    g, ref = (torch.cat([d[k].flatten() for k in grads_ref]) for d in (grads, grads_ref))
    assert (g - ref).norm() <= 5e-2 * ref.norm()


def test_channels_last_keeps_the_layout_through_the_network() -> None:
    net = apply_speed(tiny_net(), SpeedOptions(channels_last=True))
    seen: list[str] = []

    def check(module: nn.Module, inputs: tuple, output: torch.Tensor) -> None:
        for t in (*inputs, output):
            if t.dim() == 5 and not t.is_contiguous(memory_format=CHANNELS_LAST):
                seen.append(type(module).__name__)

    for m in net.modules():
        m.register_forward_hook(check)
    # On one thread PyTorch runs the 1x1 head convolution outside oneDNN, which returns the
    # standard layout; an earlier test in the same worker may have left torch on one thread.
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        net(to_layout(torch.randn(*SHAPE), SpeedOptions(channels_last=True)))
    finally:
        torch.set_num_threads(threads)
    assert seen == []


def test_fusion_keeps_state_dict_keys_and_checkpoints_load_either_way() -> None:
    plain = tiny_net()
    fused = apply_speed(copy.deepcopy(plain), SpeedOptions(fused_norm_act=True, channels_last=True))
    assert sum(isinstance(m, FusedGroupNormGELU) for m in fused.modules()) == 2 * 5  # 2 per block
    assert list(fused.state_dict()) == list(plain.state_dict())
    x = torch.randn(*SHAPE)
    # fused -> plain: perturb the fused one's norm parameters, load them into a fresh plain net
    with torch.no_grad():
        fused.encoders[0][1].weight.mul_(1.5)
    fresh = tiny_net()
    fresh.load_state_dict(fused.state_dict())
    assert_close_scaled(fresh(x), fused(x), rtol=1e-5, atol_rel=1e-5)
    # plain -> fused
    refused = apply_speed(tiny_net(), SpeedOptions(fused_norm_act=True))
    refused.load_state_dict(fresh.state_dict())
    assert_close_scaled(refused(x), fresh(x), rtol=1e-5, atol_rel=1e-5)


@pytest.mark.slow
def test_compile_shares_parameters_and_unwrap_gives_the_plain_keys() -> None:
    net = tiny_net(depth=1)
    keys = list(net.state_dict())
    compiled = apply_speed(net, SpeedOptions(compile=True))  # compiles lazily: nothing runs here
    assert unwrap(compiled) is net and list(unwrap(compiled).state_dict()) == keys
    assert {id(p) for p in compiled.parameters()} == {id(p) for p in net.parameters()}
    assert unwrap(net) is net


def test_fusion_without_a_norm_changes_nothing() -> None:
    net = apply_speed(tiny_net(norm_groups=0), SpeedOptions(fused_norm_act=True))
    assert not any(isinstance(m, FusedGroupNormGELU) for m in net.modules())
    assert any(isinstance(m, nn.GELU) for m in net.modules())


def test_to_layout_and_autocast() -> None:
    x = torch.randn(*SHAPE)
    assert to_layout(x, SpeedOptions()) is x
    assert to_layout(x, SpeedOptions(channels_last=True)).is_contiguous(memory_format=CHANNELS_LAST)
    flat = torch.randn(2, 3)
    assert to_layout(flat, SpeedOptions(channels_last=True)) is flat
    with autocast(SpeedOptions(), "cpu"):
        assert not torch.is_autocast_enabled("cpu")
    with autocast(SpeedOptions(bf16=True), "cpu"):
        assert torch.is_autocast_enabled("cpu")
        assert torch.get_autocast_dtype("cpu") == torch.bfloat16


def test_bf16_support_follows_the_cpu_flags(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed, "_cpu_flags", lambda: {"avx512f", "avx512_bf16"})
    assert bf16_supported("cpu")
    monkeypatch.setattr(speed, "_cpu_flags", lambda: {"avx512f", "amx_bf16"})
    assert bf16_supported("cpu")
    monkeypatch.setattr(speed, "_cpu_flags", lambda: {"avx2"})
    assert not bf16_supported("cpu")
    assert not bf16_supported("mps")


@pytest.mark.parametrize(
    ("options", "device", "words"),
    [
        (SpeedOptions(bf16=True), "cpu", "bf16=True but this cpu has no bf16 support"),
        (SpeedOptions(compile=True, fused_norm_act=True), "cpu", "inductor already fuses"),
        (SpeedOptions(), "mps", "device type 'mps' is not supported"),
    ],
)
def test_impossible_combinations_give_one_line(options, device, words, monkeypatch) -> None:
    monkeypatch.setattr(speed, "_cpu_flags", lambda: {"avx2"})
    with pytest.raises(EnsmlError, match=words) as info:
        options.check(device)
    assert "\n" not in str(info.value)


def test_compile_without_a_compiler_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(speed.shutil, "which", lambda name: None)
    with pytest.raises(EnsmlError, match="needs a C\\+\\+ compiler"):
        SpeedOptions(compile=True).check("cpu")
    SpeedOptions(channels_last=True, fused_norm_act=True).check("cpu")  # the rest needs nothing
