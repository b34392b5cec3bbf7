"""The heavy-precipitation figures of the guide (ensml.experiments.precip_maps), against hand counts."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.experiments.precip_maps import probability_map, reliability_deviation, reliability_rows


def _case() -> tuple[xr.DataArray, xr.DataArray]:
    """Two leads, eight points each: probabilities in two bins and the events that verified."""
    leads = np.array([24, 48], dtype="timedelta64[h]").astype("timedelta64[ns]")
    p = np.array([[0.05, 0.05, 0.05, 0.05, 0.95, 0.95, 0.95, 0.95]] * 2)
    y = np.array([[0, 0, 0, 20, 20, 20, 0, 0], [0, 0, 0, 0, 20, 20, 20, 20]], dtype=float)
    dims = ("lead_time", "point")
    prob = xr.DataArray(
        p[..., None], dims=(*dims, "threshold"), coords={"lead_time": leads, "threshold": [10.0]}
    )
    obs = xr.DataArray(y, dims=dims, coords={"lead_time": leads})
    return prob, obs


def test_reliability_rows_count_and_frequency_by_hand() -> None:
    prob, obs = _case()
    rows = reliability_rows({"f": prob}, obs)
    full = rows[rows["count"] > 0].set_index(["lead_h", "bin_lower"])
    assert list(full["count"]) == [4, 4, 4, 4]
    # lead 24 h: 1 of 4 at 5 %, 2 of 4 at 95 %; lead 48 h: 0 of 4, 4 of 4
    assert full["observed_frequency"].to_list() == pytest.approx([0.25, 0.5, 0.0, 1.0])
    assert full["forecast_probability"].to_list() == pytest.approx([0.05, 0.95, 0.05, 0.95])
    dev = reliability_deviation(rows)
    assert dev.loc[("f", 10.0), 24.0] == pytest.approx((0.2 * 4 + 0.45 * 4) / 8)
    assert dev.loc[("f", 10.0), 48.0] == pytest.approx((0.05 * 4 + 0.05 * 4) / 8)


def test_reliability_rows_keep_the_forecasts_order_and_refuse_a_missing_dim() -> None:
    prob, obs = _case()
    rows = reliability_rows({"b": prob, "a": 1 - prob}, obs)
    assert list(dict.fromkeys(rows["forecast"])) == ["b", "a"]
    assert isinstance(rows, pd.DataFrame)
    with pytest.raises(EnsmlError, match="'threshold' and 'lead_time' dims"):
        reliability_rows({"f": prob.isel(threshold=0)}, obs)


@pytest.mark.slow
def test_probability_map_is_a_png_and_checks_its_fields() -> None:
    lat, lon = np.linspace(-60, 60, 8), np.linspace(0, 350, 16)
    coords = {"latitude": lat, "longitude": lon}
    truth = xr.DataArray(
        np.random.default_rng(0).gamma(0.5, 8.0, (8, 16)),
        dims=("latitude", "longitude"),
        coords=coords,
        name="tp",
    )
    prob = (truth > 10).astype(float) * 0.8 + 0.1
    png = probability_map(prob, truth, 10.0, name="csg0 EMOS", coastlines=False)
    assert png.startswith(b"\x89PNG")
    with pytest.raises(EnsmlError, match="must be a \\(latitude, longitude\\) field"):
        probability_map(prob.expand_dims(lead_time=1), truth, 10.0, name="x", coastlines=False)
    with pytest.raises(EnsmlError, match="differ in grid"):
        probability_map(prob.isel(longitude=slice(0, 8)), truth, 10.0, name="x", coastlines=False)
