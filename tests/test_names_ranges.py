"""The range checks of the time types in :mod:`ensml.names` and of seeds in :mod:`ensml.seeds`:
every value an option may give is either taken whole or refused in one line that says the range."""

from __future__ import annotations

import datetime as dt

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ensml.errors import EnsmlError
from ensml.seeds import SEED_RANGE, Seed, check_seed
from ensml.times import FIRST_DATE, LAST_DATE, MAX_LEAD_HOURS, date_after, parse_date, parse_lead, parse_leads

FIRST_DAY, LAST_DAY = dt.date(1677, 9, 22), dt.date(2262, 4, 11)
SPAN = "must be a date in 1677-09-22 … 2262-04-11, the span datetime64[ns] holds"


@settings(deadline=None)  # the first call imports pandas
@given(st.dates(min_value=FIRST_DAY, max_value=LAST_DAY))
def test_every_date_datetime64_ns_holds_is_taken_whole(day: dt.date) -> None:
    for value in (day, day.isoformat()):
        got = parse_date(value, "option --start")
        assert got.dtype == np.dtype("datetime64[ns]")
        assert str(got.astype("datetime64[D]")) == day.isoformat() or day == FIRST_DAY  # numpy, see names


@settings(deadline=None)
@given(st.one_of(st.dates(max_value=dt.date(1677, 9, 21)), st.dates(min_value=dt.date(2262, 4, 12))))
def test_a_date_outside_is_refused_with_the_span(day: dt.date) -> None:
    for value in (day, day.isoformat()):
        with pytest.raises(EnsmlError) as info:
            parse_date(value, "option --start")
        assert str(info.value) == f"option --start: {day.isoformat()} is out of range ({SPAN})"


@pytest.mark.parametrize("text", ["99999-01-01", "2262-04-11T12:00", "1677-09-21T23:00"])
def test_a_date_past_the_bounds_or_pandas_is_out_of_range(text: str) -> None:
    with pytest.raises(EnsmlError, match=r"is out of range \(must be a date in 1677-09-22 … 2262-04-11"):
        parse_date(text, "x")


@pytest.mark.parametrize("value", ["soon", "", "now", "yesterday", None, True, "2017-13-01"])
def test_what_is_not_a_date_says_so(value: object) -> None:
    with pytest.raises(EnsmlError, match="is not a date"):
        parse_date(value, "option --start")  # type: ignore[arg-type]


def test_the_bounds_and_a_time_zone() -> None:
    assert parse_date("1677-09-22", "x") == FIRST_DATE
    assert parse_date("2262-04-11", "x") == LAST_DATE
    assert parse_date("2017-01-01T06:00+01:00", "x") == np.datetime64("2017-01-01T05:00", "ns")


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=10**7))
def test_date_after_adds_or_refuses_without_wrapping(hours: int) -> None:
    start = parse_date("2200-01-01", "x")
    room_h = int((LAST_DATE - start) // np.timedelta64(1, "h"))
    if hours <= room_h:
        assert date_after(start, hours * 3600, "synth") == start + np.timedelta64(hours, "h")
    else:
        with pytest.raises(EnsmlError, match=r"^synth: 2200-01-01T00:00:00 \+ .* days runs past 2262-04-11"):
            date_after(start, hours * 3600, "synth")


@settings(deadline=None)
@given(st.integers(min_value=0, max_value=MAX_LEAD_HOURS))
def test_every_lead_up_to_ten_years_is_taken(hours: int) -> None:
    assert parse_lead(hours) == np.timedelta64(hours, "h")
    assert parse_lead(f"{hours}h") == np.timedelta64(hours, "h")


@settings(deadline=None)
@given(
    st.one_of(
        st.integers(min_value=MAX_LEAD_HOURS + 1, max_value=10**30),
        st.floats(min_value=87600.001, max_value=1e300),
    )
)
def test_a_longer_lead_is_refused_with_the_range_not_numpy_internals(hours: float) -> None:
    for value in (hours, str(hours)) if isinstance(hours, int) else (hours,):  # "1e+16" is no lead
        with pytest.raises(EnsmlError) as info:
            parse_leads([0, value])
        message = str(info.value)
        assert message.endswith("is out of range (must be >= 0 and <= 87600 h, ten years)"), message
        assert "np." not in message and "timedelta64" not in message


@settings(deadline=None)
@given(st.integers(min_value=SEED_RANGE[0], max_value=SEED_RANGE[1]))
def test_every_seed_in_range_is_taken(seed: int) -> None:
    assert check_seed(seed, "option --seed") == seed
    assert check_seed(np.uint32(seed), "option --seed") == seed
    assert int(Seed(seed)) == seed


@settings(deadline=None)
@given(st.one_of(st.integers(max_value=-1), st.integers(min_value=2**32)))
def test_a_seed_out_of_range_is_refused_with_the_range(seed: int) -> None:
    with pytest.raises(EnsmlError) as info:
        check_seed(seed, "option --seed")
    assert str(info.value) == f"option --seed: {seed} is out of range (must be >= 0 and <= 4294967295)"
    with pytest.raises(ValueError):
        Seed(seed)


@pytest.mark.parametrize("value", [True, 1.5, "7", None])
def test_a_seed_that_is_not_an_integer_is_refused(value: object) -> None:
    with pytest.raises(EnsmlError, match="is out of range"):
        check_seed(value, "option --seed")  # type: ignore[arg-type]
