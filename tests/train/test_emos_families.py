"""EMOS in every parametric family recovers a known predictive distribution.

Observations are drawn from the family itself with parameters an EMOS can represent; the fit
must then score (almost) as well as the truth and be calibrated (a flat randomised PIT).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from ensml.errors import EnsmlError
from ensml.scores.distributions import get_family
from ensml.train.emos import emos_distribution, fit_emos

SHAPE = (3000, 1, 1, 2, 3)  # N samples, one variable and level, a 2 × 3 grid


def _truth(name: str, rng: np.random.Generator):
    mean = rng.gamma(2.0, 2.0, SHAPE)  # an ensemble mean ≥ 0, as for rain or wind
    std = rng.uniform(0.5, 2.0, SHAPE)
    family = get_family(name)
    mu, sigma = 0.5 + 0.8 * mean, np.sqrt(0.3 + 0.9 * std**2)
    if name == "csg0":
        params = family.from_moments(mu, sigma, np.full(SHAPE, 1.0), 1.0)
    else:
        params = family.from_moments(mu, sigma)
    y = family.sample(params, 1, rng)[0]
    return family, params, mean, std, y


@pytest.mark.parametrize("name", ["truncnormal", "trunclogistic", "cnormal", "clogistic", "csg0"])
def test_emos_recovers_the_truth(name: str) -> None:
    rng = np.random.default_rng(0)
    family, params, mean, std, y = _truth(name, rng)
    t = [torch.tensor(a, dtype=torch.float32) for a in (mean, std, y)]
    model = fit_emos(*t, mode="global", family=name, max_iter=100)
    fitted = {k: v.detach().double().numpy() for k, v in emos_distribution(model, name, t[0], t[1]).items()}
    crps_fit = family.crps(fitted, y).mean()
    crps_true = family.crps(params, y).mean()
    assert crps_fit <= crps_true * 1.01, (crps_fit, crps_true)
    pit = family.pit(fitted, y, np.random.default_rng(1)).ravel()
    counts = np.histogram(pit, bins=10, range=(0, 1))[0] / pit.size
    assert np.abs(counts - 0.1).max() < 0.02, counts  # ±4.5 binomial std of 18000 cases


def test_emos_normal_is_the_gaussian_fit() -> None:
    rng = np.random.default_rng(2)
    mean, std = rng.normal(size=SHAPE), rng.uniform(0.5, 1.5, SHAPE)
    y = 0.3 + 0.9 * mean + std * rng.normal(size=SHAPE)
    t = [torch.tensor(a, dtype=torch.float32) for a in (mean, std, y)]
    a = fit_emos(*t, mode="local")
    b = fit_emos(*t, mode="local", family="normal")
    for key in ("a", "b", "c", "d"):
        torch.testing.assert_close(a.coefficients()[key], b.coefficients()[key], rtol=0, atol=0)
    assert a.extra is None  # the Gaussian's EMOS has only its four coefficients


def test_emos_refuses_data_outside_the_support_and_bqn() -> None:
    t = [torch.ones(SHAPE), torch.ones(SHAPE), -torch.ones(SHAPE)]
    with pytest.raises(
        EnsmlError,
        match=r"observations: 18000 value\(s\) below 0 \(min -1\) lie outside the support of the csg0",
    ):
        fit_emos(*t, family="csg0")
    with pytest.raises(EnsmlError, match="EMOS fits parametric families"):
        fit_emos(*t, family="bqn")


@pytest.mark.slow  # a local EMOS fit per point
def test_local_csg0_emos_stays_finite_where_it_never_rains() -> None:
    """Points that are always dry drive a local csg0 fit's mean far below zero; its softplus
    underflowed in float32 and the fit went NaN (or L-BFGS overflowed) before the moments had a
    floor (``MOMENT_FLOOR``). Now every coefficient and parameter stays finite, and the fitted
    distributions say dry where it is always dry."""
    torch.manual_seed(0)
    n, h, w = 60, 8, 8
    wet = (torch.rand(1, 1, 1, h, w) < 0.5).float()
    gamma = torch.distributions.Gamma(0.5, 0.1)
    obs = gamma.sample((n, 1, 1, h, w)) * (torch.rand(n, 1, 1, h, w) < 0.2) * wet
    members = gamma.sample((10, n, 1, 1, h, w)) * (torch.rand(10, n, 1, 1, h, w) < 0.1)
    model = fit_emos(members.mean(0), members.std(0), obs, mode="local", family="csg0", max_iter=100)
    assert all(torch.isfinite(p).all() for p in model.parameters())
    params = emos_distribution(model, "csg0", members.mean(0), members.std(0))
    assert all(torch.isfinite(v).all() for v in params.values())
    dry = (obs == 0).all(0, keepdim=True).expand_as(obs)
    p_zero = get_family("csg0").cdf({k: v.numpy() for k, v in params.items()}, np.zeros(obs.shape))
    assert np.median(p_zero[dry.numpy()]) > 0.9
