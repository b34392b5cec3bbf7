"""Regional and projected ensembles: a tiny polar-stereographic grid with 2-D latitude/longitude.

``ensml evaluate`` and ``ensml report`` run end to end on files made here (CF grid mapping,
2-D coordinates), maps are drawn in the data's projection, and malformed or mismatched grids are
one-line errors that leave nothing behind. The weights' closed forms: test_weights_projected.py.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import xarray as xr
import yaml

from ensml.cli.main import main
from ensml.data.grid import horizontal_dims
from ensml.data.open import open_analysis, open_forecast
from ensml.data.weights import area_weights, cell_areas
from ensml.errors import EnsmlError
from ensml.verify.maps import Panel, _geometry, draw_maps, unmappable
from tests.data.projected import GM, POLAR, geographic, grid
from tests.verify.reference_inputs import run_meta
from tests.verify.test_cases import run_failing
from tests.verify.test_maps import PNG, no_downloads  # noqa: F401  (autouse: cartopy may not download)


def write_projected(
    folder: Path,
    *,
    mapping: dict = POLAR,
    with_latlon: bool = True,
    with_mapping: bool = True,
    x_units: str = "m",
    n_inits: int = 8,
    members: int = 6,
    seed: int = 0,
) -> dict[str, Path]:
    """forecast.nc, analysis.nc, predictions.nc of a tiny WRF-like ensemble on a projected grid.

    Temperature t at 500 hPa on (y, x) 6 × 7 points of 250 km, daily inits from 2020-01-01 at
    +24 and +48 h; the members carry a bias growing with lead; the "post-processed" Gaussian
    removes most of it. CF: a scalar grid-mapping variable named by each variable's
    ``grid_mapping``, projection x/y with standard names, 2-D latitude/longitude coordinates.
    """
    rng = np.random.default_rng(seed)
    x, y = grid()
    lat, lon = geographic(mapping, x, y)
    xx, yy = np.meshgrid(x, y)
    scale = {"m": 1.0, "km": 1e-3}[x_units]
    coords: dict = {
        "x": ("x", x * scale, {"standard_name": "projection_x_coordinate", "units": x_units}),
        "y": ("y", y * scale, {"standard_name": "projection_y_coordinate", "units": x_units}),
    }
    if with_latlon:
        coords["latitude"] = (("y", "x"), lat, {"standard_name": "latitude", "units": "degrees_north"})
        coords["longitude"] = (("y", "x"), lon, {"standard_name": "longitude", "units": "degrees_east"})
    times = pd.date_range("2020-01-01", periods=n_inits + 2, freq="D").values
    inits, leads = times[:n_inits], np.array([24, 48], "timedelta64[h]").astype("timedelta64[ns]")
    truth = np.stack([250 + 5 * np.sin(xx / 4e5 + 0.3 * t) + 3 * np.cos(yy / 3e5) for t in range(times.size)])
    analysis = truth + rng.normal(0.0, 1.0, truth.shape)
    fc = np.empty((n_inits, 2, members, 1, *xx.shape))
    for i in range(n_inits):
        for j, days in enumerate((1, 2)):
            fc[i, j, :, 0] = truth[i + days] + 0.5 * days + rng.normal(0.0, 0.6 * days, (members, *xx.shape))
    attrs = {"units": "K", **({"grid_mapping": GM} if with_mapping else {})}
    extra = {GM: xr.DataArray(np.int32(0), attrs=mapping)} if with_mapping else {}
    fields = ("y", "x")
    forecast = xr.Dataset(
        {"t": (("init_time", "lead_time", "member", "level", *fields), fc.astype("float32"), attrs), **extra},
        coords={
            **coords,
            "init_time": inits,
            "lead_time": leads,
            "member": np.arange(members),
            "level": [500.0],
        },
    )
    ana = xr.Dataset(
        {"t": (("time", "level", *fields), analysis[:, None].astype("float32"), attrs), **extra},
        coords={**coords, "time": times, "level": [500.0]},
    )
    mean = (fc[:, 1].mean(axis=1) - 0.8).astype("float32")
    predictions = xr.Dataset(
        {
            "t_mean": (("init_time", "level", *fields), mean, attrs),
            "t_std": (("init_time", "level", *fields), np.full_like(mean, 1.3), attrs),
            **extra,
        },
        coords={**coords, "init_time": inits, "level": [500.0], "lead_time": leads[1]},
        attrs=run_meta(
            "MixedTask",
            k=3,
            members=(0, 1, 2),
            ensemble_size=members,
            variables=("t",),
            levels=(500.0,),
            leads=(leads[1],),
        ),
    )
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for name, ds in (("forecast", forecast), ("analysis", ana), ("predictions", predictions)):
        out[name] = folder / f"{name}.nc"
        ds.to_netcdf(out[name])
    return out


@pytest.fixture
def polar(tmp_path: Path) -> dict[str, Path]:
    return write_projected(tmp_path / "data")


def _cli(command: str, data: dict[str, Path], out: Path, *extra: str) -> list[str]:
    return [
        command,
        f"--forecast={data['forecast']}",
        f"--analysis={data['analysis']}",
        f"--out_dir={out}",
        "--k=3",
        *extra,
    ]


def _rewrite(src: Path, dst: Path, change) -> Path:
    with xr.open_dataset(src) as ds:
        change(ds.load()).to_netcdf(dst)
    return dst


# --- reading --------------------------------------------------------------------------------------


def test_projected_files_open_with_their_own_dims(polar: dict[str, Path]) -> None:
    fc, an = open_forecast(polar["forecast"]), open_analysis(polar["analysis"])
    assert list(fc.data_vars) == ["t"] and GM in fc.coords  # the grid mapping is not a variable to score
    assert fc["t"].dims == ("init_time", "lead_time", "member", "level", "y", "x")
    assert horizontal_dims(fc) == horizontal_dims(an) == ("y", "x")
    lon = fc["longitude"].values
    assert lon.min() >= 0 and lon.max() < 360 and fc["latitude"].attrs["units"] == "degrees_north"
    assert "axis" not in fc["latitude"].attrs  # CF: axis only on 1-D coordinate variables


@pytest.mark.slow
@pytest.mark.parametrize("x_units", ["m", "km"])
def test_latlon_from_grid_mapping_when_absent(tmp_path: Path, polar: dict[str, Path], x_units: str) -> None:
    bare = write_projected(tmp_path / x_units, with_latlon=False, x_units=x_units)
    fc, ref = open_forecast(bare["forecast"]), open_forecast(polar["forecast"])
    np.testing.assert_allclose(fc["latitude"].values, ref["latitude"].values, atol=1e-9)
    np.testing.assert_allclose(fc["longitude"].values, ref["longitude"].values, atol=1e-9)
    np.testing.assert_allclose(area_weights(fc).values, area_weights(ref).values, rtol=1e-12)


# --- ensml evaluate and ensml report --------------------------------------------------------------


def _crps(members: np.ndarray, obs: np.ndarray) -> np.ndarray:
    """Empirical ensemble CRPS by hand, members on axis 0: E|X − y| − ½ E|X − X'|."""
    skill = np.abs(members - obs).mean(0)
    return skill - 0.5 * np.abs(members[:, None] - members[None]).mean((0, 1))


@pytest.mark.slow
def test_evaluate_scores_a_polar_stereographic_ensemble(polar, tmp_path, capsys) -> None:
    out = tmp_path / "eval"
    assert main(_cli("evaluate", polar, out, f"--predictions={polar['predictions']}")) == 0
    assert "uniform weights" not in capsys.readouterr().err  # cell areas, no uniform fallback
    table = pd.read_csv(out / "scores.csv")
    assert set(table["forecast"]) == {
        "raw ensemble (6 members)",
        "raw subset (3 members)",
        "post-processed (Gaussian)",
    }
    # the raw-ensemble CRPS by hand, weighted by the map-factor areas of the polar-stereographic grid
    with xr.open_dataset(polar["forecast"]) as f, xr.open_dataset(polar["analysis"]) as a:
        members = f["t"].sel(lead_time=np.timedelta64(48, "h")).isel(level=0).values.astype(float)
        obs = a["t"].isel(level=0).values[2:].astype(float)  # valid 2 days after each init
        lat, lon = f["latitude"].values, f["longitude"].values
    per_point = np.mean([_crps(members[i], obs[i]) for i in range(members.shape[0])], axis=0)
    map_factor_area = ((1 + np.sin(np.deg2rad(lat))) / (1 + np.sin(np.deg2rad(60.0)))) ** 2
    raw = table.set_index("forecast").loc["raw ensemble (6 members)", "crps"]
    assert raw == pytest.approx(np.average(per_point, weights=cell_areas(lat, lon)), rel=1e-6)  # 1.5e-8
    assert raw == pytest.approx(np.average(per_point, weights=map_factor_area), rel=1e-4)  # 2.9e-5
    assert abs(raw / per_point.mean() - 1) > 2e-4  # unweighted: 3.5e-4 off, the check above can tell
    # per-point scores: CF, on the data's grid, readable without ensml
    with xr.open_dataset(out / "scores.nc") as scores:
        field = scores["crps_raw_ensemble_t"]
        assert field.dims == ("level", "y", "x") and field.attrs["grid_mapping"] == GM
        assert {"latitude", "longitude", GM} <= set(scores.coords)
        assert scores[GM].attrs["grid_mapping_name"] == "polar_stereographic"
        np.testing.assert_allclose(field.isel(level=0).values, per_point, rtol=1e-5)
    assert (
        "area-weighted (spherical cell area from the 2-D latitude/longitude)"
        in (out / "scores.md").read_text()
    )


@pytest.mark.slow  # report end to end
def test_report_on_a_polar_stereographic_ensemble(polar: dict[str, Path], tmp_path: Path) -> None:
    case = tmp_path / "polar_low.yaml"
    case.write_text(
        yaml.safe_dump(
            {
                "name": "polar low",
                "variable": "t",
                "level": 500,
                "lead": 48,
                "region": {"lat": [83, 90], "lon": [270, 90]},
                "window": ["2020-01-03", "2020-01-09"],
                "threshold": {"quantile": 0.8, "tail": "upper"},
            }
        )
    )
    out = tmp_path / "report"
    assert main(_cli("report", polar, out, f"--predictions={polar['predictions']}", f"--cases={case}")) == 0
    figures = {p.name for p in (out / "figures").iterdir()}
    assert {"crps_skill_map.png", "case_polar_low.png", "crps_by_lead.png", "rank_histograms.png"} <= figures
    for f in (out / "figures").iterdir():
        assert f.read_bytes().startswith(PNG) and f.stat().st_size > 10_000, f
    md = (out / "report.md").read_text()
    assert "projected grid (y, x) of 6 × 7 points with 2-D latitude/longitude" in md
    assert "spherical cell area" in md and "polar low" in md
    for ref in re.findall(r"\(figures/([^)]+)\)", md):
        assert (out / "figures" / ref).is_file()
    assert "twCRPS" in md and not [p for p in tmp_path.iterdir() if p.name.startswith(".")]


def test_case_region_on_a_projected_grid(polar: dict[str, Path]) -> None:
    from ensml.verify.cases import Region

    fc = open_forecast(polar["forecast"])
    box = Region((83.0, 90.0), (270.0, 90.0)).select(fc["t"])
    inside = box.isel(init_time=0, lead_time=0, member=0, level=0).notnull().values
    lat, lon = box["latitude"].values, box["longitude"].values
    assert inside.any() and not inside.all()
    assert np.all(lat[inside] >= 83) and np.all(((lon[inside] - 270) % 360) <= 180)
    assert inside.sum() == Region((83.0, 90.0), (270.0, 90.0)).inside(fc["latitude"], fc["longitude"]).sum()
    empty = Region((10.0, 20.0), (0.0, 10.0)).select(fc["t"])
    assert empty.sizes["y"] == 0 and empty.sizes["x"] == 0


@pytest.mark.slow
def test_uniform_weights_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture) -> None:
    # no latitude/longitude and no grid mapping: scored with uniform weights, one note, no map
    data = write_projected(tmp_path / "bare", with_latlon=False, with_mapping=False)
    out = tmp_path / "report"
    assert main(_cli("report", data, out, f"--predictions={data['predictions']}")) == 0
    notes = [line for line in capsys.readouterr().err.splitlines() if "uniform weights" in line]
    assert len(notes) == 1 and "without latitude/longitude coordinates" in notes[0], notes
    md = (out / "report.md").read_text()
    assert "unweighted (uniform: projected grid (y, x) without latitude/longitude coordinates)" in md
    assert (
        "No map of the per-point CRPS skill" in md and not (out / "figures" / "crps_skill_map.png").exists()
    )
    table = pd.read_csv(out / "tables" / "scores.csv")
    with xr.open_dataset(data["forecast"]) as f, xr.open_dataset(data["analysis"]) as a:
        members = f["t"].sel(lead_time=np.timedelta64(48, "h")).isel(level=0).values.astype(float)
        obs = a["t"].isel(level=0).values[2:].astype(float)
    by_hand = np.mean([_crps(members[i], obs[i]) for i in range(members.shape[0])])
    assert table.set_index("forecast").loc["raw ensemble (6 members)", "crps"] == pytest.approx(
        by_hand, rel=1e-5
    )


# --- maps ---------------------------------------------------------------------------------------


@pytest.mark.slow  # draws maps
def test_maps_in_the_data_projection_or_from_2d_coordinates(polar: dict[str, Path]) -> None:
    import cartopy.crs as ccrs

    field = open_forecast(polar["forecast"])["t"].isel(init_time=0, lead_time=0, member=0, level=0).load()
    in_projection = _geometry(field)
    assert not in_projection.plate_carree and isinstance(in_projection.crs, ccrs.Projection)
    assert in_projection.crs.to_cf()["grid_mapping_name"] == "polar_stereographic"
    np.testing.assert_allclose(in_projection.x_corner[0, :2], grid()[0][:2] - 125e3)
    bare = field.drop_vars(GM)  # no grid mapping: from the 2-D latitude/longitude
    around_pole = _geometry(bare)
    assert isinstance(around_pole.crs, ccrs.NorthPolarStereo)  # the grid encloses the pole
    off_pole = _geometry(bare.isel(y=slice(0, 3), x=slice(0, 3)))
    assert isinstance(off_pole.crs, ccrs.PlateCarree) and off_pole.plate_carree
    for f in (field, bare, bare.isel(y=slice(0, 3), x=slice(0, 3))):
        panel = Panel(f, "t", "temperature", "K", contour=f, hatch=f > float(f.mean()))
        png = draw_maps([[panel, Panel(f - f.mean(), "anomaly", "t", "K", "RdBu_r", -5, 5)]], "title")
        assert png.startswith(PNG) and len(png) > 20_000
    assert unmappable(field.drop_vars(["latitude", "longitude", GM])) is not None
    with pytest.raises(EnsmlError, match="neither latitude/longitude nor a CF grid mapping"):
        draw_maps([[Panel(field.drop_vars(["latitude", "longitude", GM]), "t", "t", "K")]])


@pytest.mark.slow
def test_rotated_pole_map_uses_the_rotated_frame() -> None:
    import cartopy.crs as ccrs

    mapping = {
        "grid_mapping_name": "rotated_latitude_longitude",
        "grid_north_pole_latitude": 39.25,
        "grid_north_pole_longitude": -162.0,
    }
    rlon, rlat = np.arange(-10.0, 10.5, 1.0), np.arange(-8.0, 8.5, 1.0)
    lat, lon = geographic(mapping, rlon, rlat)
    field = xr.DataArray(
        np.cos(np.deg2rad(lat)),
        dims=("rlat", "rlon"),
        coords={
            "rlat": ("rlat", rlat, {"standard_name": "grid_latitude"}),
            "rlon": ("rlon", rlon, {"standard_name": "grid_longitude"}),
            "latitude": (("rlat", "rlon"), lat),
            "longitude": (("rlat", "rlon"), lon % 360),
            "rotated_pole": xr.DataArray(np.int32(0), attrs=mapping),
        },
    )
    geo = _geometry(field)
    assert isinstance(geo.crs, ccrs.RotatedPole)
    assert draw_maps([[Panel(field, "rotated", "x", "1")]]).startswith(PNG)


# --- bad grids: one line, nothing written ---------------------------------------------------------


def _mismatched_dims(ds: xr.Dataset) -> xr.Dataset:
    lat, lon = ds["latitude"].values.T, ds["longitude"].values.T  # (x, y) shaped, on other dims
    ds = ds.drop_vars(["latitude", "longitude"])
    return ds.assign_coords(latitude=(("nx", "ny"), lat), longitude=(("nx", "ny"), lon))


def _nan_latitude(ds: xr.Dataset) -> xr.Dataset:
    lat = ds["latitude"].values.copy()
    lat[2, 3] = np.nan
    return ds.assign_coords(latitude=(("y", "x"), lat, ds["latitude"].attrs))


def _other_projection(ds: xr.Dataset) -> xr.Dataset:
    x, y = grid()
    lat, lon = geographic({**POLAR, "straight_vertical_longitude_from_pole": -40.0}, x, y)
    ds[GM].attrs["straight_vertical_longitude_from_pole"] = -40.0
    return ds.assign_coords(latitude=(("y", "x"), lat), longitude=(("y", "x"), lon))


@pytest.mark.parametrize(
    ("command", "what", "change", "match"),
    [
        ("evaluate", "forecast", _mismatched_dims, "2-D latitude/longitude are on (nx, ny) of shape (7, 6)"),
        ("evaluate", "analysis", _nan_latitude, "2-D latitude has 1 missing (NaN) value(s), first at y=2"),
        ("evaluate", "analysis", _other_projection, "different grids: their 2-D latitude/longitude differ"),
        (
            "evaluate",
            "analysis",
            lambda d: d.isel(y=slice(1, None)),
            "different grids: projected grid (y, x) of 6 × 7 points with 2-D latitude/longitude vs",
        ),
        ("evaluate", "predictions", _other_projection, "are on different grids"),
        ("report", "analysis", _other_projection, "are on different grids"),
        ("report", "forecast", _nan_latitude, "missing (NaN)"),
    ],
)
def test_bad_grids_are_one_line_errors(polar, tmp_path, capsys, command, what, change, match) -> None:
    data = dict(polar)
    data[what] = _rewrite(polar[what], tmp_path / f"bad_{what}.nc", change)
    extra = [f"--predictions={data['predictions']}"]
    run_failing(_cli(command, data, tmp_path / "out", *extra), capsys, match, tmp_path)


def test_regular_against_projected_is_an_error(tiny_data, polar, tmp_path, capsys) -> None:
    data = {"forecast": tiny_data["forecast"], "analysis": polar["analysis"]}
    run_failing(
        _cli("evaluate", data, tmp_path / "out", "--variables=[t]"), capsys, "different grids", tmp_path
    )


def test_report_refuses_automatic_cases_on_a_projected_grid(polar, tmp_path, capsys) -> None:
    run_failing(
        _cli("report", polar, tmp_path / "out", "--n_extreme_cases=1"),
        capsys,
        "n_extreme_cases searches latitude/longitude boxes of a regular grid",
        tmp_path,
    )


def test_case_finding_refuses_a_projected_grid(polar) -> None:
    from ensml.verify.casefind import find_extreme_cases

    an = open_analysis(polar["analysis"])["t"].isel(level=0)
    with pytest.raises(
        EnsmlError, match="find_extreme_cases: finds latitude/longitude boxes on a regular grid"
    ):
        find_extreme_cases(an, variable="t", level=500.0)
