"""The one map helper of ensml: every map goes through :func:`draw_maps`.

Maps of a regular latitude/longitude grid use cartopy's PlateCarree projection centred on the
region (so regions across 0° or the dateline are drawn in one piece). Maps of a projected grid
(2-D latitude/longitude, :mod:`ensml.data.grid`) are drawn in the data's own projection when a
CF ``grid_mapping`` and 1-D projection x/y coordinates give one (pyproj, then cartopy), cell
edges half-way between the x/y points; otherwise from the 2-D latitude/longitude, cell corners
estimated as for the area weights (:func:`ensml.data.weights.cell_corners`), in PlateCarree
centred on the grid, or a polar stereographic view when the grid encloses a pole (where
PlateCarree would tear the cells around it). All maps take coastlines from the Natural Earth
110m file shipped in ``ensml/verify/mapdata`` (public domain; see its README), and a colour bar
with units under each panel. Nothing here uses cartopy's own coastline or feature downloads,
or anything else that would download data: ensml draws offline. Figures are rendered with the
Agg canvas (no pyplot, no display) and returned as PNG bytes, which callers write atomically
with the rest of their outputs.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import pairwise

import numpy as np
import xarray as xr

from ensml.data.grid import grid_mapping, horizontal_dims, projection_coords, to_crs
from ensml.data.weights import cell_corners
from ensml.errors import EnsmlError
from ensml.names import LATITUDE, LONGITUDE

COASTLINE_FILE = "ne_110m_coastline.npz"
GRAVITY = 9.80665  # m s-2, to show geopotential as geopotential height


@dataclass
class Panel:
    """One map panel: a 2-D field and how to colour it.

    ``data`` is on a regular grid (latitude, longitude) or a projected one (e.g. (y, x) with 2-D
    latitude/longitude coordinates and, optionally, a CF grid mapping and x/y coordinates).

    ``contour`` (optional, same grid) is overlaid as labelled black lines, ``hatch`` (optional
    boolean field) as hatching, e.g. where the analysis exceeds the case threshold.
    """

    data: xr.DataArray
    title: str
    label: str
    units: str
    cmap: str = "viridis"
    vmin: float | None = None
    vmax: float | None = None
    contour: xr.DataArray | None = None
    hatch: xr.DataArray | None = None
    coastlines: bool = True  # False for a world without land (the physics testbed's aquaplanet)


@lru_cache(maxsize=1)
def coastlines():
    """The shipped Natural Earth 110m coastlines as a shapely ``MultiLineString`` (lon/lat)."""
    from shapely.geometry import MultiLineString

    with resources.files("ensml.verify").joinpath("mapdata", COASTLINE_FILE).open("rb") as f:
        data = np.load(f)
        lon, lat, off = data["lon"], data["lat"], data["offsets"]
    return MultiLineString([np.column_stack([lon[a:b], lat[a:b]]).astype(float) for a, b in pairwise(off)])


def display_units(var: str, kind: str) -> tuple[float, float, str, str]:
    """``(scale, offset, units, label)`` to show ``var`` as forecasters read it.

    ``kind="field"`` for full fields (geopotential as height in dam, temperature in °C);
    ``kind="difference"`` for spreads, errors and scores (height in m, temperature in K).
    """
    if var == "z":
        if kind == "field":
            return 1.0 / (10.0 * GRAVITY), 0.0, "dam", "geopotential height"
        return 1.0 / GRAVITY, 0.0, "m", "geopotential height"
    if var in ("t", "t2m"):
        return (1.0, -273.15, "°C", "temperature") if kind == "field" else (1.0, 0.0, "K", "temperature")
    from ensml.names import VARIABLE_ATTRS

    attrs = VARIABLE_ATTRS.get(var, {})
    return 1.0, 0.0, attrs.get("units", "1"), attrs.get("long_name", var)


def _edges(centres: np.ndarray, lo: float | None = None, hi: float | None = None) -> np.ndarray:
    c = np.asarray(centres, dtype=float)
    if c.size == 1:
        return np.array([c[0] - 0.5, c[0] + 0.5])
    mid = (c[1:] + c[:-1]) / 2
    e = np.concatenate([[c[0] - (mid[0] - c[0])], mid, [c[-1] + (c[-1] - mid[-1])]])
    return np.clip(e, lo, hi) if lo is not None else e


def unwrap_longitude(lon: np.ndarray) -> np.ndarray:
    """Longitudes made increasing across 0°/360° (e.g. 350, 355, 360, 365), for plotting."""
    lon = np.asarray(lon, dtype=float)
    return lon[0] + np.concatenate([[0.0], np.cumsum(np.diff(lon) % 360.0)])


def _gridlines(
    ax, crs, lon: tuple[float, float] | None = None, lat: tuple[float, float] | None = None
) -> None:
    """A labelled graticule: at round ticks over the ``lon`` and ``lat`` ranges (degrees), labelled
    below and on the left, where they are given; else where cartopy puts it."""
    style = {"crs": crs, "draw_labels": True, "linewidth": 0.3, "color": "0.5", "alpha": 0.6}
    if lon is None or lat is None:
        gl = ax.gridlines(**style)
    else:
        xs, ys = _ticks(*lon), _ticks(*lat)
        gl = ax.gridlines(**style, xlocs=(xs + 180.0) % 360.0 - 180.0, ylocs=ys)
        gl.top_labels = gl.right_labels = False
    gl.xlabel_style = gl.ylabel_style = {"size": 7}


def _ticks(lo: float, hi: float) -> np.ndarray:
    """Grid line positions every 5/10/20/30/60° (about 3-6 lines across the span)."""
    step = next((s for s in (5.0, 10.0, 20.0, 30.0, 60.0) if (hi - lo) / s <= 6), 90.0)
    return np.arange(np.ceil(lo / step) * step, hi + 1e-9, step)


def _setup_axes(fig, n_rows: int, n_cols: int, index: int, lon: np.ndarray, lat: np.ndarray):
    import cartopy.crs as ccrs

    centre = float((lon[0] + lon[-1]) / 2)
    proj = ccrs.PlateCarree(central_longitude=centre)
    ax = fig.add_subplot(n_rows, n_cols, index, projection=proj)
    half = min(180.0, (lon[-1] - lon[0]) / 2 + 0.5 * abs(lon[1] - lon[0]) if lon.size > 1 else 1.0)
    lat_e = _edges(lat, -90.0, 90.0)
    ax.set_extent([-half, half, float(lat_e.min()), float(lat_e.max())], crs=proj)
    return ax, ccrs.PlateCarree()


def _draw(fig, ax, data_crs, panel: Panel, lon: np.ndarray, lat: np.ndarray) -> None:
    values = np.asarray(panel.data.transpose(LATITUDE, LONGITUDE).values, dtype=float)
    if not np.isfinite(values).any():
        raise EnsmlError(f"map {panel.title!r}: the field has no finite value")
    mesh = ax.pcolormesh(
        _edges(lon),
        _edges(lat, -90.0, 90.0),
        values,
        cmap=panel.cmap,
        vmin=panel.vmin,
        vmax=panel.vmax,
        transform=data_crs,
        shading="flat",
        rasterized=True,
    )
    if panel.contour is not None:
        c = np.asarray(panel.contour.transpose(LATITUDE, LONGITUDE).values, dtype=float)
        cs = ax.contour(lon, lat, c, levels=8, colors="k", linewidths=0.7, transform=data_crs)
        ax.clabel(cs, fontsize=6, fmt="%.0f", inline=True)
    if panel.hatch is not None and bool(panel.hatch.any()):
        h = np.asarray(panel.hatch.transpose(LATITUDE, LONGITUDE).values, dtype=float)
        ax.contourf(lon, lat, h, levels=[0.5, 1.5], colors="none", hatches=["////"], transform=data_crs)
        ax.contour(lon, lat, h, levels=[0.5], colors="m", linewidths=1.0, transform=data_crs)
    if panel.coastlines:
        ax.add_geometries(
            [coastlines()], crs=data_crs, facecolor="none", edgecolor="0.15", linewidth=0.8, zorder=3
        )
    lon_e, lat_e = _edges(lon), _edges(lat, -90.0, 90.0)
    _gridlines(
        ax, data_crs, (float(lon_e.min()), float(lon_e.max())), (float(lat_e.min()), float(lat_e.max()))
    )
    ax.set_title(panel.title, fontsize=9)
    cb = fig.colorbar(mesh, ax=ax, orientation="horizontal", pad=0.02, shrink=0.9, aspect=30)
    cb.set_label(f"{panel.label} ({panel.units})", fontsize=8)
    cb.ax.tick_params(labelsize=7)


@dataclass
class _Geometry:
    """Where the cells of a projected grid lie on the map: corners and centres in ``crs``."""

    dims: tuple[str, str]
    crs: object  # cartopy CRS of the axes (and of the coordinates below)
    x_corner: np.ndarray  # (ny + 1, nx + 1)
    y_corner: np.ndarray
    x_centre: np.ndarray  # (ny, nx)
    y_centre: np.ndarray
    plate_carree: bool  # PlateCarree axes: grid lines at _ticks, labelled on two sides

    @property
    def extent(self) -> list[float]:
        x, y = self.x_corner[np.isfinite(self.x_corner)], self.y_corner[np.isfinite(self.y_corner)]
        return [float(x.min()), float(x.max()), float(y.min()), float(y.max())]


def _cartopy_crs(gm: xr.DataArray, x_edges: np.ndarray, y_edges: np.ndarray):
    """The cartopy CRS of a CF grid mapping, or ``None`` when cartopy cannot draw in it."""
    import cartopy.crs as ccrs

    attrs = gm.attrs
    try:
        if attrs.get("grid_mapping_name") == "rotated_latitude_longitude":
            return ccrs.RotatedPole(
                pole_longitude=float(attrs["grid_north_pole_longitude"]),
                pole_latitude=float(attrs["grid_north_pole_latitude"]),
                central_rotated_longitude=float(attrs.get("north_pole_grid_longitude", 0.0)),
            )
        crs = to_crs(gm)
        if not crs.is_projected:
            return None
        proj = ccrs.Projection(crs)
    except (RuntimeError, ValueError, TypeError, KeyError):  # pyproj's ProjError is a RuntimeError
        # a mapping pyproj or cartopy does not know: the map is drawn from latitude/longitude
        return None
    if proj.bounds is None:  # no area of use (a CRS from CF): the data's extent, with a margin
        width, height = np.ptp(x_edges), np.ptp(y_edges)
        pad = 0.5 * max(width, height)
        proj.bounds = (x_edges.min() - pad, x_edges.max() + pad, y_edges.min() - pad, y_edges.max() + pad)
        proj.threshold = min(width, height) / 100.0
    return proj


def _encloses_pole(lat_c: np.ndarray, lon_c: np.ndarray) -> int:
    """+1 / -1 when the outer ring of corners winds once around the north / south pole, else 0."""
    ring = np.concatenate([lon_c[0, :], lon_c[1:, -1], lon_c[-1, -2::-1], lon_c[-2:0:-1, 0], lon_c[:1, 0]])
    turn = np.sum((np.diff(ring) + 180.0) % 360.0 - 180.0)
    return 0 if abs(turn) < 180.0 else (1 if lat_c.mean() > 0 else -1)


def _geometry(data: xr.DataArray) -> _Geometry:
    """The map geometry of a field on a projected grid (see the module docstring)."""
    import cartopy.crs as ccrs

    dims = horizontal_dims(data)
    assert dims is not None
    gm, coords = grid_mapping(data), projection_coords(data)
    if gm is not None and coords is not None and all(np.all(np.isfinite(c)) for c in coords):
        y, x = coords
        ye, xe = _edges(y), _edges(x)
        crs = _cartopy_crs(gm, xe, ye)
        if crs is not None:
            xc, yc = np.meshgrid(xe, ye)
            xm, ym = np.meshgrid(x, y)
            return _Geometry(dims, crs, xc, yc, xm, ym, plate_carree=False)
    if LATITUDE not in data.coords or LONGITUDE not in data.coords:
        raise EnsmlError(f"draw_maps: {unmappable(data)}")
    lat = np.asarray(data[LATITUDE].transpose(*dims).values, dtype=float)
    lon = np.asarray(data[LONGITUDE].transpose(*dims).values, dtype=float)
    lat_c, lon_c = cell_corners(lat, lon)
    pole = _encloses_pole(lat_c, lon_c)
    rad = np.deg2rad(lon)
    centre = float(np.rad2deg(np.arctan2(np.sin(rad).mean(), np.cos(rad).mean())))
    if pole:
        crs = (ccrs.NorthPolarStereo if pole > 0 else ccrs.SouthPolarStereo)(central_longitude=centre)
    else:
        crs = ccrs.PlateCarree(central_longitude=centre)
    geo = ccrs.PlateCarree()
    corners = crs.transform_points(geo, lon_c, lat_c)
    centres = crs.transform_points(geo, lon, lat)
    return _Geometry(
        dims, crs, corners[..., 0], corners[..., 1], centres[..., 0], centres[..., 1], plate_carree=not pole
    )


def unmappable(data: xr.DataArray) -> str | None:
    """Why :func:`draw_maps` cannot place ``data`` on a map, or ``None`` when it can."""
    dims = horizontal_dims(data)
    if dims is None:
        return f"the field has no horizontal grid (dims {', '.join(map(str, data.dims))})"
    if dims == (LATITUDE, LONGITUDE) or (LATITUDE in data.coords and LONGITUDE in data.coords):
        return None
    gm, coords = grid_mapping(data), projection_coords(data)
    if gm is not None and coords is not None and all(np.all(np.isfinite(c)) for c in coords):
        y, x = coords
        if _cartopy_crs(gm, _edges(x), _edges(y)) is not None:
            return None
    return (
        f"the field on ({', '.join(dims)}) has neither latitude/longitude nor a CF grid mapping "
        "with x/y coordinates that cartopy can draw"
    )


def _values(da: xr.DataArray, dims: tuple[str, str]) -> np.ndarray:
    return np.asarray(da.transpose(*dims).values, dtype=float)


def _draw_projected(fig, ax, geo: _Geometry, panel: Panel) -> None:
    import cartopy.crs as ccrs

    values = _values(panel.data, geo.dims)
    if not np.isfinite(values).any():
        raise EnsmlError(f"map {panel.title!r}: the field has no finite value")
    if geo.plate_carree:  # a cell across the map's seam (180° from its centre) would span the map
        span = np.ptp(
            np.stack(
                [geo.x_corner[:-1, :-1], geo.x_corner[1:, :-1], geo.x_corner[:-1, 1:], geo.x_corner[1:, 1:]]
            ),
            axis=0,
        )
        values = np.where(span > 180.0, np.nan, values)
    mesh = ax.pcolormesh(
        geo.x_corner,
        geo.y_corner,
        np.ma.masked_invalid(values),
        cmap=panel.cmap,
        vmin=panel.vmin,
        vmax=panel.vmax,
        transform=geo.crs,
        shading="flat",
        rasterized=True,
    )
    if panel.contour is not None:
        c = _values(panel.contour, geo.dims)
        cs = ax.contour(
            geo.x_centre, geo.y_centre, c, levels=8, colors="k", linewidths=0.7, transform=geo.crs
        )
        ax.clabel(cs, fontsize=6, fmt="%.0f", inline=True)
    if panel.hatch is not None and bool(panel.hatch.any()):
        h = _values(panel.hatch, geo.dims)
        ax.contourf(
            geo.x_centre,
            geo.y_centre,
            h,
            levels=[0.5, 1.5],
            colors="none",
            hatches=["////"],
            transform=geo.crs,
        )
        ax.contour(geo.x_centre, geo.y_centre, h, levels=[0.5], colors="m", linewidths=1.0, transform=geo.crs)
    data_crs = ccrs.PlateCarree()
    if panel.coastlines:
        ax.add_geometries(
            [coastlines()], crs=data_crs, facecolor="none", edgecolor="0.15", linewidth=0.8, zorder=3
        )
    if geo.plate_carree:
        lon_e = geo.x_corner + float(geo.crs.proj4_params.get("lon_0", 0.0))
        lon_range = (float(np.nanmin(lon_e)), float(np.nanmax(lon_e)))
        _gridlines(ax, data_crs, lon_range, (float(np.nanmin(geo.y_corner)), float(np.nanmax(geo.y_corner))))
    else:
        _gridlines(ax, data_crs)
    ax.set_title(panel.title, fontsize=9)
    cb = fig.colorbar(mesh, ax=ax, orientation="horizontal", pad=0.02, shrink=0.9, aspect=30)
    cb.set_label(f"{panel.label} ({panel.units})", fontsize=8)
    cb.ax.tick_params(labelsize=7)


def draw_maps(panels: list[list[Panel | None]], title: str = "", *, dpi: int = 110) -> bytes:
    """Draw a grid of map panels (rows × columns, ``None`` leaves a cell empty) as PNG bytes.

    All panels of one figure share the grid of the first panel's ``data``. On a regular grid:
    latitude north → south or south → north, longitude increasing (unwrapped across 0°/360°
    where the region crosses it, see :func:`unwrap_longitude`). On a projected grid: its two
    horizontal dims, drawn in its CF grid mapping or from its 2-D latitude/longitude (see the
    module docstring).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cells = [p for row in panels for p in row if p is not None]
    if not cells:
        raise EnsmlError("draw_maps: no panel to draw")
    first = cells[0].data
    dims = horizontal_dims(first)
    if dims is None:
        raise EnsmlError(f"draw_maps: {unmappable(first)}")
    geo = None if dims == (LATITUDE, LONGITUDE) else _geometry(first)
    if geo is None:
        lon = unwrap_longitude(first[LONGITUDE].values)
        lat = np.asarray(first[LATITUDE].values, dtype=float)
        aspect = max(0.2, min(1.5, np.ptp(_edges(lat, -90.0, 90.0)) / max(np.ptp(_edges(lon)), 1.0)))
    else:
        x0, x1, y0, y1 = geo.extent
        aspect = max(0.2, min(1.5, (y1 - y0) / (x1 - x0)))
    n_rows, n_cols = len(panels), max(len(r) for r in panels)
    panel_w = 3.8 if n_cols > 1 else 6.0
    height = n_rows * (panel_w * aspect + 1.0) + (0.4 if title else 0.0)
    fig = Figure(figsize=(panel_w * n_cols, height), layout="constrained")
    FigureCanvasAgg(fig)
    for r, row in enumerate(panels):
        for c, panel in enumerate(row):
            if panel is None:
                continue
            index = r * n_cols + c + 1
            if geo is None:
                ax, data_crs = _setup_axes(fig, n_rows, n_cols, index, lon, lat)
                _draw(fig, ax, data_crs, panel, lon, lat)
            else:
                ax = fig.add_subplot(n_rows, n_cols, index, projection=geo.crs)
                ax.set_extent(geo.extent, crs=geo.crs)
                _draw_projected(fig, ax, geo, panel)
    if title:
        fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


__all__ = ["Panel", "coastlines", "display_units", "draw_maps", "unmappable", "unwrap_longitude"]
