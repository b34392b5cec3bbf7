"""Pruning (ensml.models.prune) against hand computations on tiny networks."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from ensml.models import prune as P
from ensml.models.unet3d import UNet3d

pytestmark = pytest.mark.timeout(60)


def tiny_unet(norm_groups: int = 0, seed: int = 0) -> UNet3d:
    torch.manual_seed(seed)
    return UNet3d(3, 2, width=4, depth=2, norm_groups=norm_groups)


def sample(seed: int = 1) -> torch.Tensor:
    return torch.randn(2, 3, 2, 8, 12, generator=torch.Generator().manual_seed(seed))


def weights(net: nn.Module) -> dict[str, np.ndarray]:
    return {name: m.weight.detach().numpy().copy() for name, m in P.weighted_layers(net)}


def test_layers_are_the_convolutions_and_linear_and_the_head_is_the_output() -> None:
    net = tiny_unet()
    names = [n for n, _ in P.weighted_layers(net)]
    assert "upsamplers.0" in names and "head.conv" in names and len(names) == 3 * 2 + 2 + 2 * 2 + 1
    assert P.output_layers(net) == ["head.conv"]
    seq = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Flatten(), nn.Linear(12, 2))
    assert P.output_layers(seq) == ["2"]


@pytest.mark.parametrize("target", [0.0, 0.3, 0.8, 0.95])
def test_global_magnitude_zeroes_exactly_the_smallest_weights(target: float) -> None:
    net = tiny_unet()
    before = weights(net)
    keys = {k: v.shape for k, v in net.state_dict().items()}
    P.global_magnitude(net, target)
    after = weights(net)
    absw = np.concatenate([np.abs(w).ravel() for w in before.values()])
    k = round(target * absw.size)  # global: exact, up to the one weight of rounding
    # The hand computation: the k-th smallest |w| (the empirical quantile at k / N).
    threshold = np.quantile(absw, k / absw.size, method="inverted_cdf") if k else -1.0
    zeros = sum(int((w == 0).sum()) for w in after.values())
    assert zeros == k
    for name, w0 in before.items():
        pruned = after[name] == 0
        assert (np.abs(w0[pruned]) <= threshold + 1e-12).all(), name
        assert (np.abs(w0[~pruned]) >= threshold - 1e-12).all(), name
        np.testing.assert_array_equal(after[name][~pruned], w0[~pruned])  # the others untouched
    assert {k: v.shape for k, v in net.state_dict().items()} == keys  # no weight_orig / weight_mask
    assert net(sample()).shape == (2, 2, 2, 8, 12)
    assert P.sparsity(net).overall == pytest.approx(target, abs=1 / absw.size)


def test_global_magnitude_covers_conv2d_and_linear() -> None:
    torch.manual_seed(0)
    net = nn.Sequential(nn.Conv2d(1, 3, 3), nn.Flatten(), nn.Linear(12, 2))
    absw = np.concatenate([np.abs(w).ravel() for w in weights(net).values()])
    P.global_magnitude(net, 0.5)
    assert sum(int((w == 0).sum()) for w in weights(net).values()) == round(0.5 * absw.size)
    assert net(torch.randn(1, 1, 4, 4)).shape == (1, 2)


@pytest.mark.parametrize("target", [0.5, 0.75, 0.9])
def test_channel_prune_zeroes_the_smallest_l2_channels_never_the_head(target: float) -> None:
    net = tiny_unet()
    before = {
        name: (m.weight.detach().clone(), m.bias.detach().clone()) for name, m in P.weighted_layers(net)
    }
    P.channel_prune(net, target)
    for name, m in P.weighted_layers(net):
        w0, b0 = before[name]
        w, b = m.weight.detach(), m.bias.detach()
        if name == "head.conv":
            torch.testing.assert_close(w, w0)  # every output field kept
            torch.testing.assert_close(b, b0)
            continue
        dim = 1 if isinstance(m, nn.ConvTranspose3d) else 0
        norms = w0.transpose(0, dim).flatten(1).norm(dim=1)
        n = norms.numel()
        expect = set(torch.argsort(norms)[: min(round(target * n), n - 1)].tolist())  # by hand
        zero = w.transpose(0, dim).flatten(1).eq(0).all(1) & b.eq(0)
        assert set(torch.nonzero(zero).flatten().tolist()) == expect, name
        kept = [c for c in range(n) if c not in expect]
        torch.testing.assert_close(w.transpose(0, dim)[kept], w0.transpose(0, dim)[kept])
    assert net(sample()).shape == (2, 2, 2, 8, 12)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["channel", "magnitude"])
def test_slim_copy_gives_the_outputs_of_the_zeroed_network(method: str) -> None:
    net = tiny_unet()
    (P.channel_prune if method == "channel" else P.global_magnitude)(net, 0.5)
    slim = P.slim_unet(net)
    x = sample()
    with torch.no_grad():
        torch.testing.assert_close(slim(x), net(x), rtol=1e-5, atol=1e-5)
    n_slim, n = (sum(p.numel() for p in m.parameters()) for m in (slim, net))
    if method == "channel":  # half the channels: about a quarter of the weights
        assert n_slim < 0.4 * n
        assert slim.encoders[0][0].conv.weight.shape[:2] == (2, 3)
        assert slim.head.conv.weight.shape[:2] == (2, 2)
    else:
        assert n_slim <= n


def test_slim_copy_refuses_groupnorm() -> None:
    with pytest.raises(ValueError, match="GroupNorm"):
        P.slim_unet(tiny_unet(norm_groups=2))


@pytest.mark.slow
def test_masks_keep_pruned_weights_zero_while_training() -> None:
    net = tiny_unet()
    P.mask_magnitude(net, 0.7)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    for _ in range(2):
        opt.zero_grad()
        net(sample()).square().mean().backward()
        opt.step()
    P.make_permanent(net)
    assert P.sparsity(net).overall == pytest.approx(0.7, abs=1e-3)
    assert not any(k.endswith(("_orig", "_mask")) for k in net.state_dict())


def test_iterative_pruning_keeps_earlier_zeros() -> None:
    net = tiny_unet()
    P.channel_prune(net, 0.25)
    zero_before = {n: m.weight.detach() == 0 for n, m in P.weighted_layers(net)}
    P.channel_prune(net, 0.5)
    for name, m in P.weighted_layers(net):
        assert (m.weight.detach()[zero_before[name]] == 0).all(), name


def test_sparsity_report_per_layer() -> None:
    net = tiny_unet()
    P.channel_prune(net, 0.5)
    report = P.sparsity(net)
    assert report.layers["head.conv"] == 0.0
    assert report.layers["encoders.0.0.conv"] == 0.5
    n_weights = sum(m.weight.numel() for _, m in P.weighted_layers(net))
    zeros = sum(int((m.weight == 0).sum()) for _, m in P.weighted_layers(net))
    assert report.overall == pytest.approx(zeros / n_weights)
    assert report.total == sum(p.numel() for p in net.parameters())
    assert report.nonzero == sum(int((p != 0).sum()) for p in net.parameters())
    assert "head.conv" in report.table()


def test_schedules_end_at_the_target() -> None:
    cubic = P.prune_schedule(0.9, 3)
    assert cubic[-1] == pytest.approx(0.9) and cubic == sorted(cubic)
    assert cubic[0] == pytest.approx(0.9 * (1 - (2 / 3) ** 3))
    geo = P.prune_schedule(0.9, 2, "geometric")
    assert geo == pytest.approx([1 - 0.1**0.5, 0.9])
    assert P.prune_schedule(0.5, 1) == [0.5]


@pytest.mark.parametrize("bad", [1.0, -0.1, 1.5])
def test_sparsity_out_of_range_is_refused(bad: float) -> None:
    with pytest.raises(ValueError, match="sparsity must be"):
        P.global_magnitude(tiny_unet(), bad)
    with pytest.raises(ValueError, match="sparsity must be"):
        P.prune_schedule(bad, 2)
