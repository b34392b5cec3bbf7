"""Skill intervals and Diebold-Mariano tests (:mod:`ensml.scores.significance`): the DM test against
``scores``' own worked example and the closed form of Harvey, Leybourne & Newbold (1997); the
moving-block bootstrap interval by its coverage on serially correlated series of known skill."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ensml.errors import EnsmlError
from ensml.scores.significance import MIN_INITS, dm_test, forecast_horizon, skill_test


def hln_by_hand(d: np.ndarray, h: int) -> float:
    """The HLN-corrected DM statistic from its formula: mean / sqrt(V / n) with
    V = gamma_0 + 2 sum_{k<h} gamma_k (biased autocovariances), times
    sqrt((n + 1 - 2h + h(h-1)/n) / n)."""
    n, dev = d.size, d - d.mean()
    gamma = [np.sum(dev[k:] * dev[: n - k]) / n for k in range(h)]
    v = gamma[0] + 2 * sum(gamma[1:])
    return d.mean() / math.sqrt(v / n) * math.sqrt((n + 1 - 2 * h + h * (h - 1) / n) / n)


def test_dm_matches_the_worked_example_of_scores() -> None:
    """``scores.stats.statistical_tests.diebold_mariano``'s docstring, HLN with Student's t: the
    series [1, 2, 3, 4] (h = 2) gives 2.236, confidence_gt_0 0.9443; [2, 1, -3, -1, 0] (h = 3)
    gives -0.3333, 0.3778."""
    stat, p = dm_test(np.array([1.0, 2, 3, 4]), 2)
    assert stat == pytest.approx(2.236, abs=5e-4) and stat == pytest.approx(math.sqrt(5), rel=1e-12)
    assert p == pytest.approx(2 * (1 - 0.9443), abs=2e-4)
    stat, p = dm_test(np.array([2.0, 1, -3, -1, 0]), 3)
    assert stat == pytest.approx(-1 / 3, rel=1e-12)
    assert p == pytest.approx(2 * 0.3778, abs=2e-4)


@pytest.mark.parametrize("h", [1, 2, 4])
def test_dm_is_the_hln_closed_form_with_a_t_p_value(h: int) -> None:
    rng = np.random.default_rng(h)
    d = 0.3 + rng.standard_normal(60)
    stat, p = dm_test(d, h)
    assert stat == pytest.approx(hln_by_hand(d, h), rel=1e-10)
    assert p == pytest.approx(2 * stats.t.sf(abs(stat), df=d.size - 1), rel=1e-8)


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    e = rng.standard_normal(n + 200)
    x = np.zeros_like(e)
    for t in range(1, e.size):
        x[t] = phi * x[t - 1] + e[t]
    return x[200:] * math.sqrt(1 - phi**2)  # unit variance


@pytest.mark.slow
def test_blocks_cover_the_true_skill_far_better_than_single_dates() -> None:
    """Reference r_t = 1 + 0.2 (c_t + a_t / 2), forecast s_t = 0.9 + 0.2 (c_t + b_t / 2), with c, a
    and b AR(1) of lag-1 correlation 0.6 (consecutive inits share weather): the true skill is
    1 - 0.9 / 1 = 0.1. Over 200 samples of 120 inits, the moving-block interval covers it in
    0.85 of them (measured; below the nominal 0.95: block bootstraps underestimate the variance
    of short, strongly correlated series), an i.i.d. bootstrap of single dates in 0.67."""
    from arch.bootstrap import IIDBootstrap

    rng = np.random.default_rng(7)
    blocks_cover, iid_cover, blocks = 0, 0, []
    for i in range(200):
        common = ar1(rng, 120, 0.6)
        r = 1 + 0.2 * (common + 0.5 * ar1(rng, 120, 0.6))
        s = 0.9 + 0.2 * (common + 0.5 * ar1(rng, 120, 0.6))
        t = skill_test(s, r, reps=400)
        blocks_cover += t.low <= 0.1 <= t.high
        blocks.append(t.block_length)
        lo, hi = IIDBootstrap(s, r, seed=i).conf_int(
            lambda a, b: np.array([1 - a.mean() / b.mean()]), reps=400, method="percentile"
        )[:, 0]
        iid_cover += lo <= 0.1 <= hi
    assert blocks_cover / 200 >= 0.82 and iid_cover / 200 <= 0.75
    assert blocks_cover - iid_cover >= 20
    assert np.median(blocks) >= 4  # the correlation is seen: blocks of several dates


def test_block_length_follows_the_autocorrelation() -> None:
    rng = np.random.default_rng(0)
    white = skill_test(1 + 0.1 * rng.standard_normal(200), np.ones(200) + 0.05 * rng.standard_normal(200))
    corr = skill_test(1 + 0.1 * ar1(rng, 200, 0.9), np.ones(200) + 0.05 * rng.standard_normal(200))
    assert white.block_length <= 2 < corr.block_length


def test_the_skill_is_that_of_the_means_and_nan_inits_are_left_out() -> None:
    rng = np.random.default_rng(1)
    s, r = 1 + 0.1 * rng.random(30), 1.2 + 0.1 * rng.random(30)
    s[3], r[7] = np.nan, np.nan
    t = skill_test(s, r, h=1)
    keep = np.isfinite(s) & np.isfinite(r)
    assert t.n == 28 and t.skill == pytest.approx(1 - s[keep].mean() / r[keep].mean(), rel=1e-14)
    assert t.low < t.skill < t.high and t.p_value < 1e-6 and t.dm_stat > 0


def test_too_few_inits_give_no_interval() -> None:
    t = skill_test(np.ones(MIN_INITS - 1), np.full(MIN_INITS - 1, 2.0))
    assert t.skill == 0.5 and math.isnan(t.low) and math.isnan(t.p_value) and t.block_length == 0


def test_the_reference_against_itself_has_no_spread() -> None:
    r = np.linspace(1, 2, 20)
    t = skill_test(r, r)
    assert t.skill == 0 and t.low == t.high == 0 and t.p_value == 1.0


@pytest.mark.parametrize(
    ("lead_h", "every_h", "h"), [(48, 24, 2), (48, 72, 1), (24, 12, 2), (0, 24, 1), (120, 24, 5)]
)
def test_forecast_horizon(lead_h: int, every_h: int, h: int) -> None:
    inits = np.datetime64("2017-01-01") + np.arange(10) * np.timedelta64(every_h, "h")
    assert forecast_horizon(np.timedelta64(lead_h, "h"), inits) == h


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(EnsmlError, match="differ in length"):
        skill_test(np.ones(10), np.ones(9))
    with pytest.raises(EnsmlError, match="confidence in"):
        skill_test(np.ones(10), np.ones(10), confidence=1.5)
