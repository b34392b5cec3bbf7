"""The Data guide's "Walkthrough: real GRIB files" (``docs/guide/data.md``, Bring your own
ensemble), run as written on the real sample files in ../shared/data/real: the same inputs
(written under tmp_path, never next to the read-only data), the same ``ensml evaluate`` commands,
and the numbers the guide quotes.

The GRIB files are read as they are: a GRIB analysis (its ``step`` of 0 or its one valid time),
a deterministic forecast (no member dimension: an ensemble of one), a netCDF forecast whose init
time is a scalar and an analysis whose one level is a scalar each once failed here and have a
test below.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr

from ensml.cli.main import main

CITIES = {
    "reading": (51.44, -0.94),
    "reykjavik": (64.15, -21.94),
    "st_johns": (47.56, -52.71),
    "madrid": (40.42, -3.70),
    "oslo": (59.91, 10.75),
}
TIMES = ["2016-09-25T00:00", "2016-09-30T00:00"]


def grib(real: Path, path: str, **keys: object) -> xr.Dataset:
    """A real GRIB file through cfgrib, writing no index file next to the read-only data."""
    kwargs = {"indexpath": "", "filter_by_keys": keys}
    return xr.open_dataset(real / path, engine="cfgrib", backend_kwargs=kwargs)


def prepare(real: Path, out: Path) -> None:
    """The guide's script: the ENS control, the ERA5 EDA split and masked, the IFS run, stations."""
    (out / "ens_50").symlink_to(real / "earthkit-data" / "ens_50.grib")  # GRIB without a suffix
    eda = grib(real, "cfgrib/era5-levels-members.grib")
    eda.sel(number=slice(1, 9)).to_netcdf(out / "eda_members1-9.nc")
    m0 = eda.sel(number=0).drop_vars(["number", "step", "valid_time"])
    m0.where(m0.latitude >= 0).to_netcdf(out / "eda_member0_north.nc")
    an = grib(real, "metview-python/ds/an/msl_sfc.grib").msl
    rows = ["station,lat,lon,time,msl"]
    for name, (lat, lon) in CITIES.items():
        for t in TIMES:
            v = an.sel(time=t).interp(latitude=lat, longitude=lon).item()  # bilinear
            gap = name == "oslo" and t.startswith("2016-09-30")  # one value "not observed"
            rows.append(f"{name},{lat},{lon},{t},{'' if gap else f'{v:.1f}'}")
    (out / "stations.csv").write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def walk(real_data: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("byo")
    prepare(real_data, out)
    return out


def scores(folder: Path) -> pd.DataFrame:
    return pd.read_csv(folder / "scores.csv").set_index(["variable", "forecast"])


@pytest.mark.slow
def test_ens_perturbed_members_against_the_control(walk: Path, tmp_path: Path, real_data: Path) -> None:
    args = ["evaluate", "--forecast", str(walk / "ens_50"), "--reader", "{drop_control: true}"]
    args += ["--analysis", str(walk / "ens_50"), "--analysis_reader", "{filter_by_keys: {dataType: cf}}"]
    args += ["--out_dir", str(tmp_path / "ens")]
    assert main(args) == 0
    got = scores(tmp_path / "ens")
    assert got["lead_h"].unique().tolist() == [78] and got["level_hPa"].unique().tolist() == [850.0]
    assert got.loc[("z", "raw ensemble (50 members)"), "crps"] == pytest.approx(99.39, abs=0.01)
    assert got.loc[("z", "raw subset (5 members)"), "crps"] == pytest.approx(186.3, abs=0.1)
    assert got["n_scored"].unique().tolist() == [6]
    # by hand: properscoring on the 50 perturbed members vs the control, cell areas of the two
    # latitudes 60° and 50° (edges 65°, 55°, 45°)
    import properscoring as ps

    pf = grib(real_data, "earthkit-data/ens_50.grib", dataType="pf").z.values  # (number, lat, lon)
    cf = grib(real_data, "earthkit-data/ens_50.grib", dataType="cf").z.values
    crps = ps.crps_ensemble(cf, np.moveaxis(pf, 0, -1))
    area = np.sin(np.deg2rad([65, 55])) - np.sin(np.deg2rad([55, 45]))
    by_hand = float((crps * area[:, None]).sum() / (area.sum() * crps.shape[1]))
    assert got.loc[("z", "raw ensemble (50 members)"), "crps"] == pytest.approx(by_hand, rel=1e-5)


@pytest.mark.slow
def test_eda_leave_one_member_out_with_half_the_globe_not_observed(
    walk: Path, tmp_path: Path, capfd, real_data: Path
) -> None:
    args = ["evaluate", "--forecast", str(walk / "eda_members1-9.nc")]
    args += ["--analysis", str(walk / "eda_member0_north.nc"), "--leads", "0", "--levels", "500"]
    assert main([*args, "--out_dir", str(tmp_path / "eda")]) == 0
    assert "the analysis observes 14880 of 29280 values of z at +0 h (50.8%)" in capfd.readouterr().err
    got = scores(tmp_path / "eda")
    assert got.loc[("z", "raw ensemble (9 members)"), "crps"] == pytest.approx(5.814, abs=1e-3)
    assert got.loc[("t", "raw ensemble (9 members)"), "crps"] == pytest.approx(0.09915, abs=1e-5)
    assert got.loc[("z", "raw subset (5 members)"), "skill_vs_raw_ensemble"] == pytest.approx(
        -0.117, abs=5e-4
    )
    assert got["n_scored"].unique().tolist() == [31 * 120 * 4]  # 90°N … 0° of the 3° grid, 4 times
    # the same by hand: properscoring's CRPS per point, weighted by the exact cell areas of the
    # 3° grid (sin of the cell edges' latitudes; the pole cells are half cells)
    import properscoring as ps

    eda = grib(real_data, "cfgrib/era5-levels-members.grib").sel(isobaricInhPa=500)
    lat = eda.latitude.values
    north = lat >= 0
    edges = np.clip(np.concatenate([[lat[0] + 1.5], lat - 1.5]), -90, 90)
    area = np.sin(np.deg2rad(edges[:-1])) - np.sin(np.deg2rad(edges[1:]))
    for var in ("z", "t"):
        x = eda[var].values  # (number, time, latitude, longitude)
        crps = ps.crps_ensemble(x[0], np.moveaxis(x[1:], 0, -1))[:, north]  # (time, lat, lon)
        w = np.broadcast_to(area[north][None, :, None], crps.shape)
        by_hand = float((crps * w).sum() / w.sum())
        want = got.loc[(var, "raw ensemble (9 members)"), "crps"]
        assert want == pytest.approx(by_hand, rel=1e-5), var


def test_ifs_run_at_five_cities_sampled_from_the_analysis(
    walk: Path, tmp_path: Path, real_data: Path
) -> None:
    ifs = str(real_data / "metview-python" / "ds" / "oper" / "msl_sfc.grib")
    args = ["evaluate", "--forecast", ifs, "--observations", str(walk / "stations.csv")]
    args += ["--extraction", "bilinear", "--k", "1", "--out_dir", str(tmp_path / "st")]
    assert main(args) == 0
    row = scores(tmp_path / "st").loc[("msl", "raw ensemble (1 member)")]
    assert row["n_pairs"] == 4  # Oslo's empty cell is not observed
    assert row["crps"] == pytest.approx(75.82, abs=0.01) and row["crps"] == pytest.approx(
        row["mae"], rel=1e-12
    )
    assert row["rmse"] == pytest.approx(85.95, abs=0.01)
    # the same by hand: the +120 h forecast bilinear at the cities minus the CSV's values
    fc = grib(real_data, "metview-python/ds/oper/msl_sfc.grib").msl.isel(step=1)
    obs = pd.read_csv(walk / "stations.csv").dropna()
    obs = obs[obs["time"] == TIMES[1]]
    errors = [
        fc.interp(latitude=la, longitude=lo).item() - v for la, lo, v in obs[["lat", "lon", "msl"]].values
    ]
    assert row["mae"] == pytest.approx(np.mean(np.abs(errors)), abs=0.05)


def _an_msl(real: Path, out: Path) -> Path:
    an = grib(real, "metview-python/ds/an/msl_sfc.grib")
    an.drop_vars(["step", "number", "valid_time"]).to_netcdf(out / "an_msl.nc")
    return out / "an_msl.nc"


def test_a_deterministic_grib_run_against_grib_analyses(tmp_path: Path, real_data: Path) -> None:
    """One IFS run (no member dim: an ensemble of one, CRPS = absolute error) against the IFS
    analyses at its valid time, both GRIB; no CRPS decomposition (one member has none)."""
    ds = real_data / "metview-python" / "ds"
    args = [
        "evaluate",
        "--forecast",
        str(ds / "oper" / "msl_sfc.grib"),
        "--analysis",
        str(ds / "an" / "msl_sfc.grib"),
    ]
    assert main([*args, "--k", "1", "--out_dir", str(tmp_path / "o")]) == 0
    row = scores(tmp_path / "o").loc[("msl", "raw ensemble (1 member)")]
    assert row["lead_h"] == 120 and row["n_scored"] == 7 * 12  # the 10° grid, one valid time
    assert row["crps"] == pytest.approx(176.8, abs=0.05)  # the guide's walkthrough
    fc = grib(real_data, "metview-python/ds/oper/msl_sfc.grib").msl.isel(step=1)
    an = grib(real_data, "metview-python/ds/an/msl_sfc.grib").msl.sel(time=fc.valid_time.values)
    w = np.cos(np.deg2rad(fc.latitude))  # cell areas of a regular grid away from the poles
    by_hand = float((np.abs(fc - an.squeeze(drop=True)) * w).sum() / (w * xr.ones_like(fc)).sum())
    assert row["crps"] == pytest.approx(by_hand, rel=2e-3)  # exact cell areas vs cos(lat)
    assert not (tmp_path / "o" / "decomposition.csv").exists()


def test_scalar_init_time(tmp_path: Path, real_data: Path) -> None:
    fc = grib(real_data, "metview-python/ds/oper/msl_sfc.grib").expand_dims("number").drop_vars("valid_time")
    fc.to_netcdf(tmp_path / "fc.nc")  # time (the init) a scalar coordinate, as cfgrib reads one run
    an = str(_an_msl(real_data, tmp_path))
    args = ["evaluate", "--forecast", str(tmp_path / "fc.nc"), "--analysis", an, "--k", "1"]
    assert main([*args, "--out_dir", str(tmp_path / "o")]) == 0


@pytest.mark.slow
def test_scalar_level_analysis(walk: Path, tmp_path: Path, real_data: Path) -> None:
    cf = grib(real_data, "earthkit-data/ens_50.grib", dataType="cf")
    cf = cf.assign_coords(time=cf.valid_time).expand_dims("time")  # isobaricInhPa stays a scalar
    cf.drop_vars(["step", "number", "valid_time"]).to_netcdf(tmp_path / "control.nc")
    args = ["evaluate", "--forecast", str(walk / "ens_50"), "--reader", "{drop_control: true}"]
    args += ["--analysis", str(tmp_path / "control.nc"), "--out_dir", str(tmp_path / "o")]
    assert main(args) == 0
