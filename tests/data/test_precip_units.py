"""Precipitation is held in kg m-2 whatever the file says (ECMWF's tp is metres of water)."""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.data.normalise import normalise


def test_tp_in_metres_becomes_kg_m2_lazily() -> None:
    metres = xr.DataArray(np.array([[0.0, 0.0025]]), dims=("latitude", "longitude"), attrs={"units": "m"})
    ds = xr.Dataset({"tp": metres, "t": metres.copy() + 250}).chunk()
    out = normalise(ds)
    assert out["tp"].chunks is not None  # still lazy
    np.testing.assert_allclose(out["tp"].values, [[0.0, 2.5]])
    assert out["tp"].attrs["units"] == "kg m-2" and out["tp"].attrs["standard_name"] == "precipitation_amount"
    np.testing.assert_array_equal(out["t"].values, ds["t"].values)  # a variable in m that is not rain


def test_precipitation_in_kg_m2_is_left_alone() -> None:
    mm = xr.DataArray(np.array([[0.0, 2.5]]), dims=("latitude", "longitude"), attrs={"units": "kg m-2"})
    out = normalise(xr.Dataset({"tp": mm}))
    np.testing.assert_array_equal(out["tp"].values, mm.values)
