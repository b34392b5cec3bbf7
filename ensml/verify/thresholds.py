"""The event thresholds of ``evaluate``: which variables get threshold scores, and at what.

Defaults by the kind of variable (its name's default family, :func:`ensml.names.default_family`):

- precipitation (``tp``, ``cp``, ``lsp``, …; censored shifted gamma): events 0.1 (a wet day), 1,
  5, 10 and 25 mm per 24 h (kg m-2); threshold-weighted CRPS at 10 and 25 mm (heavy); SEEPS'
  dry/light boundary 0.2 mm (Rodwell et al. 2010);
- wind speed (``si10``, ``ws``; truncated normal): events 10 (Beaufort 5-6), 15 (near gale, 7)
  and 20 m s-1 (gale, 8); twCRPS at 15 and 20 m s-1.

The defaults are converted to the analysis' ``units`` attribute (:data:`UNIT_FACTORS`: ``m`` of
water, as ECMWF's ``tp``, × 0.001); units they do not convert to are an error asking for the
thresholds. Thresholds given to ``evaluate`` (``thresholds: {var: [...]}``) are in the data's
units and are the events and the twCRPS thresholds alike.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from ensml.data.frame import EnsembleFrame
from ensml.errors import EnsmlError
from ensml.names import default_family
from ensml.progress import note
from ensml.scores.distributions import Family
from ensml.scores.precipitation import DRY_THRESHOLD


@dataclass(frozen=True)
class EventThresholds:
    """The thresholds of one variable: events (Brier, reliability, FSS) and tails (twCRPS)."""

    events: tuple[float, ...]
    tail: tuple[float, ...]
    units: str  # the units of the numbers
    kind: str  # "precipitation", "wind speed" or "" (given by the option)
    dry: float | None = None  # SEEPS' dry/light boundary, precipitation only

    def scaled(self, factor: float, units: str) -> EventThresholds:
        """The thresholds in other units, ``factor`` of those per one of these."""
        dry = None if self.dry is None else self.dry * factor
        return EventThresholds(
            tuple(t * factor for t in self.events),
            tuple(t * factor for t in self.tail),
            units,
            self.kind,
            dry,
        )


PRECIPITATION = EventThresholds(
    (0.1, 1.0, 5.0, 10.0, 25.0), (10.0, 25.0), "kg m-2", "precipitation", DRY_THRESHOLD
)
WIND_SPEED = EventThresholds((10.0, 15.0, 20.0), (15.0, 20.0), "m s-1", "wind speed")
#: The family a variable name defaults to (:func:`ensml.names.default_family`) → its thresholds.
DEFAULTS = {"csg0": PRECIPITATION, "truncnormal": WIND_SPEED}
#: Units each kind's defaults convert to: how many of them make one of the defaults' units.
UNIT_FACTORS = {
    "precipitation": {
        "kg m-2": 1.0,
        "kg m**-2": 1.0,
        "kg m^-2": 1.0,
        "kg/m2": 1.0,
        "kg/m^2": 1.0,
        "mm": 1.0,
        "m": 1e-3,
    },
    "wind speed": {"m s-1": 1.0, "m s**-1": 1.0, "m s^-1": 1.0, "m/s": 1.0, "km h-1": 3.6, "km/h": 3.6},
}


def thresholds_for(
    var: str, attrs: Mapping[str, object], given: Mapping[str, Sequence[float]] | None = None
) -> EventThresholds | None:
    """The thresholds of ``var`` (analysis attributes ``attrs``): ``given[var]`` in the data's
    units, else the defaults of its kind in the data's units, else None (no default for it).

    Raises
    ------
    EnsmlError
        The data's ``units`` are not ones the defaults convert to (give the thresholds), or a
        given threshold is not a finite number.
    """
    units = str(attrs.get("units") or "")
    if given and var in given:
        values = np.atleast_1d(np.asarray(given[var], dtype=np.float64))
        if values.ndim != 1 or values.size == 0 or not np.all(np.isfinite(values)):
            raise EnsmlError(
                f"evaluate: thresholds of {var} must be a list of finite numbers, got {given[var]!r}"
            )
        events = tuple(float(v) for v in np.unique(values))
        kind = _kind(var, attrs)
        dry = (
            DRY_THRESHOLD * UNIT_FACTORS["precipitation"].get(units, 1.0) if kind == "precipitation" else None
        )
        return EventThresholds(events, events, units, kind, dry)
    kind = _kind(var, attrs)
    if not kind:
        return None
    default = DEFAULTS[default_family(var, str(attrs.get("standard_name") or ""))]
    if not units:
        note(f"evaluate: {var} has no units attribute; its thresholds are taken in {default.units}")
        return default
    factor = UNIT_FACTORS[kind].get(units.strip())
    if factor is None:
        raise EnsmlError(
            f"evaluate: {var} is in {units!r}, which the default {kind} thresholds ({default.units}) do not "
            f"convert to; give them in {units!r} with --thresholds '{{{var}: [...]}}'"
        )
    return default.scaled(factor, units)


def _kind(var: str, attrs: Mapping[str, object]) -> str:
    default = DEFAULTS.get(default_family(var, str(attrs.get("standard_name") or "")))
    return default.kind if default else ""


def bounded_variables(
    frame: EnsembleFrame, families: Mapping[str, Mapping[str, Family]], given: Mapping[str, object] | None
) -> list[str]:
    """The variables that get the event scores: a scored distribution of them is bounded below,
    their name's default family is (``tp``, ``si10``), or ``given`` names thresholds for them."""
    out = []
    for var in frame.variables:
        fams = [f[var] for f in families.values() if var in f]
        if (
            any(f.lower is not None for f in fams)
            or default_family(var) != "normal"
            or (given and var in given)
        ):
            out.append(var)
    return out


__all__ = [
    "DEFAULTS",
    "PRECIPITATION",
    "UNIT_FACTORS",
    "WIND_SPEED",
    "EventThresholds",
    "bounded_variables",
    "thresholds_for",
]
