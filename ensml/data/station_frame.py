"""The forecast at stations beside the observations, aligned by valid time: the station frame.

What :func:`ensml.data.frame.build_frame` is for an analysis, :func:`build_station_frame` is for
station observations (:mod:`ensml.data.stations`): it opens the forecast (lazily) and the
observations, checks the variables, levels and lead times, places the stations on the
forecast's grid (:mod:`ensml.data.points`; those outside are dropped with a note), and reads the
model's surface height at the stations for the lapse-rate correction of 2 m temperature
(:mod:`ensml.data.heights`). :meth:`StationFrame.at` then reads one lead: the forecast values at
the stations only (a dask-backed selection of points, one init time a chunk) for the init
times whose valid time ``init_time + lead`` the observations hold, and the observations there.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import xarray as xr

from ensml.data.grid import check_same_grid
from ensml.data.heights import (
    STANDARD_LAPSE_RATE,
    check_heights,
    is_t2m,
    lapse_rate_correction,
    read_model_height,
)
from ensml.data.layouts.options import ReaderOptions
from ensml.data.open import check_lead_times, check_levels, open_inputs
from ensml.data.points import Points
from ensml.data.runfiles import choose_leads
from ensml.data.stations import on_grid, read_observations, read_stations
from ensml.errors import EnsmlError
from ensml.names import DEFAULT_K, ELEVATION, INIT_TIME, LEAD_TIME, LEVEL, STATION, TIME, units_of
from ensml.times import LeadLike, format_leads


@dataclass(frozen=True)
class Predictor:
    """A forecast field a station model reads beside the observed variables: ``key`` as given
    (``z850``: a variable on levels and its level in hPa; ``msl``: a surface variable)."""

    key: str
    variable: str
    level: float | None


def parse_predictors(keys: Sequence[str], fc: xr.Dataset, name: str) -> tuple[Predictor, ...]:
    """The predictors ``keys`` of the forecast ``fc`` (named ``name`` in errors).

    A key that is a variable of ``fc`` without levels is that field; otherwise its trailing
    digits are the level of the variable before them (``t850``).

    Raises
    ------
    EnsmlError
        A key that names no field of ``fc`` (naming its variables and levels), or one given twice.
    """
    out = []
    for key in keys:
        key = str(key)
        if key in fc.data_vars and LEVEL not in fc[key].dims:
            out.append(Predictor(key, key, None))
            continue
        var, digits = key.rstrip("0123456789"), key[len(key.rstrip("0123456789")) :]
        levels = [float(v) for v in np.atleast_1d(fc[LEVEL].values)] if LEVEL in fc.coords else []
        if not digits or var not in fc.data_vars or LEVEL not in fc[var].dims or float(digits) not in levels:
            fields = ", ".join(str(v) for v in fc.data_vars)
            raise EnsmlError(
                f"{name}: predictor {key!r} is no field of it: give a surface variable or a variable on "
                f"levels followed by its level in hPa (variables: {fields}; levels: "
                f"{', '.join(f'{x:g}' for x in levels) or 'none'})"
            )
        out.append(Predictor(key, var, float(digits)))
    seen = [p.key for p in out]
    if len(set(seen)) != len(seen):
        raise EnsmlError(f"{name}: a predictor is given twice ({', '.join(seen)})")
    return tuple(out)


@dataclass(frozen=True)
class StationLead:
    """One lead at the stations, in memory: ``forecast`` (init_time, member, [level], station),
    ``observed`` (init_time, [level], station; NaN: not observed), the init times whose valid time
    the observations hold."""

    lead: np.timedelta64
    forecast: xr.Dataset
    observed: xr.Dataset


@dataclass(frozen=True)
class StationFrame:
    """Forecast (lazy), observations at the stations inside its grid, and how to read one lead."""

    forecast: xr.Dataset  # lazy, the frame's variables, chunked one init time a chunk
    observations: xr.Dataset  # in memory, the stations inside the grid
    points: Points
    variables: list[str]
    levels: list[float]
    leads: np.ndarray  # timedelta64[ns]
    names: dict[str, str]
    model_height: xr.DataArray | None = None  # m, at the stations (station)
    lapse_rate: float = STANDARD_LAPSE_RATE
    predictors: tuple[Predictor, ...] = ()  # further forecast fields a station model reads

    def inits_at(self, lead: np.timedelta64) -> np.ndarray:
        """The forecast's init times whose valid time at ``lead`` the observations hold."""
        inits = self.forecast[INIT_TIME].values
        return inits[np.isin(inits + lead, self.observations[TIME].values)]

    def at_station_height(self, var: str, values: xr.DataArray) -> xr.DataArray:
        """Grid ``values`` of ``var`` at the stations (…, station) moved to the stations'
        heights: 2 m temperature when the frame has a model height, anything else unchanged."""
        if self.model_height is None or not is_t2m(var):
            return values
        elevation = self.observations[ELEVATION]
        return lapse_rate_correction(values, self.model_height, elevation, self.lapse_rate)

    def at(self, lead: np.timedelta64) -> StationLead:
        """The forecast at the stations (2 m temperature height-corrected, with a model height)
        and the observations, at ``lead``; raises on a NaN or infinite forecast value."""
        inits = self.inits_at(lead)
        fc = self.forecast[self.variables]  # not the predictors (ensml.data.station_table reads them)
        levels = {LEVEL: self.levels} if LEVEL in fc.dims else {}
        fc = fc.sel({INIT_TIME: inits, LEAD_TIME: lead, **levels})
        fc = self.points.extract(fc).load()
        _check_finite(fc, f"{self.names['forecast']} at the stations")
        for var in self.variables:
            fc[var] = self.at_station_height(var, fc[var])
        obs_levels = {LEVEL: self.levels} if LEVEL in self.observations.dims else {}
        obs = self.observations.reindex({TIME: inits + lead, **obs_levels})
        obs = obs.rename({TIME: INIT_TIME}).assign_coords({INIT_TIME: inits})
        coords = {c: self.observations[c] for c in self.observations[STATION].coords}
        return StationLead(lead, fc.assign_coords(coords), obs)


def _check_finite(ds: xr.Dataset, name: str) -> None:
    for var, da in ds.data_vars.items():
        bad = ~np.isfinite(da.values)
        if bad.any():
            raise EnsmlError(
                f"{name}: {int(bad.sum())} NaN or infinite value(s) of {var!r}; a forecast at stations "
                "must be complete"
            )


def _variables(obs: xr.Dataset, asked: Sequence[str] | None, name: str) -> list[str]:
    found = [str(v) for v in obs.data_vars]
    if not asked:
        return found
    missing = [v for v in asked if v not in found]
    if missing:
        raise EnsmlError(f"{name} has no variable {missing[0]!r} (found: {', '.join(found)})")
    return list(asked)


def _levels(
    fc: xr.Dataset, obs: xr.Dataset, variables: list[str], asked, names: dict[str, str]
) -> list[float]:
    for var in variables:
        on_fc, on_obs = LEVEL in fc[var].dims, LEVEL in obs[var].dims
        if on_fc != on_obs:
            fc_levels = ", ".join(f"{v:g}" for v in np.atleast_1d(fc[LEVEL].values)) if on_fc else ""
            which = f"on pressure levels ({fc_levels} hPa)" if on_fc else "a surface field"
            raise EnsmlError(
                f"{names['observations']}: variable {var!r} is {'' if on_obs else 'not '}observed on "
                f"levels, but the forecast's is {which}; give a level column for upper-air observations"
            )
    if not any(LEVEL in obs[v].dims for v in variables):
        return []
    levels = [float(x) for x in (asked if asked is not None else np.atleast_1d(obs[LEVEL].values))]
    check_levels(fc, levels, names["forecast"])
    return levels


def _model_height(source: str | xr.DataArray, fc: xr.Dataset, what: str) -> xr.DataArray:
    """The model's surface height on ``fc``'s grid: read from a file, or given (a station model
    keeps the field it was trained with), checked to be on the forecast's grid."""
    if isinstance(source, xr.DataArray):
        check_same_grid(fc, source.to_dataset(name="model_height"), what, "the model height")
        return source
    return read_model_height(source, fc, what)


def _unobserved(
    stations: xr.Dataset,
    fc: xr.Dataset,
    variables: Sequence[str],
    leads: np.ndarray,
    levels: Sequence[float] | None,
) -> xr.Dataset:
    """``stations`` with every variable NaN at every valid time of ``fc`` at ``leads`` (and at
    ``levels``, or the forecast's, for a variable on levels)."""
    valid = np.unique(fc[INIT_TIME].values[:, None] + np.asarray(leads)[None, :])
    ds = stations.assign_coords({TIME: valid})
    for var in variables:
        if var not in fc:
            continue  # open_inputs has named it
        on_levels = LEVEL in fc[var].dims
        at = np.asarray(levels if levels is not None else fc[LEVEL].values, np.float64) if on_levels else None
        dims = (STATION, TIME, *((LEVEL,) if on_levels else ()))
        shape = (ds.sizes[STATION], valid.size, *((at.size,) if on_levels else ()))
        ds[var] = xr.DataArray(np.full(shape, np.nan), dims=dims, coords={LEVEL: at} if on_levels else {})
    return ds


def build_station_frame(
    forecast: str | list[str],
    observations: str | xr.Dataset,
    *,
    variables: Sequence[str] | None = None,
    levels: Sequence[float] | None = None,
    leads: LeadLike | Sequence[LeadLike] | None = None,
    k: int = DEFAULT_K,
    extraction: str = "nearest",
    model_height: str | xr.DataArray | None = None,
    lapse_rate: float = STANDARD_LAPSE_RATE,
    reader: ReaderOptions | None = None,
    observed: bool = True,
    predictors: Sequence[str] = (),
) -> StationFrame:
    """Open, check and align a forecast and station observations (see the module docstring).

    ``variables``: those of the observations by default (the forecast must hold each);
    ``levels``: those observed by default (hPa, for upper-air observations); ``leads`` as
    :func:`ensml.data.runfiles.choose_leads` (every forecast lead but 0 h by default); ``k``: the
    subset size, checked against the members; ``extraction``: ``nearest`` or ``bilinear``.

    ``predictors``: further forecast fields a station model reads (:func:`parse_predictors`:
    ``z850``, ``msl``), opened beside the variables.

    ``observed=False`` builds the frame of a station *list* (a forecast for places, nothing to
    verify): ``observations`` is then any file :func:`ensml.data.stations.read_stations` reads
    (its observations, if any, are left aside) or its dataset of station coordinates,
    ``variables`` must be given, and every init time
    counts at every lead, its observation NaN.

    Raises
    ------
    EnsmlError
        One line naming the file: an unreadable or malformed observations file, a variable,
        level or lead the forecast lacks, fewer than ``k`` members, no station inside the grid,
        a model height without station elevations or 2 m temperature, no valid time observed.
    """
    what = "observations" if observed else "stations"
    given = isinstance(observations, xr.Dataset)
    source = observations.attrs.get("source", "given") if given else observations
    names = {"forecast": f"forecast {forecast}", "observations": f"{what} {source}"}
    if observed:
        if given:
            raise EnsmlError("observations are read from a file (a station list alone has none)")
        obs = read_observations(observations)
        variables = _variables(obs, variables, names["observations"])
    elif not variables:
        raise EnsmlError(f"a forecast at the stations of {observations} needs the variables to extract")
    else:
        obs = observations if given else read_stations(observations)
    read = None if predictors else variables  # predictors: every field, to find theirs
    fc = open_inputs(forecast, variables=read, k=k, names=(names["forecast"], ""), reader=reader).forecast
    missing = [v for v in variables if v not in fc.data_vars]
    if missing:  # as open_inputs says it when it opens the variables alone
        fc = open_inputs(
            forecast, variables=variables, k=k, names=(names["forecast"], ""), reader=reader
        ).forecast
    chosen = parse_predictors(predictors, fc, names["forecast"])
    fc = fc[list(dict.fromkeys([*variables, *(p.variable for p in chosen)]))]
    lead_list, _ = choose_leads(leads, [], fc[LEAD_TIME].values)
    if not observed:  # nothing observed: every valid time of the forecast, NaN
        obs = _unobserved(obs, fc, variables, lead_list, levels)
    levels = _levels(fc, obs, variables, levels, names)
    check_lead_times(fc, lead_list, names["forecast"])
    obs, points = on_grid(obs, fc, extraction, (names["observations"], names["forecast"]))
    if model_height is not None:  # the stations inside need their elevations
        elevation = obs[ELEVATION].values if ELEVATION in obs.coords else None
        check_heights(variables, elevation, obs[STATION].values, names["observations"])
    for var in variables:  # the observations' units are the forecast's (a CSV has none)
        fc_units = fc[var].attrs.get("units") or units_of(var)
        obs_units = obs[var].attrs.setdefault("units", fc_units)
        if str(obs_units).strip() != str(fc_units).strip():
            raise EnsmlError(
                f"{names['observations']}: {var!r} is in {obs_units}, the forecast's in {fc_units}; "
                "give both in the same units"
            )
    heights = (
        points.extract(_model_height(model_height, fc, names["forecast"]))
        if model_height is not None
        else None
    )
    if observed and not any(
        np.isin(fc[INIT_TIME].values + lead, obs[TIME].values).any() for lead in lead_list
    ):
        valid = fc[INIT_TIME].values[:, None] + lead_list[None, :]
        t = obs[TIME].values
        raise EnsmlError(
            f"{names['forecast']} at {format_leads(lead_list)} is valid from {valid.min()} to "
            f"{valid.max()}, and {names['observations']} holds no time among them (its times: "
            f"{t.min()} to {t.max()}); observations count at a valid time exactly"
        )
    if not any(var.chunks for var in fc.data_vars.values()):  # a selection of points reads one init at a time
        fc = fc.chunk({INIT_TIME: 1, LEAD_TIME: 1})
    return StationFrame(
        forecast=fc,
        observations=obs,
        points=points,
        variables=variables,
        levels=levels,
        leads=lead_list,
        names=names,
        model_height=heights,
        lapse_rate=float(lapse_rate),
        predictors=chosen,
    )


__all__ = ["Predictor", "StationFrame", "StationLead", "build_station_frame", "parse_predictors"]
