"""Lead times and dates: one type each inside ensml, hours and text only at the edges.

Lead times are ``numpy.timedelta64`` in nanoseconds. Hours exist only at the edges (command
line, YAML, table headers, file attributes) and are converted here, by :func:`parse_lead` /
:func:`parse_leads` (``24``, ``"24"``, ``"24h"``, ``"90min"``, ``"P1D"``, ``"PT36H"``) and
:func:`lead_hours` / :func:`format_lead` / :func:`iso_lead` back; formulas and tables take hours
as floats from :func:`hours_of` and give them back through :func:`from_hours`. Nothing else
converts hours. A lead is at most :data:`MAX_LEAD_HOURS` (ten years).

Dates are ``numpy.datetime64`` in nanoseconds, which holds 1677-09-22 … 2262-04-11: every date an
option gives is read by :func:`parse_date`, which refuses one outside that span (numpy and
pandas would otherwise wrap it around into another century, or overflow later).
"""

from __future__ import annotations

import datetime as _dt
import re
from collections.abc import Iterable
from typing import Any

import numpy as np

from ensml.errors import EnsmlError

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
