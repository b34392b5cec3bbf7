"""Leave-one-member-out verification of the real ERA5 EDA ensemble (section 4)."""

from __future__ import annotations

import numpy as np
import pytest
import xarray as xr

from ensml.data.layouts.grib import open_grib
from ensml.errors import EnsmlError
from ensml.scores.lomo import below_ground, leave_one_member_out

pytestmark = pytest.mark.realdata


@pytest.fixture(scope="module")
def eda(real_data) -> xr.Dataset:
    ds = open_grib(real_data / "cfgrib" / "era5-levels-members.grib", variables=["z", "t"])
    return ds.isel(lead_time=0, drop=True).load()  # analyses: one "lead" of 0 h


def test_reader_normalises_the_eda_file(eda) -> None:
    assert dict(eda.sizes) == {"init_time": 4, "member": 10, "level": 2, "latitude": 61, "longitude": 120}
    assert eda.latitude.values[0] == 90 and eda.longitude.values[-1] == 357
    z500 = eda.z.sel(level=500)
    assert 4.6e4 < float(z500.min()) and float(z500.max()) < 6.0e4  # geopotential, m2 s-2


@pytest.mark.slow
def test_leave_one_member_out_z500_and_t850(eda) -> None:
    z = leave_one_member_out(eda.z).sel(level=500)
    t = leave_one_member_out(eda.t).sel(level=850)
    # the data README's spread/skill (mean std over RMSE): about 0.90 for z500, 0.76 for t850
    assert float(z.mean_spread_over_rmse) == pytest.approx(0.89, abs=0.03)
    assert float(t.mean_spread_over_rmse) == pytest.approx(0.76, abs=0.03)
    # pooled over all choices of truth, the RMS ratio and the rank histogram are calibrated by construction
    assert float(z.spread_skill_ratio) == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(z.rank_histogram, 0.1, atol=1e-3)  # ties (GRIB packing) broken at random
    # EDA member spread at 3°: z500 CRPS of some m2 s-2 (about 1 m), t850 a few tenths of a K
    assert 2 < float(z.crps) < 30 and 0.05 < float(t.crps) < 0.5
    assert z.crps_by_member.sizes["truth_member"] == 10
    assert float(z.crps_by_member.mean()) == pytest.approx(float(z.crps), rel=1e-6)


@pytest.mark.slow
def test_below_ground_mask(eda) -> None:
    z850 = eda.z.sel(level=850)
    # a made-up orography: a 2 km plateau (surface geopotential ~ 19600 m2 s-2) over 30-45°N 75-100°E
    plateau = (eda.latitude >= 30) & (eda.latitude <= 45) & (eda.longitude >= 75) & (eda.longitude <= 100)
    orography = xr.where(plateau, 2000 * 9.80665, 0.0)
    mask = below_ground(z850, orography)
    assert set(mask.dims) == {"init_time", "latitude", "longitude"}
    assert bool(mask.where(plateau, False).any()) and not bool(mask.where(~plateau, False).any())
    masked = leave_one_member_out(eda.t.sel(level=850), mask=mask)
    by_hand = leave_one_member_out(eda.t.sel(level=850).where(~mask))
    assert float(masked.crps) == pytest.approx(float(by_hand.crps), rel=1e-9)
    assert float(masked.crps) != pytest.approx(
        float(leave_one_member_out(eda.t.sel(level=850)).crps), rel=1e-6
    )


def test_lomo_bad_input(eda) -> None:
    with pytest.raises(EnsmlError, match="no member dimension"):
        leave_one_member_out(eda.z.isel(member=0))
    with pytest.raises(EnsmlError, match="at least 3 members"):
        leave_one_member_out(eda.z.isel(member=[0, 1]))
    with pytest.raises(EnsmlError, match="orography has"):
        below_ground(
            eda.z, xr.zeros_like(eda.z.isel(member=0, init_time=0, level=0)).isel(latitude=slice(1, None))
        )


def test_grib_reader_errors(real_data, tmp_path) -> None:
    with pytest.raises(EnsmlError, match="does not exist"):
        open_grib(tmp_path / "nothing.grib")
    bad = tmp_path / "bad.grib"
    bad.write_bytes(b"GRIB" + b"\0" * 100)
    with pytest.raises(EnsmlError, match="cannot be read"):
        open_grib(bad)
    with pytest.raises(EnsmlError, match="has no variable"):
        open_grib(real_data / "cfgrib" / "era5-levels-members.grib", variables=["q"])
