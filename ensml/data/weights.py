"""Area weights of grid points: exact cell areas on latitude/longitude grids (as WeatherBench2),
spherical cell areas on projected grids with 2-D latitude/longitude, uniform otherwise.

:func:`area_weights` picks the method from the coordinates of the data (see
:mod:`ensml.data.grid`):

* 1-D latitude (a regular grid): :func:`latitude_weights`, exact cell areas of latitude bands;
* 2-D latitude/longitude (a projected or curvilinear grid, e.g. WRF on a polar-stereographic
  grid): :func:`cell_areas`, the area on the sphere of each cell. A grid whose 2-D latitude
  depends on one index and longitude on the other (a regular grid stored as 2-D arrays) gets the
  exact band × longitude-width areas; any other grid gets spherical quadrilaterals whose corners
  are estimated from the cell centres;
* cells of an unstructured grid (one ``cell`` dim, e.g. an anemoi dataset on a reduced Gaussian
  grid): the ``cell_area`` coordinate where the data carry one, else :func:`voronoi_areas`, the
  areas of the spherical Voronoi cells of the cell centres (as anemoi-graphs weighs its nodes);
* otherwise (no latitude/longitude, latitude not monotone, cells that fold over, cells that do not
  cover the globe and carry no ``cell_area``): uniform
  weights, with a one-line note on stderr saying why (:func:`ensml.progress.note`: not under
  ``--quiet``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import xarray as xr

from ensml import progress
from ensml.data.grid import horizontal_dims
from ensml.errors import EnsmlError
from ensml.names import CELL_AREA, LATITUDE, LONGITUDE

__all__ = ["area_weights", "cell_areas", "cell_corners", "latitude_weights", "voronoi_areas"]


#: How the weights were computed (the ``weighting`` attribute of :func:`area_weights`' result).
EXACT = "exact cell area"
SPHERICAL = "spherical cell area from the 2-D latitude/longitude"
#: Degrees: a 2-D latitude (longitude) that varies less than this along one index is regular.
RECTILINEAR_TOL_DEG = 1e-5
PROVIDED = "cell area given by the data (cell_area)"
VORONOI = "spherical Voronoi cell area from the cell centres"
#: A Voronoi cell this many times the median is the open side of cells that do not cover the globe.
VORONOI_MAX_RATIO = 50.0


class _NoCellAreas(EnsmlError):
    """The coordinates do not define cells (too few points, cells that fold over): weigh uniformly."""


def _band_areas(lat: np.ndarray) -> np.ndarray:
    """sin φ_upper − sin φ_lower of each latitude cell (positive), in the order of ``lat``."""
    if lat.size == 1:
        return np.ones(1)
    step = np.diff(lat)
    if not (np.all(step > 0) or np.all(step < 0)):
        raise EnsmlError("latitude_weights: latitudes must be strictly increasing or decreasing")
    asc = lat if step[0] > 0 else lat[::-1]
    mid = 0.5 * (asc[1:] + asc[:-1])
    edges = np.concatenate([[asc[0] - 0.5 * (asc[1] - asc[0])], mid, [asc[-1] + 0.5 * (asc[-1] - asc[-2])]])
    edges = np.deg2rad(np.clip(edges, -90.0, 90.0))
    w = np.sin(edges[1:]) - np.sin(edges[:-1])
    return w[::-1] if step[0] < 0 else w


def latitude_weights(latitude: Any, *, dim: str = LATITUDE) -> xr.DataArray:
    r"""Area weights of latitude cells, normalised to mean 1.

    A cell reaches half-way to its neighbours (the outer cells as far again as half their
    inner spacing), clipped to ±90°; its area on the sphere is proportional to

    .. math:: w_j = \sin\varphi_j^{\mathrm{upper}} - \sin\varphi_j^{\mathrm{lower}},

    then ``w / mean(w)``. On a regular grid with pole points (90 → −90) the pole cells are
    half-width caps, as in WeatherBench2 (Rasp et al. 2024, ``get_lat_weights``). Both
    latitude orders give the same weight per latitude.

    Parameters
    ----------
    latitude
        Latitudes in degrees north: a 1-D array or DataArray, or a Dataset/DataArray
        that has a ``dim`` coordinate. Strictly monotonic, within [−90, 90].
    dim
        Name of the latitude dimension.

    Returns
    -------
    xr.DataArray
        Weights (dimensionless, mean 1) along ``dim``, with the latitude coordinate.
    """
    if isinstance(latitude, (xr.DataArray, xr.Dataset)) and dim in latitude.coords:
        lat = np.asarray(latitude[dim].values, dtype=np.float64)
    elif isinstance(latitude, xr.Dataset):
        raise EnsmlError(f"latitude_weights: dataset has no '{dim}' coordinate")
    else:
        lat = np.asarray(latitude, dtype=np.float64)
    if lat.ndim != 1 or lat.size == 0:
        raise EnsmlError(f"latitude_weights: latitude must be a non-empty 1-D array, got shape {lat.shape}")
    if not np.all(np.isfinite(lat)) or np.any(np.abs(lat) > 90):
        raise EnsmlError("latitude_weights: latitudes must be finite and within [-90, 90] degrees")
    w = _band_areas(lat)
    if lat.size > 1:
        w = w / w.mean()
    return xr.DataArray(w, dims=[dim], coords={dim: lat}, name="latitude_weight", attrs={"units": "1"})


def _check_2d(latitude: Any, longitude: Any) -> tuple[np.ndarray, np.ndarray]:
    lat = np.asarray(latitude, dtype=np.float64)
    lon = np.asarray(longitude, dtype=np.float64)
    if lat.ndim != 2 or lat.shape != lon.shape:
        raise EnsmlError(
            "cell_areas: latitude and longitude must be 2-D arrays of one shape, "
            f"got {lat.shape} and {lon.shape}"
        )
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))) or np.any(np.abs(lat) > 90):
        raise EnsmlError(
            "cell_areas: latitudes and longitudes must be finite, latitudes within [-90, 90] degrees"
        )
    if min(lat.shape) < 2:
        raise _NoCellAreas(f"a grid of {lat.shape[0]} × {lat.shape[1]} points has no cell size")
    return lat, lon


def _unit_vectors(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    la, lo = np.deg2rad(lat), np.deg2rad(lon)
    return np.stack([np.cos(la) * np.cos(lo), np.cos(la) * np.sin(lo), np.sin(la)], axis=-1)


def _corner_vectors(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    """Unit vectors (ny+1, nx+1, 3) of the cell corners: the normalised mean of the 4 centres
    around each corner, the centres first extended by one row/column on each side by linear
    extrapolation (in 3-D, so that poles and the 0°/360° seam need no special case)."""

    def extend(a: np.ndarray, axis: int) -> np.ndarray:
        a = np.moveaxis(a, axis, 0)
        a = np.concatenate([2 * a[:1] - a[1:2], a, 2 * a[-1:] - a[-2:-1]])
        return np.moveaxis(a, 0, axis)

    e = extend(extend(_unit_vectors(lat, lon), 0), 1)
    c = e[:-1, :-1] + e[1:, :-1] + e[:-1, 1:] + e[1:, 1:]
    return c / np.linalg.norm(c, axis=-1, keepdims=True)


def cell_corners(latitude: Any, longitude: Any) -> tuple[np.ndarray, np.ndarray]:
    """Latitude and longitude (degrees, longitude in [0, 360)) of the corners of a 2-D grid's cells.

    Parameters
    ----------
    latitude, longitude
        Cell centres, degrees, 2-D arrays of shape (ny, nx), ny and nx at least 2.

    Returns
    -------
    tuple of np.ndarray
        Corner latitudes and longitudes, shape (ny + 1, nx + 1): corner ``[i, j]`` is shared by
        the cells ``[i-1 : i+1, j-1 : j+1]`` (see :func:`cell_areas` for how it is estimated).
    """
    c = _corner_vectors(*_check_2d(latitude, longitude))
    lat = np.rad2deg(np.arcsin(np.clip(c[..., 2], -1.0, 1.0)))
    lon = np.rad2deg(np.arctan2(c[..., 1], c[..., 0])) % 360.0
    return lat, lon


def _triangle(a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    # signed solid angle of the spherical triangle abc (Van Oosterom & Strackee 1983)
    num = np.einsum("...i,...i", a, np.cross(b, c))
    den = 1.0 + np.einsum("...i,...i", a, b) + np.einsum("...i,...i", b, c) + np.einsum("...i,...i", c, a)
    return 2.0 * np.arctan2(num, den)


def _regular_axes(lat: np.ndarray, lon: np.ndarray) -> tuple[np.ndarray, np.ndarray, int] | None:
    """``(lat_1d, lon_1d, axis of latitude)`` when the 2-D grid is a regular latitude/longitude grid."""
    for axis in (0, 1):
        other = 1 - axis
        lat1, lon1 = lat.take(0, axis=other), lon.take(0, axis=axis)
        dlon = (lon - np.expand_dims(lon1, axis) + 180.0) % 360.0 - 180.0
        if (
            np.abs(lat - np.expand_dims(lat1, other)).max() <= RECTILINEAR_TOL_DEG
            and np.abs(dlon).max() <= RECTILINEAR_TOL_DEG
        ):
            lon1 = np.rad2deg(np.unwrap(np.deg2rad(lon1)))
            steps = (np.diff(lat1), np.diff(lon1))
            if all(np.all(s > 0) or np.all(s < 0) for s in steps):
                return lat1, lon1, axis
    return None


def cell_areas(latitude: Any, longitude: Any) -> np.ndarray:
    r"""Areas of the cells of a 2-D grid on the unit sphere (steradians; × R² for m²).

    The grid is given by its cell centres only (as models write them). Two cases:

    * a **regular latitude/longitude grid stored as 2-D arrays** (latitude depends on one index,
      longitude on the other): exact areas :math:`(\sin\varphi_u - \sin\varphi_l)\,\Delta\lambda`,
      with the cell edges of :func:`latitude_weights` (half-way to the neighbours, clipped to
      ±90°), so the normalised areas equal :func:`latitude_weights` and a global grid sums to 4π;
    * **any other grid** (projected, rotated, curvilinear): each cell is the spherical
      quadrilateral of its four corners, each corner the normalised mean of the unit vectors of
      the four surrounding centres (the grid is first extended by one row and column on each
      side by linear extrapolation in 3-D; no special case at the poles or 0°/360°). Its area is
      the sum of the solid angles of two triangles (Van Oosterom & Strackee 1983). For a
      polar-stereographic or Lambert grid of 50 km cells the error is 6e-6 inside the grid and
      5.5e-4 on its outer row (extrapolated corners); inside, it falls as the square of the cell
      size (1.5e-4 for 250 km cells), on the outer row about linearly (1.6e-3).

    Parameters
    ----------
    latitude, longitude
        Cell centres in degrees, 2-D arrays of one shape (ny, nx), ny and nx at least 2.

    Returns
    -------
    np.ndarray
        Cell areas, steradians, shape (ny, nx).

    Raises
    ------
    EnsmlError
        Non-finite coordinates, latitudes beyond ±90°, fewer than 2 points along a dim, or
        cells that fold over or collapse (the coordinates are not monotone along the grid).
    """
    lat, lon = _check_2d(latitude, longitude)
    regular = _regular_axes(lat, lon)
    if regular is not None:
        lat1, lon1, axis = regular
        bands = _band_areas(lat1)
        mid = 0.5 * (lon1[1:] + lon1[:-1])
        edges = np.concatenate([[lon1[0] - (mid[0] - lon1[0])], mid, [lon1[-1] + (lon1[-1] - mid[-1])]])
        widths = np.abs(np.diff(np.deg2rad(edges)))
        return np.outer(bands, widths) if axis == 0 else np.outer(widths, bands)
    c = _corner_vectors(lat, lon)
    a, b, cc, d = c[:-1, :-1], c[:-1, 1:], c[1:, 1:], c[1:, :-1]
    signed = _triangle(a, b, cc) + _triangle(a, cc, d)
    if not (np.all(signed > 0) or np.all(signed < 0)):
        n = int(np.count_nonzero(np.sign(signed) != np.sign(np.median(signed)))) or signed.size
        raise _NoCellAreas(
            f"{n} of {signed.size} cells fold over or collapse (the 2-D latitude/longitude are not "
            "monotone along the grid)"
        )
    return np.abs(signed)


def voronoi_areas(latitude: Any, longitude: Any) -> np.ndarray:
    """Areas (steradians, summing to 4π) of the spherical Voronoi cells of points on the sphere.

    Each point owns the part of the sphere nearer to it than to any other point
    (:class:`scipy.spatial.SphericalVoronoi`): on a global grid of cells (reduced Gaussian,
    HEALPix, icosahedral) that part is the cell. anemoi-graphs weighs its nodes so.

    Parameters
    ----------
    latitude, longitude
        Cell centres in degrees, 1-D arrays of one length, at least 4 distinct points.

    Raises
    ------
    EnsmlError
        Non-finite coordinates or latitudes beyond ±90°; fewer than 4 points, points that share a
        position, or points that do not cover the globe (a Voronoi cell over
        :data:`VORONOI_MAX_RATIO` times the median: a regional set of cells).
    """
    from scipy.spatial import SphericalVoronoi

    lat = np.asarray(latitude, dtype=np.float64)
    lon = np.asarray(longitude, dtype=np.float64)
    if lat.ndim != 1 or lat.shape != lon.shape:
        raise EnsmlError(
            f"voronoi_areas: latitude and longitude must be 1-D of one length, got {lat.shape}, {lon.shape}"
        )
    if not (np.all(np.isfinite(lat)) and np.all(np.isfinite(lon))) or np.any(np.abs(lat) > 90):
        raise EnsmlError(
            "voronoi_areas: latitudes and longitudes must be finite, latitudes within [-90, 90] degrees"
        )
    if lat.size < 4:
        raise _NoCellAreas(f"{lat.size} cells have no Voronoi areas (4 or more are needed)")
    points = _unit_vectors(lat, lon)
    shared = lat.size - np.unique(np.round(points, 12), axis=0).shape[0]
    if shared:
        raise _NoCellAreas(f"{shared} cells share a position with another (duplicate latitude/longitude)")
    areas = SphericalVoronoi(points, radius=1.0).calculate_areas()
    if areas.max() > VORONOI_MAX_RATIO * np.median(areas):
        raise _NoCellAreas(
            "the cells do not cover the globe (a regional set of cells: give a cell_area coordinate)"
        )
    return areas


def _uniform(obj: xr.Dataset | xr.DataArray, dims: tuple[str, str], why: str, what: str, note: bool):
    if note:
        progress.note(f"ensml: note: {what}: {why}; weighting every grid point the same (uniform weights)")
    return _weights(np.ones([obj.sizes[d] for d in dims]), obj, dims, f"uniform: {why}")


def _weights(w: np.ndarray, obj, dims, weighting: str) -> xr.DataArray:
    coords = {d: obj[d].values for d in dims if d in obj.coords and obj[d].ndim == 1}
    attrs = {"units": "1", "weighting": weighting}
    return xr.DataArray(w / w.mean(), dims=dims, coords=coords, name="area_weight", attrs=attrs)


def area_weights(obj: xr.Dataset | xr.DataArray, *, what: str = "data", note: bool = True) -> xr.DataArray:
    """Area weights (mean 1) of the grid points of ``obj``, on its horizontal dims.

    See the module docstring: :func:`latitude_weights` on a regular grid (weights along
    ``latitude`` only), :func:`cell_areas` on a grid with 2-D latitude/longitude (weights on its
    two horizontal dims, e.g. ``(y, x)``), uniform weights where the coordinates define no
    cells. The ``weighting`` attribute of the result says which (for tables and reports).

    Parameters
    ----------
    obj
        A Dataset or DataArray on a grid that :func:`ensml.data.grid.horizontal_dims` knows.
    what
        How to name ``obj`` in the note and errors (e.g. ``"forecast f.nc"``).
    note
        Print the one-line note when falling back to uniform weights (:func:`ensml.progress.note`,
        silent under ``--quiet``); ``False`` when the caller has said it already.

    Raises
    ------
    EnsmlError
        ``obj`` has no horizontal dims, or non-finite or out-of-range latitude/longitude.
    """
    dims = horizontal_dims(obj)
    if dims is None:
        raise EnsmlError(f"area_weights: {what} has no horizontal grid (no latitude/longitude or x/y dims)")
    if dims == (LATITUDE, LONGITUDE):
        lat = np.asarray(obj[LATITUDE].values, dtype=np.float64)
        step = np.diff(lat)
        if lat.size > 1 and not (np.all(step > 0) or np.all(step < 0)):
            return _uniform(obj, dims, "latitude is not monotone", what, note)
        w = latitude_weights(obj)
        w.attrs["weighting"] = EXACT
        return w
    if len(dims) == 1:
        return _cell_weights(obj, dims, what, note)
    if LATITUDE not in obj.coords or LONGITUDE not in obj.coords:
        why = f"projected grid ({', '.join(dims)}) without latitude/longitude coordinates"
        return _uniform(obj, dims, why, what, note)
    lat = obj[LATITUDE].transpose(*dims).values
    lon = obj[LONGITUDE].transpose(*dims).values
    try:
        areas = cell_areas(lat, lon)
    except _NoCellAreas as err:
        return _uniform(obj, dims, str(err), what, note)
    except EnsmlError as err:
        raise EnsmlError(f"{what}: {str(err).removeprefix('cell_areas: ')}") from None
    method = EXACT if _regular_axes(lat, lon) is not None else SPHERICAL
    return _weights(areas, obj, dims, method)


def _cell_weights(
    obj: xr.Dataset | xr.DataArray, dims: tuple[str, ...], what: str, note: bool
) -> xr.DataArray:
    """Weights of the cells of an unstructured grid: its ``cell_area``, else :func:`voronoi_areas`."""
    if CELL_AREA in obj.coords:
        area = np.asarray(obj[CELL_AREA].values, dtype=np.float64)
        if area.shape != (obj.sizes[dims[0]],) or not np.all(np.isfinite(area)) or np.any(area <= 0):
            raise EnsmlError(f"{what}: {CELL_AREA} must be finite and positive, one per cell")
        return _weights(area, obj, dims, PROVIDED)
    try:
        areas = voronoi_areas(obj[LATITUDE].values, obj[LONGITUDE].values)
    except _NoCellAreas as err:
        return _uniform(obj, dims, str(err), what, note)
    except EnsmlError as err:
        raise EnsmlError(f"{what}: {str(err).removeprefix('voronoi_areas: ')}") from None
    return _weights(areas, obj, dims, VORONOI)
