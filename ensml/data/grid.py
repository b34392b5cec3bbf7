"""Horizontal grids: regular latitude/longitude, or projected with 2-D latitude/longitude.

ensml reads three kinds of grid:

* **regular**: 1-D ``latitude`` and ``longitude`` dimension coordinates (the canonical
  ``(latitude, longitude)`` dims of :mod:`ensml.names`);
* **projected** (regional models such as WRF, rotated-pole or polar-stereographic grids): two
  other dims, e.g. ``(y, x)``, with 2-D ``latitude(y, x)`` and ``longitude(y, x)`` coordinates
  and, optionally, a CF ``grid_mapping`` variable and 1-D projection ``x``/``y`` coordinates.
  A file with ``x``/``y`` and a grid mapping pyproj understands but no latitude/longitude gets
  them computed on open (:func:`add_geographic`);
* **cells** (an unstructured grid: reduced Gaussian, HEALPix, a subset of cells, as anemoi
  datasets hold them): one ``cell`` dim with 1-D ``latitude(cell)`` and ``longitude(cell)``
  coordinates (:data:`ensml.names.CELL`).

:func:`horizontal_dims` says which dims are horizontal, so that scores reduce over them
whatever their names; :func:`check_grid` and :func:`check_same_grid_2d` turn malformed or
mismatched grids into one-line errors.
"""

from __future__ import annotations

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import CELL, LATITUDE, LONGITUDE, SPATIAL_DIMS

#: CF standard names of 1-D projection (or rotated-pole) coordinates, by axis.
PROJECTION_X = ("projection_x_coordinate", "grid_longitude")
PROJECTION_Y = ("projection_y_coordinate", "grid_latitude")
#: Metres per unit of projection coordinates (CF ``units``).
LENGTH_UNITS = {
    "m": 1.0,
    "metre": 1.0,
    "meter": 1.0,
    "metres": 1.0,
    "meters": 1.0,
    "km": 1000.0,
    "kilometre": 1000.0,
    "kilometer": 1000.0,
    "kilometres": 1000.0,
    "kilometers": 1000.0,
}
#: Tolerance (degrees) when comparing the 2-D coordinates of two files (float32 storage: ~1e-5°).
COORD_ATOL_DEG = 1e-4

Obj = xr.Dataset | xr.DataArray


def is_projected(obj: Obj) -> bool:
    """Whether ``obj`` is on a projected grid (two horizontal dims other than latitude/longitude)."""
    dims = horizontal_dims(obj)
    return dims is not None and len(dims) == 2 and dims != (LATITUDE, LONGITUDE)


def cell_dim(obj: Obj) -> str | None:
    """The dim of an unstructured grid (1-D latitude and longitude on the ``cell`` dim,
    :data:`ensml.names.CELL`), or None. Only that name: points on another dim with 1-D latitude
    and longitude, such as stations (``station``), are places, not a grid."""
    lat, lon = obj.coords.get(LATITUDE), obj.coords.get(LONGITUDE)
    if lat is None or lon is None or lat.ndim != 1 or lat.dims != lon.dims or lat.dims[0] != CELL:
        return None
    return CELL


def _projection_dim(obj: Obj, names: tuple[str, ...]) -> str | None:
    for name, c in obj.coords.items():
        if c.ndim == 1 and c.dims[0] == name and c.attrs.get("standard_name") in names:
            return str(name)
    return None


def projection_dims(obj: Obj) -> tuple[str, str] | None:
    """``(y, x)`` dims of 1-D projection coordinates (by CF standard name, else named y/x)."""
    y, x = _projection_dim(obj, PROJECTION_Y), _projection_dim(obj, PROJECTION_X)
    if y and x:
        return y, x
    if "y" in obj.dims and "x" in obj.dims:
        return "y", "x"
    return None


def horizontal_dims(obj: Obj) -> tuple[str, ...] | None:
    """The horizontal dims of ``obj``, or ``None`` when it has none.

    ``(latitude, longitude)`` on a regular grid; the dims of the 2-D latitude coordinate, in its
    order, on a projected grid; ``(cell,)`` on an unstructured grid (:func:`cell_dim`); else the
    ``(y, x)`` dims of 1-D projection coordinates (:func:`projection_dims`).
    """
    lat = obj.coords.get(LATITUDE)
    if lat is not None and lat.ndim == 2:
        return str(lat.dims[0]), str(lat.dims[1])
    if LATITUDE in obj.dims and LONGITUDE in obj.dims:
        return LATITUDE, LONGITUDE
    cells = cell_dim(obj)
    return (cells,) if cells is not None and cells in obj.dims else projection_dims(obj)


def grid_mapping(obj: Obj) -> xr.DataArray | None:
    """The CF grid-mapping variable of ``obj`` (the one with a ``grid_mapping_name``), if any."""
    names = list(obj.coords) + (list(obj.data_vars) if isinstance(obj, xr.Dataset) else [])
    for name in names:
        if "grid_mapping_name" in obj[name].attrs:
            return obj[name]
    return None


def grid_mapping_names(ds: xr.Dataset) -> list[str]:
    """Variables that data variables name in their CF ``grid_mapping`` attribute (``crs`` or ``crs: x y``)."""
    found: list[str] = []
    for var in ds.data_vars.values():
        text = str(var.attrs.get("grid_mapping", var.encoding.get("grid_mapping", ""))).strip()
        names = [t[:-1] for t in text.split() if t.endswith(":")] if ":" in text else [text]
        found += [n for n in names if n in ds.variables and n not in found]
    return found


def to_crs(gm: xr.DataArray):
    """The pyproj CRS of a CF grid-mapping variable (raises what pyproj raises)."""
    from pyproj import CRS

    return CRS.from_cf({k: (v.item() if hasattr(v, "item") else v) for k, v in gm.attrs.items()})


def geographic_crs(crs):
    """The latitude/longitude CRS that ``crs`` is derived from (for a rotated pole: the unrotated one)."""
    return crs.source_crs if crs.source_crs is not None else crs.geodetic_crs


def projection_coords(obj: Obj) -> tuple[np.ndarray, np.ndarray] | None:
    """1-D projection ``(y, x)`` in the grid mapping's units (metres, or degrees when rotated)."""
    dims = projection_dims(obj)
    if dims is None or any(d not in obj.coords for d in dims):
        return None
    out = []
    for d in dims:
        c = obj[d]
        scale = 1.0  # grid_latitude/grid_longitude (rotated pole): degrees
        if str(c.attrs.get("standard_name", "")).startswith("projection_"):
            scale = LENGTH_UNITS.get(str(c.attrs.get("units", "m")).strip(), np.nan)
        out.append(np.asarray(c.values, dtype=np.float64) * scale)
    return out[0], out[1]


def add_geographic(ds: xr.Dataset) -> xr.Dataset:
    """Add 2-D latitude/longitude computed from projection x/y and a CF grid mapping, if absent.

    Nothing is added (and nothing raises) when the file has latitude, no grid mapping, no
    projection coordinates, units other than metres/kilometres, or a mapping pyproj cannot read.
    """
    gm = grid_mapping(ds)
    dims = projection_dims(ds)
    if LATITUDE in ds.coords or gm is None or dims is None:
        return ds
    coords = projection_coords(ds)
    if coords is None or not all(np.all(np.isfinite(c)) for c in coords):
        return ds
    try:
        from pyproj import Transformer

        crs = to_crs(gm)
        tr = Transformer.from_crs(crs, geographic_crs(crs), always_xy=True)
        xx, yy = np.meshgrid(coords[1], coords[0])
        lon, lat = tr.transform(xx, yy)
    except (RuntimeError, ValueError, TypeError, KeyError):  # pyproj's ProjError is a RuntimeError
        # a mapping pyproj does not know: the grid stays without coordinates (as documented)
        return ds
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))):
        return ds
    note = f"computed by ensml from {dims[1]}/{dims[0]} and grid mapping {gm.name!r}"
    return ds.assign_coords(
        {LATITUDE: (dims, lat, {"comment": note}), LONGITUDE: (dims, lon % 360.0, {"comment": note})}
    )


def _where(a: xr.DataArray, bad: np.ndarray) -> str:
    idx = np.unravel_index(int(np.argmax(bad.ravel())), bad.shape)
    return ", ".join(f"{d}={i}" for d, i in zip(a.dims, idx))


def check_grid(ds: xr.Dataset, variables, path: str, what: str) -> None:
    """Raise one line naming the file if its latitude/longitude grid is malformed.

    Checked: every 1-D latitude and longitude value finite (a NaN one would otherwise surface as
    "different grids" with ranges that look the same); for a 2-D grid, latitude and longitude
    on the same dims, those dims the horizontal dims of every variable in ``variables``, every
    value finite, latitudes within ±90°.
    """
    lat, lon = ds.coords.get(LATITUDE), ds.coords.get(LONGITUDE)
    for name, c in ((LATITUDE, lat), (LONGITUDE, lon)):
        if c is not None and c.ndim == 1:
            bad = ~np.isfinite(np.asarray(c.values, dtype=np.float64))
            if bad.any():
                raise EnsmlError(
                    f"{what} file {path}: {name} has {int(bad.sum())} NaN or infinite value(s) of "
                    f"{bad.size}; every grid point needs a position (NaN coordinates)"
                )
    if lat is None or lon is None or (lat.ndim != 2 and lon.ndim != 2):
        return
    if lat.ndim != 2 or lon.ndim != 2 or set(lat.dims) != set(lon.dims):
        raise EnsmlError(
            f"{what} file {path}: latitude is on ({', '.join(map(str, lat.dims))}) and longitude on "
            f"({', '.join(map(str, lon.dims))}); a projected grid needs both 2-D on the same two dims"
        )
    for var in variables or []:
        if var in ds.data_vars and not set(lat.dims) <= set(ds[var].dims):
            shape = tuple(lat.shape)
            raise EnsmlError(
                f"{what} file {path}: 2-D latitude/longitude are on ({', '.join(map(str, lat.dims))}) "
                f"of shape {shape}, which are not horizontal dims of variable {var!r} "
                f"(dims {', '.join(map(str, ds[var].dims))}, shape {tuple(ds[var].shape)})"
            )
    for name, c in ((LATITUDE, lat), (LONGITUDE, lon)):
        values = np.asarray(c.values, dtype=np.float64)
        bad = ~np.isfinite(values)
        if bad.any():
            raise EnsmlError(
                f"{what} file {path}: 2-D {name} has {int(bad.sum())} missing (NaN) value(s), first at "
                f"{_where(c, bad)}; every grid point needs a position"
            )
    values = np.asarray(lat.values, dtype=np.float64)
    beyond = np.abs(values) > 90
    if beyond.any():
        worst = values.ravel()[np.argmax(np.abs(values))]
        raise EnsmlError(
            f"{what} file {path}: 2-D latitude has {int(beyond.sum())} value(s) beyond ±90° (e.g. "
            f"{worst:g}, first at {_where(lat, beyond)}); latitude must be in degrees north"
        )


def describe(obj: Obj) -> str:
    """A short description of a grid for error messages: ``projected grid (y, x) of 6 × 7 points``."""
    dims = horizontal_dims(obj)
    if dims is None:
        return "no latitude/longitude grid"
    shape = " × ".join(str(obj.sizes[d]) for d in dims)
    if len(dims) == 1:
        return f"unstructured grid of {shape} cells ({dims[0]})"
    if dims == (LATITUDE, LONGITUDE):
        return f"latitude/longitude grid of {shape} points"
    geo = "2-D latitude/longitude" if LATITUDE in obj.coords else "no latitude/longitude"
    return f"projected grid ({', '.join(dims)}) of {shape} points with {geo}"


def check_same_grid_2d(a: Obj, b: Obj, name_a: str, name_b: str) -> None:
    """Raise unless ``a`` and ``b`` are on the same horizontal grid (one of them projected)."""
    da, db = horizontal_dims(a), horizontal_dims(b)
    if da != db or any(a.sizes[d] != b.sizes[d] for d in da or ()):
        raise EnsmlError(f"{name_a} and {name_b} are on different grids: {describe(a)} vs {describe(b)}")
    has = [LATITUDE in x.coords and LONGITUDE in x.coords for x in (a, b)]
    if has[0] != has[1]:
        raise EnsmlError(
            f"{name_a} and {name_b} are on different grids: only "
            f"{name_a if has[0] else name_b} has 2-D latitude/longitude"
        )
    pairs = [(LATITUDE, LONGITUDE)] if has[0] else []
    for lat_name, lon_name in pairs:
        la = np.asarray(a[lat_name].transpose(*da).values, dtype=np.float64)
        lb = np.asarray(b[lat_name].transpose(*da).values, dtype=np.float64)
        oa = np.asarray(a[lon_name].transpose(*da).values, dtype=np.float64)
        ob = np.asarray(b[lon_name].transpose(*da).values, dtype=np.float64)
        with np.errstate(invalid="ignore"):
            diff = np.maximum(np.abs(la - lb), np.abs((oa - ob + 180.0) % 360.0 - 180.0))
        bad = ~(diff <= COORD_ATOL_DEG)  # NaN counts as different
        if bad.any():
            i = np.unravel_index(
                int(np.argmax(np.where(bad, np.nan_to_num(diff, nan=np.inf), -1))), bad.shape
            )
            at = ", ".join(f"{d}={k}" for d, k in zip(da, i))
            raise EnsmlError(
                f"{name_a} and {name_b} are on different grids: their 2-D latitude/longitude differ at "
                f"{int(bad.sum())} of {bad.size} points (first at {at}: {la[i]:.4f}°N {oa[i]:.4f}°E vs "
                f"{lb[i]:.4f}°N {ob[i]:.4f}°E)"
            )
    if not has[0]:  # projection coordinates only: compare them
        ca, cb = projection_coords(a), projection_coords(b)
        if (ca is None) != (cb is None) or (
            ca is not None and not all(np.allclose(x, y, rtol=1e-9, atol=1e-6) for x, y in zip(ca, cb))
        ):
            raise EnsmlError(
                f"{name_a} and {name_b} are on different grids: their projection coordinates "
                f"({', '.join(da or ())}) differ"
            )


__all__ = [
    "add_geographic",
    "cell_dim",
    "check_grid",
    "check_same_grid_2d",
    "describe",
    "geographic_crs",
    "grid_mapping",
    "grid_mapping_names",
    "horizontal_dims",
    "is_projected",
    "projection_coords",
    "projection_dims",
    "single_field",
    "to_crs",
]


def check_same_grid(a: xr.Dataset, b: xr.Dataset, name_a: str, name_b: str) -> None:
    """Raise if ``a`` and ``b`` are not on the same grid (regular, or projected: :mod:`ensml.data.grid`)."""
    if horizontal_dims(a) != SPATIAL_DIMS or horizontal_dims(b) != SPATIAL_DIMS:
        check_same_grid_2d(a, b, name_a, name_b)
        return
    for dim in (LATITUDE, LONGITUDE):
        va, vb = a[dim].values, b[dim].values
        if va.shape != vb.shape or not np.allclose(va, vb, atol=1e-6):
            raise EnsmlError(
                f"{name_a} and {name_b} are on different grids: {dim} has {va.size} points "
                f"[{va[0]:g} … {va[-1]:g}] vs {vb.size} [{vb[0]:g} … {vb[-1]:g}]"
            )


def single_field(field: xr.DataArray, grid: Obj, name: str) -> xr.DataArray:
    """``field`` as one field on ``grid``'s horizontal dims: dims of length 1 besides them (a
    time, a member) dropped; raises, in one line naming ``name`` and the variable, when it has
    other dims longer than 1 or lacks one of the grid's."""
    dims = horizontal_dims(grid) or ()
    extra = [d for d in field.dims if d not in dims]
    if any(field.sizes[d] > 1 for d in extra) or set(dims) - set(field.dims):
        shown = ", ".join(f"{d}={field.sizes[d]}" for d in field.dims)
        raise EnsmlError(f"{name}: {field.name!r} has dims ({shown}); give one field on the grid")
    return field.isel({d: 0 for d in extra}, drop=True)
