"""The single vocabulary of ensml: dimension names, aliases, units and CF attributes.

Every reader renames what other sources call these dimensions on open, so that the rest of
the code sees one vocabulary. Conventions fixed here:

* latitude runs north to south (90 → -90), as ECMWF/ENS-10 grids do;
* longitude runs 0 → 360 (east), periodic on a global grid;
* ``lead_time`` is ``timedelta64[ns]``; ``valid_time = init_time + lead_time`` is a coordinate;
* ``level`` is pressure in hPa;
* tensors are float32.

Lead times are one type inside ensml: ``numpy.timedelta64`` in nanoseconds. Hours exist only at
the edges (command line, YAML, table headers, file attributes) and are converted here, by
:func:`parse_lead` / :func:`parse_leads` (``24``, ``"24"``, ``"24h"``, ``"90min"``, ``"P1D"``,
``"PT36H"``) and :func:`lead_hours` / :func:`format_lead` / :func:`iso_lead` back; nothing else
converts hours. A lead is at most :data:`MAX_LEAD_HOURS` (ten years).

Dates are ``numpy.datetime64`` in nanoseconds, which holds 1677-09-22 … 2262-04-11: every date an
option gives is read by :func:`parse_date`, which refuses one outside that span (numpy and
pandas would otherwise wrap it around into another century, or overflow later).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np

from ensml.errors import EnsmlError

# Dimensions, in the canonical order of an ensemble forecast array.
#: Initialisation time of a forecast (datetime64).
INIT_TIME = "init_time"
#: Lead time, ``timedelta64[ns]``.
LEAD_TIME = "lead_time"
#: Ensemble member number.
MEMBER = "member"
#: The dimension of quantile levels (products, model climates); its coordinate holds the levels.
QUANTILE = "quantile"
#: Pressure level, hPa.
LEVEL = "level"
#: Latitude, degrees north, running north to south.
LATITUDE = "latitude"
#: Longitude, degrees east, in [0, 360).
LONGITUDE = "longitude"
#: ``init_time + lead_time``: a coordinate, not a dimension, of forecasts.
VALID_TIME = "valid_time"
#: A station of point observations (``ensml evaluate --observations``); its coordinate holds the ids.
STATION = "station"
#: A station's height above mean sea level, metres (a coordinate along ``station``).
ELEVATION = "elevation"

#: The subset size K (members given to a model) when neither a run's metadata nor the user gives one.
DEFAULT_K = 5

#: The dimensions of an ensemble forecast variable, in their canonical order.
FORECAST_DIMS = (INIT_TIME, LEAD_TIME, MEMBER, LEVEL, LATITUDE, LONGITUDE)
#: The verifying analysis is indexed by valid time ("time" in files, renamed on open).
TIME = "time"
#: The dimensions of an analysis variable, in their canonical order.
ANALYSIS_DIMS = (TIME, LEVEL, LATITUDE, LONGITUDE)
#: The horizontal dimensions.
SPATIAL_DIMS = (LATITUDE, LONGITUDE)

#: What other sources call the dimensions (cfgrib, ENS-10, CMIP-like files, WeatherBench), renamed
#: on open.
DIM_ALIASES: dict[str, str] = {
    "number": MEMBER,
    "realization": MEMBER,
    "ensemble_member": MEMBER,
    "step": LEAD_TIME,
    "prediction_timedelta": LEAD_TIME,
    "isobaricInhPa": LEVEL,
    "pressure_level": LEVEL,
    "plev": LEVEL,
    "lat": LATITUDE,
    "lon": LONGITUDE,
    "forecast_reference_time": INIT_TIME,
}

#: CF attributes of the coordinates.
COORD_ATTRS: dict[str, dict[str, str]] = {
    INIT_TIME: {"standard_name": "forecast_reference_time", "long_name": "initialisation time"},
    LEAD_TIME: {"standard_name": "forecast_period", "long_name": "lead time"},
    VALID_TIME: {"standard_name": "time", "long_name": "valid time"},
    TIME: {"standard_name": "time", "long_name": "valid time of the analysis"},
    MEMBER: {"long_name": "ensemble member number", "units": "1"},
    LEVEL: {
        "standard_name": "air_pressure",
        "long_name": "pressure level",
        "units": "hPa",
        "positive": "down",
        "axis": "Z",
    },
    LATITUDE: {
        "standard_name": "latitude",
        "long_name": "latitude",
        "units": "degrees_north",
        "axis": "Y",
    },
    LONGITUDE: {
        "standard_name": "longitude",
        "long_name": "longitude",
        "units": "degrees_east",
        "axis": "X",
    },
}

#: CF attributes of the physical variables ensml knows by name. Others pass through unchanged.
VARIABLE_ATTRS: dict[str, dict[str, str]] = {
    "z": {"standard_name": "geopotential", "long_name": "geopotential", "units": "m2 s-2"},
    "t": {"standard_name": "air_temperature", "long_name": "temperature", "units": "K"},
    "q": {"standard_name": "specific_humidity", "long_name": "specific humidity", "units": "kg kg-1"},
    "u": {"standard_name": "eastward_wind", "long_name": "U component of wind", "units": "m s-1"},
    "v": {"standard_name": "northward_wind", "long_name": "V component of wind", "units": "m s-1"},
    "w": {
        "standard_name": "lagrangian_tendency_of_air_pressure",
        "long_name": "vertical velocity",
        "units": "Pa s-1",
    },
    "t2m": {"standard_name": "air_temperature", "long_name": "2 metre temperature", "units": "K"},
    # ECMWF's tp is in metres of water: readers convert it (ensml.data.normalise)
    "tp": {"standard_name": "precipitation_amount", "long_name": "total precipitation", "units": "kg m-2"},
    "si10": {"standard_name": "wind_speed", "long_name": "10 metre wind speed", "units": "m s-1"},
    "msl": {
        "standard_name": "air_pressure_at_mean_sea_level",
        "long_name": "mean sea level pressure",
        "units": "Pa",
    },
}


#: The predictive family a variable gets when the config names none (``model.distribution``):
#: precipitation a censored shifted gamma, wind speed a normal truncated at 0, the rest a normal.
#: Keys are variable names as ensml reads them (ECMWF short names) or CF standard names.
DEFAULT_FAMILIES: dict[str, str] = {
    "tp": "csg0",
    "cp": "csg0",
    "lsp": "csg0",
    "precipitation_amount": "csg0",
    "lwe_thickness_of_precipitation_amount": "csg0",
    "si10": "truncnormal",
    "ws": "truncnormal",
    "wind_speed": "truncnormal",
}


#: The parameters of each predictive family, as files name them (``{var}_{param}``); the
#: families themselves are :mod:`ensml.scores.distributions`.
FAMILY_PARAMS: dict[str, tuple[str, ...]] = {
    "normal": ("mean", "std"),
    "truncnormal": ("loc", "scale"),
    "trunclogistic": ("loc", "scale"),
    "cnormal": ("loc", "scale"),
    "clogistic": ("loc", "scale"),
    "csg0": ("shape", "scale", "shift"),
}
#: The Bernstein quantile network's degree when a config says just ``bqn``.
BQN_DEFAULT_DEGREE = 8


def bqn_degree(name: str) -> int:
    """``bqn`` → the default degree, ``bqn:12`` → 12 (2 … 30); a one-line error otherwise."""
    match = re.fullmatch(r"bqn(?::(\d+))?", name)
    if not match:
        raise EnsmlError(f"unknown distribution {name!r}: the quantile network is 'bqn' or 'bqn:<degree>'")
    degree = int(match.group(1) or BQN_DEFAULT_DEGREE)
    if not 2 <= degree <= 30:
        raise EnsmlError(f"bqn degree must be 2 … 30, got {degree} in {name!r}")
    return degree


def family_params(name: str) -> tuple[str, ...]:
    """The parameter names of the family ``name`` (``bqn:<d>``: ``alpha0`` … ``alpha<d>``)."""
    if name.startswith("bqn"):
        return tuple(f"alpha{j}" for j in range(bqn_degree(name) + 1))
    if name not in FAMILY_PARAMS:
        raise EnsmlError(f"unknown distribution {name!r} (known: {', '.join([*FAMILY_PARAMS, 'bqn'])})")
    return FAMILY_PARAMS[name]


def default_family(var: str, standard_name: str | None = None) -> str:
    """The family of ``var`` when none is configured (see :data:`DEFAULT_FAMILIES`)."""
    return DEFAULT_FAMILIES.get(var) or DEFAULT_FAMILIES.get(standard_name or "", "normal")


def family_names(
    variables: Sequence[str], distribution: Mapping[str, str] | None, option: str = "model.distribution"
) -> tuple[str, ...]:
    """The family of each of ``variables``: ``distribution[var]`` where given, else the default.

    Names come back canonical (``bqn:8`` is ``bqn``, the default degree). A one-line error names
    ``option`` and the value for a variable not among ``variables`` or a family ensml does not
    know. The families themselves are :func:`ensml.scores.distributions.resolve_families`.
    """
    if distribution is not None and not isinstance(distribution, Mapping):
        raise EnsmlError(f"{option} must map variables to families, e.g. {{tp: csg0}}, got {distribution!r}")
    chosen = {str(k): str(v).strip() for k, v in (distribution or {}).items()}
    unknown = [v for v in chosen if v not in variables]
    if unknown:
        raise EnsmlError(
            f"{option} names {', '.join(unknown)}, not among the variables ({', '.join(variables)})"
        )
    names = []
    for var in variables:
        name = chosen.get(var, default_family(var))
        try:
            family_params(name)
        except EnsmlError as exc:
            raise EnsmlError(f"{option}.{var}: {exc}") from None
        if name.startswith("bqn"):
            degree = bqn_degree(name)
            name = "bqn" if degree == BQN_DEFAULT_DEGREE else f"bqn:{degree}"
        names.append(name)
    return tuple(names)


def as_list(value: Any, option: str) -> list | None:
    """An option that takes one item or several (``--variables tp``, ``--levels [500, 850]``) as a
    list; None (the option left out: all of them) stays None.

    Raises :class:`EnsmlError` for an empty list (it would silently mean "all") or an item given
    twice (it would be read and scored twice).
    """
    if value is None:
        return None
    values = [value] if isinstance(value, str | int | float) else list(value)
    if not values:
        raise EnsmlError(f"{option} is empty: leave the option out for all of them, or name at least one")
    check_distinct(option, values)
    return values


def check_distinct(option: str, values: Sequence[object]) -> None:
    """Raise :class:`EnsmlError` when ``values`` (of ``option``) names an item more than once."""
    values = list(values)
    seen = [v for i, v in enumerate(values) if v in values[:i]]
    if seen:
        again = ", ".join(str(v) for v in dict.fromkeys(seen))
        raise EnsmlError(f"{option} {values} repeats {again}: give each once")


def units_of(var: str, default: str = "1") -> str:
    """Units of a known variable (``default`` when ensml does not know it)."""
    return VARIABLE_ATTRS.get(var, {}).get("units", default)


# -- lead time: one type inside (timedelta64[ns]), hours at the edges ------------------------------
#: The dtype of lead times everywhere inside ensml.
LEAD_DTYPE = "timedelta64[ns]"
#: One hour, as a lead time.
HOUR = np.timedelta64(1, "h").astype(LEAD_DTYPE)

#: Something a user may write for a lead time: hours as a number, or a string (see :func:`parse_lead`).
LeadLike = int | float | str | np.timedelta64 | _dt.timedelta

#: The longest lead time ensml takes, in hours (3650 days: a decadal forecast's; a lead must also
#: fit in ``timedelta64[ns]``, about 292 years, and keep valid times within :data:`LAST_DATE`).
MAX_LEAD_HOURS = 87_600

_UNITS = {"d": 86400, "h": 3600, "min": 60, "s": 1}
_PLAIN = re.compile(r"^\+?\s*(\d+(?:\.\d*)?)\s*(d|h|min|s)?$", re.IGNORECASE)
_NUM = r"(\d+(?:\.\d+)?)"
_ISO = re.compile(rf"^P(?:{_NUM}D)?(?:T(?:{_NUM}H)?(?:{_NUM}M)?(?:{_NUM}S)?)?$")


def _seconds(value: LeadLike) -> float:
    """Seconds of ``value``, or a one-line error naming what was given."""
    if isinstance(value, bool):
        raise EnsmlError(f"lead time {value!r} is not a duration (give hours, e.g. 24, '24h' or 'P1D')")
    if isinstance(value, np.timedelta64):
        if np.isnat(value):
            raise EnsmlError("lead time is NaT (not a time)")
        return float(value / np.timedelta64(1, "s"))
    if isinstance(value, _dt.timedelta):
        return value.total_seconds()
    if isinstance(value, int | np.integer):  # clamped: float() of 10**400 overflows, and past 10**18 h
        return float(max(-(10**18), min(int(value), 10**18))) * 3600.0  # only the range matters
    if isinstance(value, float | np.floating):
        if not np.isfinite(value):
            raise EnsmlError(f"lead time {value!r} is not finite")
        return float(value) * 3600.0
    text = str(value).strip()
    plain = _PLAIN.match(text)
    if plain:
        return float(plain.group(1)) * _UNITS[(plain.group(2) or "h").lower()]
    iso = _ISO.match(text.upper()) if text.upper() not in ("P", "PT") else None
    if iso and any(iso.groups()):
        d, h, m, s = (float(g) if g else 0.0 for g in iso.groups())
        return d * 86400 + h * 3600 + m * 60 + s
    raise EnsmlError(
        f"lead time {value!r} is not understood: give hours (24), a number with a unit "
        "('24h', '90min', '2d') or an ISO 8601 duration ('P1D', 'PT36H')"
    )


def parse_lead(value: LeadLike) -> np.timedelta64:
    """One lead time as ``timedelta64[ns]``.

    Parameters
    ----------
    value
        A number of hours (``24``, ``1.5``), a string of hours or with a unit (``"24"``,
        ``"24h"``, ``"+24 h"``, ``"90min"``, ``"2d"``), an ISO 8601 duration (``"P1D"``,
        ``"PT36H"``, ``"P1DT12H"``), a ``numpy.timedelta64`` or a ``datetime.timedelta``.

    Raises
    ------
    EnsmlError
        One line, for anything else, a negative lead, a lead over :data:`MAX_LEAD_HOURS` or a
        lead that is not whole seconds.
    """
    seconds = _seconds(value)
    if seconds < 0:
        raise EnsmlError(f"lead time {value!r} is negative; lead times are >= 0")
    if seconds > MAX_LEAD_HOURS * 3600:
        raise EnsmlError(
            f"lead time {value!r} is out of range (must be >= 0 and <= {MAX_LEAD_HOURS} h, ten years)"
        )
    if seconds != round(seconds):
        raise EnsmlError(f"lead time {value!r} is not a whole number of seconds")
    return np.timedelta64(round(seconds), "s").astype(LEAD_DTYPE)


def parse_leads(values: LeadLike | Iterable[LeadLike]) -> np.ndarray:
    """One or several lead times as a 1-D ``timedelta64[ns]`` array, in the order given.

    A string holding several leads (``"24, 48"``, ``"[24, 48]"``) is split at commas.
    """
    if isinstance(values, str):
        parts = [p for p in values.strip().strip("[]").split(",") if p.strip()]
        values = parts if len(parts) != 1 else parts[0]
    if isinstance(values, np.ndarray) and np.issubdtype(values.dtype, np.timedelta64):
        items: list = list(values.ravel())
    elif isinstance(values, str | int | float | np.integer | np.floating | np.timedelta64 | _dt.timedelta):
        items = [values]
    else:
        items = list(values)
    return np.array([parse_lead(v) for v in items], dtype=LEAD_DTYPE)


def lead_hours(lead: LeadLike) -> int:
    """A lead time in whole hours, for tables, messages and YAML (an error if not whole hours)."""
    td = parse_lead(lead)
    hours, rest = divmod(td, HOUR)
    if rest:
        raise EnsmlError(f"lead time {format_lead(td)} is not a whole number of hours")
    return int(hours)


def hours_of(durations: Any) -> np.ndarray:
    """Lead times (or any ``timedelta64`` durations, an array or a Series) in hours, as floats: for
    formulas, table columns and plots (the one place durations become hours)."""
    return np.asarray(durations) / HOUR


def from_hours(hours: Any) -> np.ndarray:
    """Hours (numbers, whole or not) as ``timedelta64[ns]`` durations (exact to the nanosecond for
    whole hours up to about 2·10⁷ h)."""
    return (np.asarray(hours, dtype=float) * 3600e9).astype(LEAD_DTYPE)


def truncated_hours(hours: Any) -> np.ndarray:
    """Numbers read from a file as hours (a lead-time coordinate without units), whole hours
    towards zero, as ``timedelta64[ns]``."""
    return np.asarray(hours).astype("timedelta64[h]").astype(LEAD_DTYPE)


def format_lead(lead: LeadLike) -> str:
    """A lead time as people read it: ``"24 h"``, ``"90 min"``, ``"36 s"``."""
    seconds = int(parse_lead(lead) / np.timedelta64(1, "s"))
    if seconds % 3600 == 0:
        return f"{seconds // 3600} h"
    if seconds % 60 == 0:
        return f"{seconds // 60} min"
    return f"{seconds} s"


def iso_lead(lead: LeadLike) -> str:
    """A lead time as an ISO 8601 duration (``"PT24H"``), as file attributes hold it."""
    seconds = int(parse_lead(lead) / np.timedelta64(1, "s"))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    parts = [f"{n}{unit}" for n, unit in ((hours, "H"), (minutes, "M"), (secs, "S")) if n]
    return "PT" + ("".join(parts) or "0H")


def format_leads(leads: LeadLike | Iterable[LeadLike]) -> str:
    """Several lead times for messages: ``"0, 24, 48 h"`` (one unit when all are whole hours)."""
    values = parse_leads(leads)
    if values.size and not (values % HOUR).any():
        return ", ".join(str(int(v // HOUR)) for v in values) + " h"
    return ", ".join(format_lead(v) for v in values) or "none"


# -- dates: one type inside (datetime64[ns]), checked where an option gives one --------------------
#: The first whole day ``datetime64[ns]`` holds (it runs from 1677-09-21 00:12:43 to
#: 2262-04-11 23:47:16): the start of the span of every date ensml takes.
FIRST_DATE = np.datetime64("1677-09-22", "ns")
#: The last whole day ``datetime64[ns]`` holds: the end of the span of every date ensml takes.
LAST_DATE = np.datetime64("2262-04-11", "ns")
# (the days as text: numpy 2.4 turns 1677-09-22 in ns into 2262-04-11 when cast to days)
_DATES = "must be a date in 1677-09-22 … 2262-04-11, the span datetime64[ns] holds"

#: Something a user may write for a date: ISO text (``"2017-01-01"``, ``"2017-01-01T12"``), a
#: ``datetime.date``/``datetime`` (YAML reads bare dates as these) or a ``numpy.datetime64``.
DateLike = str | _dt.date | np.datetime64


def parse_date(value: DateLike, option: str) -> np.datetime64:
    """One date as ``datetime64[ns]``, or a one-line error naming ``option``.

    Parameters
    ----------
    value
        The date as given (see :data:`DateLike`); a time zone is converted to UTC.
    option
        What gave it, for the message (``"option --start"``, ``"train_period"``).

    Raises
    ------
    EnsmlError
        ``<option>: <value> is not a date …`` or ``<option>: <value> is out of range (must be a
        date in 1677-09-22 … 2262-04-11, …)``.
    """
    import pandas as pd  # here, not at import: names is read by every module, pandas is slow to load

    try:
        # no digits: not a date, nor "now" or "today" (pandas reads them as the clock's date)
        if (
            isinstance(value, bool)
            or value is None
            or (isinstance(value, str) and not any(map(str.isdigit, value)))
        ):
            raise ValueError(value)
        stamp = pd.Timestamp(value.isoformat() if isinstance(value, _dt.date) else value)
    except (ValueError, TypeError, OverflowError) as err:
        if "out of range" in str(err) or "Out of bounds" in str(err):
            raise EnsmlError(f"{option}: {value} is out of range ({_DATES})") from None
        raise EnsmlError(f"{option}: {value!r} is not a date (e.g. 2017-01-01 or 2017-01-01T12:00)") from None
    if stamp is pd.NaT:
        raise EnsmlError(f"{option}: {value!r} is not a date (e.g. 2017-01-01 or 2017-01-01T12:00)")
    if stamp.tzinfo is not None:
        stamp = stamp.tz_convert("UTC").tz_localize(None)
    if not pd.Timestamp(FIRST_DATE) <= stamp <= pd.Timestamp(LAST_DATE):
        raise EnsmlError(f"{option}: {value} is out of range ({_DATES})")
    return stamp.as_unit("ns").to_datetime64()


def date_after(date: np.datetime64, seconds: int, what: str) -> np.datetime64:
    """``date + seconds`` (a date of :func:`parse_date`, ``seconds`` >= 0), or a one-line error
    naming ``what`` when that passes :data:`LAST_DATE` (``datetime64[ns]`` would wrap around)."""
    room = int((LAST_DATE.astype("datetime64[s]") - np.datetime64(date, "s")).astype(np.int64))
    if int(seconds) > room:
        raise EnsmlError(
            f"{what}: {np.datetime64(date, 's')} + {int(seconds) / 86400:g} days runs past "
            "2262-04-11, the last date datetime64[ns] holds"
        )
    return np.datetime64(date, "ns") + np.timedelta64(int(seconds), "s").astype("timedelta64[ns]")


def members_text(n: int) -> str:
    """``"10 members"``, ``"1 member"``: a member count in the forecasts' names."""
    return f"{n} member" + ("" if n == 1 else "s")


def raw_ensemble_name(m: int) -> str:
    """The raw ``m``-member ensemble's name in every score table (``raw ensemble (10 members)``)."""
    return f"raw ensemble ({members_text(m)})"


def raw_subset_name(k: int) -> str:
    """The name of the raw subset of the first ``k`` members (``raw subset (5 members)``)."""
    return f"raw subset ({members_text(k)})"
