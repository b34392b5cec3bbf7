"""The one map helper of ensml: every map goes through :func:`draw_maps`.

Maps use cartopy's PlateCarree projection centred on the region (so regions across 0° or the
dateline are drawn in one piece), coastlines from the Natural Earth 110m file shipped in
``ensml/eval/mapdata`` (public domain; see its README), and a colour bar with units under each
panel. Nothing here uses cartopy's own coastline or feature downloads, or anything else that would download
data: ensml draws offline. Figures are rendered with the Agg canvas (no pyplot, no display) and
returned as PNG bytes, which callers write atomically with the rest of their outputs.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import lru_cache
from importlib import resources
from itertools import pairwise

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import LATITUDE, LONGITUDE

COASTLINE_FILE = "ne_110m_coastline.npz"
GRAVITY = 9.80665  # m s-2, to show geopotential as geopotential height


@dataclass
class Panel:
    """One map panel: a 2-D (latitude, longitude) field and how to colour it.

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


@lru_cache(maxsize=1)
def coastlines():
    """The shipped Natural Earth 110m coastlines as a shapely ``MultiLineString`` (lon/lat)."""
    from shapely.geometry import MultiLineString

    with resources.files("ensml.eval").joinpath("mapdata", COASTLINE_FILE).open("rb") as f:
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
        _edges(lon), _edges(lat, -90.0, 90.0), values, cmap=panel.cmap, vmin=panel.vmin,
        vmax=panel.vmax, transform=data_crs, shading="flat", rasterized=True,
    )  # fmt: skip
    if panel.contour is not None:
        c = np.asarray(panel.contour.transpose(LATITUDE, LONGITUDE).values, dtype=float)
        cs = ax.contour(lon, lat, c, levels=8, colors="k", linewidths=0.7, transform=data_crs)
        ax.clabel(cs, fontsize=6, fmt="%.0f", inline=True)
    if panel.hatch is not None and bool(panel.hatch.any()):
        h = np.asarray(panel.hatch.transpose(LATITUDE, LONGITUDE).values, dtype=float)
        ax.contourf(lon, lat, h, levels=[0.5, 1.5], colors="none", hatches=["////"], transform=data_crs)
        ax.contour(lon, lat, h, levels=[0.5], colors="m", linewidths=1.0, transform=data_crs)
    ax.add_geometries(
        [coastlines()], crs=data_crs, facecolor="none", edgecolor="0.15", linewidth=0.8, zorder=3
    )
    lon_e, lat_e = _edges(lon), _edges(lat, -90.0, 90.0)
    xs = _ticks(float(lon_e.min()), float(lon_e.max()))
    ys = _ticks(float(lat_e.min()), float(lat_e.max()))
    gl = ax.gridlines(
        crs=data_crs, draw_labels=True, linewidth=0.3, color="0.5", alpha=0.6,
        xlocs=(xs + 180.0) % 360.0 - 180.0, ylocs=ys,
    )  # fmt: skip
    gl.top_labels = gl.right_labels = False
    gl.xlabel_style = gl.ylabel_style = {"size": 7}
    ax.set_title(panel.title, fontsize=9)
    cb = fig.colorbar(mesh, ax=ax, orientation="horizontal", pad=0.02, shrink=0.9, aspect=30)
    cb.set_label(f"{panel.label} ({panel.units})", fontsize=8)
    cb.ax.tick_params(labelsize=7)


def draw_maps(panels: list[list[Panel | None]], title: str = "", *, dpi: int = 110) -> bytes:
    """Draw a grid of map panels (rows × columns, ``None`` leaves a cell empty) as PNG bytes.

    All panels of one figure share the grid of the first panel's ``data``: latitude north →
    south or south → north, longitude increasing (unwrapped across 0°/360° where the region
    crosses it, see :func:`unwrap_longitude`).
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    cells = [p for row in panels for p in row if p is not None]
    if not cells:
        raise EnsmlError("draw_maps: no panel to draw")
    first = cells[0].data
    lon = unwrap_longitude(first[LONGITUDE].values)
    lat = np.asarray(first[LATITUDE].values, dtype=float)
    n_rows, n_cols = len(panels), max(len(r) for r in panels)
    aspect = max(0.2, min(1.5, np.ptp(_edges(lat, -90.0, 90.0)) / max(np.ptp(_edges(lon)), 1.0)))
    panel_w = 3.8 if n_cols > 1 else 6.0
    height = n_rows * (panel_w * aspect + 1.0) + (0.4 if title else 0.0)
    fig = Figure(figsize=(panel_w * n_cols, height), layout="constrained")
    FigureCanvasAgg(fig)
    for r, row in enumerate(panels):
        for c, panel in enumerate(row):
            if panel is None:
                continue
            ax, data_crs = _setup_axes(fig, n_rows, n_cols, r * n_cols + c + 1, lon, lat)
            _draw(fig, ax, data_crs, panel, lon, lat)
    if title:
        fig.suptitle(title, fontsize=11)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight")
    return buf.getvalue()


__all__ = ["Panel", "coastlines", "display_units", "draw_maps", "unwrap_longitude"]
