"""Extreme-event case definitions: YAML files under ``configs/cases/``, and automatic case finding.

A case file holds one case (a mapping) or several (``cases: [...]``)::

    name: Southern Ocean storm, February 2020
    description: the strongest stored storm of the test year   # optional
    variable: z
    level: 500                  # hPa; left out for a surface variable (tp, si10, t2m)
    lead: 48h                   # hours (48) or a duration (48h, 2d, P2D)
    region: {lat: [-75, -40], lon: [340, 45]}   # degrees; lon west > east crosses 0°
    window: [2020-01-30, 2020-02-05]            # valid dates, inclusive
    threshold: {quantile: 0.1, tail: lower}     # optional; or {value: 52000, tail: upper}

Longitudes may be given in [-180, 180] or [0, 360]; the box runs east from ``lon[0]`` to
``lon[1]``, so ``[340, 45]`` and ``[160, -160]`` cross 0° and the dateline. A ``quantile``
threshold is the climatological quantile of the verifying analysis at each grid point, over all
analysis times in the calendar months of the case window (see
:func:`climatological_threshold`); a ``value`` is in the units of the variable's file.

Cases are found automatically by :func:`find_extreme_cases` (dates and boxes where the analysis
exceeds a high climatological quantile over the largest area) and, on the embedded synthetic
data, by :func:`storm_cases` (the stored storms of ``oracle.nc``'s ``event_mask``).
"""

from __future__ import annotations

import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import xarray as xr
import yaml

from ensml.data.grid import horizontal_dims
from ensml.errors import EnsmlError
from ensml.names import LATITUDE, LONGITUDE, TIME
from ensml.times import format_lead, parse_date, parse_lead

KEYS = {"name", "description", "variable", "level", "lead", "region", "window", "threshold"}
DAY = np.timedelta64(1, "D")


@dataclass(frozen=True)
class Region:
    """A latitude/longitude box; ``lon = (west, east)`` in [0, 360), crossing 0° when west > east."""

    lat: tuple[float, float]
    lon: tuple[float, float]

    def lon_indices(self, lon: np.ndarray) -> np.ndarray:
        """Indices of the longitudes inside the box, ordered west → east across 0°."""
        lon = np.asarray(lon, dtype=float) % 360.0
        west, east = self.lon
        rel = (lon - west) % 360.0
        width = (east - west) % 360.0 or 360.0
        idx = np.flatnonzero(rel <= width + 1e-9)
        return idx[np.argsort(rel[idx], kind="stable")]

    def inside(self, lat: np.ndarray, lon: np.ndarray) -> np.ndarray:
        """Whether each point (latitude, longitude in degrees, any shape) lies in the box."""
        lat, lon = np.asarray(lat, dtype=float), np.asarray(lon, dtype=float)
        west, east = self.lon
        width = (east - west) % 360.0 or 360.0
        in_lat = (lat >= self.lat[0] - 1e-9) & (lat <= self.lat[1] + 1e-9)
        return in_lat & ((lon - west) % 360.0 <= width + 1e-9)

    def select(self, da: xr.DataArray | xr.Dataset) -> xr.DataArray | xr.Dataset:
        """The box of ``da`` (latitude order kept, longitudes contiguous west → east).

        On a projected grid (2-D latitude/longitude): the smallest block of rows and columns that
        holds every point in the box, with the points outside the box set to NaN (missing, so
        left out of every score and map); no row or column when no point is in the box.
        """
        dims = horizontal_dims(da)
        if dims is not None and dims != (LATITUDE, LONGITUDE):
            if LATITUDE not in da.coords or LONGITUDE not in da.coords:
                raise EnsmlError(
                    f"region {self} is a latitude/longitude box, and the data's projected grid "
                    f"({', '.join(dims)}) has no latitude/longitude coordinates to place it"
                )
            inside = self.inside(da[LATITUDE].transpose(*dims).values, da[LONGITUDE].transpose(*dims).values)
            rows, cols = np.flatnonzero(inside.any(axis=1)), np.flatnonzero(inside.any(axis=0))
            if rows.size == 0:
                return da.isel({dims[0]: slice(0, 0), dims[1]: slice(0, 0)})
            block = {dims[0]: slice(rows[0], rows[-1] + 1), dims[1]: slice(cols[0], cols[-1] + 1)}
            mask = xr.DataArray(inside[block[dims[0]], block[dims[1]]], dims=dims)
            return da.isel(block).where(mask)
        lat = np.asarray(da[LATITUDE].values, dtype=float)
        ilat = np.flatnonzero((lat >= self.lat[0] - 1e-9) & (lat <= self.lat[1] + 1e-9))
        return da.isel({LATITUDE: ilat, LONGITUDE: self.lon_indices(da[LONGITUDE].values)})

    def __str__(self) -> str:
        return f"lat {self.lat[0]:g}…{self.lat[1]:g}°, lon {self.lon[0]:g}…{self.lon[1]:g}°E"


@dataclass(frozen=True)
class Threshold:
    """An event threshold: a ``value`` (variable units) or a climatological ``quantile``."""

    value: float | None = None
    quantile: float | None = None
    tail: str = "upper"

    def __str__(self) -> str:
        what = f"{self.value:g}" if self.value is not None else f"clim. q{100 * self.quantile:g}"
        return f"{'>' if self.tail == 'upper' else '<'} {what}"


@dataclass(frozen=True)
class Case:
    """One case study: where, when, which field, and (optionally) which event threshold."""

    name: str
    variable: str
    level: float | None  # hPa; None for a surface variable
    lead: np.timedelta64  # timedelta64[ns]
    region: Region
    start: np.datetime64  # first valid time
    end: np.datetime64  # last valid time (inclusive)
    threshold: Threshold | None = None
    description: str = ""
    source: str = field(default="", compare=False)

    @property
    def slug(self) -> str:
        s = "".join(c if c.isalnum() else "_" for c in self.name.lower())
        return "_".join(p for p in s.split("_") if p)[:60] or "case"

    def to_dict(self) -> dict[str, Any]:
        """The case as YAML-ready plain data (the format :func:`load_cases` reads)."""
        out: dict[str, Any] = {"name": self.name, "description": self.description, "variable": self.variable}
        if self.level is not None:
            out["level"] = float(self.level)
        out["lead"] = format_lead(self.lead)
        out["region"] = {"lat": list(map(float, self.region.lat)), "lon": list(map(float, self.region.lon))}
        out["window"] = [str(self.start.astype("datetime64[D]")), str(self.end.astype("datetime64[D]"))]
        if self.threshold is not None:
            t = self.threshold
            key = ("value", t.value) if t.value is not None else ("quantile", t.quantile)
            out["threshold"] = {key[0]: float(key[1]), "tail": t.tail}
        return out


def _pair(x: Any, key: str, where: str) -> tuple[float, float]:
    if not (isinstance(x, list | tuple) and len(x) == 2):
        raise EnsmlError(f"{where}: {key} must be a pair [low, high], got {x!r}")
    try:
        a, b = float(x[0]), float(x[1])
    except (TypeError, ValueError):
        raise EnsmlError(f"{where}: {key} must hold two numbers, got {x!r}") from None
    if not (np.isfinite(a) and np.isfinite(b)):
        raise EnsmlError(f"{where}: {key} must be finite, got {x!r}")
    return a, b


def _time(x: Any, where: str) -> np.datetime64:
    return parse_date(x, f"{where}: window")


def _level(x: Any, where: str) -> float | None:
    """A case's level in hPa, or None (a surface variable: no level given)."""
    if x is None:
        return None
    try:
        level = float(x)
    except (TypeError, ValueError):
        raise EnsmlError(f"{where}: level must be a number (hPa), got {x!r}") from None
    if not (np.isfinite(level) and level > 0):
        raise EnsmlError(f"{where}: level must be a pressure > 0 (hPa), got {x!r}")
    return level


def case_from_dict(d: Any, where: str = "case") -> Case:
    """Validate a case given as a mapping (from YAML) and build it; one-line errors name ``where``."""
    if not isinstance(d, dict):
        raise EnsmlError(f"{where}: a case must be a mapping of {', '.join(sorted(KEYS))}")
    unknown = sorted(set(map(str, d)) - KEYS)
    if unknown:
        raise EnsmlError(f"{where}: unknown key(s) {', '.join(unknown)} (allowed: {', '.join(sorted(KEYS))})")
    missing = sorted(k for k in KEYS - {"description", "threshold", "level"} if k not in d)
    if missing:
        raise EnsmlError(f"{where}: missing key(s) {', '.join(missing)}")
    name = str(d["name"])
    where = f"{where} ({name!r})" if name not in where else where
    region = d["region"]
    if not isinstance(region, dict) or set(region) != {"lat", "lon"}:
        raise EnsmlError(
            f"{where}: region must be {{lat: [south, north], lon: [west, east]}}, got {region!r}"
        )
    lat = _pair(region["lat"], "region.lat", where)
    if not (-90 <= lat[0] < lat[1] <= 90):
        raise EnsmlError(f"{where}: region.lat must be south < north within [-90, 90], got {list(lat)}")
    lon = _pair(region["lon"], "region.lon", where)
    window = d["window"]
    if not (isinstance(window, list | tuple) and len(window) == 2):
        raise EnsmlError(f"{where}: window must be [first, last] valid date, got {window!r}")
    start, end = _time(window[0], where), _time(window[1], where)
    if len(str(window[1])) <= 10:
        end = end + DAY - np.timedelta64(1, "ns")  # a date means the whole day
    if end < start:
        raise EnsmlError(f"{where}: window ends ({window[1]}) before it starts ({window[0]})")
    level = _level(d.get("level"), where)
    try:
        lead = parse_lead(d["lead"])
    except EnsmlError as exc:
        raise EnsmlError(f"{where}: lead: {exc}") from None
    threshold = None
    if d.get("threshold") is not None:
        t = d["threshold"]
        if (
            not isinstance(t, dict)
            or len({"value", "quantile"} & set(t)) != 1
            or set(t)
            - {
                "value",
                "quantile",
                "tail",
            }
        ):
            raise EnsmlError(
                f"{where}: threshold must be {{value: x}} or {{quantile: q}}, with optional tail"
            )
        tail = str(t.get("tail", "upper"))
        if tail not in ("upper", "lower"):
            raise EnsmlError(f"{where}: threshold tail must be 'upper' or 'lower', got {tail!r}")
        try:
            num = float(t.get("value", t.get("quantile")))
        except (TypeError, ValueError):
            raise EnsmlError(f"{where}: threshold must be a number, got {t!r}") from None
        if "quantile" in t and not 0 < num < 1:
            raise EnsmlError(f"{where}: threshold quantile must be in (0, 1), got {num:g}")
        if not np.isfinite(num):
            raise EnsmlError(f"{where}: threshold must be finite, got {num}")
        threshold = Threshold(num if "value" in t else None, num if "quantile" in t else None, tail)
    return Case(
        name=name,
        variable=str(d["variable"]),
        level=level,
        lead=lead,
        region=Region(lat, (lon[0] % 360.0, lon[1] % 360.0)),
        start=start,
        end=end,
        threshold=threshold,
        description=str(d.get("description") or ""),
        source=where,
    )


def _case_files(spec: str | Path) -> list[Path]:
    p = Path(spec)
    if p.is_dir():
        files = sorted([*p.glob("*.yaml"), *p.glob("*.yml")])
    elif any(c in str(spec) for c in "*?["):
        files = sorted(Path().glob(str(spec)))
    else:
        files = [p]
    if not files:
        raise EnsmlError(f"no case files match {str(spec)!r}")
    for f in files:
        if not f.is_file():
            raise EnsmlError(f"case file {f} does not exist")
    return files


def load_cases(specs: str | Path | Sequence[str | Path]) -> list[Case]:
    """Read and validate cases from YAML files, directories of them, or globs."""
    items = [specs] if isinstance(specs, str | Path) else list(specs)
    cases: list[Case] = []
    for f in (f for s in items for f in _case_files(s)):
        try:
            doc = yaml.safe_load(f.read_text())
        except yaml.YAMLError as exc:
            raise EnsmlError(f"case file {f} is not valid YAML ({str(exc).splitlines()[0]})") from None
        entries = doc["cases"] if isinstance(doc, dict) and set(doc) == {"cases"} else [doc]
        if not isinstance(entries, list) or not entries:
            raise EnsmlError(f"case file {f}: 'cases' must be a non-empty list")
        cases += [
            case_from_dict(e, f"case file {f}" + (f" #{i}" if len(entries) > 1 else ""))
            for i, e in enumerate(entries)
        ]
    names = [c.name for c in cases]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise EnsmlError(f"case names must be unique: {', '.join(dup)} appear more than once")
    return cases


def climatological_threshold(analysis: xr.DataArray, case: Case) -> xr.DataArray:
    """Per-point climatological quantile of ``analysis`` (time, lat, lon) for ``case``'s threshold.

    The climate is every analysis time in the calendar months that the case window touches
    (all years), so a winter storm is compared with winters.
    """
    assert case.threshold is not None and case.threshold.quantile is not None
    months = np.unique(
        np.arange(case.start.astype("datetime64[M]"), case.end.astype("datetime64[M]") + 1).astype(int) % 12
        + 1
    )
    clim = analysis.sel({TIME: analysis[TIME].dt.month.isin(months)})
    if clim.sizes[TIME] < 10:
        raise EnsmlError(
            f"case {case.name!r}: only {clim.sizes[TIME]} analysis times in months {months.tolist()} to "
            "estimate a climatological quantile from (need 10)"
        )
    with warnings.catch_warnings():  # points outside the box of a projected grid are all NaN
        warnings.filterwarnings("ignore", "All-NaN slice", RuntimeWarning)
        q = clim.quantile(case.threshold.quantile, dim=TIME).drop_vars("quantile")
    return q.assign_attrs(long_name=f"climatological q{100 * case.threshold.quantile:g}")


__all__ = ["Case", "Region", "Threshold", "case_from_dict", "climatological_threshold", "load_cases"]
