"""Forecast values at points (stations): where each point falls on a grid, and the values there.

:func:`locate` finds, for each point (latitude, longitude in degrees), the grid points whose
weighted sum is its value, and whether the point lies inside the grid's domain;
:meth:`Points.extract` then selects those grid points from any field on that grid, lazily (a
dask-backed field stays lazy: only the chunks holding the points are read when computed).

Methods:

* ``nearest``: the grid point at the smallest great-circle distance. On a regular grid it lies
  in the column of the nearest longitude (for any row, a smaller longitude difference is
  closer), so each point's distances to that column's (two columns' at a tie) rows decide it;
  on a projected grid a k-d tree of the points' 3-D unit vectors (chord distance orders as the
  great-circle distance) finds it.
* ``bilinear``: linear in each horizontal coordinate between the four surrounding grid points:
  latitude and longitude on a regular grid (either latitude order, longitudes 0..360 or
  -180..180 or crossing the date line, wrapping around a global grid), projection ``x``/``y``
  on a projected grid with a CF grid mapping (the point's longitude/latitude transformed by
  pyproj; ``x``/``y`` from the file's 1-D projection coordinates, else from its 2-D
  latitude/longitude).

The domain: the grid's cells, half a spacing beyond the outermost points on each side (to the
pole at most); a global grid has no longitude edge. Between the outermost points and the
domain's edge, ``bilinear`` takes the edge row or column's values (constant across it). On a
projected grid without a grid mapping only ``nearest`` works, and a point is inside when its
nearest grid point is at most 0.75 local grid spacings away (the spacing: the largest distance
from that grid point to its neighbours), an approximation of the cells' outline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
import xarray as xr

from ensml.data.grid import (
    describe,
    geographic_crs,
    grid_mapping,
    horizontal_dims,
    is_projected,
    projection_coords,
    to_crs,
)
from ensml.errors import EnsmlError, exception_reason
from ensml.names import LATITUDE, LONGITUDE, STATION

#: How values at points are taken from a grid.
Method = Literal["nearest", "bilinear"]
METHODS = ("nearest", "bilinear")
#: Mean Earth radius (m), for distances in messages and the nearest-point search.
EARTH_RADIUS_M = 6_371_000.0
Obj = xr.Dataset | xr.DataArray


@dataclass(frozen=True)
class Points:
    """The grid points that make each point's value: ``value = sum_k weights[:, k] * field[index[:, k]]``.

    ``dims`` are the grid's horizontal dims; ``index`` the integer positions along each of them,
    and ``weights`` (rows sum to 1), both of shape (points, K): K = 1 for ``nearest``, 4 for
    ``bilinear``; ``inside`` (points,) whether each point lies in the grid's domain (the others
    have index 0 and weight NaN).
    """

    method: str
    dims: tuple[str, str]
    index: tuple[np.ndarray, np.ndarray]
    weights: np.ndarray
    inside: np.ndarray

    def subset(self, keep: np.ndarray) -> Points:
        """The points where ``keep`` (boolean, or positions) is true, in order."""
        idx = (self.index[0][keep], self.index[1][keep])
        return Points(self.method, self.dims, idx, self.weights[keep], self.inside[keep])

    def extract(self, obj: Obj, dim: str = STATION) -> Obj:
        """``obj``'s values at the points, the horizontal dims replaced by ``dim`` (last).

        Lazy inputs stay lazy (vectorised indexing; dask reads only the chunks with points).
        The grid's horizontal coordinates and grid mapping are dropped (the points carry their
        own positions); NaN weights (points outside) give NaN.
        """
        if not self.inside.all():
            raise EnsmlError(f"{(~self.inside).sum()} point(s) lie outside the grid: keep the inside ones")
        drop = [n for n, c in obj.coords.items() if set(c.dims) & set(self.dims)]
        gm = grid_mapping(obj)
        drop += [gm.name] if gm is not None and gm.name in obj.coords else []
        base = obj.drop_vars(drop)
        out = None
        for k in range(self.weights.shape[1]):
            at = {d: xr.DataArray(i[:, k], dims=dim) for d, i in zip(self.dims, self.index)}
            term = base.isel(at) * xr.DataArray(self.weights[:, k], dims=dim)
            out = term if out is None else out + term
        if isinstance(out, xr.Dataset):  # arithmetic keeps the values' attrs only with keep_attrs
            for name in out.data_vars:
                out[name].attrs = dict(obj[name].attrs)
        else:
            out.attrs = dict(obj.attrs)
        return out


def great_circle_m(lat1, lon1, lat2, lon2) -> np.ndarray:
    """Great-circle distance (m) between points in degrees (haversine; broadcasts)."""
    p1, p2 = np.deg2rad(lat1), np.deg2rad(lat2)
    dl = np.deg2rad(np.asarray(lon2) - np.asarray(lon1))
    h = np.sin((p2 - p1) / 2) ** 2 + np.cos(p1) * np.cos(p2) * np.sin(dl / 2) ** 2
    return 2 * EARTH_RADIUS_M * np.arcsin(np.sqrt(np.clip(h, 0.0, 1.0)))


def locate(grid: Obj, lat: np.ndarray, lon: np.ndarray, method: str, name: str = "forecast") -> Points:
    """Where the points (``lat``, ``lon``: degrees, 1-D) fall on ``grid`` (regular or projected).

    Raises
    ------
    EnsmlError
        An unknown method; a grid without latitude/longitude, with fewer than 2 points along a
        horizontal dim, or non-monotonic coordinates; ``bilinear`` on a projected grid without
        a grid mapping pyproj understands. ``name`` names the grid in messages.
    """
    if method not in METHODS:
        raise EnsmlError(f"extraction {method!r} is not one of {', '.join(METHODS)}")
    lat, lon = np.asarray(lat, dtype=np.float64), np.asarray(lon, dtype=np.float64) % 360.0
    dims = horizontal_dims(grid)
    if dims is None or LATITUDE not in grid.coords or LONGITUDE not in grid.coords:
        raise EnsmlError(f"{name} has no latitude/longitude grid to take values at stations from")
    for d in dims:
        if grid.sizes[d] < 2:
            raise EnsmlError(f"{name}: {describe(grid)}; values at stations need 2 or more points along {d}")
    if not is_projected(grid):
        return _regular(grid, lat, lon, method, name)
    return _projected(grid, dims, lat, lon, method, name)


# -- regular latitude/longitude grids -------------------------------------------------------------
def _bracket(coord: np.ndarray, x: np.ndarray, name: str, what: str):
    """(i0, i1, w1, inside): the points of the monotonic ``coord`` around each ``x``, the weight of
    i1, and whether ``x`` lies within half a spacing of the outermost points; clamped outside."""
    c = np.asarray(coord, dtype=np.float64)
    step = np.diff(c)
    if not (np.all(step > 0) or np.all(step < 0)):
        raise EnsmlError(f"{name}: {what} is not strictly monotonic; cannot place stations on the grid")
    order = np.argsort(c)
    s = c[order]
    h0, h1 = (s[1] - s[0]) / 2, (s[-1] - s[-2]) / 2
    inside = (x >= s[0] - h0) & (x <= s[-1] + h1)
    i = np.clip(np.searchsorted(s, x, side="right") - 1, 0, s.size - 2)
    w = np.clip((x - s[i]) / (s[i + 1] - s[i]), 0.0, 1.0)
    return order[i], order[i + 1], w, inside


def _longitudes(lon_grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, bool]:
    """The grid's longitudes unwrapped to increase from the start of its domain (after the
    largest gap around the circle), their positions in the grid, and whether it is global."""
    lg = np.asarray(lon_grid, dtype=np.float64) % 360.0
    order = np.argsort(lg, kind="stable")
    s = lg[order]
    gaps = np.diff(np.append(s, s[0] + 360.0))
    start = (int(np.argmax(gaps)) + 1) % s.size
    u, idx = np.roll(s, -start), np.roll(order, -start)
    u = u + 360.0 * (np.arange(u.size) >= u.size - start)  # those that came round the circle
    is_global = gaps.max() < 1.5 * np.median(gaps)
    return u, idx, bool(is_global)


def _lon_bracket(lon_grid: np.ndarray, x: np.ndarray, name: str):
    """(j0, j1, w1, inside) along longitude (degrees east), wrapping around a global grid."""
    u, idx, is_global = _longitudes(lon_grid)
    if is_global:
        ext, eidx = np.append(u, u[0] + 360.0), np.append(idx, idx[0])
        p = u[0] + (x - u[0]) % 360.0
        j = np.clip(np.searchsorted(ext, p, side="right") - 1, 0, ext.size - 2)
        w = (p - ext[j]) / (ext[j + 1] - ext[j])
        return eidx[j], eidx[j + 1], w, np.ones(x.shape, bool)
    h0 = (u[1] - u[0]) / 2
    p = (u[0] - h0) + (x - (u[0] - h0)) % 360.0
    j0, j1, w, inside = _bracket(u, p, name, "longitude")
    return idx[j0], idx[j1], w, inside


def _regular(grid: Obj, lat: np.ndarray, lon: np.ndarray, method: str, name: str) -> Points:
    glat = np.asarray(grid[LATITUDE].values, dtype=np.float64)
    glon = np.asarray(grid[LONGITUDE].values, dtype=np.float64)
    i0, i1, wi, in_lat = _bracket(glat, lat, name, "latitude")
    j0, j1, wj, in_lon = _lon_bracket(glon, lon, name)
    inside = in_lat & in_lon
    if method == "bilinear":
        index = (np.stack([i0, i0, i1, i1], 1), np.stack([j0, j1, j0, j1], 1))
        weights = np.stack([(1 - wi) * (1 - wj), (1 - wi) * wj, wi * (1 - wj), wi * wj], 1)
    else:  # the nearest column (two at a tie), then the nearest row in it by great circle
        dlon = np.abs((glon[None, :] - lon[:, None] + 180.0) % 360.0 - 180.0)
        cols = np.where(dlon <= dlon.min(1, keepdims=True) + 1e-12)
        best = np.full(lat.size, np.inf)
        row, col = np.zeros(lat.size, int), np.zeros(lat.size, int)
        for p, j in zip(*cols):
            dist = great_circle_m(lat[p], lon[p], glat, glon[j])
            i = int(np.argmin(dist))
            if dist[i] < best[p]:
                best[p], row[p], col[p] = dist[i], i, j
        index, weights = (row[:, None], col[:, None]), np.ones((lat.size, 1))
    return _finish(method, (LATITUDE, LONGITUDE), index, weights, inside)


def _finish(method: str, dims, index, weights, inside) -> Points:
    index = tuple(np.where(inside[:, None], i, 0).astype(np.int64) for i in index)
    weights = np.where(inside[:, None], weights, np.nan)
    return Points(method, (str(dims[0]), str(dims[1])), index, weights, inside)


# -- projected grids ---------------------------------------------------------------------------------
def _projected(grid: Obj, dims, lat: np.ndarray, lon: np.ndarray, method: str, name: str) -> Points:
    gm = grid_mapping(grid)
    glat = np.asarray(grid[LATITUDE].transpose(*dims).values, dtype=np.float64)
    glon = np.asarray(grid[LONGITUDE].transpose(*dims).values, dtype=np.float64)
    xy = _station_xy(grid, gm, dims, glat, glon, lat, lon, name) if gm is not None else None
    if method == "bilinear":
        if xy is None:
            raise EnsmlError(
                f"{name}: bilinear values at stations on a projected grid need its CF grid mapping "
                f"({describe(grid)}, no grid_mapping variable); use extraction nearest"
            )
        (gy, gx), (sy, sx) = xy
        i0, i1, wi, in_y = _bracket(gy, sy, name, f"projection {dims[0]}")
        j0, j1, wj, in_x = _bracket(gx, sx, name, f"projection {dims[1]}")
        index = (np.stack([i0, i0, i1, i1], 1), np.stack([j0, j1, j0, j1], 1))
        weights = np.stack([(1 - wi) * (1 - wj), (1 - wi) * wj, wi * (1 - wj), wi * wj], 1)
        return _finish(method, dims, index, weights, in_y & in_x)
    from scipy.spatial import cKDTree

    _, flat = cKDTree(_unit(glat.ravel(), glon.ravel())).query(_unit(lat, lon))
    row, col = np.unravel_index(flat, glat.shape)
    if xy is not None:
        (gy, gx), (sy, sx) = xy
        inside = _bracket(gy, sy, name, f"projection {dims[0]}")[3] & _bracket(gx, sx, name, dims[1])[3]
    else:
        dist = great_circle_m(lat, lon, glat[row, col], glon[row, col])
        inside = dist <= 0.75 * _local_spacing(glat, glon, row, col)
    return _finish(method, dims, (row[:, None], col[:, None]), np.ones((lat.size, 1)), inside)


def _unit(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    p, q = np.deg2rad(lat), np.deg2rad(lon)
    return np.stack([np.cos(p) * np.cos(q), np.cos(p) * np.sin(q), np.sin(p)], -1)


def _local_spacing(glat: np.ndarray, glon: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """The largest distance (m) from each grid point (row, col) to its 4 direct neighbours."""
    out = np.zeros(row.shape)
    for dr, dc in ((-1, 0), (1, 0), (0, -1), (0, 1)):
        r, c = np.clip(row + dr, 0, glat.shape[0] - 1), np.clip(col + dc, 0, glat.shape[1] - 1)
        out = np.maximum(out, great_circle_m(glat[row, col], glon[row, col], glat[r, c], glon[r, c]))
    return out


def _station_xy(grid: Obj, gm: xr.DataArray, dims, glat, glon, lat, lon, name: str):
    """((y, x) of the grid, (y, x) of the points) in the grid mapping's projection."""
    from pyproj import Transformer

    try:
        crs = to_crs(gm)
        tr = Transformer.from_crs(geographic_crs(crs), crs, always_xy=True)
        sx, sy = tr.transform(lon, lat)
    except (RuntimeError, ValueError, TypeError, KeyError) as exc:  # pyproj's ProjError is a RuntimeError
        reason = exception_reason(exc)
        raise EnsmlError(f"{name}: grid mapping {gm.name!r} is not one pyproj reads ({reason})") from None
    coords = projection_coords(grid)
    if coords is None or not all(np.all(np.isfinite(c)) for c in coords):
        gx2, gy2 = tr.transform(glon, glat)  # x/y of the 2-D latitude/longitude
        coords = (np.mean(gy2, axis=1), np.mean(gx2, axis=0))
        spread = max(np.ptp(gy2, axis=1).max(), np.ptp(gx2, axis=0).max())
        spacing = min(np.abs(np.diff(coords[0])).min(), np.abs(np.diff(coords[1])).min())
        if not spread <= 1e-3 * spacing:
            raise EnsmlError(
                f"{name}: its 2-D latitude/longitude do not form a regular x/y grid in grid mapping "
                f"{gm.name!r} (x or y varies by {spread:.3g} along a row or column); use extraction nearest"
            )
    return coords, (np.asarray(sy, dtype=np.float64), np.asarray(sx, dtype=np.float64))


__all__ = ["METHODS", "Method", "Points", "great_circle_m", "locate"]
