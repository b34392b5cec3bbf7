"""Split init dates into train / validation / test periods without leakage."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ensml.errors import EnsmlError
from ensml.times import LAST_DATE, parse_date

SPLITS = ("train", "val", "test")


def _period(period: Sequence[str], name: str) -> tuple[np.datetime64, np.datetime64]:
    if len(period) != 2:
        raise EnsmlError(f"{name}_period must be [start, end], got {list(period)}")
    start, end = (parse_date(p, f"{name}_period {list(period)}") for p in period)
    if end < start:
        raise EnsmlError(f"{name}_period ends before it starts: {list(period)}")
    # An end given as a bare date includes that whole day (to the last instant datetime64[ns] holds).
    if len(str(period[1])) <= 10:
        last = np.datetime64(np.iinfo(np.int64).max, "ns")  # 2262-04-11T23:47:16.854775807
        end = end + np.timedelta64(1, "D") - np.timedelta64(1, "ns") if end < LAST_DATE else last
    return start, end


def check_periods(periods: dict[str, Sequence[str] | None]) -> dict[str, tuple[np.datetime64, np.datetime64]]:
    """Each named period's ``(start, end)`` (an end given as a date includes its day), checked
    before any data is read or made: a pair of dates, not reversed, not overlapping another.

    Raises
    ------
    EnsmlError
        Naming the period (``test_period ends before it starts: [...]``).
    """
    bounds = {name: _period(p, name) for name, p in periods.items() if p is not None}
    names = list(bounds)
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            (a0, a1), (b0, b1) = bounds[a], bounds[b]
            if a0 <= b1 and b0 <= a1:
                raise EnsmlError(f"{a}_period {list(periods[a])} overlaps {b}_period {list(periods[b])}")
    return bounds


def _rank(name: str) -> int:
    return SPLITS.index(name) if name in SPLITS else len(SPLITS)


def split_init_times(
    init_times: np.ndarray,
    periods: dict[str, Sequence[str]],
    max_lead: np.timedelta64,
    source: str = "forecast",
) -> dict[str, np.ndarray]:
    """Assign init times to named periods, dropping samples whose valid times overlap another split.

    A sample initialised at ``t`` uses valid times ``[t, t + max_lead]``. An init time of one split
    whose window overlaps the valid-time window of a later-listed split (``train`` before ``val``
    before ``test``) is dropped, so no verifying analysis is seen by two splits.

    Raises
    ------
    EnsmlError
        If periods overlap, or a split ends up empty.
    """
    init_times = np.asarray(init_times, dtype="datetime64[ns]")
    bounds = check_periods(periods)
    names = list(bounds)
    out: dict[str, np.ndarray] = {}
    for name, (start, end) in bounds.items():
        sel = init_times[(init_times >= start) & (init_times <= end)]
        # Guard against leakage into every split ranked later (train < val < test < others).
        for other in names:
            if _rank(other) <= _rank(name):
                continue
            o0, o1 = bounds[other]
            sel = sel[~((sel + max_lead >= o0) & (sel <= o1 + max_lead))]
        if sel.size == 0:
            lo, hi = (
                (str(init_times.min())[:10], str(init_times.max())[:10]) if init_times.size else ("-", "-")
            )
            raise EnsmlError(
                f"the {name} split {list(periods[name])} holds no init dates of the {source} "
                f"(which covers {lo} … {hi})"
            )
        out[name] = sel
    return out
