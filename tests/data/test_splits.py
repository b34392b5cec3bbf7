"""Splitting init dates without leakage."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from ensml.data.splits import check_periods, split_init_times
from ensml.errors import EnsmlError

INITS = pd.date_range("2017-01-01", "2017-12-31", freq="1D").values
LEAD = np.timedelta64(48, "h")


def test_periods_are_inclusive_and_leakage_is_dropped() -> None:
    periods = {
        "train": ["2017-01-01", "2017-06-30"],
        "val": ["2017-07-01", "2017-09-30"],
        "test": ["2017-10-01", "2017-12-31"],
    }
    s = split_init_times(INITS, periods, LEAD)
    # the last two training inits verify on 1–2 July, inside the validation window
    assert str(s["train"][-1])[:10] == "2017-06-28"
    assert str(s["val"][0])[:10] == "2017-07-01" and str(s["val"][-1])[:10] == "2017-09-28"
    assert str(s["test"][0])[:10] == "2017-10-01" and str(s["test"][-1])[:10] == "2017-12-31"
    for a, b in (("train", "val"), ("val", "test"), ("train", "test")):
        assert (s[a].max() + LEAD) < s[b].min()  # no valid time shared


def test_test_before_train_also_guarded() -> None:
    periods = {
        "train": ["2017-03-01", "2017-12-31"],
        "val": ["2017-02-01", "2017-02-28"],
        "test": ["2017-01-01", "2017-01-31"],
    }
    s = split_init_times(INITS, periods, LEAD)
    # a training init on 1 March is fine (its valid times come after val), but val's last inits
    # must not verify in March; train inits must not overlap the later-ranked splits' windows
    assert s["train"].min() >= np.datetime64("2017-03-01")
    assert str(s["train"][0])[:10] == "2017-03-03"


def test_overlap_and_empty_and_malformed() -> None:
    with pytest.raises(EnsmlError, match="overlaps"):
        split_init_times(
            INITS, {"train": ["2017-01-01", "2017-06-30"], "val": ["2017-06-01", "2017-07-31"]}, LEAD
        )
    with pytest.raises(EnsmlError, match=r"the test split .* holds no init dates .* 2017-01-01 … 2017-12-31"):
        split_init_times(INITS, {"test": ["2030-01-01", "2030-12-31"]}, LEAD)
    with pytest.raises(EnsmlError, match="'yesterday' is not a date"):
        split_init_times(INITS, {"train": ["yesterday", "2017-01-01"]}, LEAD)
    with pytest.raises(
        EnsmlError, match=r"train_period .*: 1600-01-01 is out of range \(must be a date in 1677"
    ):
        split_init_times(INITS, {"train": ["1600-01-01", "2017-01-01"]}, LEAD)
    # an end on the last day datetime64[ns] holds takes the day's instants it holds, no more
    bounds = check_periods({"test": ["2262-04-01", "2262-04-11"]})["test"]
    assert bounds[1] == np.datetime64(np.iinfo(np.int64).max, "ns")
    with pytest.raises(EnsmlError, match="ends before it starts"):
        split_init_times(INITS, {"train": ["2017-02-01", "2017-01-01"]}, LEAD)
