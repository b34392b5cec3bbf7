"""Closed-form Gaussian CRPS: numpy vs references, torch == numpy, gradients at σ → 0."""

from __future__ import annotations

import numpy as np
import properscoring as ps
import pytest
import scoringrules as sr
import torch
import xarray as xr
from hypothesis import given, settings
from hypothesis import strategies as st

from ensml.errors import EnsmlError
from ensml.scores.gaussian import crps_gaussian, crps_gaussian_xr


@pytest.fixture
def gauss_inputs():
    rng = np.random.default_rng(1)
    mu = rng.normal(size=500)
    sigma = rng.gamma(1.0, size=500)
    obs = rng.normal(size=500) * 2
    return mu, sigma, obs


def test_numpy_matches_references(gauss_inputs):
    mu, sigma, obs = gauss_inputs
    got = crps_gaussian(mu, sigma, obs)
    np.testing.assert_allclose(got, ps.crps_gaussian(obs, mu, sigma), rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(got, sr.crps_normal(obs, mu, sigma), rtol=1e-10)


def test_torch_equals_numpy(gauss_inputs):
    mu, sigma, obs = gauss_inputs
    got = crps_gaussian(torch.tensor(mu), torch.tensor(sigma), torch.tensor(obs))
    assert isinstance(got, torch.Tensor) and got.dtype == torch.float64
    np.testing.assert_allclose(got.numpy(), crps_gaussian(mu, sigma, obs), rtol=1e-12, atol=1e-15)
    got32 = crps_gaussian(torch.tensor(mu).float(), torch.tensor(sigma).float(), torch.tensor(obs).float())
    assert got32.dtype == torch.float32
    np.testing.assert_allclose(got32.numpy(), crps_gaussian(mu, sigma, obs), rtol=1e-5, atol=1e-6)


def test_torch_gradcheck(gauss_inputs):
    mu, sigma, obs = (torch.tensor(a[:8]).requires_grad_() for a in gauss_inputs)
    assert torch.autograd.gradcheck(crps_gaussian, (mu, sigma, obs))


def test_torch_broadcast_gradients():
    mu = torch.zeros(3, 1, requires_grad=True)
    sigma = torch.tensor(1.0, requires_grad=True)
    obs = torch.linspace(-1, 1, 4)
    crps_gaussian(mu, sigma, obs).sum().backward()
    assert mu.grad.shape == (3, 1) and sigma.grad.shape == ()


def test_sigma_zero_is_absolute_error_with_finite_gradients():
    mu = torch.tensor([0.0, 1.0, 2.0, 5.5e4], requires_grad=True)
    sigma = torch.zeros(4, requires_grad=True)
    obs = torch.tensor([1.0, 1.0, 1.0, 5.5e4 + 3])
    crps = crps_gaussian(mu, sigma, obs)
    np.testing.assert_allclose(crps.detach().numpy(), [1.0, 0.0, 1.0, 3.0])
    crps.sum().backward()
    assert torch.isfinite(mu.grad).all() and torch.isfinite(sigma.grad).all()
    np.testing.assert_allclose(mu.grad.numpy(), [-1.0, 0.0, 1.0, -1.0])
    # ∂/∂σ = 2φ(z) − 1/√π: −1/√π for z = ±∞, (√2 − 1)/√π for z = 0
    np.testing.assert_allclose(sigma.grad.numpy()[1], (np.sqrt(2) - 1) / np.sqrt(np.pi), rtol=1e-6)
    np.testing.assert_allclose(sigma.grad.numpy()[0], -1 / np.sqrt(np.pi), rtol=1e-6)
    np.testing.assert_allclose(crps_gaussian(np.array([0.0, 1.0]), 0.0, 1.0), [1.0, 0.0])


def test_tiny_sigma_is_continuous():
    mu, obs = torch.tensor([0.0]), torch.tensor([1.0])
    for s in (1e-3, 1e-20, 1e-40):
        sigma = torch.tensor([s], requires_grad=True)
        crps = crps_gaussian(mu, sigma, obs)
        crps.backward()
        assert abs(crps.item() - 1.0) < 1e-3 and torch.isfinite(sigma.grad).all()


def test_float32_numpy_keeps_dtype_and_nan_propagates():
    got = crps_gaussian(np.float32([5.5e4, np.nan]), np.float32([10.0, 1.0]), np.float32([5.5e4, 0.0]))
    assert got.dtype == np.float32
    np.testing.assert_allclose(got[0], 10 * (2 / np.sqrt(2 * np.pi) - 1 / np.sqrt(np.pi)), rtol=1e-6)
    assert np.isnan(got[1])


@pytest.mark.slow
@settings(max_examples=15, deadline=None)
@given(
    mu=st.floats(-5, 5),
    sigma=st.floats(0.1, 5),
    obs=st.floats(-8, 8),
)
def test_matches_large_sampled_ensemble(mu, sigma, obs):
    from ensml.scores.crps import crps_ensemble_array

    # a stratified "ensemble" of 20,000 quantiles converges to the closed form at O(1/M)
    m = 20000
    q = (np.arange(m) + 0.5) / m
    from scipy.special import ndtri

    members = mu + sigma * ndtri(q)
    got = crps_ensemble_array(members, np.array(obs))
    np.testing.assert_allclose(got, crps_gaussian(mu, sigma, obs), rtol=2e-3, atol=1e-4)


def test_xarray_wrapper_reduces_and_stays_lazy():
    rng = np.random.default_rng(2)
    dims = ("init_time", "latitude")
    mu = xr.DataArray(rng.normal(size=(4, 6)), dims=dims)
    sigma = xr.DataArray(rng.gamma(1.0, size=(4, 6)), dims=dims)
    obs = xr.DataArray(rng.normal(size=(4, 6)), dims=dims)
    ref = ps.crps_gaussian(obs.values, mu.values, sigma.values)
    np.testing.assert_allclose(crps_gaussian_xr(mu, sigma, obs), ref.mean())
    out = crps_gaussian_xr(mu.chunk(init_time=2), sigma, obs, preserve_dims="latitude")
    assert out.chunks is not None
    np.testing.assert_allclose(out.compute(), ref.mean(axis=0))
    elem = crps_gaussian(mu, sigma, obs)
    assert isinstance(elem, xr.DataArray) and elem.dims == dims


def test_bad_inputs():
    with pytest.raises(EnsmlError, match="sigma must be >= 0"):
        crps_gaussian(np.zeros(2), np.array([1.0, -1.0]), np.zeros(2))
    with pytest.raises(EnsmlError, match="sigma must be >= 0"):
        crps_gaussian(torch.zeros(2), torch.tensor([1.0, -1.0]), torch.zeros(2))
    with pytest.raises(EnsmlError, match="do not broadcast"):
        crps_gaussian(np.zeros(2), np.ones(3), np.zeros(2))
    with pytest.raises(EnsmlError, match="do not broadcast"):
        crps_gaussian(torch.zeros(2), torch.ones(3), torch.zeros(2))
    with pytest.raises(EnsmlError, match="must be numeric"):
        crps_gaussian(np.array(["a"]), 1.0, 0.0)
    obs = xr.DataArray(np.zeros(3), dims="x")
    with pytest.raises(EnsmlError, match=r"must be an xarray\.DataArray"):
        crps_gaussian_xr(np.zeros(3), obs, obs)
    with pytest.raises(EnsmlError, match="lacks"):
        crps_gaussian_xr(xr.DataArray(np.zeros(3), dims="y"), obs, obs)
