"""SEEPS and the fractions skill score (``ensml.scores.precipitation``) against hand-computed cases.

SEEPS' penalty matrix with p1 = 1/2 (so p3 = 1/6), entry by entry (Rodwell et al. 2010, eq. 15):
rows forecast dry/light/heavy, columns observed dry/light/heavy,
``[[0, 1, 4], [1, 0, 3], [1.6, 0.6, 0]]``. The FSS from the fractions of small fields.
"""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.precipitation import fractions_skill_score, seeps, seeps_climatology


def test_climatology_by_hand() -> None:
    obs = xr.DataArray([[0.0, 0.1, 0.2, 1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 9.0]], dims=("x", "time"))
    clim = seeps_climatology(obs, "time")
    np.testing.assert_allclose(clim["prob_dry"], [0.3])  # 0, 0.1 and 0.2 are dry (<= 0.2)
    # wet days 1, 2, 3, 4, 5, 6, 9: the 2/3 quantile is at position 6 * 2/3 = 4 -> 5
    np.testing.assert_allclose(clim["light_heavy_threshold"], [5.0])
    assert clim["n_climate"].values.tolist() == [10]


def _climate(p1: float, split: float, n: int) -> xr.Dataset:
    return xr.Dataset(
        {"prob_dry": ("x", np.full(n, p1)), "light_heavy_threshold": ("x", np.full(n, split))},
    )


def test_seeps_penalties_by_hand() -> None:
    # categories with dry <= 0.2 and light <= 5: 0 dry, 2 light, 9 heavy
    values = {0: 0.0, 1: 2.0, 2: 9.0}
    fc, ob = np.meshgrid([0, 1, 2], [0, 1, 2], indexing="ij")
    fcst = xr.DataArray([values[i] for i in fc.ravel()], dims="x")
    obs = xr.DataArray([values[j] for j in ob.ravel()], dims="x")
    score = seeps(fcst, obs, _climate(0.5, 5.0, 9), preserve_dims="all")
    expected = np.array([[0.0, 1.0, 4.0], [1.0, 0.0, 3.0], [1.6, 0.6, 0.0]])
    np.testing.assert_allclose(score.values.reshape(3, 3), expected)
    np.testing.assert_allclose(seeps(fcst, obs, _climate(0.5, 5.0, 9)), expected.mean())


def test_seeps_masks_extreme_climates_and_missing_values() -> None:
    fcst = xr.DataArray([0.0, 2.0, 2.0, np.nan], dims="x")
    obs = xr.DataArray([2.0, 2.0, 0.0, 0.0], dims="x")
    clim = xr.Dataset({"prob_dry": ("x", [0.05, 0.5, 1.0, 0.5]), "light_heavy_threshold": ("x", [5.0] * 4)})
    score = seeps(fcst, obs, clim, preserve_dims="all")
    assert np.isnan(score[0])  # p1 < 0.1: not scored (Rodwell et al.)
    assert float(score[1]) == 0.0
    assert np.isnan(score[2]) and np.isnan(score[3])  # p1 = 1; a missing forecast
    unmasked = seeps(fcst, obs, clim, mask_clim_extremes=False, preserve_dims="all")
    np.testing.assert_allclose(unmasked[0], 0.5 / (1 - 0.05))  # forecast dry, observed light


def test_fss_of_one_window_by_hand() -> None:
    fcst = xr.DataArray([[1.0, 1.0, 1.0], [0.0, 0.0, 0.0], [0.0, 0.0, 0.0]], dims=("y", "x"))
    obs = xr.DataArray([[0.0, 0.0, 0.0], [0.0, 2.0, 0.0], [0.0, 0.0, 0.0]], dims=("y", "x"))
    fss = fractions_skill_score(fcst, obs, [0.5], window=(3, 3), spatial_dims=("y", "x"))
    # fractions 3/9 and 1/9: 1 - (2/9)^2 / ((3/9)^2 + (1/9)^2) = 1 - 4/10
    np.testing.assert_allclose(fss.sel(threshold=0.5), 0.6)


def _fractions(a: np.ndarray, n: int) -> np.ndarray:
    """The fraction of each n x n window inside ``a`` (no padding), by loops."""
    rows, cols = a.shape[0] - n + 1, a.shape[1] - n + 1
    return np.array([[a[i : i + n, j : j + n].mean() for j in range(cols)] for i in range(rows)])


def test_fss_aggregates_sums_over_fields() -> None:
    rng = np.random.default_rng(0)
    fcst = xr.DataArray(rng.gamma(0.5, 4.0, (3, 7, 9)), dims=("init_time", "latitude", "longitude"))
    obs = xr.DataArray(rng.gamma(0.5, 4.0, (3, 7, 9)), dims=("init_time", "latitude", "longitude"))
    got = fractions_skill_score(fcst, obs, [1.0, 4.0], window=(3, 3), spatial_dims=("latitude", "longitude"))
    for t in (1.0, 4.0):
        num = den = 0.0
        for i in range(3):
            pf, po = _fractions(fcst.values[i] > t, 3), _fractions(obs.values[i] > t, 3)
            num += ((pf - po) ** 2).sum()
            den += (pf**2).sum() + (po**2).sum()
        np.testing.assert_allclose(got.sel(threshold=t), 1 - num / den)
    per_init = fractions_skill_score(
        fcst, obs, [1.0], window=(3, 3), spatial_dims=("latitude", "longitude"), preserve_dims=["init_time"]
    )
    assert per_init.dims == ("threshold", "init_time")


def test_fss_refuses_nan_and_oversized_windows() -> None:
    a = xr.DataArray(np.ones((3, 3)), dims=("y", "x"))
    with pytest.raises(EnsmlError, match="does not fit"):
        fractions_skill_score(a, a, [0.5], window=(4, 4), spatial_dims=("y", "x"))
    with pytest.raises(EnsmlError, match="holds NaN"):
        fractions_skill_score(a.where(a.x > 0), a, [0.5], window=(2, 2), spatial_dims=("y", "x"))
