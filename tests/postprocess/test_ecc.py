"""ECC-Q and the Gaussian products, against the standard library's NormalDist and properscoring."""

from __future__ import annotations

from statistics import NormalDist

import numpy as np
import properscoring as ps
import pytest

from ensml.errors import EnsmlError
from ensml.postprocess.ecc import ecc_levels, ecc_members, exceedance, gaussian_quantiles

RNG = np.random.default_rng(42)


def _case(m: int = 10, shape: tuple[int, ...] = (3, 4, 5)) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    mu = RNG.normal(5.5e4, 100.0, shape).astype(np.float32)
    sigma = RNG.uniform(10.0, 50.0, shape).astype(np.float32)
    raw = (mu[None] + RNG.normal(0, 30.0, (m, *shape))).astype(np.float32)
    return mu, sigma, raw


def _reference_quantiles(mu: float, sigma: float, levels: np.ndarray) -> np.ndarray:
    return np.array([NormalDist(float(mu), float(sigma)).inv_cdf(float(p)) for p in levels])


def test_levels_centred_and_rank() -> None:
    np.testing.assert_allclose(ecc_levels(4), [0.125, 0.375, 0.625, 0.875])
    np.testing.assert_allclose(ecc_levels(4, "rank"), [0.2, 0.4, 0.6, 0.8])
    with pytest.raises(EnsmlError, match="at least 1"):
        ecc_levels(0)
    with pytest.raises(EnsmlError, match="spacing"):
        ecc_levels(3, "uniform")  # type: ignore[arg-type]


def test_quantiles_and_exceedance_match_normaldist() -> None:
    mu, sigma = np.array([0.0, 273.15, 5.4e4]), np.array([1.0, 2.5, 80.0])
    q = np.array([0.05, 0.5, 0.9])
    got = gaussian_quantiles(mu, sigma, q, axis=0)
    for j in range(mu.size):
        np.testing.assert_allclose(got[:, j], _reference_quantiles(mu[j], sigma[j], q), rtol=1e-12)
    t = np.array([270.0, 273.15, 280.0])
    p = exceedance(mu[1:2], sigma[1:2], t, axis=0)[:, 0]
    np.testing.assert_allclose(p, [1 - NormalDist(273.15, 2.5).cdf(x) for x in t], rtol=1e-12)
    assert p[1] == pytest.approx(0.5)


@pytest.mark.parametrize("spacing", ["centred", "rank"])
def test_ecc_sorted_members_are_the_quantiles_in_raw_rank_order(spacing: str) -> None:
    mu, sigma, raw = _case()
    members = ecc_members(mu, sigma, raw, spacing=spacing, axis=0)
    assert members.shape == raw.shape and members.dtype == np.float32
    levels = ecc_levels(raw.shape[0], spacing)
    for idx in [(0, 0, 0), (2, 3, 4), (1, 2, 0)]:
        want = _reference_quantiles(mu[idx], sigma[idx], levels)
        np.testing.assert_allclose(np.sort(members[(slice(None), *idx)]), want, rtol=1e-6)
    # the rank order of the calibrated members is the raw members' at every point
    np.testing.assert_array_equal(np.argsort(members, axis=0), np.argsort(raw, axis=0))


def test_ecc_keeps_a_member_highest_across_leads_and_points() -> None:
    """The copula: wherever raw member 3 is the highest, calibrated member 3 is the highest."""
    mu, sigma, raw = _case(m=6, shape=(4, 7))
    raw[3] = raw.max(axis=0) + 1.0
    members = ecc_members(mu, sigma, raw, axis=0)
    assert (members.argmax(axis=0) == 3).all()
    np.testing.assert_allclose(members[3], mu + sigma * NormalDist().inv_cdf(1 - 0.5 / 6), rtol=1e-6)


def test_ecc_fewer_members_than_raw_take_the_first_raw_ranks() -> None:
    mu, sigma, raw = _case(m=10)
    members = ecc_members(mu, sigma, raw, n=4, axis=0)
    assert members.shape[0] == 4
    np.testing.assert_array_equal(np.argsort(members, axis=0), np.argsort(raw[:4], axis=0))


def test_ecc_more_members_than_raw_repeat_the_template() -> None:
    mu, sigma, raw = _case(m=3, shape=(5,))
    members = ecc_members(mu, sigma, raw, n=7, axis=0)  # template: raw 0, 1, 2, 0, 1, 2, 0
    for p in range(5):
        np.testing.assert_allclose(
            np.sort(members[:, p]), _reference_quantiles(mu[p], sigma[p], ecc_levels(7)), rtol=1e-6
        )
        order = np.argsort(members[:, p])
        # the copies of one raw member take adjacent ranks, in member order
        ranks = np.empty(7, int)
        ranks[order] = np.arange(7)
        for j in range(3):
            copies = ranks[j::3]
            assert (np.diff(copies) == 1).all()
        # and the raw members' order is kept between copies
        assert (members[0, p] < members[1, p]) == (raw[0, p] < raw[1, p])


def test_ecc_ties_follow_member_order() -> None:
    mu, sigma = np.zeros(2, np.float32), np.ones(2, np.float32)
    raw = np.array([[1.0, 2.0], [1.0, 2.0], [0.0, 2.0]], np.float32)  # a tie at point 0, all equal at 1
    members = ecc_members(mu, sigma, raw, axis=0)
    q = _reference_quantiles(0.0, 1.0, ecc_levels(3))
    np.testing.assert_allclose(members[:, 0], [q[1], q[2], q[0]], rtol=1e-6)
    np.testing.assert_allclose(members[:, 1], q, rtol=1e-6)


def test_ecc_crps_is_within_one_percent_of_the_gaussian_for_ten_members() -> None:
    """The docstring's claim: centred levels cost 0.7% CRPS at 10 members (calibrated forecast)."""
    n_points = 200_000
    mu, sigma = np.zeros(n_points), np.ones(n_points)
    y = RNG.standard_normal(n_points)
    raw = RNG.standard_normal((10, n_points))
    members = ecc_members(mu, sigma, raw, axis=0)
    ratio = ps.crps_ensemble(y, members.T).mean() / ps.crps_gaussian(y, mu, sigma).mean()
    assert 1.0 < ratio < 1.01
    rank = ecc_members(mu, sigma, raw, spacing="rank", axis=0)
    assert ps.crps_ensemble(y, rank.T).mean() / ps.crps_gaussian(y, mu, sigma).mean() > ratio


def test_ecc_rejects_mismatched_shapes() -> None:
    mu, sigma, raw = _case()
    with pytest.raises(EnsmlError, match="do not match"):
        ecc_members(mu, sigma, raw[:, :2], axis=0)
