"""Values at stations (ensml.data.points): bilinear against closed forms, nearest against a brute-force
great-circle search and hand-picked points, the domain's edges, laziness, and the real ERA5 ensemble."""

from __future__ import annotations

from pathlib import Path

import dask.array as da
import numpy as np
import pyproj
import pytest
import xarray as xr

from ensml.data.open import open_forecast
from ensml.data.points import great_circle_m, locate
from ensml.errors import EnsmlError
from tests.data.projected import GM, POLAR, geographic, grid


def regular(lat: np.ndarray, lon: np.ndarray, f) -> xr.DataArray:
    """A field ``f(lat, lon)`` on the regular grid ``lat`` × ``lon`` (as given: any order, any range)."""
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    return xr.DataArray(f(la, lo), dims=("latitude", "longitude"), coords={"latitude": lat, "longitude": lon})


def brute_nearest(glat: np.ndarray, glon: np.ndarray, lat: float, lon: float) -> tuple[int, int]:
    """The (row, col) of the 2-D grid point nearest (great circle) by trying every point."""
    d = great_circle_m(lat, lon, glat, glon)
    return tuple(int(i) for i in np.unravel_index(np.argmin(d), d.shape))


# -- bilinear: closed forms ------------------------------------------------------------------------
@pytest.mark.parametrize("lat_order", [1, -1])
def test_bilinear_reproduces_a_linear_field_across_the_date_line(lat_order: int) -> None:
    """f = 2 + 0.3 lat - 0.05 lon' (lon' east of 160°, unwrapped) on a grid 160°E–170°W written in
    -180..180, both latitude orders: bilinear is exact for a field linear in each coordinate."""
    lat = np.arange(-10.0, 20.1, 2.5)[::lat_order]
    lon_u = np.arange(160.0, 190.1, 2.0)  # crosses the date line
    lon = (lon_u + 180.0) % 360.0 - 180.0  # 160 … 180, -178 … -170
    unwrap = lambda lo: np.where(lo < 0, lo + 360.0, lo)  # noqa: E731
    field = regular(lat, lon, lambda la, lo: 2 + 0.3 * la - 0.05 * unwrap(lo))
    st_lat = np.array([-9.1, 0.0, 7.3, 19.9, 12.5])
    st_lon = np.array([161.3, 179.9, -179.2, 185.7, -170.5])  # 185.7 = -174.3
    points = locate(field, st_lat, st_lon, "bilinear")
    assert points.inside.all()
    got = points.extract(field).values
    expected = 2 + 0.3 * st_lat - 0.05 * unwrap((st_lon + 180) % 360 - 180)
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-12)


def test_bilinear_wraps_around_a_global_grid() -> None:
    """Between the last longitude (350°) and 360°: the weights of the columns 350° and 0°."""
    lat, lon = np.array([10.0, 0.0, -10.0]), np.arange(0.0, 360.0, 10.0)
    field = regular(lat, lon, lambda la, lo: la * 100 + lo)
    points = locate(field, np.array([5.0]), np.array([-4.0]), "bilinear")  # 356°E
    # corners: (10, 350) = 1350, (10, 0) = 1000, (0, 350) = 350, (0, 0) = 0; weights 0.4/0.6 in lon
    hand = 0.5 * (0.4 * 1350 + 0.6 * 1000) + 0.5 * (0.4 * 350 + 0.6 * 0)
    assert float(points.extract(field)[0]) == pytest.approx(hand, abs=1e-10)


def test_bilinear_is_the_same_through_open_forecast(tmp_path: Path) -> None:
    """A file on ascending latitude and -180..180 longitude, normalised on open (north → south,
    0..360): the station values are those of the field as written."""
    lat, lon = np.arange(-30.0, 30.1, 5.0), np.arange(-180.0, 180.0, 5.0)
    f = lambda la, lo: 250 + 0.2 * la + 0.01 * lo  # noqa: E731  (linear away from the date line)
    values = regular(lat, lon, f).values.astype("float32")
    ds = xr.Dataset(
        {"t2m": (("init_time", "lead_time", "member", "lat", "lon"), values[None, None, None].repeat(2, 2))},
        coords={
            "init_time": [np.datetime64("2020-01-01")],
            "lead_time": [np.timedelta64(24, "h")],
            "member": [0, 1],
            "lat": lat,
            "lon": lon,
        },
    )
    ds.to_netcdf(tmp_path / "fc.nc")
    fc = open_forecast(tmp_path / "fc.nc")
    assert fc["latitude"].values[0] > fc["latitude"].values[-1] and fc["longitude"].values.min() >= 0
    st_lat, st_lon = np.array([12.3, -27.5, 0.4]), np.array([-71.2, 33.3, -0.5])
    got = locate(fc, st_lat, st_lon, "bilinear").extract(fc["t2m"]).isel(init_time=0, lead_time=0, member=1)
    np.testing.assert_allclose(got.values, f(st_lat, st_lon), atol=2e-4)  # float32 storage


def polar_field(x_units: str = "m") -> tuple[xr.DataArray, np.ndarray, np.ndarray]:
    """A field linear in projection x/y on the polar-stereographic test grid, and the grid's x, y (m)."""
    x, y = grid()
    lat, lon = geographic(POLAR, x, y)
    xx, yy = np.meshgrid(x, y)
    scale = {"m": 1.0, "km": 1e-3}[x_units]
    field = xr.DataArray(
        3.0 + 2e-6 * xx - 1e-6 * yy,
        dims=("y", "x"),
        coords={
            "x": ("x", x * scale, {"standard_name": "projection_x_coordinate", "units": x_units}),
            "y": ("y", y * scale, {"standard_name": "projection_y_coordinate", "units": x_units}),
            "latitude": (("y", "x"), lat),
            "longitude": (("y", "x"), lon % 360),
            GM: xr.DataArray(np.int32(0), attrs=POLAR),
        },
        attrs={"grid_mapping": GM},
    )
    return field, x, y


@pytest.mark.parametrize("variant", ["m", "km", "no x/y coordinates"])
def test_bilinear_reproduces_a_field_linear_in_projection_x_y(variant: str) -> None:
    field, x, y = polar_field("km" if variant == "km" else "m")
    if variant == "no x/y coordinates":  # x/y then come from the 2-D latitude/longitude
        field = field.drop_vars(["x", "y"])
    crs = pyproj.CRS.from_cf(POLAR)
    sx = np.array([-600e3, -123.4e3, 0.0, 777e3, 849e3])  # inside the grid's x/y rectangle
    sy = np.array([-690e3, 321e3, 0.0, -55.5e3, 549e3])
    assert x.min() <= sx.min() and sx.max() <= x.max() and y.min() <= sy.min() and sy.max() <= y.max()
    st_lon, st_lat = pyproj.Transformer.from_crs(crs, crs.source_crs, always_xy=True).transform(sx, sy)
    points = locate(field, st_lat, st_lon, "bilinear")
    np.testing.assert_allclose(points.extract(field).values, 3.0 + 2e-6 * sx - 1e-6 * sy, atol=1e-9)


# -- nearest -----------------------------------------------------------------------------------------
def test_nearest_picks_the_hand_checked_points_across_the_date_line() -> None:
    lat, lon = np.arange(90.0, -90.1, -1.0), np.arange(0.0, 360.0, 1.0)  # 1° global
    field = regular(lat, lon, lambda la, lo: 1000 * la + lo)
    st_lat = np.array([10.4, 10.4, -45.6, 0.2])
    st_lon = np.array([359.7, -0.3, 179.6, -179.6])
    # by hand: (10, 0) twice (0.3° east of 359.7 is 0°), (-46, 180), (0, 180) (-179.6 = 180.4)
    expected = np.array([10_000.0, 10_000.0, -46_000.0 + 180.0, 180.0])
    np.testing.assert_array_equal(locate(field, st_lat, st_lon, "nearest").extract(field).values, expected)


def test_nearest_is_the_great_circle_nearest_near_the_pole() -> None:
    """Near a pole the nearest latitude and longitude taken apart are not the nearest point."""
    lat, lon = np.array([89.0, 87.0, 85.0]), np.arange(0.0, 360.0, 45.0)
    field = regular(lat, lon, lambda la, lo: la * 1000 + lo)
    rng = np.random.default_rng(3)
    st_lat, st_lon = rng.uniform(84.0, 90.0, 200), rng.uniform(-180.0, 180.0, 200)
    points = locate(field, st_lat, st_lon, "nearest")
    la2, lo2 = np.meshgrid(lat, lon, indexing="ij")
    ref = [brute_nearest(la2, lo2, a, b) for a, b in zip(st_lat, st_lon)]
    got = list(zip(points.index[0][:, 0], points.index[1][:, 0]))
    assert got == ref
    naive = [
        (int(np.argmin(np.abs(lat - a))), int(np.argmin(np.abs((lon - b + 180) % 360 - 180))))
        for a, b in zip(st_lat, st_lon)
    ]
    assert naive != ref  # the case is one where it matters


def test_nearest_on_a_projected_grid_is_the_great_circle_nearest() -> None:
    field, _, _ = polar_field()
    rng = np.random.default_rng(0)
    st_lat, st_lon = rng.uniform(72.0, 88.0, 50), rng.uniform(-180.0, 180.0, 50)
    points = locate(field, st_lat, st_lon, "nearest")
    glat, glon = field["latitude"].values, field["longitude"].values
    for i in np.flatnonzero(points.inside):
        assert (points.index[0][i, 0], points.index[1][i, 0]) == brute_nearest(
            glat, glon, st_lat[i], st_lon[i]
        )
    assert points.inside.sum() > 10


# -- the domain --------------------------------------------------------------------------------------
@pytest.mark.parametrize("method", ["nearest", "bilinear"])
def test_points_beyond_half_a_spacing_are_outside(method: str) -> None:
    lat, lon = np.arange(40.0, 60.1, 2.0), np.arange(-10.0, 20.1, 2.0)  # Europe, 2°
    field = regular(lat, lon, lambda la, lo: la + lo)
    st_lat = np.array([60.9, 61.1, 50.0, 50.0, 39.2, 50.0])
    st_lon = np.array([0.0, 0.0, 20.9, 21.1, 5.0, 190.0])
    inside = locate(field, st_lat, st_lon, method).inside
    np.testing.assert_array_equal(inside, [True, False, True, False, True, False])


def test_bilinear_keeps_the_edge_rows_value_in_the_last_half_cell() -> None:
    lat, lon = np.array([84.0, 80.0]), np.arange(0.0, 360.0, 90.0)
    field = regular(lat, lon, lambda la, lo: la + lo / 1000)
    got = locate(field, np.array([85.5]), np.array([45.0]), "bilinear").extract(field)
    assert float(got[0]) == pytest.approx(84.045)  # row 84°, halfway between 0° and 90°


def test_projected_bilinear_needs_a_grid_mapping_and_nearest_does_not() -> None:
    field, _, _ = polar_field()
    bare = field.drop_vars([GM, "x", "y"])
    with pytest.raises(EnsmlError, match=r"need its CF grid mapping.*use extraction nearest"):
        locate(bare, np.array([80.0]), np.array([0.0]), "bilinear")
    lat, lon = float(field["latitude"][2, 3]), float(field["longitude"][2, 3])  # a grid point
    points = locate(bare, np.array([lat, 30.0]), np.array([lon, lon]), "nearest")
    np.testing.assert_array_equal(points.inside, [True, False])  # 30°N is far off the grid


def test_extraction_stays_lazy_and_reads_only_what_it_needs() -> None:
    """A dask forecast of 32 GB (never made: broadcast zeros plus a ramp) stays lazy when the
    stations are taken; computing the values touches only the chunks that hold them."""
    lat, lon = np.linspace(90, -90, 721), np.arange(0, 360, 0.25)
    big = da.zeros((20, 10, 50, 721, 1440), dtype="float32", chunks=(1, 1, 50, 721, 1440))
    ramp = da.from_array(np.add.outer(lat, lon / 1000).astype("float32"), chunks=-1)
    fc = xr.DataArray(
        big + ramp,
        dims=("init_time", "lead_time", "member", "latitude", "longitude"),
        coords={"latitude": lat, "longitude": lon},
    )
    points = locate(fc, np.array([51.4, -33.9]), np.array([359.1, 18.4]), "bilinear")
    at = points.extract(fc.isel(lead_time=3))
    assert at.chunks is not None and at.dims == ("init_time", "member", "station")
    values = at.isel(init_time=slice(0, 2)).values
    np.testing.assert_allclose(values[0, 0], [51.4 + 0.3591, -33.9 + 0.0184], atol=1e-4)


# -- real data ---------------------------------------------------------------------------------------
STATIONS = {  # (lat, lon): Reading, Fiji (by the date line), Ny-Ålesund, Cape Town
    "reading": (51.44, -0.94),
    "nadi": (-17.76, 177.44),
    "ny-alesund": (78.92, 11.93),
    "cape-town": (-33.97, 18.60),
}


def test_real_era5_members_at_stations_by_hand(real_data: Path) -> None:
    """t at 850 hPa of the ERA5 EDA members (3° grid) at four stations, nearest and bilinear,
    against values read with plain xarray and combined by hand."""
    path = real_data / "cfgrib" / "era5-levels-members.grib"
    before = sorted(p.name for p in path.parent.iterdir())
    fc = open_forecast(path, ["t"])["t"].sel(level=850.0).isel(lead_time=0)
    raw = xr.open_dataset(path, engine="cfgrib", backend_kwargs={"indexpath": ""})["t"]
    raw = raw.sel(isobaricInhPa=850).rename(time="init_time", number="member").load()
    lat, lon = (np.array([v[i] for v in STATIONS.values()]) for i in (0, 1))
    near = locate(fc, lat, lon, "nearest").extract(fc).load()
    bil = locate(fc, lat, lon, "bilinear").extract(fc).load()
    for s, (la, lo) in enumerate(STATIONS.values()):
        east = lo % 360
        # nearest by hand: the grid is every 3°, so the nearest point rounds each coordinate to 3°
        hand = raw.sel(latitude=3 * round(la / 3), longitude=(3 * round(east / 3)) % 360)
        np.testing.assert_array_equal(
            near.isel(station=s).values, hand.transpose("init_time", "member").values
        )
        la0, lo0 = 3 * np.floor(la / 3), 3 * np.floor(east / 3)
        wy, wx = (la - la0) / 3, (east - lo0) / 3
        c = {
            (a, b): raw.sel(latitude=la0 + 3 * a, longitude=(lo0 + 3 * b) % 360)
            for a in (0, 1)
            for b in (0, 1)
        }
        bil_hand = (1 - wy) * ((1 - wx) * c[0, 0] + wx * c[0, 1]) + wy * ((1 - wx) * c[1, 0] + wx * c[1, 1])
        np.testing.assert_allclose(
            bil.isel(station=s).values, bil_hand.transpose("init_time", "member").values, rtol=1e-6
        )
    assert (near.std("member") > 0).all()  # ten distinct members at every station
    assert sorted(p.name for p in path.parent.iterdir()) == before  # nothing written beside the file
