"""What a checkpoint must share with the data it is applied to."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ensml.errors import EnsmlError

#: Hyperparameters a checkpoint must share with the data it is applied to.
DATA_KEYS = ("variables", "levels", "input_lead_hours", "target_lead_hours", "k", "static_variables")
#: Checkpoint entry holding the training grid (latitude, longitude) and ensemble size.
GRID_KEY = "ensml_grid"


def lead_list(hours: int | Sequence[int]) -> list[int]:
    """``target_lead_hours`` (one lead or several) as a list of ints."""
    return [int(h) for h in (hours if isinstance(hours, list | tuple) else [hours])]


def check_compatible(saved: dict[str, Any], current: dict[str, Any], what: str) -> None:
    """Raise if a checkpoint was trained for other variables, levels, leads or subset size."""

    def norm(key: str, v: Any) -> Any:
        if key == "target_lead_hours":
            v = lead_list(v)
        if isinstance(v, list | tuple):
            return [norm("", x) for x in v]
        return float(v) if isinstance(v, int | float) else str(v)

    for key in DATA_KEYS:
        a, b = saved.get(key, [] if key == "static_variables" else None), current.get(key)
        if a is not None and b is not None and norm(key, a) != norm(key, b):
            raise EnsmlError(f"{what} was trained with {key}={a!s} but the data has {key}={b!s}")


__all__ = ["DATA_KEYS", "GRID_KEY", "check_compatible", "lead_list"]
