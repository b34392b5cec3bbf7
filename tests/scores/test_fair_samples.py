"""The fair scores of samples in torch (the generative task's losses) against scoringrules."""

from __future__ import annotations

import numpy as np
import pytest
import scoringrules as sr
import torch

from ensml.errors import EnsmlError
from ensml.scores.fair_samples import crps_fair, energy_score_fair, variogram_score_fair


def test_fair_crps_matches_scoringrules() -> None:
    rng = np.random.default_rng(0)
    fc, obs = rng.normal(size=(6, 7, 3)), rng.normal(size=(7, 3))  # members first
    got = crps_fair(torch.from_numpy(fc), torch.from_numpy(obs), dim=0).numpy()
    want = sr.crps_ensemble(obs, np.moveaxis(fc, 0, -1), estimator="fair")
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_fair_crps_by_hand() -> None:
    # members 0 and 2, observation 1: mean |x − y| = 1, Σ_{i,j} |x_i − x_j| = 4, N(N−1) = 2:
    # CRPS_f = 1 − 4 / (2·2) = 0 (the fair score of a two-member ensemble straddling y).
    got = crps_fair(torch.tensor([0.0, 2.0]), torch.tensor(1.0))
    assert float(got) == pytest.approx(0.0)
    # ties: members 1, 1, 4 and y = 0: skill 2, Σ|x_i − x_j| = 2·(0 + 3 + 3) = 12, N(N−1) = 6
    got = crps_fair(torch.tensor([1.0, 4.0, 1.0]), torch.tensor(0.0))
    assert float(got) == pytest.approx(2.0 - 12.0 / 12.0)


def test_fair_energy_score_matches_scoringrules() -> None:
    rng = np.random.default_rng(1)
    fc, obs = rng.normal(size=(5, 4, 9)), rng.normal(size=(5, 9))  # (case, member, component)
    got = energy_score_fair(torch.from_numpy(fc), torch.from_numpy(obs), member_dim=1).numpy()
    want = sr.es_ensemble(obs, fc, estimator="fair")
    np.testing.assert_allclose(got, want, rtol=1e-12)


@pytest.mark.parametrize("p", [0.5, 1.0])
def test_fair_variogram_score_matches_scoringrules(p) -> None:
    rng = np.random.default_rng(3)
    fc, obs = rng.normal(size=(4, 6, 7)), rng.normal(size=(4, 7))  # (case, member, component)
    got = variogram_score_fair(torch.from_numpy(fc), torch.from_numpy(obs), member_dim=1, p=p).numpy()
    want = sr.vs_ensemble(obs, fc, p=p, estimator="fair")
    np.testing.assert_allclose(got, want, rtol=1e-12)


def test_fair_variogram_score_by_hand() -> None:
    # two components, p = 1; members (0, 1) and (0, 3): d = 1 and 3, mean 2, unbiased variance 2;
    # y = (0, 2): |y_1 − y_2| = 2. Per ordered pair (2 of them): (2 − 2)² − 2/2 = −1.
    got = variogram_score_fair(torch.tensor([[0.0, 1.0], [0.0, 3.0]]), torch.tensor([0.0, 2.0]), p=1.0)
    assert float(got) == pytest.approx(-2.0)


def test_smoothed_variogram_score_is_close_and_has_gradients_at_ties() -> None:
    rng = np.random.default_rng(4)
    fc, obs = torch.from_numpy(rng.normal(size=(3, 5, 6))), torch.from_numpy(rng.normal(size=(3, 6)))
    exact = variogram_score_fair(fc, obs, member_dim=1)
    smooth = variogram_score_fair(fc, obs, member_dim=1, smooth=1e-6)
    torch.testing.assert_close(smooth, exact, rtol=1e-4, atol=1e-4)
    # dry: every member and the truth zero at every point; the exact score's gradient is NaN there
    x = torch.zeros(3, 4, requires_grad=True)
    variogram_score_fair(x, torch.zeros(4), smooth=1e-4).backward()
    assert torch.isfinite(x.grad).all()


def test_energy_score_of_one_component_is_the_fair_crps() -> None:
    rng = np.random.default_rng(2)
    fc, obs = torch.from_numpy(rng.normal(size=(8, 5, 1))), torch.from_numpy(rng.normal(size=(8, 1)))
    es = energy_score_fair(fc, obs, member_dim=1)
    torch.testing.assert_close(es, crps_fair(fc[..., 0], obs[:, 0], dim=1))


def test_fair_scores_have_gradients_where_members_tie() -> None:
    # dry members: two identical zero vectors; |x| has gradient 0 at 0, so no NaN
    x = torch.zeros(2, 4, requires_grad=True)
    (energy_score_fair(x, torch.ones(4)) + crps_fair(x, torch.ones(4)).sum()).backward()
    assert torch.isfinite(x.grad).all()


def test_fair_crps_rewards_the_true_spread() -> None:
    # the expected fair score of N=2 members from N(0, s²) against y ~ N(0, 1) is least at s = 1
    g = torch.Generator().manual_seed(0)
    y = torch.randn(200_000, generator=g)
    z = torch.randn(2, 200_000, generator=g)
    scores = {s: float(crps_fair(s * z, y).mean()) for s in (0.8, 1.0, 1.25)}
    assert scores[1.0] < scores[0.8] and scores[1.0] < scores[1.25], scores


@pytest.mark.parametrize("func", [crps_fair, energy_score_fair, variogram_score_fair])
def test_one_member_is_refused(func) -> None:
    with pytest.raises(EnsmlError, match="at least 2 members, got 1"):
        func(torch.zeros(1, 3), torch.zeros(3))


@pytest.mark.parametrize("func", [energy_score_fair, variogram_score_fair])
def test_member_axis_must_not_be_the_components(func) -> None:
    with pytest.raises(EnsmlError, match="last axis holds the components"):
        func(torch.zeros(3, 4), torch.zeros(3), member_dim=-1)


@pytest.mark.parametrize("options", [{"p": 0.0}, {"smooth": -1.0}, {"p": float("nan")}])
def test_variogram_score_refuses_its_order_and_smoothing_out_of_range(options) -> None:
    with pytest.raises(EnsmlError, match="need p > 0 and smooth >= 0"):
        variogram_score_fair(torch.zeros(3, 4), torch.zeros(4), **options)
