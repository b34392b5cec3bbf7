"""The single vocabulary of ensml: dimension names, aliases, units and CF attributes.

Every reader renames what other sources call these dimensions on open, so that the rest of
the code sees one vocabulary. Conventions fixed here:

* latitude runs north to south (90 → -90), as ECMWF/ENS-10 grids do;
* longitude runs 0 → 360 (east), periodic on a global grid;
* ``lead_time`` is ``timedelta64[ns]``; ``valid_time = init_time + lead_time`` is a coordinate;
* ``level`` is pressure in hPa;
* tensors are float32.

Lead times and dates, and their conversions from and to hours and text, are :mod:`ensml.times`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

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
#: The one horizontal dim of an unstructured grid (reduced Gaussian, HEALPix, a subset of cells),
#: with 1-D ``latitude``/``longitude`` coordinates on it (e.g. an anemoi dataset's cells).
CELL = "cell"
#: A coordinate along :data:`CELL` with each cell's area (any unit), where the source gives one.
CELL_AREA = "cell_area"

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


def members_text(n: int) -> str:
    """``"10 members"``, ``"1 member"``: a member count in the forecasts' names."""
    return f"{n} member" + ("" if n == 1 else "s")


def raw_ensemble_name(m: int) -> str:
    """The raw ``m``-member ensemble's name in every score table (``raw ensemble (10 members)``)."""
    return f"raw ensemble ({members_text(m)})"


def raw_subset_name(k: int) -> str:
    """The name of the raw subset of the first ``k`` members (``raw subset (5 members)``)."""
    return f"raw subset ({members_text(k)})"


def members_name(task: str, n: int) -> str:
    """The name of ``n`` members of a run of ``task`` in every score table: ``generated members
    (50)`` from a generative task, ``post-processed members (50)`` (ECC) from any other."""
    made = "generated" if task == "GenerativeTask" else "post-processed"
    return f"{made} members ({n})"
