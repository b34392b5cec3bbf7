"""twcrps_ensemble_array: numpy in, against scoringrules and twcrps_ensemble; its bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import scoringrules as sr
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import _kernels, twcrps_ensemble, twcrps_ensemble_array
from ensml.scores._sortnet import plan

TAILS = {  # tail: (threshold, scoringrules' a/b)
    "upper": (0.3, {"a": 0.3}),
    "lower": (-0.2, {"b": -0.2}),
    "interval": ((-0.6, 0.5), {"a": -0.6, "b": 0.5}),
}


@pytest.mark.parametrize("m", [5, 10, 16, 17, 49, 50, 51, 129])
@pytest.mark.parametrize("tail", list(TAILS))
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_matches_scoringrules(m, tail, dtype):
    """Every kernel path: 5 and 129 members (buffer networks), 10 and 16 (registers, no buffer),
    17 and 49 (a register group of one row), 50 and 51; members last, so read without a copy."""
    rng = np.random.default_rng(m)
    n = 2100
    fc = rng.standard_normal((n, m)).astype(dtype)
    obs = rng.standard_normal(n).astype(dtype)
    threshold, kw = TAILS[tail]
    got = twcrps_ensemble_array(fc, obs, threshold, axis=-1, tail=tail)
    ref = sr.twcrps_ensemble(obs.astype(float), fc.astype(float), estimator="nrg", backend="numpy", **kw)
    assert got.dtype == dtype and got.shape == (n,)
    np.testing.assert_allclose(got, ref, rtol=2e-6 if dtype == np.float32 else 1e-12, atol=1e-7)


def test_per_point_threshold_axis_and_agreement_with_xarray():
    rng = np.random.default_rng(4)
    fc = rng.standard_normal((12, 30, 7))  # members first
    obs = rng.standard_normal((30, 7))
    t = rng.uniform(-0.5, 0.5, size=(30, 7))
    got = twcrps_ensemble_array(fc, obs, t, axis=0)
    ref = sr.twcrps_ensemble(obs, fc, a=t, m_axis=0, estimator="nrg", backend="numpy")
    np.testing.assert_allclose(got, ref, rtol=1e-12)
    moved = twcrps_ensemble_array(np.moveaxis(fc, 0, 1), obs, t, axis=1)
    np.testing.assert_allclose(moved, got, rtol=1e-12)
    da = xr.DataArray(fc, dims=("member", "y", "x"))
    via_xr = twcrps_ensemble(da, xr.DataArray(obs, dims=("y", "x")), 0.1, preserve_dims="all")
    np.testing.assert_allclose(twcrps_ensemble_array(fc, obs, 0.1), via_xr.values, rtol=1e-12)
    fi, oi = np.round(fc * 3).astype(int), np.round(obs * 3).astype(int)
    ints = twcrps_ensemble_array(fi, oi, t * 3)  # integers are scored as float64
    ref_i = sr.twcrps_ensemble(
        oi.astype(float), fi.astype(float), a=t * 3, m_axis=0, estimator="nrg", backend="numpy"
    )
    assert ints.dtype == np.float64
    np.testing.assert_allclose(ints, ref_i, rtol=1e-12)


def test_nan_members_dropped():
    fc = np.array([[0.0, 1.0, np.nan, 2.0], [np.nan] * 4])
    obs = np.array([0.5, 0.5])
    got = twcrps_ensemble_array(fc, obs, 0.8, axis=-1)
    ref = sr.twcrps_ensemble(0.5, np.array([0.0, 1.0, 2.0]), a=0.8, estimator="nrg", backend="numpy")
    np.testing.assert_allclose(got[0], ref)
    assert np.isnan(got[1])
    all_nan = twcrps_ensemble_array(np.full((3, 4), np.nan), np.full(3, np.nan), 0.8, axis=-1)
    assert np.isnan(all_nan).all()  # no data: NaN, not a range error
    np.testing.assert_array_equal(twcrps_ensemble_array(fc, obs, np.array(0.8), axis=-1), got)


def _fc_obs():
    rng = np.random.default_rng(0)
    return rng.standard_normal((8, 50)), rng.standard_normal(50)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"threshold": 1e6}, "threshold 1e\\+06 is above the data range"),
        ({"threshold": -1e6, "tail": "lower"}, "threshold -1e\\+06 is below the data range"),
        ({"threshold": (1.0, 0.0), "tail": "interval"}, "interval thresholds need lower < upper everywhere"),
        ({"threshold": 1.0, "tail": "interval"}, "tail='interval' needs threshold=\\(lower, upper\\)"),
        ({"threshold": 1.0, "tail": "middle"}, "tail must be 'upper', 'lower' or 'interval'"),
        ({"threshold": "1"}, "threshold must be a number or an array, got str"),
        ({"threshold": np.inf}, "threshold must be finite, got inf"),
        ({"threshold": np.zeros(49)}, "threshold shape \\(49,\\) does not match the observation shape"),
        ({"threshold": np.full(50, np.nan)}, "threshold must be finite numbers"),
        ({"threshold": 0.0, "axis": 2}, "member axis 2 out of range for 2-D forecast"),
        ({"threshold": np.zeros(50), "axis": 2}, "member axis 2 out of range for 2-D forecast"),
    ],
)
def test_bad_inputs(kwargs, match):
    fc, obs = _fc_obs()
    with pytest.raises(EnsmlError, match=f"^twcrps_ensemble_array: {match}"):
        twcrps_ensemble_array(fc, obs, **kwargs)


@pytest.mark.parametrize("threshold", [0.5, np.full(50, 0.5)])
def test_infinite_values_refused_before_chaining(threshold):
    """max(-inf, t) would be a finite t: ±Inf is found whether the kernel or numpy chains."""
    fc, obs = _fc_obs()
    fc[3, 17] = -np.inf
    with pytest.raises(EnsmlError, match="twcrps_ensemble_array: forecast has 1 infinite value"):
        twcrps_ensemble_array(fc, obs, threshold)
    fc[3, 17] = 0.0
    obs[5] = np.inf
    with pytest.raises(EnsmlError, match="twcrps_ensemble_array: observation has 1 infinite value"):
        twcrps_ensemble_array(fc, obs, threshold, tail="lower")


@pytest.mark.parametrize("m", [10, 50])
@pytest.mark.parametrize("blocks", [5, 9, 200])
def test_threads_share_the_blocks(m, blocks):
    """The threads take runs of blocks from a shared counter: every point is scored once, as
    the serial path scores it, for few blocks (runs of one block) and many (runs of 25)."""
    bsize = plan(m, 4)[-1]
    n = blocks * bsize - 3
    rng = np.random.default_rng(blocks)
    fc = rng.standard_normal((n, m)).astype(np.float32)
    obs = rng.standard_normal(n).astype(np.float32)
    for lo in (-np.inf, 0.2):
        par, bad = _kernels.crps_2d(fc.T, obs, False, parallel=True, dtype=np.float32, lo=lo)
        ser, _ = _kernels.crps_2d(fc.T, obs, False, parallel=False, dtype=np.float32, lo=lo)
        assert bad == 0
        np.testing.assert_array_equal(par, ser)
