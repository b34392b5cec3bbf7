"""Station (point) observations from CSV or netCDF, as one dataset in ensml's vocabulary.

:func:`read_observations` returns a dataset with dims ``(station, time)`` (``time``: the valid
time of the observation, as an analysis has it) and ``(station, time, level)`` for variables
observed on pressure levels (``level`` in hPa); coordinates ``station`` (the ids, text),
``latitude`` and ``longitude`` (degrees north / east in [0, 360)) and, when given, ``elevation``
(m above mean sea level) along ``station``. A value not observed is NaN.

**CSV** (comma, semicolon or tab separated; ``#`` starts a comment line; column names are
matched without regard to case):

* the station id: ``station``, ``station_id``, ``id``, ``wmo_id``, ``site`` or ``site_id``;
* ``lat`` / ``latitude``, ``lon`` / ``longitude`` (``-180..180`` or ``0..360``);
* the valid time: ``valid_time``, ``time``, ``datetime`` or ``date`` (ISO 8601; UTC unless an
  offset is given);
* optional ``elevation`` / ``height`` / ``altitude`` (m), ``level`` (hPa), ``name`` (ignored);
* the values, either *wide*, one column per variable (``t2m``, ``msl`` …), or *long*, the
  columns ``variable`` and ``value``.

An empty cell, ``NA``, ``NaN``, ``null`` or ``-`` is a value not observed. A station's position
and elevation must be the same on every row; two rows of one station, time, level and
variable must not hold different values (equal repeats are kept once).

**netCDF** (or any format ensml reads): a ``station`` dim; ``latitude``/``lat`` and
``longitude``/``lon`` along it (coordinates or variables), optionally an elevation; the ids
from the ``station`` coordinate, or a variable along ``station`` with ``cf_role:
timeseries_id`` or named ``station_id``/``id``/``name`` (else 0, 1, …); ``time`` or
``valid_time``; the variables on ``(station, time[, level])``.

:func:`on_grid` places the stations on a forecast's grid (:mod:`ensml.data.points`), dropping
with a note those outside its domain, and refusing a file none of whose stations is inside.
"""

from __future__ import annotations

import csv
import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import xarray as xr

from ensml.data.grid import describe
from ensml.data.layouts.formats import detect_format
from ensml.data.open import load_dataset
from ensml.data.points import Points, locate
from ensml.errors import EnsmlError
from ensml.names import ELEVATION, LATITUDE, LEVEL, LONGITUDE, STATION, TIME, VALID_TIME
from ensml.progress import note

#: CSV column names, by role (matched case-insensitively).
COLUMNS = {
    STATION: ("station", "station_id", "stationid", "id", "wmo_id", "site", "site_id"),
    LATITUDE: ("latitude", "lat"),
    LONGITUDE: ("longitude", "lon", "lng"),
    TIME: ("valid_time", "time", "datetime", "date"),
    ELEVATION: ("elevation", "height", "altitude", "elev"),
    LEVEL: ("level", "level_hpa"),
    "name": ("name", "station_name"),
}
REQUIRED = (STATION, LATITUDE, LONGITUDE, TIME)
MISSING = {"", "na", "nan", "null", "none", "n/a", "-"}
COORD_ATTRS = {
    STATION: {"long_name": "station identifier", "cf_role": "timeseries_id"},
    ELEVATION: {
        "standard_name": "height_above_mean_sea_level",
        "long_name": "station elevation",
        "units": "m",
    },
    TIME: {"standard_name": "time", "long_name": "valid time of the observation"},
}
#: A station model's products say, along ``station``, where each station's embedding comes from:
#: ``own`` (trained there), ``nearest`` (the nearest trained station's) or ``zero``.
EMBEDDING = "embedding"
COORD_ATTRS[EMBEDDING] = {
    "long_name": "origin of the station's embedding: own (trained there), nearest (the nearest "
    "trained station's) or zero (no history)"
}


def read_observations(path: str | Path) -> xr.Dataset:
    """The observations of a CSV or netCDF station file, in memory (see the module docstring).

    Raises
    ------
    EnsmlError
        One line naming the file (and the line of a CSV): a missing file or column, a value or
        time that cannot be read, a latitude outside [-90, 90], a longitude outside
        [-180, 360], a station at two positions, two different values for one station, time
        and variable, no variable.
    """
    p = Path(path)
    name = f"observations file {p}"
    if not p.exists():
        raise EnsmlError(f"{name} does not exist")
    if p.is_dir() and detect_format(p) is None:
        raise EnsmlError(f"{name} is a folder, not a CSV or netCDF file")
    if p.is_file() and p.stat().st_size == 0:
        raise EnsmlError(f"{name} is empty (0 bytes)")
    ds = _from_netcdf(p, name) if detect_format(p) else _from_long(_read_csv(p, name), name)
    _check_positions(ds, name)
    ds = ds.assign_coords({LONGITUDE: ds[LONGITUDE] % 360.0})
    for coord, attrs in COORD_ATTRS.items():
        if coord in ds.coords:
            ds[coord].attrs.update(attrs)
    ds.attrs = {"source": str(p)}
    return ds


def read_stations(path: str | Path) -> xr.Dataset:
    """The stations of a file, without observations: a dataset with no variables whose
    coordinates are ``station`` (the ids), ``latitude``, ``longitude`` (in [0, 360)) and, when
    given, ``elevation``, along ``station``.

    ``path`` is either any file :func:`read_observations` reads (its observations are left
    aside) or a *station list*: a CSV with the station id, latitude and longitude columns (and
    optionally the elevation) of :data:`COLUMNS`, one row per station, and no time column.

    Raises
    ------
    EnsmlError
        As :func:`read_observations`; a station id on two rows at different positions.
    """
    p = Path(path)
    name = f"stations file {p}"
    if p.is_file() and p.stat().st_size > 0 and detect_format(p) is None:
        table, found, _ = _csv_rows(p, name, (STATION, LATITUDE, LONGITUDE))
        if found[TIME] is None:
            rows = _station_columns(table, found, name)
            stations = _station_table(rows, name)
            ds = xr.Dataset(
                coords={
                    STATION: stations.index.to_numpy(dtype=str),
                    **{c: (STATION, stations[c].to_numpy(dtype=np.float64)) for c in stations.columns},
                }
            )
            _check_positions(ds, name)
            ds = ds.assign_coords({LONGITUDE: ds[LONGITUDE] % 360.0})
            for coord in (STATION, ELEVATION):
                if coord in ds.coords:
                    ds[coord].attrs.update(COORD_ATTRS[coord])
            ds.attrs = {"source": str(p)}
            return ds
    obs = read_observations(p)
    return obs.drop_vars(list(obs.data_vars)).drop_dims([d for d in obs.dims if d != STATION])


#: How far (degrees) a station of one id may lie from itself in two files: farther is another place.
SAME_PLACE_DEG = 1e-4


def match_stations(reference: xr.Dataset, other: xr.Dataset) -> tuple[np.ndarray, tuple[int, int] | None]:
    """Where each station of ``other`` is in ``reference`` (by id; -1 where it is not), and the
    first pair ``(j, i)`` of ``other[j]`` and ``reference[i]`` with one id at places more than
    :data:`SAME_PLACE_DEG` apart (None: every shared id names one place). Callers say what a
    conflict means for them (a model applied to other stations, products of another list)."""
    known = {str(s): i for i, s in enumerate(reference[STATION].values)}
    index = np.array([known.get(str(s), -1) for s in other[STATION].values], dtype=np.int64)
    shared = np.flatnonzero(index >= 0)
    i = index[shared]
    dlat = np.abs(other[LATITUDE].values[shared] - reference[LATITUDE].values[i])
    dlon = np.abs((other[LONGITUDE].values[shared] - reference[LONGITUDE].values[i] + 180.0) % 360.0 - 180.0)
    far = np.flatnonzero(np.maximum(dlat, dlon) > SAME_PLACE_DEG)
    return index, (None if far.size == 0 else (int(shared[far[0]]), int(i[far[0]])))


def station_set_id(stations: xr.Dataset) -> str:
    """The identity of a station list: the SHA-256 of its ids, positions and elevations (to a
    micro-degree and a millimetre), in order. What a station model and its products record, so
    that a file for one list is never read against another."""
    digest = hashlib.sha256()
    digest.update("\n".join(str(s) for s in stations[STATION].values).encode())
    for coord, decimals in ((LATITUDE, 6), (LONGITUDE, 6), (ELEVATION, 3)):
        values = stations[coord].values if coord in stations.coords else np.array([])
        digest.update(coord.encode() + np.round(np.asarray(values, np.float64), decimals).tobytes())
    return digest.hexdigest()


# -- CSV ------------------------------------------------------------------------------------------
def _csv_rows(path: Path, name: str, required: tuple[str, ...]) -> tuple[pd.DataFrame, dict, list[str]]:
    """The CSV's rows as text (with their ``line`` numbers), the column found for each role of
    :data:`COLUMNS` (None where absent; the ``required`` roles must be there) and the header."""
    try:
        lines = path.read_text(encoding="utf-8-sig").splitlines()
    except (UnicodeDecodeError, OSError) as exc:
        raise EnsmlError(f"{name} is not a CSV text file ({type(exc).__name__})") from None
    numbered = [(i + 1, s) for i, s in enumerate(lines) if s.strip() and not s.lstrip().startswith("#")]
    if not numbered:
        raise EnsmlError(f"{name} has no header line")
    head = numbered[0][1]
    sep = next((c for c in (",", ";", "\t") if c in head), ",")
    rows = list(csv.reader([s for _, s in numbered], delimiter=sep))
    header = [h.strip() for h in rows[0]]
    lower = [h.lower() for h in header]
    found = {
        role: next((header[lower.index(a)] for a in aliases if a in lower), None)
        for role, aliases in COLUMNS.items()
    }
    for role in required:
        if found[role] is None:
            names = ", ".join(COLUMNS[role])
            raise EnsmlError(f"{name} has no {role} column (one of: {names}; found: {', '.join(header)})")
    body = rows[1:]
    bad = next((k for k, r in enumerate(body) if len(r) != len(header)), None)
    if bad is not None:
        raise EnsmlError(
            f"{name}, line {numbered[bad + 1][0]}: {len(body[bad])} fields, the header has {len(header)}"
        )
    table = pd.DataFrame(body, columns=header, dtype=str)
    table["line"] = [n for n, _ in numbered[1:]]
    return table, found, header


def _station_columns(table: pd.DataFrame, found: dict, name: str) -> pd.DataFrame:
    """The station id, position (elevation, level) of each row, as numbers, with its line."""
    out = pd.DataFrame({STATION: table[found[STATION]].str.strip(), "line": table["line"]})
    for role in (LATITUDE, LONGITUDE, ELEVATION, LEVEL):
        if found[role] is not None:
            out[role] = _numbers(table[found[role]], found[role], table["line"], name)
    for role in (STATION, LATITUDE, LONGITUDE):
        _no_missing(out, role, found[role], name)
    return out


def _read_csv(path: Path, name: str) -> pd.DataFrame:
    """The long table (station, latitude, longitude, time, [elevation, level], variable, value, line)."""
    table, found, header = _csv_rows(path, name, REQUIRED)
    lower = [h.lower() for h in header]
    long = "variable" in lower and "value" in lower
    out = _station_columns(table, found, name)
    out[TIME] = _times(table[found[TIME]], found[TIME], table["line"], name)
    if long:
        var_col, val_col = header[lower.index("variable")], header[lower.index("value")]
        out["variable"] = table[var_col].str.strip()
        out["value"] = _numbers(table[val_col], val_col, table["line"], name)
        return out
    known = {c for c in found.values() if c is not None}
    values = [h for h in header if h not in known]
    if not values:
        raise EnsmlError(f"{name} has no value column (a column per variable, or 'variable' and 'value')")
    parts = [out.assign(variable=v, value=_numbers(table[v], v, table["line"], name)) for v in values]
    return pd.concat(parts, ignore_index=True)


def _numbers(text: pd.Series, column: str, lines: pd.Series, name: str) -> pd.Series:
    clean = text.str.strip()
    missing = clean.str.lower().isin(MISSING)
    values = pd.to_numeric(clean.where(~missing), errors="coerce")
    bad = values.isna() & ~missing
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise EnsmlError(
            f"{name}, line {lines.iloc[i]}: column {column!r} holds {clean.iloc[i]!r}, not a number "
            "(an empty cell, NA or NaN marks a value not observed)"
        )
    return values.astype("float64")


def _times(text: pd.Series, column: str, lines: pd.Series, name: str) -> pd.Series:
    clean = text.str.strip()
    times = pd.to_datetime(clean, format="ISO8601", utc=True, errors="coerce")
    bad = times.isna()
    if bad.any():
        i = int(np.flatnonzero(bad.to_numpy())[0])
        raise EnsmlError(
            f"{name}, line {lines.iloc[i]}: {column} {clean.iloc[i]!r} is not a time "
            "(give ISO 8601, e.g. 2017-01-04T12:00 or 2017-01-04 12:00+00:00)"
        )
    return times.dt.tz_localize(None).astype("datetime64[ns]")


def _no_missing(table: pd.DataFrame, role: str, column: str | None, name: str) -> None:
    empty = table[role].isna() | (table[role].astype(str) == "")
    if empty.any():
        line = table["line"].iloc[int(np.flatnonzero(empty.to_numpy())[0])]
        raise EnsmlError(f"{name}, line {line}: no {column} (every row needs its station's {role})")


def _station_table(long: pd.DataFrame, name: str) -> pd.DataFrame:
    """One row per station (in order of appearance): its position and elevation, the same on every row."""
    meta = [c for c in (LATITUDE, LONGITUDE, ELEVATION) if c in long]
    first = long.drop_duplicates(STATION).set_index(STATION)
    for col in meta:
        ref = first.loc[long[STATION], col].to_numpy()
        got = long[col].to_numpy()
        differ = ~(np.isclose(got, ref, rtol=0, atol=1e-6) | (np.isnan(got) & np.isnan(ref)))
        if differ.any():
            i = int(np.flatnonzero(differ)[0])
            st = long[STATION].iloc[i]
            raise EnsmlError(
                f"{name}: station {st!r} has {col} {ref[i]:g} on line {first.loc[st, 'line']} and "
                f"{got[i]:g} on line {long['line'].iloc[i]}; a station has one position"
            )
    return first[meta]


def _from_long(long: pd.DataFrame, name: str) -> xr.Dataset:
    stations = _station_table(long, name)
    keys = [STATION, TIME, *([LEVEL] if LEVEL in long else []), "variable"]
    obs = long.dropna(subset=["value"])
    repeated = obs[obs.duplicated(keys, keep=False)]
    conflict = repeated.groupby(keys, sort=False)["value"].transform("nunique") > 1
    if conflict.any():
        rows = repeated[conflict.to_numpy()]
        key = rows.iloc[0]
        same = rows[(rows[keys] == key[keys]).all(axis=1)]
        raise EnsmlError(
            f"{name}: station {key[STATION]!r} at {key[TIME]} has two values of {key['variable']!r} "
            f"({', '.join(f'{v:g}' for v in same['value'])} on lines "
            f"{', '.join(map(str, same['line']))}); give one"
        )
    obs = obs.drop_duplicates(keys)
    times = np.unique(long[TIME].to_numpy())
    index = {STATION: stations.index.to_numpy(dtype=str), TIME: times}
    data = {}
    for var, rows in obs.groupby("variable", sort=False):
        levels = rows[LEVEL] if LEVEL in rows else pd.Series(np.nan, index=rows.index)
        if levels.notna().any() and levels.isna().any():
            line = rows["line"].iloc[int(np.flatnonzero(levels.isna().to_numpy())[0])]
            raise EnsmlError(f"{name}, line {line}: variable {var!r} has rows with a level and rows without")
        dims = [STATION, TIME, *([LEVEL] if levels.notna().any() else [])]
        da = rows.set_index(dims)["value"].to_xarray()
        full = {**index, **({LEVEL: np.unique(levels.to_numpy())} if LEVEL in dims else {})}
        data[str(var)] = da.reindex(full).transpose(*dims)
    for var in long["variable"].unique():  # a variable never observed: all NaN
        shape = tuple(len(v) for v in index.values())
        data.setdefault(str(var), xr.DataArray(np.full(shape, np.nan), coords=index, dims=list(index)))
    coords = {c: (STATION, stations[c].to_numpy(dtype=np.float64)) for c in stations.columns}
    return xr.Dataset(data, coords={**index, **coords})


# -- netCDF ---------------------------------------------------------------------------------------
def _variable_along(ds: xr.Dataset, names: tuple[str, ...], standard: tuple[str, ...] = ()) -> str | None:
    for n, v in ds.variables.items():
        if v.dims == (STATION,) and (str(n).lower() in names or v.attrs.get("standard_name") in standard):
            return str(n)
    return None


def _from_netcdf(path: Path, name: str) -> xr.Dataset:
    # Read whole and closed here: a file left to the garbage collector is closed by whichever
    # thread collects it, and HDF5 crashed when that raced with an open in another thread.
    ds = load_dataset(path, "observations")
    if STATION not in ds.dims:
        raise EnsmlError(f"{name} has no {STATION} dim (dims: {', '.join(map(str, ds.dims)) or 'none'})")
    if TIME not in ds.dims and VALID_TIME in ds.dims:
        ds = ds.drop_vars(TIME, errors="ignore").rename({VALID_TIME: TIME})
    if TIME not in ds.dims:
        raise EnsmlError(f"{name} has no time or valid_time dim (dims: {', '.join(map(str, ds.dims))})")
    if not np.issubdtype(ds[TIME].dtype, np.datetime64) or np.isnat(ds[TIME].values).any():
        raise EnsmlError(f"{name}: its {TIME} values are not times that can be read ({ds[TIME].dtype})")
    meta = {}
    for role in (LATITUDE, LONGITUDE):
        if role not in ds.variables or ds[role].dims != (STATION,):
            raise EnsmlError(f"{name} has no {role} along {STATION} (one value per station)")
        meta[role] = ds[role].values.astype(np.float64)
    elev = _variable_along(
        ds, COLUMNS[ELEVATION] + ("station_elevation",), ("surface_altitude", "height_above_mean_sea_level")
    )
    if elev is not None:
        meta[ELEVATION] = ds[elev].values.astype(np.float64)
    ids_var = next(
        (
            str(n)
            for n, v in ds.variables.items()
            if v.dims == (STATION,) and v.attrs.get("cf_role") == "timeseries_id"
        ),
        None,
    )
    if ids_var is None:
        ids_var = STATION if STATION in ds.coords else _variable_along(ds, ("station_id", "id", "name"))
    raw = ds[ids_var].values if ids_var else np.arange(ds.sizes[STATION])
    ids = np.array([v.decode() if isinstance(v, bytes) else str(v) for v in raw], dtype=str)
    data = {}
    for var, da in ds.data_vars.items():
        if da.dims == (STATION,) or str(var) in meta or var == ids_var or var == elev:
            continue
        allowed = {STATION, TIME, LEVEL}
        if not set(da.dims) <= allowed or STATION not in da.dims or TIME not in da.dims:
            raise EnsmlError(
                f"{name}: variable {var!r} has dims ({', '.join(map(str, da.dims))}); "
                "observations are on (station, time) or (station, time, level)"
            )
        if not np.issubdtype(da.dtype, np.number):
            raise EnsmlError(f"{name}: variable {var!r} holds {da.dtype} values, not numbers")
        order = [STATION, TIME, *([LEVEL] if LEVEL in da.dims else [])]
        data[str(var)] = da.transpose(*order).astype(np.float64).drop_vars(list(ds.coords), errors="ignore")
    if not data:
        raise EnsmlError(f"{name} has no variable on (station, time)")
    for dim, values in ((STATION, ids), (TIME, ds[TIME].values)):
        uniq, counts = np.unique(values, return_counts=True)
        if (counts > 1).any():
            raise EnsmlError(
                f"{name}: {dim} {uniq[counts > 1][0]} appears {counts.max()} times; each must appear once"
            )
    coords = {
        STATION: ids,
        TIME: ds[TIME].values.astype("datetime64[ns]"),
        **({LEVEL: ds[LEVEL].values} if LEVEL in ds.dims else {}),
        **{k: (STATION, v) for k, v in meta.items()},
    }
    out = xr.Dataset({k: (v.dims, v.values, v.attrs) for k, v in data.items()}, coords=coords)
    return out.sortby(TIME)


def _check_positions(ds: xr.Dataset, name: str) -> None:
    lat, lon = ds[LATITUDE].values, ds[LONGITUDE].values
    for coord, values, lo, hi in ((LATITUDE, lat, -90, 90), (LONGITUDE, lon, -180, 360)):
        bad = ~((values >= lo) & (values <= hi))
        if bad.any():
            i = int(np.argmax(bad))
            raise EnsmlError(
                f"{name}: station {str(ds[STATION].values[i])!r} has {coord} {values[i]:g}, outside "
                f"[{lo}, {hi}] (degrees {'north' if coord == LATITUDE else 'east'})"
            )


# -- stations on a forecast grid ------------------------------------------------------------------
def on_grid(
    obs: xr.Dataset, grid: xr.Dataset, method: str, names: tuple[str, str]
) -> tuple[xr.Dataset, Points]:
    """The stations of ``obs`` inside ``grid``'s domain and where they fall on it (``method``).

    Stations outside are dropped with a note naming them; ``names``: how messages name the
    observations and the grid.

    Raises
    ------
    EnsmlError
        No station lies inside the grid's domain (naming some).
    """
    points = locate(grid, obs[LATITUDE].values, obs[LONGITUDE].values, method, names[1])
    outside = np.flatnonzero(~points.inside)
    if outside.size == 0:
        return obs, points
    listed = ", ".join(
        f"{str(obs[STATION].values[i])!r} ({obs[LATITUDE].values[i]:.2f}°N {obs[LONGITUDE].values[i]:.2f}°E)"
        for i in outside[:5]
    ) + (f" and {outside.size - 5} more" if outside.size > 5 else "")
    where = f"the {names[1]} ({describe(grid)})"
    if outside.size == points.inside.size:
        raise EnsmlError(f"{names[0]}: none of its {outside.size} stations lies inside {where}: {listed}")
    note(
        f"{outside.size} of {points.inside.size} stations of {names[0]} lie outside {where} "
        f"and are left out: {listed}"
    )
    keep = np.flatnonzero(points.inside)
    return obs.isel({STATION: keep}), points.subset(keep)


__all__ = [
    "COLUMNS",
    "EMBEDDING",
    "SAME_PLACE_DEG",
    "match_stations",
    "on_grid",
    "read_observations",
    "read_stations",
    "station_set_id",
]
