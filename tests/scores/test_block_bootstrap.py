"""The generic moving-block bootstrap, its block length, and the per-point test and false discovery
rate of the maps (:mod:`ensml.scores.significance`)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from ensml.errors import EnsmlError
from ensml.scores.significance import (
    MIN_INITS,
    block_bootstrap,
    block_bootstraps,
    block_length,
    false_discovery,
    pointwise_mean_test,
    skill_test,
)


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    x = np.empty(n)
    x[0] = rng.standard_normal()
    for t in range(1, n):
        x[t] = phi * x[t - 1] + math.sqrt(1 - phi**2) * rng.standard_normal()
    return x


def ratio(v: np.ndarray, e: np.ndarray) -> float:
    return float(np.sqrt(v.mean() / e.mean()))


def test_the_interval_holds_the_estimate_and_is_seeded() -> None:
    rng = np.random.default_rng(0)
    v, e = 1 + 0.2 * np.abs(ar1(rng, 60, 0.5)), 1.5 + 0.2 * np.abs(ar1(rng, 60, 0.5))
    b = block_bootstrap(ratio, v, e)
    assert b.value == ratio(v, e) and b.n == 60 and 1 <= b.block_length <= 30
    assert b.low < b.value < b.high
    assert block_bootstrap(ratio, v, e) == b  # seeded: the same numbers again
    assert block_bootstrap(ratio, v, e, seed=1) != b
    wide = block_bootstrap(ratio, v, e, confidence=0.99)
    assert wide.low <= b.low and b.high <= wide.high


def test_a_constant_series_has_no_spread() -> None:
    v = np.full(20, 2.0)
    b = block_bootstrap(lambda x: float(x.mean()), v)
    assert b.value == b.low == b.high == 2.0 and b.block_length == 1
    hist = np.tile([3.0, 1.0, 2.0], (12, 1))  # the same histogram at every init time: (n, bins)
    b = block_bootstrap(lambda h: float(h.sum(0)[0] / h.sum()), hist)
    assert b.value == b.low == b.high == 0.5


def test_nan_inits_are_left_out_of_every_series_and_few_give_no_interval() -> None:
    v, e = np.linspace(1, 2, 12), np.linspace(2, 3, 12)
    v[2], e[5] = np.nan, np.inf
    b = block_bootstrap(ratio, v, e)
    keep = np.isfinite(v) & np.isfinite(e)
    assert b.n == 10 and b.value == pytest.approx(ratio(v[keep], e[keep]), rel=1e-15)
    few = block_bootstrap(ratio, v[: MIN_INITS - 1], e[: MIN_INITS - 1])
    assert math.isnan(few.low) and math.isnan(few.high) and few.block_length == 0
    none = block_bootstrap(ratio, np.full(9, np.nan), np.ones(9))
    assert none.n == 0 and math.isnan(none.value)


def test_several_values_share_one_bootstrap() -> None:
    rng = np.random.default_rng(2)
    v, e = 1 + rng.random(40), 2 + rng.random(40)
    both = block_bootstraps(lambda v, e: (ratio(v, e), float(e.mean())), v, e)
    assert len(both) == 2 and both[0].block_length == both[1].block_length
    alone = block_bootstrap(ratio, v, e)
    assert (both[0].low, both[0].high) == (alone.low, alone.high)  # the same seeded resamples


def test_block_length_is_that_of_skill_test_for_one_series() -> None:
    rng = np.random.default_rng(3)
    s, r = 1 + 0.1 * ar1(rng, 120, 0.8), np.ones(120) + 0.05 * rng.standard_normal(120)
    assert block_length(r - s) == skill_test(s, r).block_length > 2
    # the longest of the columns' estimates; a constant column gives none
    cols = np.column_stack([rng.standard_normal(120), r - s, np.ones(120)])
    assert block_length(cols) == block_length(r - s)
    assert block_length(np.ones((20, 2))) == 1


def test_bad_arguments_are_one_line_errors() -> None:
    with pytest.raises(EnsmlError, match="differ in length"):
        block_bootstrap(ratio, np.ones(10), np.ones(9))
    with pytest.raises(EnsmlError, match="confidence"):
        block_bootstrap(ratio, np.ones(10), np.ones(10), confidence=1.0)
    with pytest.raises(EnsmlError, match="1-D or 2-D"):
        block_bootstrap(ratio, np.ones((10, 2, 2)))


def test_pointwise_test_is_student_t_without_autocorrelation() -> None:
    rng = np.random.default_rng(4)
    e = rng.standard_normal((31, 5))
    d = 0.2 + e[1:] - 0.8 * e[:-1]  # MA(1): negative lag-1 autocorrelation, clipped to 0, so n' = n
    dev = d - d.mean(0)
    assert ((dev[1:] * dev[:-1]).sum(0) < 0).all()
    np.testing.assert_allclose(pointwise_mean_test(d), stats.ttest_1samp(d, 0.0).pvalue, rtol=1e-10)


def test_pointwise_test_shrinks_the_sample_by_the_autocorrelation() -> None:
    rng = np.random.default_rng(5)
    d = 0.3 + ar1(rng, 50, 0.7)
    dev = d - d.mean()
    r1 = (dev[1:] * dev[:-1]).sum() / (dev**2).sum()
    n_eff = 50 * (1 - r1) / (1 + r1)
    t = d.mean() / math.sqrt(d.var(ddof=1) / n_eff)
    assert pointwise_mean_test(d[:, None])[0] == pytest.approx(2 * stats.t.sf(abs(t), n_eff - 1), rel=1e-10)
    const = np.column_stack([np.zeros(10), np.full(10, 0.5), np.r_[np.nan, np.ones(9)]])
    assert pointwise_mean_test(const).tolist() == [1.0, 0.0, 1.0]


def test_false_discovery_is_benjamini_hochberg() -> None:
    p = np.array([0.001, 0.008, 0.039, 0.041, 0.042, 0.06, 0.074, 0.205, 0.212, 0.216])
    # by hand at 0.05: p_(i) <= 0.005 i holds for i = 1, 2 only
    assert false_discovery(p, 0.05).tolist() == [True, True] + [False] * 8
    rng = np.random.default_rng(6)
    q = rng.random((6, 7)) ** 3
    np.testing.assert_array_equal(
        false_discovery(q, 0.1), stats.false_discovery_control(q.ravel()).reshape(6, 7) <= 0.1
    )
    assert not false_discovery(np.array([0.5, np.nan])).any()
