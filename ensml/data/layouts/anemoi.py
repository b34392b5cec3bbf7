"""Anemoi datasets (ECMWF's training data: a zarr store of dates × variables × ensembles × cells),
read through anemoi-datasets' own :func:`anemoi.datasets.open_dataset` (the ``ensml[anemoi]`` extra).

How an anemoi dataset maps to ensml's vocabulary (:mod:`ensml.names`):

* **variables**: a pressure-level variable (``t_850``, ``z_500``: ``levtype: pl`` in the dataset's
  variable metadata, read by anemoi's ``typed_variables``) becomes variable ``t`` on ``level``
  850 hPa; every other variable (``2t``, ``msl``, model levels ``t_137``, forcings such as
  ``cos_latitude``) keeps its name, without a level. The variables on levels must share one set
  of levels (else one line says which to select);
* **dates** are valid times: an **analysis** has them as ``time``; a **forecast** has them as
  ``init_time + lead_time`` with one lead time, the ``step`` of the dataset's MARS metadata (0 h
  when it has none, e.g. an analysis ensemble such as ERA5's EDA read as a forecast of lead 0);
  dates anemoi lists as missing are left out;
* **ensembles** become ``member`` (the GRIB ``number`` of each member where the metadata lists
  one per member, else 0, 1, …). A forecast needs an ensemble (two members or more); an analysis
  has one member (choose one with ``reader.anemoi: {members: [0]}``);
* **cells**: a regular latitude/longitude grid (a 2-D ``field_shape`` whose cells form a
  latitude × longitude mesh) becomes ``latitude`` × ``longitude``; any other grid (reduced
  Gaussian such as O96, HEALPix, a subset of cells) keeps its cells on a ``cell`` dim with 1-D
  ``latitude``/``longitude`` coordinates, and a ``cell_area`` coordinate where the dataset holds a
  ``cell_area`` variable (:func:`ensml.data.weights.area_weights` uses it, else computes the
  areas of the cells from their centres).

The data stay lazy: each read goes through anemoi's own indexing (so anemoi's subsetting options,
``reader.anemoi``, apply), one date at a time, and a read that fails is one line naming the dataset.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
from xarray.backends import BackendArray
from xarray.core import indexing

from ensml.data.layouts.options import ReaderOptions
from ensml.errors import EnsmlError, exception_reason
from ensml.names import CELL, CELL_AREA, INIT_TIME, LATITUDE, LEAD_TIME, LEVEL, LONGITUDE, MEMBER, TIME
from ensml.times import parse_lead

#: The dims of an anemoi dataset's ``data`` array (the ``dimensions`` attribute of its store).
ANEMOI_DIMS = ("dates", "variables", "ensembles", "values")
#: The arrays every anemoi dataset holds beside its attributes.
ANEMOI_ARRAYS = ("data", "dates", "latitudes", "longitudes")
#: Degrees: latitudes (longitudes) of a regular grid vary less than this along a row (column).
REGULAR_TOL_DEG = 1e-6
INSTALL = "install the extra: pip install 'ensml[anemoi]' (see docs/guide/data.md, anemoi datasets)"


def _root_attrs(path: Path) -> dict | None:
    """The attributes of the zarr group at ``path`` (v2 ``.zattrs`` or v3 ``zarr.json``), if any."""
    try:
        if (path / ".zattrs").is_file():
            return json.loads((path / ".zattrs").read_text())
        if (path / "zarr.json").is_file():
            return json.loads((path / "zarr.json").read_text()).get("attributes") or {}
    except (OSError, ValueError, AttributeError):
        return None
    return None


def is_anemoi(path: str | Path) -> bool:
    """Whether the zarr store ``path`` is an anemoi dataset: its ``data``, ``dates``, ``latitudes``
    and ``longitudes`` arrays, and the attributes anemoi writes (``variables``, ``field_shape``)."""
    path = Path(path)
    attrs = _root_attrs(path)
    if not attrs or "variables" not in attrs or "field_shape" not in attrs:
        return False
    return all(
        (path / name / ".zarray").is_file() or (path / name / "zarr.json").is_file() for name in ANEMOI_ARRAYS
    )


_OPENED: dict[tuple[str, str], Any] = {}
_LOCK = threading.Lock()


def _open(path: Path, options: dict, what: str) -> Any:
    """``anemoi.datasets.open_dataset(path, **options)``, once per process (the arrays that read
    from it hold only the path and options, so that they pickle to data-loader workers)."""
    key = (str(path), json.dumps(options, sort_keys=True, default=str))
    with _LOCK:
        if key in _OPENED:
            return _OPENED[key]
    try:
        from anemoi.datasets import open_dataset
    except ImportError:
        raise EnsmlError(
            f"{what} file {path} is an anemoi dataset, but anemoi-datasets is not installed: {INSTALL}"
        ) from None
    try:
        ds = open_dataset(str(path), **options)
    except Exception as exc:  # anemoi raises ValueError, NotImplementedError, KeyError, zarr's errors
        given = f" with reader.anemoi {options}" if options else ""
        raise EnsmlError(
            f"{what} anemoi dataset {path} cannot be opened{given} ({exception_reason(exc)})"
        ) from None
    with _LOCK:
        return _OPENED.setdefault(key, ds)


@dataclass(frozen=True)
class _Grid:
    """The horizontal grid: ``shape`` (ny, nx) of a regular grid, else None (cells)."""

    latitude: np.ndarray  # 1-D: per row (regular) or per cell
    longitude: np.ndarray
    shape: tuple[int, int] | None


def _grid(ds: Any) -> _Grid:
    lat = np.asarray(ds.latitudes, dtype=np.float64)
    lon = np.asarray(ds.longitudes, dtype=np.float64) % 360.0
    shape = tuple(int(n) for n in (getattr(ds, "field_shape", None) or ()))
    if len(shape) == 2 and shape[0] * shape[1] == lat.size and min(shape) > 1:
        lat2, lon2 = lat.reshape(shape), lon.reshape(shape)
        rows = np.all(np.abs(lat2 - lat2[:, :1]) <= REGULAR_TOL_DEG)
        cols = np.all(np.abs((lon2 - lon2[:1, :] + 180.0) % 360.0 - 180.0) <= REGULAR_TOL_DEG)
        if rows and cols:
            return _Grid(lat2[:, 0], lon2[0, :], (shape[0], shape[1]))
    return _Grid(lat, lon, None)


class AnemoiArray(BackendArray):
    """The data of an anemoi dataset in ensml's order, read lazily through anemoi's indexing.

    Axes: ``(date[, lead], member, variable, *grid)`` where a forecast has a lead axis of one and
    an analysis no member axis (its one member); ``grid`` is ``(latitude, longitude)`` on a
    regular grid, else ``(cell,)``. ``dates`` are the dataset's date indices kept (missing dates
    left out). Holds the path and anemoi's options only, so that it pickles.
    """

    def __init__(
        self,
        path: Path,
        options: dict,
        what: str,
        shape: tuple[int, ...],
        dtype: np.dtype,
        dates: np.ndarray,
        grid_shape: tuple[int, int] | None,
        forecast: bool,
    ) -> None:
        self.path, self.options, self.what = path, options, what
        self.shape, self.dtype = shape, np.dtype(dtype)
        self.dates, self.grid_shape, self.forecast = dates, grid_shape, forecast

    def __getitem__(self, key: indexing.ExplicitIndexer) -> np.ndarray:
        return indexing.explicit_indexing_adapter(key, self.shape, indexing.IndexingSupport.OUTER, self._read)

    def _read(self, key: tuple) -> np.ndarray:
        try:
            return self._outer(key)
        except EnsmlError:
            raise
        except Exception as exc:  # a damaged chunk, a missing date, a lost file: one line
            raise EnsmlError(
                f"{self.what} anemoi dataset {self.path} cannot be read ({exception_reason(exc)})"
            ) from None

    def _outer(self, key: tuple) -> np.ndarray:
        ds = _open(self.path, self.options, self.what)
        idx = [np.arange(n)[k] for k, n in zip(key, self.shape, strict=True)]
        scalar = [np.ndim(i) == 0 for i in idx]
        idx = [np.atleast_1d(i) for i in idx]
        axes = dict(zip(self._axes(), idx, strict=True))
        members = axes.get("member", np.zeros(1, dtype=int))
        variables, cells = axes["variable"], axes.get("cell")
        # The span of each axis asked, read through anemoi, then indexed here. anemoi's subsets
        # (members, area, …) do not all take slices of members or cells: those read them whole.
        spans = [_span(variables), _span(members), _span(cells)]
        if self.options:
            spans[1:] = [slice(0, None), slice(0, None)]
        out = []
        for d in self.dates[axes["date"]]:
            raw = np.asarray(ds[(slice(int(d), int(d) + 1), *spans)])[0]
            raw = raw[np.ix_(variables - spans[0].start, members - spans[1].start)]  # (V, E, cells)
            raw = raw.transpose(1, 0, 2)  # (E, V, cells)
            if self.grid_shape is not None:
                raw = raw.reshape(*raw.shape[:2], *self.grid_shape)[..., axes[LATITUDE], :]
                raw = raw[..., axes[LONGITUDE]]
            elif cells is not None:
                raw = raw[..., cells - spans[2].start]
            out.append(raw)
        data = np.stack(out) if out else np.empty((0, members.size, variables.size, *self._grid_sizes(axes)))
        if self.forecast:
            data = data[:, None][:, axes["lead"]]  # the one lead
        else:
            data = data[:, 0]  # the analysis' one member
        drop = tuple(i for i, s in enumerate(scalar) if s)
        return data.squeeze(axis=drop) if drop else data

    def _axes(self) -> list[str]:
        grid = [LATITUDE, LONGITUDE] if self.grid_shape is not None else [CELL]
        head = ["date", "lead", "member"] if self.forecast else ["date"]
        return [*head, "variable", *grid]

    def _grid_sizes(self, axes: dict) -> list[int]:
        names = [LATITUDE, LONGITUDE] if self.grid_shape is not None else [CELL]
        return [axes[n].size for n in names]


def _span(index: np.ndarray | None) -> slice:
    """The slice from the first to the last of ``index`` (all when None or empty)."""
    if index is None or not index.size:
        return slice(0, None)
    return slice(int(index.min()), int(index.max()) + 1)


def _levels(ds: Any, path: Path, what: str) -> dict[str, list[tuple[float | None, int]]]:
    """``{ensml variable: [(level hPa or None, index in the dataset)]}`` by anemoi's typed
    variables: pressure levels grouped under their parameter, highest pressure first."""
    try:
        typed = ds.typed_variables
    except Exception:  # a dataset without variable metadata: every variable as it is named
        typed = {}
    groups: dict[str, list[tuple[float | None, int]]] = {}
    for i, name in enumerate(ds.variables):
        var = typed.get(name) if hasattr(typed, "get") else None
        if var is not None and getattr(var, "is_pressure_level", False) and var.level is not None:
            groups.setdefault(str(var.param), []).append((float(var.level), i))
        else:
            groups.setdefault(str(name), []).append((None, i))
    for param, entries in groups.items():
        if len(entries) > 1 and any(level is None for level, _ in entries):
            raise EnsmlError(
                f"{what} anemoi dataset {path}: variable {param!r} is both on pressure levels and at "
                f"the surface; leave one out or rename the surface one with reader.anemoi: "
                f"{{drop: [{param}]}} or {{rename: {{{param}: {param}_surface}}}}"
            )
        entries.sort(key=lambda e: -(e[0] or 0.0))
    on_levels = {p: [lev for lev, _ in e] for p, e in groups.items() if e[0][0] is not None}
    if len({tuple(v) for v in on_levels.values()}) > 1:
        (a, la), (b, lb) = sorted(on_levels.items(), key=lambda kv: -len(kv[1]))[:2]
        shown = ", ".join(f"{p} on {', '.join(f'{lev:g}' for lev in v)} hPa" for p, v in ((a, la), (b, lb)))
        raise EnsmlError(
            f"{what} anemoi dataset {path}: its variables on levels do not share one set of levels "
            f"({shown}); keep those on common levels with reader.anemoi: {{select: [...]}}"
        )
    return groups


def _lead(ds: Any, path: Path, what: str) -> np.timedelta64:
    """The one lead time of a forecast dataset: MARS ``step`` (hours) of its variables, else 0 h."""
    steps = set()
    for meta in (getattr(ds, "variables_metadata", None) or {}).values():
        step = (meta or {}).get("mars", {}).get("step")
        if step is not None:
            steps.add(step)
    if len(steps) > 1:
        raise EnsmlError(
            f"{what} anemoi dataset {path}: its variables are forecasts of different steps "
            f"({', '.join(map(str, sorted(steps, key=str)))}); ensml reads one lead time per dataset: "
            "select the variables of one step with reader.anemoi: {select: [...]}"
        )
    step = str(steps.pop() if steps else 0)
    return parse_lead(step.rsplit("-", 1)[-1])  # a range such as "0-6": the step at the valid time


def _members(ds: Any, count: int) -> np.ndarray:
    """The member numbers: the GRIB ``number`` of each member where every variable's metadata
    lists the same ``count`` numbers, else 0 … count − 1."""
    lists = {
        tuple(np.atleast_1d(meta.get("mars", {}).get("number", ())).tolist())
        for meta in (getattr(ds, "variables_metadata", None) or {}).values()
        if meta
    }
    if len(lists) == 1:
        numbers = next(iter(lists))
        if len(numbers) == count and all(isinstance(n, int | np.integer) for n in numbers):
            return np.asarray(numbers, dtype=np.int64)
    return np.arange(count, dtype=np.int64)


def _check_options(path: Path, options: ReaderOptions, what: str) -> dict:
    """anemoi's ``open_dataset`` options, after refusing the reader options that are GRIB's."""
    grib = [name for name in ("filter_by_keys", "drop_control") if getattr(options, name)]
    if grib:
        raise EnsmlError(
            f"{what} file {path} is an anemoi dataset: reader.{grib[0]} applies to GRIB files only; "
            "subset an anemoi dataset with reader.anemoi (select, members, start, end, …)"
        )
    return dict(options.anemoi or {})


def read(path: Path, what: str, chunks: dict | str | None, options: ReaderOptions) -> xr.Dataset:
    """An anemoi dataset as a forecast (``what == "forecast"``) or as an analysis, lazily.

    Raises
    ------
    EnsmlError
        One line naming the dataset: anemoi-datasets not installed, GRIB reader options, options
        anemoi refuses, a forecast without an ensemble, an analysis of several members, variables
        on different sets of levels or of different steps.
    """
    anemoi_options = _check_options(path, options, what)
    ds = _open(path, anemoi_options, what)
    forecast = what == "forecast"
    n_dates, _, n_members, _ = (int(n) for n in ds.shape)
    if forecast and n_members < 2:
        raise EnsmlError(
            f"forecast anemoi dataset {path} has no ensemble (its ensembles dimension holds "
            f"{n_members} member); a forecast needs two members or more: give it as the analysis, "
            "or give an ensemble dataset"
        )
    if not forecast and n_members > 1:
        raise EnsmlError(
            f"{what} anemoi dataset {path} holds {n_members} ensemble members; an {what} is one field "
            "per date: choose one with reader.anemoi: {members: [0]}"
        )
    groups = _levels(ds, path, what)
    grid = _grid(ds)
    missing = set(int(i) for i in (getattr(ds, "missing", None) or ()))
    kept = np.asarray([i for i in range(n_dates) if i not in missing], dtype=np.int64)
    dates = np.asarray(ds.dates).astype("datetime64[ns]")[kept]
    grid_dims = (LATITUDE, LONGITUDE) if grid.shape is not None else (CELL,)
    grid_sizes = grid.shape if grid.shape is not None else (grid.latitude.size,)
    head = (INIT_TIME, LEAD_TIME, MEMBER) if forecast else (TIME,)
    head_sizes = (kept.size, 1, n_members) if forecast else (kept.size,)
    n_vars = len(ds.variables)
    array = AnemoiArray(
        path,
        anemoi_options,
        what,
        (*head_sizes, n_vars, *grid_sizes),
        np.dtype(ds.dtype),
        kept,
        grid.shape,
        forecast,
    )
    whole = xr.DataArray(xr.Variable((*head, "variable", *grid_dims), indexing.LazilyIndexedArray(array)))
    metadata = getattr(ds, "variables_metadata", None) or {}
    data_vars = {}
    for name, entries in groups.items():
        if name == CELL_AREA and grid.shape is None:
            continue  # a coordinate (below), not a variable to score
        units = (metadata.get(ds.variables[entries[0][1]]) or {}).get("units")
        indices = [i for _, i in entries]
        if entries[0][0] is None:
            var = whole.isel(variable=indices[0])
        else:
            var = whole.isel(variable=indices).rename(variable=LEVEL)
        data_vars[name] = var.assign_attrs(units=str(units)) if units else var
    levels = next((e for e in groups.values() if e[0][0] is not None), None)
    coords: dict[str, Any] = {}
    if forecast:
        lead = _lead(ds, path, what)
        coords[INIT_TIME] = dates - lead
        coords[LEAD_TIME] = [lead]
        coords[MEMBER] = _members(ds, n_members)
    else:
        coords[TIME] = dates
    if levels is not None:
        coords[LEVEL] = [lev for lev, _ in levels]
    if grid.shape is not None:
        coords[LATITUDE], coords[LONGITUDE] = grid.latitude, grid.longitude
    else:
        coords[LATITUDE], coords[LONGITUDE] = (CELL, grid.latitude), (CELL, grid.longitude)
        if CELL_AREA in groups and groups[CELL_AREA][0][0] is None:
            area = np.asarray(ds[slice(int(kept[0]), int(kept[0]) + 1)])[0, groups[CELL_AREA][0][1], 0]
            coords[CELL_AREA] = (CELL, area.astype(np.float64), {"long_name": "cell area"})
    attrs = {"source": f"anemoi dataset {Path(path).name}", "anemoi_dataset": str(path)}
    out = xr.Dataset(data_vars, coords=coords, attrs=attrs)
    if chunks is None:
        return out
    return out.chunk({head[0]: 1} if chunks == {} else chunks)  # {}: anemoi's chunks, a date each


__all__ = ["ANEMOI_DIMS", "AnemoiArray", "is_anemoi", "read"]
