"""Zonal power spectra: Parseval, pure waves, smoothing, cos-latitude weights, the member/truth
ratio and its summary, NaN rows, dask, bad inputs."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.scores.spectra import WAVENUMBER, mean_abs_log_ratio, spectrum_ratio, zonal_power_spectrum


def _grid(values: np.ndarray, lat=None, extra: tuple[str, ...] = (), units: str | None = "K") -> xr.DataArray:
    """A field (*extra, latitude, longitude) on a global grid of W = values.shape[-1] longitudes."""
    w = values.shape[-1]
    coords = {"longitude": np.arange(w) * 360.0 / w}
    dims = (*extra, "longitude")
    if lat is not None:
        coords["latitude"] = np.asarray(lat, dtype=float)
        dims = (*extra, "latitude", "longitude")
    return xr.DataArray(values, dims=dims, coords=coords, attrs={"units": units} if units else {})


def _cos_mean(a: xr.DataArray) -> xr.DataArray:
    w = np.cos(np.deg2rad(a.latitude))
    return (a * w).sum("latitude") / w.sum()


@pytest.mark.parametrize("w", [16, 15, 2, 3])
def test_parseval_per_row_and_cos_latitude_mean(w):
    rng = np.random.default_rng(w)
    lat = [80.0, 30.0, -10.0, -60.0]
    field = _grid(rng.normal(3.0, 2.0, size=(3, 4, w)), lat=lat, extra=("time",))
    rows = zonal_power_spectrum(field, lat_dim=None)
    assert rows.dims == ("time", "latitude", WAVENUMBER)
    assert rows[WAVENUMBER].values.tolist() == list(range(w // 2 + 1))
    np.testing.assert_allclose(rows.sum(WAVENUMBER), (field**2).mean("longitude"), rtol=1e-12)
    mean = zonal_power_spectrum(field)
    assert mean.dims == ("time", WAVENUMBER) and mean.attrs["units"] == "K^2"
    np.testing.assert_allclose(mean.sum(WAVENUMBER), _cos_mean((field**2).mean("longitude")), rtol=1e-12)
    xr.testing.assert_allclose(mean, _cos_mean(rows).transpose("time", WAVENUMBER).rename(mean.name))


def test_parseval_float32_geopotential_values():
    # float32 values around 5.5e4 (500 hPa geopotential): computed in float64, Parseval to ~1e-7
    rng = np.random.default_rng(0)
    z = (5.5e4 + 300.0 * rng.normal(size=(2, 64))).astype(np.float32)
    field = _grid(z, lat=[45.0, -45.0], units="m2 s-2")
    spec = zonal_power_spectrum(field, lat_dim=None)
    assert spec.dtype == np.float64 and spec.attrs["units"] == "(m2 s-2)^2"
    np.testing.assert_allclose(spec.sum(WAVENUMBER), (z.astype(np.float64) ** 2).mean(-1), rtol=1e-12)
    # the variance sits in k >= 1, the squared mean in k = 0
    np.testing.assert_allclose(spec.isel(wavenumber=slice(1, None)).sum(WAVENUMBER), z.astype(float).var(-1))


@pytest.mark.parametrize(("w", "k"), [(16, 3), (16, 7), (15, 7), (9, 1)])
def test_pure_cosine_puts_its_power_at_its_wavenumber(w, k):
    # f = c + A cos(2 pi k n / W + phi): S_0 = c², S_k = A² / 2, nothing elsewhere
    a, c, phi = 2.5, -1.0, 0.7
    n = np.arange(w)
    field = _grid((c + a * np.cos(2 * np.pi * k * n / w + phi))[None, :], lat=[0.0])
    spec = zonal_power_spectrum(field)
    want = np.zeros(w // 2 + 1)
    want[0], want[k] = c**2, a**2 / 2
    np.testing.assert_allclose(spec.values, want, atol=1e-12)


def test_nyquist_wave_is_not_doubled():
    # W = 8, f_n = A (-1)^n: mean f² = A², all of it at k = W/2 = 4
    field = _grid(3.0 * (-1.0) ** np.arange(8)[None, :], lat=[10.0])
    np.testing.assert_allclose(zonal_power_spectrum(field).values, [0, 0, 0, 0, 9.0], atol=1e-12)


def test_cos_latitude_weights_by_hand():
    # two rows, W = 12: latitude 0 (weight cos 0 = 1) has cos(2 pi n / 12), S_1 = 1/2; latitude 60
    # (weight cos 60° = 1/2) has 2 cos(4 pi n / 12), S_2 = 4/2 = 2. Mean over latitude:
    # S_1 = (1 * 1/2 + 1/2 * 0) / (3/2) = 1/3, S_2 = (1 * 0 + 1/2 * 2) / (3/2) = 2/3, the rest 0.
    n = np.arange(12)
    rows = np.stack([np.cos(2 * np.pi * n / 12), 2 * np.cos(4 * np.pi * n / 12)])
    spec = zonal_power_spectrum(_grid(rows, lat=[0.0, 60.0]))
    np.testing.assert_allclose(spec.values, [0, 1 / 3, 2 / 3, 0, 0, 0, 0], atol=1e-12)
    # a NaN row is left out with its weight: only latitude 60 remains
    spec = zonal_power_spectrum(_grid(np.stack([np.full(12, np.nan), rows[1]]), lat=[0.0, 60.0]))
    np.testing.assert_allclose(spec.values, [0, 0, 2, 0, 0, 0, 0], atol=1e-12)
    rows_only = zonal_power_spectrum(
        _grid(np.stack([np.full(12, np.nan), rows[1]]), lat=[0.0, 60.0]), lat_dim=None
    )
    assert rows_only.isel(latitude=0).isnull().all()


def _smooth(x: np.ndarray) -> np.ndarray:
    # periodic (0.2, 0.6, 0.2) filter along longitude: response H(k) = 0.6 + 0.4 cos(2 pi k / W)
    return 0.6 * x + 0.2 * (np.roll(x, 1, axis=-1) + np.roll(x, -1, axis=-1))


def test_smoothed_members_have_less_small_scale_power_and_ratio():
    rng = np.random.default_rng(3)
    w = 32
    lat = [50.0, 40.0, 30.0]
    truth = _grid(rng.normal(size=(5, 3, w)), lat=lat, extra=("init_time",)).assign_coords(
        init_time=np.arange(5)
    )
    raw = zonal_power_spectrum(truth)
    smooth = zonal_power_spectrum(truth.copy(data=_smooth(truth.values)))
    h2 = (0.6 + 0.4 * np.cos(2 * np.pi * np.arange(w // 2 + 1) / w)) ** 2
    # power times H(k)² exactly, row by row and so in the latitude mean
    np.testing.assert_allclose(smooth.values, raw.values * h2, rtol=1e-10, atol=1e-14)
    high = slice(w // 4, None)
    assert np.all(
        smooth.isel(wavenumber=high).mean("init_time") < raw.isel(wavenumber=high).mean("init_time")
    )
    # two identical smoothed members against the raw truth: the ratio of means is H(k)²
    members = xr.concat([smooth, smooth], dim="member")
    ratio = spectrum_ratio(members, raw)
    assert ratio.dims == (WAVENUMBER,) and ratio.attrs["units"] == "1"
    np.testing.assert_allclose(ratio.values, h2, rtol=1e-10)
    summary = mean_abs_log_ratio(ratio)
    np.testing.assert_allclose(float(summary), np.mean(np.abs(np.log(h2[1:]))), rtol=1e-10)
    np.testing.assert_allclose(float(mean_abs_log_ratio(spectrum_ratio(raw.expand_dims(member=2), raw))), 0.0)
    # per init time, and a ratio of means, not a mean of ratios
    per_case = spectrum_ratio(members, raw, preserve_dims="init_time")
    assert per_case.dims == ("init_time", WAVENUMBER)
    m1 = raw * 2.0
    m1[0] = raw[0] * 10.0
    pooled = spectrum_ratio(m1.expand_dims(member=1), raw)
    want = (m1.mean("init_time") / raw.mean("init_time")).values
    np.testing.assert_allclose(pooled.values, want, rtol=1e-12)


def test_ratio_nan_where_truth_has_no_power_and_nan_members():
    # zero-mean truth rows: S_0 = 0, so the ratio at k = 0 is NaN and the summary skips it
    n = np.arange(8)
    truth = zonal_power_spectrum(_grid(np.cos(2 * np.pi * n / 8)[None, :], lat=[0.0]))
    members = xr.concat([truth * 4.0, truth * np.nan, truth * 0.25], dim="member")
    ratio = spectrum_ratio(members, truth)
    assert np.isnan(ratio.values[0]) and np.isnan(ratio.values[2:]).all()
    np.testing.assert_allclose(ratio.values[1], (4.0 + 0.25) / 2)  # the NaN member is left out
    np.testing.assert_allclose(float(mean_abs_log_ratio(ratio, min_wavenumber=0)), np.log(2.125))
    assert np.isinf(float(mean_abs_log_ratio(spectrum_ratio((truth * 0).expand_dims(member=1), truth))))


def test_dask_matches_numpy():
    rng = np.random.default_rng(5)
    field = _grid(rng.normal(size=(4, 6, 20)), lat=np.linspace(60, -60, 6), extra=("time",))
    lazy = zonal_power_spectrum(field.chunk(time=2, longitude=5))
    assert lazy.chunks is not None
    xr.testing.assert_allclose(zonal_power_spectrum(field), lazy.compute())


def test_bad_inputs():
    field = _grid(np.zeros((2, 8)), lat=[10.0, 0.0])
    with pytest.raises(EnsmlError, match="field has no longitude dim 'lon'"):
        zonal_power_spectrum(field, lon_dim="lon")
    with pytest.raises(EnsmlError, match="needs at least 2 longitudes"):
        zonal_power_spectrum(field.isel(longitude=[0]))
    with pytest.raises(EnsmlError, match="must go once round the circle"):
        zonal_power_spectrum(field.assign_coords(longitude=np.arange(8) * 1.0))  # a regional grid
    with pytest.raises(EnsmlError, match="must go once round the circle"):
        zonal_power_spectrum(field.assign_coords(longitude=[0, 45, 90, 135, 180, 225, 270, 300.0]))
    # westward, or -180 … 180, longitudes are accepted as a global grid too
    xr.testing.assert_identical(
        zonal_power_spectrum(field.assign_coords(longitude=np.arange(8)[::-1] * 45.0)),
        zonal_power_spectrum(field.assign_coords(longitude=np.arange(8) * 45.0 - 180.0)),
    )
    # without a coordinate the points are taken to go round the circle
    assert zonal_power_spectrum(field.drop_vars("longitude")).sizes[WAVENUMBER] == 5
    with pytest.raises(EnsmlError, match="no coordinate for the cos-latitude weights"):
        zonal_power_spectrum(field.drop_vars("latitude"))
    with pytest.raises(EnsmlError, match=r"within \[-90, 90\]"):
        zonal_power_spectrum(field.assign_coords(latitude=[100.0, 0.0]))
    with pytest.raises(EnsmlError, match="infinite"):
        zonal_power_spectrum(field.where(field.latitude > 5, np.inf))
    with pytest.raises(EnsmlError, match=r"must be an xarray\.DataArray"):
        zonal_power_spectrum(np.zeros((2, 8)))
    spec = zonal_power_spectrum(field)
    with pytest.raises(EnsmlError, match="forecast has no member dimension 'member'"):
        spectrum_ratio(spec, spec)
    with pytest.raises(EnsmlError, match="must have a 'wavenumber' dim"):
        spectrum_ratio(field.expand_dims(member=2), field)
    with pytest.raises(EnsmlError, match="must not name 'wavenumber'"):
        spectrum_ratio(spec.expand_dims(member=2), spec, preserve_dims=WAVENUMBER)
    with pytest.raises(EnsmlError, match="no wavenumber >= 9"):
        mean_abs_log_ratio(spec, min_wavenumber=9)
    with pytest.raises(EnsmlError, match="min_wavenumber must be an integer >= 0"):
        mean_abs_log_ratio(spec, min_wavenumber=-1)
