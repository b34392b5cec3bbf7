"""EMOS: shapes, gradients, and recovery of known coefficients (global and per grid point)."""

from __future__ import annotations

import pytest
import torch

from ensml.errors import EnsmlError
from ensml.models.emos import EMOS
from ensml.scores.gaussian import crps_gaussian
from ensml.train.emos import fit_emos


def _data(shape_coef, n=400, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.empty(shape_coef).uniform_(-1, 1, generator=g)
    b = torch.empty(shape_coef).uniform_(0.6, 1.4, generator=g)
    c = torch.empty(shape_coef).uniform_(0.2, 1.0, generator=g)
    d = torch.empty(shape_coef).uniform_(0.5, 1.5, generator=g)
    full = (n, 1, 1, 4, 8)
    m = 20.0 + 3.0 * torch.randn(full, generator=g)
    s = torch.empty(full).uniform_(0.5, 2.0, generator=g)
    y = a + b * m + torch.sqrt(c + d * s**2) * torch.randn(full, generator=g)
    return (a, b, c, d), m, s, y


def test_local_emos_recovers_coefficients() -> None:
    (a, b, c, d), m, s, y = _data((1, 1, 4, 8))
    model = fit_emos(m, s, y, mode="local")
    co = model.coefficients()
    assert co["b"].shape == (1, 1, 4, 8)
    assert (co["b"] - b).abs().mean() < 0.03
    assert (co["a"] + co["b"] * 20 - (a + b * 20)).abs().mean() < 0.1  # mean at the data's centre
    assert (co["d"] - d).abs().mean() < 0.25
    assert (co["c"] - c).abs().mean() < 0.3
    # The fit is at least as good in-sample as the true coefficients.
    mu, sigma = model(m, s)
    fitted = crps_gaussian(mu, sigma, y).mean()
    true = crps_gaussian(a + b * m, torch.sqrt(c + d * s**2), y).mean()
    assert fitted <= true + 1e-4


def test_global_emos_recovers_coefficients() -> None:
    (_, b, c, d), m, s, y = _data((1, 1, 1, 1))
    co = fit_emos(m, s, y, mode="global").coefficients()
    assert co["a"].shape == (1, 1, 1, 1)
    torch.testing.assert_close(co["b"], b, atol=0.02, rtol=0)
    torch.testing.assert_close(co["d"], d, atol=0.1, rtol=0)
    torch.testing.assert_close(co["c"], c, atol=0.15, rtol=0)


def test_emos_shapes_and_gradients() -> None:
    model = EMOS(2, 3, (4, 5))
    m, s = torch.randn(6, 2, 3, 4, 5), torch.rand(6, 2, 3, 4, 5)
    mu, sigma = model(m, s)
    assert mu.shape == sigma.shape == (6, 2, 3, 4, 5) and (sigma > 0).all()
    crps_gaussian(mu, sigma, torch.randn_like(mu)).mean().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_emos_bad_input() -> None:
    m = torch.randn(5, 1, 1, 4, 8)
    with pytest.raises(EnsmlError, match="one \\(N, V, D, H, W\\) shape"):
        fit_emos(m, m.abs(), m[:4])
    with pytest.raises(EnsmlError, match="mode"):
        fit_emos(m, m.abs(), m, mode="regional")
