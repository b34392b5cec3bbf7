"""Station training data: the raw subset at every station and init time, beside the observation.

A station model (a distributional regression network with station embeddings, Rasp & Lerch
2018; station-wise EMOS) learns from pairs (what the ensemble said at the station, what the
station observed). :func:`station_table` reads them from a
:class:`~ensml.data.station_frame.StationFrame` (which opens, checks and aligns the forecast and
the observations, places the stations on the grid and moves 2 m temperature to their heights),
lead by lead, into one dataset with dims ``(lead_time, init_time, [member,] [level,] station)``:

* ``{var}`` ``(…, member, …)``: the K members of the raw subset at the station (``nearest`` or
  ``bilinear``, as the frame extracts; 2 m temperature height-corrected when the frame has a
  model height);
* ``{var}_mean``, ``{var}_std``: their mean and standard deviation (ddof 0, as the spread
  targets);
* with ``radius_km``, ``{var}_nbr_mean`` and ``{var}_nbr_std``: the mean and standard deviation
  of the K members pooled over every grid point within ``radius_km`` of the station on the
  great circle (at least the nearest point), of the grid's field as it is (not height-corrected:
  the points lie at different heights);
* ``{var}_obs``: the observation at ``init_time + lead_time`` (NaN: not observed, or no
  forecast of that init verifies then);
* with ``analysis``, ``{var}_analysis``: the gridded analysis at the station then (height-
  corrected as the members are);
* for each predictor of the frame (``z850``, ``msl``: further forecast fields,
  :func:`ensml.data.station_frame.parse_predictors`), ``{p}_mean``, ``{p}_grad_east`` and
  ``{p}_grad_north``: the subset mean of the field at the station and the eastward and
  northward components of its gradient there (per metre), the flow around the station that
  the observed variable alone does not give;

and the stations' static facts along ``station``: ``latitude``, ``longitude``, ``elevation``
(when the observations give it), ``model_height`` and ``height_difference`` (elevation less
model height, m; with a model height), and the fields of a static file (``static``: a land
fraction, a roughness …, at the stations).

:func:`table_rows` flattens one variable's table into the rows a station model trains on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import xarray as xr
from scipy import sparse
from scipy.spatial import cKDTree

from ensml.data.grid import check_same_grid, horizontal_dims, single_field
from ensml.data.open import load_dataset, open_analysis
from ensml.data.points import EARTH_RADIUS_M
from ensml.data.station_frame import Predictor, StationFrame
from ensml.data.subset import Subset
from ensml.errors import EnsmlError
from ensml.names import (
    ELEVATION,
    INIT_TIME,
    LATITUDE,
    LEAD_TIME,
    LEVEL,
    LONGITUDE,
    MEMBER,
    STATION,
    TIME,
    VALID_TIME,
)
from ensml.progress import Progress
from ensml.times import hours_of

#: The station facts :func:`table_rows` adds to the features, when the table has them.
STATIC = (LATITUDE, LONGITUDE, ELEVATION, "height_difference")


def _unit(lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
    lat, lon = np.deg2rad(lat), np.deg2rad(lon)
    return np.stack([np.cos(lat) * np.cos(lon), np.cos(lat) * np.sin(lon), np.sin(lat)], axis=-1)


@dataclass(frozen=True)
class Neighbourhood:
    """Grid points within a radius of each station: ``matrix`` (station × grid point, each row
    the equal weights of its points, summing to 1), over the grid flattened in its horizontal
    dims' order, and ``counts``, the points of each station."""

    radius_km: float
    dims: tuple[str, str]
    matrix: sparse.csr_matrix
    counts: np.ndarray

    def mean(self, field: xr.DataArray) -> xr.DataArray:
        """The neighbourhood mean of ``field`` (…, lat, lon) at each station: (…, station)."""
        lead = [d for d in field.dims if d not in self.dims]
        flat = field.transpose(*lead, *self.dims).values.reshape(-1, self.matrix.shape[1])
        out = (self.matrix @ flat.T).T.reshape(*(field.sizes[d] for d in lead), -1)
        return xr.DataArray(
            out, dims=(*lead, STATION), coords={d: field[d] for d in lead if d in field.coords}
        )


def neighbourhood(
    grid: xr.Dataset, latitude: np.ndarray, longitude: np.ndarray, radius_km: float
) -> Neighbourhood:
    """The grid points within ``radius_km`` (great circle) of each station (at least its nearest).

    Raises
    ------
    EnsmlError
        A radius that is not a positive number, or a grid without latitude/longitude.
    """
    if not (np.isfinite(radius_km) and radius_km > 0):
        raise EnsmlError(f"the neighbourhood radius must be a positive number of km, got {radius_km!r}")
    dims = horizontal_dims(grid)
    if dims is None or LATITUDE not in grid.coords or LONGITUDE not in grid.coords:
        raise EnsmlError("the forecast has no latitude/longitude grid to take neighbourhoods from")
    glat, glon = grid[LATITUDE], grid[LONGITUDE]
    if glat.ndim == 1:  # a regular grid: 1-D latitude and longitude along the two dims
        glat, glon = xr.broadcast(glat, glon)
    points = _unit(glat.transpose(*dims).values.ravel(), glon.transpose(*dims).values.ravel())
    stations = _unit(np.asarray(latitude, dtype=float), np.asarray(longitude, dtype=float))
    tree = cKDTree(points)
    chord = 2.0 * np.sin(min(radius_km * 1e3 / EARTH_RADIUS_M, np.pi) / 2.0)
    found = tree.query_ball_point(stations, chord)
    nearest = tree.query(stations)[1]
    rows, cols, counts = [], [], np.zeros(len(stations), dtype=int)
    for s, idx in enumerate(found):
        idx = idx or [int(nearest[s])]
        rows += [s] * len(idx)
        cols += list(idx)
        counts[s] = len(idx)
    weights = 1.0 / counts[np.asarray(rows, dtype=int)]
    matrix = sparse.csr_matrix((weights, (rows, cols)), shape=(len(stations), len(points)))
    return Neighbourhood(float(radius_km), dims, matrix, counts)


def read_static(path: str, grid: xr.Dataset) -> dict[str, xr.DataArray]:
    """The fields of a file of static facts on ``grid`` (a land fraction, a roughness …), by name.

    Every variable must be one finite field on the forecast's horizontal grid (dims of length 1
    besides, a time, are dropped) whose name is not already a station fact.

    Raises
    ------
    EnsmlError
        One line naming the file: unreadable, another grid, a variable with more than one field
        or non-finite values, or a name that is taken.
    """
    name = f"static fields file {path}"
    ds = load_dataset(path, "static fields")
    check_same_grid(grid, ds, "forecast", name)
    fields = {}
    for var, field in ds.data_vars.items():
        if str(var) in (*STATIC, "model_height", STATION):
            raise EnsmlError(f"{name}: {var!r} is a station fact the table has already; rename it")
        field = single_field(field, grid, name).astype(np.float64)
        if not np.isfinite(field.values).all():
            raise EnsmlError(f"{name}: {var!r} holds NaN or infinite values; a static fact must be complete")
        fields[str(var)] = field
    if not fields:
        raise EnsmlError(f"{name} holds no field")
    return fields


def station_table(
    frame: StationFrame,
    subset: Subset,
    radius_km: float | None = None,
    static: str | Mapping[str, xr.DataArray] | None = None,
    analysis: str | list[str] | None = None,
) -> xr.Dataset:
    """The station table of ``frame`` for the raw ``subset`` (see the module docstring).

    ``static``: a file of fields on the forecast's grid (:func:`read_static`: a land fraction,
    a roughness …), each taken at the stations as the frame extracts (nearest or bilinear) and
    added as a station fact (and so a feature of :func:`table_rows`). ``analysis``: the gridded
    analysis file(s) on the forecast's grid; ``{var}_analysis`` is then the analysis at the
    station at ``init_time + lead_time`` (2 m temperature moved to the station's height as the
    members are; NaN where the analysis lacks that time): the truth of the model's world where
    a station did not observe.

    Raises
    ------
    EnsmlError
        A subset with members the forecast lacks, a bad radius, a forecast without a grid, a
        static fields file that :func:`read_static` refuses, or an analysis that cannot be read,
        lacks a variable or is on another grid.
    """
    fields = _static_fields(static, frame.forecast)
    an = _open_analysis(analysis, frame) if analysis is not None else None
    n_members = frame.forecast.sizes[MEMBER]
    if not subset.fits(n_members):
        raise EnsmlError(
            f"{frame.names['forecast']} has {n_members} members; the subset asks for member "
            f"positions up to {max(subset.members)}"
        )
    obs = frame.observations
    nbr = (
        neighbourhood(frame.forecast, obs[LATITUDE].values, obs[LONGITUDE].values, radius_km)
        if radius_km
        else None
    )
    inits = frame.forecast[INIT_TIME].values
    per_lead = []
    with Progress("station table", len(frame.leads), "leads read") as progress:
        for lead in frame.leads:
            at = frame.at(lead)
            members = subset.take(at.forecast)
            one = xr.Dataset()
            for var in frame.variables:
                x = members[var]
                one[var] = x
                one[f"{var}_mean"] = x.mean(MEMBER)
                one[f"{var}_std"] = x.std(MEMBER)
                if nbr is not None:
                    one = one.merge(
                        _neighbourhood_stats(frame, subset, nbr, var, lead, at.forecast[INIT_TIME])
                    )
                one[f"{var}_obs"] = at.observed[var]
                if an is not None:
                    one[f"{var}_analysis"] = _analysis_at(frame, an, var, lead, at.forecast[INIT_TIME])
            for predictor in frame.predictors:
                one = one.merge(_predictor_stats(frame, subset, predictor, lead, at.forecast[INIT_TIME]))
            one = one.drop_vars(VALID_TIME, errors="ignore")  # the lead's own: the table has many
            per_lead.append(one.reindex({INIT_TIME: inits}).expand_dims({LEAD_TIME: [lead]}))
            progress.advance()
    table = xr.concat(per_lead, dim=LEAD_TIME, coords="minimal", compat="override")
    table = table.assign_coords({c: obs[c] for c in obs[STATION].coords if c != STATION})
    if frame.model_height is not None:
        height = frame.model_height.assign_coords({STATION: obs[STATION].values})
        table = table.assign_coords(model_height=height.reset_coords(drop=True))
        if ELEVATION in table.coords:
            table = table.assign_coords(height_difference=table[ELEVATION] - table["model_height"])
    for var, field in fields.items():
        at = frame.points.extract(field).values  # (station,)
        table = table.assign_coords({var: (STATION, at, dict(field.attrs))})
    table.attrs.update(
        static=list(fields),
        k=subset.k,
        members=list(subset.members),
        extraction=frame.points.method,
        radius_km=float(radius_km) if radius_km else 0.0,
        predictors=[p.key for p in frame.predictors],
    )
    return table


def _static_fields(
    static: str | Mapping[str, xr.DataArray] | None, grid: xr.Dataset
) -> dict[str, xr.DataArray]:
    """The static fields by name: read from a file (:func:`read_static`), or given (a station
    model keeps the fields it was trained with), checked to be on ``grid``."""
    if static is None:
        return {}
    if isinstance(static, str):
        return read_static(static, grid)
    for name, field in static.items():
        check_same_grid(grid, field.to_dataset(name=name), "forecast", f"static field {name}")
    return dict(static)


def _open_analysis(paths: str | list[str], frame: StationFrame) -> xr.Dataset:
    """The analysis of the frame's variables, lazily, checked to be on the forecast's grid."""
    an = open_analysis(paths, variables=frame.variables)
    check_same_grid(frame.forecast, an, frame.names["forecast"], f"analysis {paths}")
    return an


def _analysis_at(
    frame: StationFrame, an: xr.Dataset, var: str, lead: np.timedelta64, inits: xr.DataArray
) -> xr.DataArray:
    """The analysis of ``var`` at the stations at ``inits + lead`` (t2m height-corrected)."""
    levels = {LEVEL: frame.levels} if LEVEL in an[var].dims else {}
    valid = inits.values + lead
    field = an[var].reindex({TIME: valid}).sel(levels)
    at = frame.points.extract(field).load().rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits.values})
    at = frame.at_station_height(var, at)
    return at.drop_vars([c for c in at.coords if c not in at.dims])


def _neighbourhood_stats(
    frame: StationFrame,
    subset: Subset,
    nbr: Neighbourhood,
    var: str,
    lead: np.timedelta64,
    inits: xr.DataArray,
) -> xr.Dataset:
    """The members' mean and std pooled over each station's neighbourhood, at one lead."""
    levels = {LEVEL: frame.levels} if LEVEL in frame.forecast[var].dims else {}
    field = subset.take(frame.forecast[var].sel({INIT_TIME: inits.values, LEAD_TIME: lead, **levels}))
    field = field.astype(np.float64).load()
    first = nbr.mean(field.mean(MEMBER))
    second = nbr.mean((field**2).mean(MEMBER))
    std = np.sqrt(np.maximum(second - first**2, 0.0))
    return xr.Dataset({f"{var}_nbr_mean": first, f"{var}_nbr_std": std}).assign_coords(
        {INIT_TIME: inits.values}
    )


def _predictor_stats(
    frame: StationFrame, subset: Subset, predictor: Predictor, lead: np.timedelta64, inits: xr.DataArray
) -> xr.Dataset:
    """A predictor's subset mean at the stations and the east and north components of its
    gradient there (per metre: centred differences on the great circle, periodic in longitude
    on a global grid, one-sided at a regional grid's edges), at one lead."""
    if horizontal_dims(frame.forecast) != (LATITUDE, LONGITUDE):
        raise EnsmlError(
            f"{frame.names['forecast']}: predictor {predictor.key!r} needs a regular latitude/longitude "
            "grid (its gradient)"
        )
    level = {LEVEL: predictor.level} if predictor.level is not None else {}
    field = frame.forecast[predictor.variable].sel({INIT_TIME: inits.values, LEAD_TIME: lead, **level})
    mean = subset.take(field).astype(np.float64).mean(MEMBER).transpose(INIT_TIME, LATITUDE, LONGITUDE).load()
    lat = np.deg2rad(mean[LATITUDE].values)
    lon = np.deg2rad(mean[LONGITUDE].values)
    values = mean.values
    north = np.gradient(values, lat, axis=1) / EARTH_RADIUS_M
    step = np.diff(lon).mean() if lon.size > 1 else 0.0
    if lon.size > 2 and abs(step * lon.size - 2 * np.pi) < 1e-3 * 2 * np.pi:  # global: periodic
        d_lon = (np.roll(values, -1, axis=2) - np.roll(values, 1, axis=2)) / (2 * step)
    else:
        d_lon = np.gradient(values, lon, axis=2)
    east = d_lon / (EARTH_RADIUS_M * np.maximum(np.cos(lat), 1e-6)[None, :, None])
    key, units = predictor.key, field.attrs.get("units", "")
    grid = xr.Dataset(
        {
            f"{key}_mean": mean,
            f"{key}_grad_east": mean.copy(data=east),
            f"{key}_grad_north": mean.copy(data=north),
        }
    )
    at = frame.points.extract(grid)
    for name, what, per in (("mean", "subset mean", ""), ("grad_east", "eastward gradient", " m-1")):
        at[f"{key}_{name}"].attrs.update(long_name=f"{key}: {what}", units=f"{units}{per}".strip())
    at[f"{key}_grad_north"].attrs.update(long_name=f"{key}: northward gradient", units=f"{units} m-1".strip())
    return at.assign_coords({INIT_TIME: inits.values}).drop_vars(
        [c for c in at.coords if c not in (INIT_TIME, STATION)], errors="ignore"
    )


@dataclass(frozen=True)
class Rows:
    """One variable's station table as training rows: ``features`` (N, F), the ``station``
    positions (N,), the observations ``obs`` (N,) and the feature ``names`` (F); rows whose
    observation or a feature is missing are left out (``dropped`` counts them)."""

    features: np.ndarray
    station: np.ndarray
    obs: np.ndarray
    names: tuple[str, ...]
    dropped: int


#: The columns of a predictor ``p`` (``{p}_{suffix}``): its subset mean at the station and the
#: eastward and northward components of its gradient there.
PREDICTOR_COLUMNS = ("mean", "grad_east", "grad_north")
#: The per-variable columns of a station table beside the members, ``{var}_{suffix}``.
COLUMNS = ("mean", "std", "nbr_mean", "nbr_std", "obs", "analysis")


def variable_table(table: xr.Dataset, var: str, level: float | None = None) -> xr.Dataset:
    """``var``'s columns of the table (:data:`COLUMNS`, those it has), at pressure ``level`` for
    a variable on levels, with dims ``(lead_time, init_time, station)``.

    Raises
    ------
    EnsmlError
        The table has no ``var``, or ``var`` is on levels and ``level`` is missing or not one
        of them.
    """
    if f"{var}_obs" not in table:
        found = sorted(str(v)[:-4] for v in table.data_vars if str(v).endswith("_obs"))
        raise EnsmlError(f"the station table has no variable {var!r} (it has: {', '.join(found)})")
    one = table[[f"{var}_{c}" for c in COLUMNS if f"{var}_{c}" in table]]
    if LEVEL in one.dims:
        levels = one[LEVEL].values
        if level is None or level not in levels:
            raise EnsmlError(
                f"{var!r} is on levels {', '.join(f'{x:g}' for x in levels)} hPa; choose one, got {level}"
            )
        one = one.sel({LEVEL: level})
    return one.transpose(LEAD_TIME, INIT_TIME, STATION)


def table_features(
    table: xr.Dataset, var: str, level: float | None = None
) -> tuple[tuple[str, ...], np.ndarray]:
    """The features of ``var`` (at pressure ``level`` for a variable on levels) at every lead,
    init time and station: their names (F) and values ``(lead_time, init_time, station, F)``.

    Features: the raw subset's mean and std at the station, the neighbourhood's (with a
    radius), the lead in hours, the day of the year as sine and cosine of the valid time, the
    predictors' columns (:data:`PREDICTOR_COLUMNS`), and the station facts the table has
    (:data:`STATIC`, then the static fields).

    Raises
    ------
    EnsmlError
        As :func:`variable_table`.
    """
    one = variable_table(table, var, level)
    shape = one[f"{var}_mean"].shape
    valid = one[INIT_TIME].values[None, :] + one[LEAD_TIME].values[:, None]
    doy = 2 * np.pi * (valid.astype("datetime64[D]") - valid.astype("datetime64[Y]")).astype(float) / 365.25
    columns = {
        "mean": one[f"{var}_mean"].values,
        "std": one[f"{var}_std"].values,
        "nbr_mean": one[f"{var}_nbr_mean"].values if f"{var}_nbr_mean" in one else None,
        "nbr_std": one[f"{var}_nbr_std"].values if f"{var}_nbr_std" in one else None,
        "lead_hours": hours_of(one[LEAD_TIME].values)[:, None, None],
        "doy_sin": np.sin(doy)[:, :, None],
        "doy_cos": np.cos(doy)[:, :, None],
    }
    for key in table.attrs.get("predictors", []):
        for part in PREDICTOR_COLUMNS:
            columns[f"{key}_{part}"] = table[f"{key}_{part}"].transpose(LEAD_TIME, INIT_TIME, STATION).values
    facts = [c for c in STATIC if c in table.coords] + list(table.attrs.get("static", []))
    columns |= {c: table[c].values[None, None, :] for c in facts}
    names = tuple(k for k, v in columns.items() if v is not None)
    return names, np.stack([np.broadcast_to(columns[k], shape) for k in names], axis=-1)


def table_rows(table: xr.Dataset, var: str, level: float | None = None) -> Rows:
    """The rows of ``var`` (at pressure ``level`` for a variable on levels) for a station model:
    the features of :func:`table_features` and the observation, where both are complete.

    Raises
    ------
    EnsmlError
        As :func:`variable_table`.
    """
    names, features = table_features(table, var, level)
    shape = features.shape[:3]
    x = features.reshape(-1, len(names))
    y = variable_table(table, var, level)[f"{var}_obs"].values.reshape(-1)
    station = np.broadcast_to(np.arange(shape[2]), shape).reshape(-1)
    keep = np.isfinite(y) & np.isfinite(x).all(axis=1)
    return Rows(x[keep], station[keep], y[keep], names, int((~keep).sum()))


__all__ = [
    "COLUMNS",
    "PREDICTOR_COLUMNS",
    "STATIC",
    "Neighbourhood",
    "Rows",
    "neighbourhood",
    "read_static",
    "station_table",
    "table_features",
    "table_rows",
    "variable_table",
]
