"""The per-grid-point affine layer: identity at start, one weight per point, slabs of it."""

from __future__ import annotations

import pytest
import torch

from ensml.models.local import LocalAffine


def test_starts_as_the_identity() -> None:
    layer = LocalAffine(3, 2, 4, 8)
    x = torch.randn(5, 3, 2, 4, 8)
    torch.testing.assert_close(layer(x), x)


def test_each_point_has_its_own_weight() -> None:
    """y = a + b·x with a, b per (channel, level, lat, lon), checked element by element; the loss
    at one point moves that point's weights alone."""
    torch.manual_seed(0)
    layer = LocalAffine(2, 2, 3, 4)
    with torch.no_grad():
        layer.a.normal_()
        layer.b.normal_()
    x = torch.randn(6, 2, 2, 3, 4)
    y = layer(x)
    for idx in [(0, 0, 0, 0), (1, 1, 2, 3), (0, 1, 1, 2)]:
        expected = layer.a[idx] + layer.b[idx] * x[(slice(None), *idx)]
        torch.testing.assert_close(y[(slice(None), *idx)], expected)
    y[:, 1, 0, 2, 3].sum().backward()
    nonzero_a = torch.nonzero(layer.a.grad).tolist()
    assert nonzero_a == [[1, 0, 2, 3]]
    assert float(layer.a.grad[1, 0, 2, 3]) == pytest.approx(6.0)  # six samples, dy/da = 1
    torch.testing.assert_close(layer.b.grad[1, 0, 2, 3], x[:, 1, 0, 2, 3].sum())


def test_a_region_uses_the_weights_of_its_slab() -> None:
    """A spatial-parallel rank's slab: the same numbers as the slab of the whole field."""
    torch.manual_seed(1)
    layer = LocalAffine(2, 1, 6, 8)
    with torch.no_grad():
        layer.a.normal_()
        layer.b.normal_()
    x = torch.randn(3, 2, 1, 6, 8)
    whole = layer(x)
    layer.region = (slice(2, 6), slice(4, 8))
    torch.testing.assert_close(layer(x[..., 2:6, 4:8]), whole[..., 2:6, 4:8])


def test_wrong_input_shape_is_one_line() -> None:
    layer = LocalAffine(2, 1, 6, 8)
    with pytest.raises(ValueError, match=r"weights of shape \(2, 1, 6, 8\), got input \(3, 2, 1, 6, 7\)"):
        layer(torch.zeros(3, 2, 1, 6, 7))
