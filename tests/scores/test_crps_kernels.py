"""CRPS kernel paths: whole-register sorts, register groups (8/16 members), layouts, NaN points.

An infinite member or observation is an error (tests/scores/test_nan_policy.py).
"""

from __future__ import annotations

import numba
import numpy as np
import pytest

from ensml.errors import EnsmlError
from ensml.scores import _simd, _sortnet
from ensml.scores.crps import crps_ensemble_array


def _reference(fc: np.ndarray, obs: np.ndarray, fair: bool) -> np.ndarray:
    """Float64 O(M²) estimator per point, NaN members dropped; fc is (M, N)."""
    out = np.full(fc.shape[1], np.nan)
    for k in range(fc.shape[1]):
        x = fc[:, k].astype(np.float64)
        x = x[~np.isnan(x)] - np.float64(obs[k])
        m = x.size
        if np.isnan(obs[k]) or m == 0 or (fair and m < 2):
            continue
        spread = np.abs(x[:, None] - x[None, :]).sum()
        out[k] = np.abs(x).mean() - spread / (2 * m * (m - 1) if fair else 2 * m * m)
    return out


@pytest.mark.parametrize("m", [3, 10, 20, 50, 51, 100, 130])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_paths_layouts_and_nan(m, dtype):
    p, g = _sortnet.plan(m, np.dtype(dtype).itemsize)[:2]
    assert (p, g) == ((0, 0) if m < 9 else (0, 16) if m > 128 else (p, 0)) and p in (0, 16, 32, 64, 128)
    rng = np.random.default_rng(m)
    n = 5000
    fc = (5.5e4 + 300 * rng.standard_normal((n, m))).astype(dtype)  # members last
    obs = (5.5e4 + 300 * rng.standard_normal(n)).astype(dtype)
    fc[rng.random(fc.shape) < 0.02] = np.nan
    fc[7] = np.nan  # all-NaN point
    obs[11] = np.nan
    fc[17, :] = 5.5e4  # constant, ties
    sub = slice(0, 400)
    rtol = 1e-6 if dtype == np.float32 else 1e-10
    for fair in (False, True):
        ref = _reference(fc[sub].T, obs[sub], fair)
        variants = {
            "members last": crps_ensemble_array(fc, obs, axis=-1, fair=fair),
            "members first": crps_ensemble_array(np.ascontiguousarray(fc.T), obs, axis=0, fair=fair),
            "serial": crps_ensemble_array(fc, obs, axis=-1, fair=fair, parallel=False),
        }
        for name, got in variants.items():
            assert got.dtype == dtype, name
            np.testing.assert_allclose(got[sub], ref, rtol=rtol, atol=1e-9, err_msg=name)
            assert np.isnan(got[7]) and np.isnan(got[11]), name
            np.testing.assert_array_equal(got, variants["members last"], err_msg=name)
        strided = fc[::2]
        np.testing.assert_allclose(
            crps_ensemble_array(strided, obs[::2], axis=-1, fair=fair)[:200],
            _reference(strided[:200].T, obs[::2][:200], fair),
            rtol=rtol,
            atol=1e-9,
        )


def test_plan_network_sorts():
    rng = np.random.default_rng(0)
    for m in (1, 2, 5, 8, 129, 150, 200):  # the generic network (9..128: sort_column, below)
        p, g, nreg, mp, na, nb, _ = _sortnet.plan(m, 4)
        assert p == 0
        assert nreg <= m and (nreg % g == 0 if g else nreg == 0)
        ga, gb = _sortnet.sorting_network(g) if g else (np.zeros(0, int), np.zeros(0, int))
        x = np.full((mp, 300), np.inf)
        x[:m] = rng.integers(0, 4, size=(m, 300))  # many ties
        for r in range(0, nreg, g or 1):  # the groups sorted in registers
            for a, b in zip(ga + r, gb + r):
                lo, hi = np.minimum(x[a], x[b]), np.maximum(x[a], x[b])
                x[a], x[b] = lo, hi
        for a, b in zip(na, nb):
            lo, hi = np.minimum(x[a], x[b]), np.maximum(x[a], x[b])
            x[a], x[b] = lo, hi
        assert np.all(np.diff(x[:m], axis=0) >= 0), m


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("g", [8, 16])
def test_register_groups_are_batchers_network(g, dtype):
    """``_sort8``/``_sort16`` (rows r .. r+g-1) do what ``sorting_network(g)`` does, exchange by
    exchange: the same order of ties, and a NaN stays where the swaps leave it."""
    rng = np.random.default_rng(g)
    x = rng.integers(-3, 4, size=(g + 5, 70)).astype(dtype)  # many ties
    x[:, 1] = rng.standard_normal(g + 5)
    x[3, 2], x[g, 3], x[1, 4], x[7, 4] = np.inf, -np.inf, np.nan, np.nan
    want = x.copy()
    for a, b in zip(*_sortnet.sorting_network(g)):
        u, v = want[2 + a].copy(), want[2 + b].copy()
        swap = v < u
        want[2 + a], want[2 + b] = np.where(swap, v, u), np.where(swap, u, v)
    got = x.copy()
    (_sortnet._sort8 if g == 8 else _sortnet._sort16)(got, 2, 67)  # rows 2 .. g+1, 67 columns
    np.testing.assert_array_equal(got[:, :67], want[:, :67])
    np.testing.assert_array_equal(got[:, 67:], x[:, 67:])
    assert np.all(np.diff(got[2 : 2 + g, 5:67], axis=0) >= 0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("g", [8, 16])
def test_register_groups_sort_like_np_sort(g, dtype):
    """``_sort8``/``_sort16`` give ``np.sort``'s values on many random and adversarial columns:
    ties, all equal, sorted, reversed, ±0, ±Inf, extremes, subnormals (no NaN: see above)."""
    rng = np.random.default_rng(100 + g)
    fi = np.finfo(dtype)
    cols = [
        rng.standard_normal((g, 400)),
        rng.integers(-2, 3, size=(g, 400)),  # many ties
        rng.integers(0, 2, size=(g, 400)),  # 0/1 inputs
        np.tile(np.arange(g)[:, None], 8),  # sorted
        np.tile(np.arange(g)[::-1, None], 8),  # reversed
        np.full((g, 3), 7.0),  # all equal
        rng.choice([-np.inf, np.inf, 0.0, -0.0, fi.max, -fi.max, fi.tiny / 4, 1.0], size=(g, 400)),
    ]
    x = np.concatenate([c.astype(dtype) for c in cols], axis=1)
    for r in (0, 3):
        buf = np.full((r + g + 2, x.shape[1]), -1.5, dtype)
        buf[r : r + g] = x
        (_sortnet._sort8 if g == 8 else _sortnet._sort16)(buf, r, x.shape[1])
        np.testing.assert_array_equal(buf[r : r + g], np.sort(x, axis=0))
        assert np.all(buf[:r] == -1.5) and np.all(buf[r + g :] == -1.5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("p", [16, 32, 64, 128])
def test_sort_column_sorts_in_registers(p, dtype):
    rng = np.random.default_rng(p)
    x = rng.integers(-3, 4, size=(p, 48)).astype(dtype)  # many ties
    x[:, 5] = rng.standard_normal(p)
    x[p // 2 :, 6] = np.inf
    for m in sorted({p, p - 1, p // 2 + 1, p // 2 + 7, p // 2 + 9, p // 2 + 17} & set(range(9, p + 1))):
        x[m:] = np.inf  # padding rows, as the kernel leaves them
        got = x.copy()
        _sort_columns(got, p, 41, m)  # whole vectors up to column 48 (16 float32, 8 float64)
        np.testing.assert_array_equal(got, np.sort(x, axis=0), err_msg=str(m))


@numba.njit(cache=True)  # cached as the kernels are: a warm run compiles nothing
def _sort_columns(buf, p, n, m, lo=-np.inf, hi=np.inf):
    for k0 in range(0, n, _simd.VECTOR_BYTES // buf.itemsize):
        _simd.sort_column(buf, p, k0, m, lo, hi)


@pytest.mark.parametrize("m", [9, 16, 17, 33, 49, 50, 64, 100])
def test_sort_column_chains_as_it_loads(m):
    """twCRPS: the rows are chained (min(max(x, lo), hi)) as the register groups load them, a
    group of one row (m = 17, 33, 49) included; NaN and ±Inf are left as they are."""
    p = next(q for q in (16, 32, 64, 128) if q >= m)
    rng = np.random.default_rng(m)
    x = rng.standard_normal((m, 32)).astype(np.float32)
    x[m - 1, 3], x[0, 4], x[m // 2, 5] = np.inf, -np.inf, np.nan
    lo, hi = np.float32(-0.5), np.float32(0.8)
    got = x.copy()
    _sort_columns(got, p, 32, m, lo, hi)
    chained = np.where(np.isinf(x), x, np.clip(x, lo, hi))
    ok = ~np.isnan(x).any(axis=0)
    np.testing.assert_array_equal(got[:, ok], np.sort(chained[:, ok], axis=0))
    assert np.isnan(got[:, 5]).sum() == 1 and np.nanmax(got[:, 5]) <= hi


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_tile8_transposes(dtype):
    m, n = 11, 16
    src = np.arange(m * n, dtype=dtype)  # (points, members) flat
    dst = np.zeros((16, 32), dtype=dtype)
    _tile(src, m, dst)
    np.testing.assert_array_equal(dst[:8, 8:16], src.reshape(n, m)[8:16, 3:11].T)
    assert not dst[8:].any() and not dst[:8, :8].any() and not dst[:8, 16:].any()


@numba.njit
def _tile(src, m, dst):
    _simd.tile8(src, 8 * m + 3, m, dst, 0, 8)  # points 8..15, members 3..10 -> rows 0..7, cols 8..15


def test_nan_member_does_not_leak_into_later_blocks():
    """A NaN stays in place, so the register sort can move +inf padding into member rows."""
    rng = np.random.default_rng(1)
    m, n = 20, 20_000  # P = 32: 12 padding rows
    fc = rng.standard_normal((n, m)).astype(np.float32)
    obs = rng.standard_normal(n).astype(np.float32)
    fc[: n // 2 : 7, 3] = np.nan  # NaN members in many early blocks, none later
    got = crps_ensemble_array(fc, obs, axis=-1, parallel=False)
    ref = _reference(fc.T, obs, False)
    np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9)


@pytest.mark.parametrize("m", range(9, 17))
def test_small_ensembles_scored_in_registers(m):
    """9..16 float32 members: 16-point tiles in registers, the last points (whose 16-float reads
    would pass the array's end) and the tail through the buffer; all against the reference."""
    rng = np.random.default_rng(m)
    n = 16 * 40 + 7
    fc = (5.5e4 + 300 * rng.standard_normal((n, m))).astype(np.float32)
    obs = (5.5e4 + 300 * rng.standard_normal(n)).astype(np.float32)
    fc[5, 2] = np.nan  # inside a register tile: redone by the scalar path
    for fair in (False, True):
        ref = _reference(fc.T, obs, fair)
        for parallel in (True, False):
            got = crps_ensemble_array(fc, obs, axis=-1, fair=fair, parallel=parallel)
            np.testing.assert_allclose(got, ref, rtol=1e-6, atol=1e-9)
    fc[100, 3] = -np.inf  # inside a register tile: still found and refused
    with pytest.raises(EnsmlError, match=r"forecast has 1 infinite value \(first at index \(100, 3\)\)"):
        crps_ensemble_array(fc, obs, axis=-1)
