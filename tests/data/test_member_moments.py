"""The members' mean and standard deviation that every sample's inputs and spread target are made
of: the same bits as numpy's ``mean``/``std`` over the stacked members, without stacking them."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from ensml.data.sample_read import member_fields, member_moments, subset_moments


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.uint8)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("ddof", [0, 1])
@pytest.mark.parametrize("members", [2, 5, 10])
def test_bits_of_numpy(dtype: type, ddof: int, members: int) -> None:
    """Geopotential-like fields (large mean, small spread: where rounding shows) on (V, L, M, D,
    H, W): bit for bit numpy's moments over axis 2."""
    rng = np.random.default_rng(members)
    fc = (5500 + 10 * rng.standard_normal((2, 3, members, 2, 19, 36))).astype(dtype)
    mean, std = member_moments(member_fields(fc), ddof=ddof)
    assert mean.dtype == std.dtype == dtype
    np.testing.assert_array_equal(_bits(mean), _bits(fc.mean(axis=2)))
    np.testing.assert_array_equal(_bits(std), _bits(fc.std(axis=2, ddof=ddof)))


def test_subset_in_its_order() -> None:
    """A random subset is summed in the order it is drawn, as numpy sums ``fc[:, :, members]``."""
    rng = np.random.default_rng(0)
    fc = (280 + rng.standard_normal((1, 2, 10, 1, 8, 16))).astype(np.float32)
    members = np.array([7, 2, 9, 0, 4])
    got = subset_moments(fc, members, 5)
    sub = fc[:, :, members]
    np.testing.assert_array_equal(_bits(got["mean_k"]), _bits(sub.mean(axis=2)))
    np.testing.assert_array_equal(_bits(got["std_k"]), _bits(sub.std(axis=2, ddof=1)))
    one = subset_moments(fc, np.array([3]), 1)  # one member: itself, and no spread
    np.testing.assert_array_equal(one["mean_k"], fc[:, :, 3])
    assert not one["std_k"].any()


def test_fields_from_several_blocks() -> None:
    """Members read in two blocks (the subset, then the others at the target leads) give the
    moments of the members concatenated, with no concatenated copy."""
    rng = np.random.default_rng(1)
    first, rest = (rng.standard_normal((2, 2, m, 1, 4, 5)).astype(np.float32) for m in (5, 5))
    _, std = member_moments(member_fields(first) + member_fields(rest))
    whole = np.concatenate([first, rest], axis=2)
    np.testing.assert_array_equal(_bits(std), _bits(whole.std(axis=2)))


@settings(max_examples=60, deadline=None)
@given(
    hnp.arrays(
        np.float32,
        hnp.array_shapes(min_dims=6, max_dims=6, min_side=1, max_side=4),
        elements=st.floats(-1e4, 1e4, width=32),
    ),
    st.integers(0, 1),
)
def test_any_shape(fc: np.ndarray, ddof: int) -> None:
    """Any shape and values, ties and single members included (ddof 1 on one member gives
    numpy's NaN, with its warning)."""
    with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        mean, std = member_moments(member_fields(fc), ddof=ddof)
        want = fc.std(axis=2, ddof=ddof)
    np.testing.assert_array_equal(_bits(mean), _bits(fc.mean(axis=2)))
    np.testing.assert_array_equal(_bits(std), _bits(want))
