"""The one map helper: offline coastlines, regions across 0° and the dateline, PNG output."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import xarray as xr

from ensml.errors import EnsmlError
from ensml.verify.maps import Panel, coastlines, display_units, draw_maps, unwrap_longitude

PNG = b"\x89PNG\r\n\x1a\n"


@pytest.fixture(autouse=True)
def no_downloads(monkeypatch: pytest.MonkeyPatch) -> None:
    """Any attempt by cartopy to fetch data fails the test (besides the DownloadWarning filter)."""
    import cartopy.io

    def refuse(*args, **kwargs):
        raise AssertionError("cartopy tried to download map data")

    monkeypatch.setattr(cartopy.io.Downloader, "acquire_resource", refuse)
    warnings.simplefilter("error", cartopy.io.DownloadWarning)


def field(lat: np.ndarray, lon: np.ndarray) -> xr.DataArray:
    la, lo = np.meshgrid(lat, lon, indexing="ij")
    data = np.cos(np.deg2rad(la)) * 50 + 5 * np.sin(np.deg2rad(3 * lo))
    return xr.DataArray(data, dims=("latitude", "longitude"), coords={"latitude": lat, "longitude": lon})


def test_coastlines_are_shipped_and_offline() -> None:
    coast = coastlines()
    assert len(coast.geoms) > 100
    minx, miny, maxx, maxy = coast.bounds
    assert -180 <= minx < -170 and 170 < maxx <= 180 and miny < -60 and maxy > 80
    # no segment jumps across the antimeridian (that would draw a line around the globe)
    assert max(np.abs(np.diff(np.asarray(g.coords)[:, 0])).max() for g in coast.geoms) < 20


def test_unwrap_longitude() -> None:
    np.testing.assert_allclose(unwrap_longitude(np.array([350.0, 355.0, 0.0, 5.0])), [350, 355, 360, 365])


@pytest.mark.slow
@pytest.mark.parametrize("lon", [np.r_[330:360:5.0, 0:40:5.0], np.r_[160:200:5.0] % 360])
def test_region_maps_render(tmp_path, lon) -> None:
    f = field(np.arange(-30.0, -71.0, -5.0), lon)
    panel = Panel(f, "analysis", "temperature", "K", contour=f, hatch=f > 40)
    png = draw_maps([[panel, Panel(f - 40, "difference", "error", "K", "RdBu_r", -10, 10)]], "title")
    out = tmp_path / "map.png"
    out.write_bytes(png)
    assert png.startswith(PNG) and out.stat().st_size > 20_000


@pytest.mark.slow
def test_global_map_renders(tmp_path) -> None:
    f = field(np.linspace(87.5, -87.5, 36), np.arange(0.0, 360.0, 10.0))
    png = draw_maps([[Panel(f, "global", "x", "1")]])
    assert png.startswith(PNG) and len(png) > 20_000


def test_display_units() -> None:
    scale, offset, units, _ = display_units("z", "field")
    assert units == "dam" and scale == pytest.approx(1 / 98.0665) and offset == 0
    assert display_units("t", "field")[1:3] == (-273.15, "°C")
    assert display_units("t", "difference")[2] == "K"
    assert display_units("z", "difference")[2] == "m"


def test_empty_field_is_a_clear_error() -> None:
    f = field(np.arange(10.0, -11.0, -5.0), np.arange(0.0, 30.0, 5.0)) * np.nan
    with pytest.raises(EnsmlError, match="no finite value"):
        draw_maps([[Panel(f, "nothing", "x", "1")]])
    with pytest.raises(EnsmlError, match="no panel"):
        draw_maps([[None]])
