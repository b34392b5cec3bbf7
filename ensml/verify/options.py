"""The option groups of ``ensml evaluate``'s two library functions, grid and stations.

:func:`ensml.verify.evaluate.evaluate` is the verb: one flat set of options, as the command
line gives them. It checks which of them go together and hands the groups below to
:func:`ensml.verify.evaluate.evaluate_grid` (against an analysis) or
:func:`ensml.verify.stations.evaluate_stations` (against station observations).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ensml.times import LeadLike


@dataclass(frozen=True)
class Selection:
    """What is scored (see :func:`ensml.verify.evaluate.evaluate`).

    Attributes
    ----------
    variables, levels
        The variables and pressure levels (hPa); ``None`` for all of the forecast's.
    leads
        Lead times, ``"common"``, or ``None`` for those of the runs given.
    k
        Size of the raw subset, or ``None`` for the runs' (default 5 without runs).
    """

    variables: list[str] | None = None
    levels: list[float] | None = None
    leads: LeadLike | Sequence[LeadLike] | None = None
    k: int | None = None


@dataclass(frozen=True)
class Sources:
    """What is scored beside the raw forecast on the grid: files or globs of ``ensml predict`` and
    ``ensml postprocess`` (with run metadata) and of the generator's oracle."""

    predictions: str | list[str] | None = None
    spread_predictions: str | list[str] | None = None
    oracle: str | None = None
    members: str | list[str] | None = None


__all__ = ["Selection", "Sources"]
