"""The single vocabulary of ensml: dimension names, aliases, units and CF attributes.

Every reader renames what other sources call these dimensions on open, so that the rest of
the code sees one vocabulary. Conventions fixed here:

* latitude runs north to south (90 → -90), as ECMWF/ENS-10 grids do;
* longitude runs 0 → 360 (east), periodic on a global grid;
* ``lead_time`` is ``timedelta64[ns]``; ``valid_time = init_time + lead_time`` is a coordinate;
* ``level`` is pressure in hPa;
* tensors are float32.
"""

from __future__ import annotations

# Dimensions, in the canonical order of an ensemble forecast array.
#: Initialisation time of a forecast (datetime64).
INIT_TIME = "init_time"
#: Lead time, ``timedelta64[ns]``.
LEAD_TIME = "lead_time"
#: Ensemble member number.
MEMBER = "member"
#: Pressure level, hPa.
LEVEL = "level"
#: Latitude, degrees north, running north to south.
LATITUDE = "latitude"
#: Longitude, degrees east, in [0, 360).
LONGITUDE = "longitude"
#: ``init_time + lead_time``: a coordinate, not a dimension, of forecasts.
VALID_TIME = "valid_time"

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
    "msl": {
        "standard_name": "air_pressure_at_mean_sea_level",
        "long_name": "mean sea level pressure",
        "units": "Pa",
    },
}


def units_of(var: str, default: str = "1") -> str:
    """Units of a known variable (``default`` when ensml does not know it)."""
    return VARIABLE_ATTRS.get(var, {}).get("units", default)
