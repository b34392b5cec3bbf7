"""Memory policies: recomputed and swapped activations give the plain network's gradients to the
last bit, and the saved bytes are what the shapes say."""

from __future__ import annotations

import copy
import os
import pickle

import pytest
import torch

from ensml.errors import EnsmlError
from ensml.models import ConvGRUUNet, TimeUNet, UNet3d
from ensml.models.memory import MemoryPolicy, apply_policy, policy_of
from ensml.models.memory_profile import LiveBytes, measure_step, saved_activation_bytes
from ensml.models.offload import Offloader

NETS = {
    "unet3d": (lambda: UNet3d(4, 3, width=4, depth=2, norm_groups=2), (2, 4, 3, 12, 20)),
    "convgru": (lambda: ConvGRUUNet(4, 3, width=4, depth=2), (2, 3, 4, 3, 8, 16)),
    "unet3d_time": (lambda: TimeUNet(4, 3, n_levels=3, width=4, depth=2), (2, 3, 4, 3, 8, 16)),
}


def policies(scratch) -> list[MemoryPolicy]:
    disk = dict(offload="disk", scratch_dir=str(scratch), prefetch=1)
    return [
        MemoryPolicy("levels"),
        MemoryPolicy("all"),
        MemoryPolicy(**disk),
        MemoryPolicy("levels", swap_levels=(0,), **disk),
        MemoryPolicy("all", swap_levels=(1,), **disk),
        MemoryPolicy("levels", checkpoint_levels=(0, 1)),
        MemoryPolicy("all", checkpoint_levels=(1,)),
    ]


def _grads(net: torch.nn.Module, x: torch.Tensor) -> list[torch.Tensor]:
    net.zero_grad(set_to_none=True)
    y = net(x)
    (y.square().mean() + y.mean()).backward()
    return [y.detach()] + [p.grad for p in net.parameters()]


@pytest.mark.parametrize("arch", list(NETS))
def test_every_policy_gives_the_same_gradients_to_the_last_bit(arch, tmp_path) -> None:
    torch.use_deterministic_algorithms(True)
    try:
        make, shape = NETS[arch]
        torch.manual_seed(0)
        net, x = make(), torch.randn(shape)
        want = _grads(net, x)
        for policy in policies(tmp_path):
            apply_policy(net, policy)
            got = _grads(net, x)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), policy.name
            assert os.listdir(tmp_path) == []  # the swap file is unlinked as it is created
    finally:
        torch.use_deterministic_algorithms(False)


def test_modes_per_level() -> None:
    net = UNet3d(2, 1, width=2, depth=3)
    assert policy_of(net) == ["keep"] * 4
    apply_policy(net, MemoryPolicy("levels", "disk", (0, 1)))
    assert policy_of(net) == ["swap", "swap", "recompute", "recompute"]
    apply_policy(net, MemoryPolicy(offload="disk"))
    assert policy_of(net) == ["swap"] * 4
    apply_policy(net, None)
    assert policy_of(net) == ["keep"] * 4
    assert [b.unit_checkpoint for b in net.encoders] == [False] * 4
    apply_policy(net, MemoryPolicy("all"))
    assert all(b.unit_checkpoint for b in [*net.encoders, *net.decoders])
    apply_policy(net, MemoryPolicy("all", checkpoint_levels=(0, 1)))
    assert policy_of(net) == ["recompute", "recompute", "keep", "keep"]
    # decoder j rebuilds level 2 - j: only the recomputed levels checkpoint their convolutions
    assert [b.unit_checkpoint for b in net.encoders] == [True, True, False, False]
    assert [b.unit_checkpoint for b in net.decoders] == [False, True, True]
    apply_policy(net, MemoryPolicy("levels", "disk", (0,), checkpoint_levels=(2,)))
    assert policy_of(net) == ["swap", "keep", "recompute", "keep"]
    assert MemoryPolicy("levels", checkpoint_levels=[0, 1]).name == "levels [0, 1]"


def test_bad_policies_are_one_line_errors() -> None:
    with pytest.raises(EnsmlError, match="checkpointing must be one of none, levels, all"):
        MemoryPolicy("layers")
    with pytest.raises(EnsmlError, match="swap_levels needs an offload target"):
        MemoryPolicy(swap_levels=(0,))
    with pytest.raises(EnsmlError, match=r"swap_levels \[5\]: the U-Net has levels 0 to 2 only"):
        apply_policy(UNet3d(2, 1, width=2, depth=2), MemoryPolicy(offload="disk", swap_levels=(0, 5)))
    with pytest.raises(EnsmlError, match="checkpoint_levels needs checkpointing"):
        MemoryPolicy(checkpoint_levels=(0,))
    with pytest.raises(EnsmlError, match=r"checkpoint_levels \[3\]: the U-Net has levels 0 to 2 only"):
        apply_policy(UNet3d(2, 1, width=2, depth=2), MemoryPolicy("levels", checkpoint_levels=(3,)))
    with pytest.raises(EnsmlError, match="on the CPU use offload: disk"):
        MemoryPolicy(offload="host").check_device("cpu")


def test_saved_bytes_equal_the_shapes_by_hand() -> None:
    """Depth 0, width 3, on (1, 2, 2, 4, 6): the tensors each layer saves, counted by hand."""
    net = UNet3d(2, 1, width=3, depth=0)
    x = torch.randn(1, 2, 2, 4, 6, requires_grad=True)
    f = 4  # float32
    padded = lambda c: c * 4 * 6 * 8 * f  # noqa: E731 - (level 2+2, lat 4+2, lon 6+2)
    plain = lambda c: c * 2 * 4 * 6 * f  # noqa: E731
    # conv1: padded input; gelu1: its input; conv2: padded gelu1; gelu2: its input; head: gelu2.
    # The head's 1x1 convolution saves the tensor gelu2 returned, a new one (GELU saves its input).
    want = padded(2) + plain(3) + padded(3) + plain(3) + plain(3)
    assert saved_activation_bytes(net, x, MemoryPolicy()) == want
    # Recomputing the one level keeps its input (x) and what the head saves.
    assert saved_activation_bytes(net, x, MemoryPolicy("levels")) == plain(2) + plain(3)


def test_checkpointing_halves_the_saved_bytes_or_better() -> None:
    torch.manual_seed(0)
    net, x = UNet3d(14, 4, width=8, depth=3), torch.randn(2, 14, 2, 32, 64)
    none = saved_activation_bytes(net, x, MemoryPolicy())
    levels = saved_activation_bytes(net, x, MemoryPolicy("levels"))
    swap = saved_activation_bytes(net, x, MemoryPolicy(offload="disk"))
    assert levels <= 0.5 * none and swap <= 0.1 * none


@pytest.mark.slow
def test_swap_moves_the_saved_bytes_and_leaves_no_file(tmp_path) -> None:
    torch.manual_seed(0)
    net, x = UNet3d(4, 2, width=8, depth=2), torch.randn(2, 4, 2, 32, 64)
    m = measure_step(net, x, MemoryPolicy(offload="disk", scratch_dir=str(tmp_path)), steps=1)
    keep = measure_step(net, x, MemoryPolicy(), steps=1)
    assert m.swapped_bytes > 0.9 * keep.saved_bytes
    assert m.peak_bytes < keep.peak_bytes
    assert os.listdir(tmp_path) == []


def test_offloader_travels_with_copies_and_pickles(tmp_path) -> None:
    net = apply_policy(
        UNet3d(4, 2, width=4, depth=1), MemoryPolicy(offload="disk", scratch_dir=str(tmp_path))
    )
    x = torch.randn(1, 4, 2, 16, 32)
    net(x).sum().backward()
    for other in (copy.deepcopy(net), pickle.loads(pickle.dumps(net))):
        assert policy_of(other) == ["swap", "swap"]
        other(x).sum().backward()
        assert other.memory_offloader is not net.memory_offloader


def test_a_full_disk_is_one_line(tmp_path, monkeypatch) -> None:
    def full(*args):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "pwrite", full)
    off = Offloader("disk", str(tmp_path))
    x = torch.randn(64, 1024, requires_grad=True)
    with pytest.raises(EnsmlError, match=f"swapping activations to {tmp_path}: No space left on device"):
        with off.saving():
            y = (x * 2).sin()
        y.sum().backward()


def test_live_bytes_counts_storages_once() -> None:
    mode = LiveBytes()
    with mode:
        a = torch.zeros(1000)
        b = a.view(10, 100)
        c = a + 1
        del a, b
    assert mode.peak == 8000 and mode.live == 4000
    del c
    assert mode.live == 0


def _spatial_grads() -> list[bool]:
    """On this rank of a 1 × 2 split: gradients under each policy equal the plain ones."""
    from ensml.models.spatial import ProcessGrid, SpatialUNet3d, global_mean, reduce_gradients
    from ensml.models.spatial.unet import local_slices

    grid = ProcessGrid(lat=1, lon=2)
    torch.manual_seed(0)
    net = SpatialUNet3d(UNet3d(3, 2, width=4, depth=2, norm_groups=2), grid)
    x = torch.randn(2, 3, 2, 12, 24)[(..., *local_slices(12, 24, 2, grid))]

    def grads() -> list[torch.Tensor]:
        net.zero_grad(set_to_none=True)
        global_mean(net(x).square(), grid).backward()
        reduce_gradients(net, grid)
        return [p.grad.clone() for p in net.parameters()]

    want, same = grads(), []
    for policy in (MemoryPolicy("levels"), MemoryPolicy("all")):
        apply_policy(net, policy)
        same.append(all(torch.equal(a, b) for a, b in zip(grads(), want)))
    return same


@pytest.mark.distributed
def test_spatial_parallel_unet_recomputes_with_halo_exchanges() -> None:
    from ensml.models.spatial.testing import run_distributed

    for same in run_distributed(_spatial_grads, 2, timeout=120):
        assert same == [True, True]


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_host_offload_on_cuda_gives_the_same_gradients() -> None:
    # CUDA's max-pool backward is flagged non-deterministic (atomic adds where windows overlap;
    # the U-Net's 2x2 windows do not): warn for it rather than refuse.
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.backends.cudnn.benchmark = False
    try:
        torch.manual_seed(0)
        net = UNet3d(4, 3, width=8, depth=2, norm_groups=2).cuda()
        x = torch.randn(2, 4, 3, 32, 64, device="cuda")
        want = _grads(net, x)
        for policy in (MemoryPolicy(offload="host"), MemoryPolicy("levels", "host", (0,))):
            apply_policy(net, policy)
            got = _grads(net, x)
            assert all(torch.equal(a, b) for a, b in zip(got, want)), policy.name
        m = measure_step(net, x, MemoryPolicy(offload="host"), steps=1)
        keep = measure_step(net, x, MemoryPolicy(), steps=1)
        assert m.swapped_bytes > 0.5 * keep.saved_bytes and m.peak_bytes < keep.peak_bytes
    finally:
        torch.use_deterministic_algorithms(False)
