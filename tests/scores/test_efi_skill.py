"""EFI (continuous closed form vs quadrature), model climate, EECRPS, skill scores and bootstrap CIs."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores import (
    bootstrap_ci,
    eecrps,
    extreme_forecast_index,
    model_climate,
    reforecast_efi,
    skill_score,
)


def _efi_quadrature(members, climate):
    p = np.linspace(0, 1, 200001)[1:-1]
    q = np.quantile(climate, p)
    ff = (members[None, :] < q[:, None]).mean(1)
    return 2 / np.pi * np.trapezoid((p - ff) / np.sqrt(p * (1 - p)), p)


@pytest.mark.slow
def test_efi_matches_definition_and_limits():
    rng = np.random.default_rng(0)
    clim = xr.DataArray(rng.normal(size=(4, 500)), dims=("x", "climate_sample"))
    shift = np.array([0.0, 0.7, 50.0, -50.0])
    fc = xr.DataArray(rng.normal(size=(4, 20)) + shift[:, None], dims=("x", "member"))
    efi = extreme_forecast_index(fc, clim, method="continuous")
    for i in range(2):
        np.testing.assert_allclose(efi[i], _efi_quadrature(fc.values[i], clim.values[i]), atol=2e-3)
    np.testing.assert_allclose(efi[2:], [1.0, -1.0])


def test_efi_nan_policy_and_broadcast_climate():
    clim = xr.DataArray([0.0, 1.0, np.nan], dims="climate_sample")
    fc = xr.DataArray([[0.5, np.nan], [np.nan, np.nan]], dims=("x", "member"))
    efi = extreme_forecast_index(fc, clim, method="continuous")
    np.testing.assert_allclose(efi[0], 4 / np.pi * np.arcsin(np.sqrt(0.5)) - 1)
    assert np.isnan(efi[1])


def test_model_climate_window_and_reforecast_efi():
    base = pd.date_range("2001-02-01", periods=6, freq="3D")
    init = np.concatenate([base + pd.DateOffset(years=y) for y in range(4)])
    rng = np.random.default_rng(1)
    fc = xr.DataArray(
        rng.normal(size=(24, 5, 3)), dims=("init_time", "member", "x"), coords={"init_time": init}
    )
    clim = model_climate(fc, init[1], window_days=4)  # Feb 4: Feb 1, 4, 7 of the 3 other years
    assert clim.sizes["climate_sample"] == 3 * 3 * 5 and set(clim.dims) == {"x", "climate_sample"}
    past = model_climate(fc, init[13], window_days=4, past_only=True)  # year 3: years 1, 2
    assert past.sizes["climate_sample"] == 2 * 3 * 5
    efi = reforecast_efi(fc)
    assert efi.dims == ("init_time", "x") and np.all(np.abs(efi) <= 1)
    with pytest.raises(EnsmlError, match="no forecasts within"):
        model_climate(fc, "2001-08-01")


def test_eecrps_plain_and_normalised():
    crps = xr.DataArray([1.0, 2.0, 3.0, np.nan], dims="x")
    efi = xr.DataArray([0.5, -1.0, 0.0, 0.9], dims="x")
    np.testing.assert_allclose(eecrps(crps, efi), (0.5 + 2.0 + 0.0) / 3)
    np.testing.assert_allclose(eecrps(crps, efi, normalised=True), (0.5 + 2.0) / 1.5)
    with pytest.raises(EnsmlError, match="not among crps dims"):
        eecrps(crps, efi.rename(x="y"))


def test_skill_score_named_reference():
    s = xr.DataArray([[1.0, 2.0], [0.8, 1.0]], dims=("model", "lead_time"), coords={"model": ["raw", "emos"]})
    ss = skill_score(s, "raw")
    np.testing.assert_allclose(ss.sel(model="emos"), [0.2, 0.5])
    assert ss.sel(model="raw").values.tolist() == [0.0, 0.0] and ss.attrs["reference"] == "raw"
    with pytest.raises(EnsmlError, match="not among the models"):
        skill_score(s, "unet")
    with pytest.raises(EnsmlError, match="no 'model' dimension"):
        skill_score(s.isel(model=0), "raw")


def test_bootstrap_ci_covers_and_is_paired():
    rng = np.random.default_rng(5)
    s = xr.DataArray(rng.gamma(2.0, size=(40, 6)), dims=("init_time", "latitude"))
    ci = bootstrap_ci(s, n_resamples=400, seed=3)
    assert float(ci.lower) < float(ci.estimate) < float(ci.upper)
    np.testing.assert_allclose(ci.estimate, s.mean())
    again = bootstrap_ci(s, n_resamples=400, seed=3)
    xr.testing.assert_identical(ci, again)
    paired = bootstrap_ci(s, reference=s * 1.25, preserve_dims="latitude", n_resamples=200)
    np.testing.assert_allclose(paired.lower, 0.2)  # constant ratio: no spread in the skill
    np.testing.assert_allclose(paired.upper, 0.2)
    with pytest.raises(EnsmlError, match="no 'init_time' dimension"):
        bootstrap_ci(s.rename(init_time="t"))
    with pytest.raises(EnsmlError, match="confidence must be in"):
        bootstrap_ci(s, confidence=1.5)
    with pytest.raises(EnsmlError, match="must be among the reduced dims"):
        bootstrap_ci(s, preserve_dims="init_time")


def test_efi_refuses_infinite_members_and_climate():
    clim = xr.DataArray([0.0, 1.0, 2.0], dims="climate_sample")
    fc = xr.DataArray([[0.5, np.inf], [1.0, 1.5]], dims=("x", "member"))
    with pytest.raises(EnsmlError, match=r"forecast has 1 infinite value \(first at x=0, member=1\)"):
        extreme_forecast_index(fc, clim, method="continuous")
    with pytest.raises(EnsmlError, match="extreme_forecast_index: climate has 1 infinite value"):
        extreme_forecast_index(
            fc.where(np.isfinite(fc), 0.0), clim.where(clim < 2, -np.inf), method="continuous"
        )
