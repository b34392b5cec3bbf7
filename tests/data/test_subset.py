"""The raw subset: K and its members from the runs' metadata, else the first k (default 5)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest
import xarray as xr

from ensml.data.subset import Subset, raw_subset
from ensml.errors import EnsmlError
from ensml.names import DEFAULT_K, MEMBER
from ensml.predictions import RunMeta


@dataclass
class _Run:
    """What :func:`raw_subset` reads of a run's files: their metadata and their name."""

    meta: RunMeta
    name: str

    def __str__(self) -> str:
        return self.name


def _run(k: int, members: tuple[int, ...], name: str = "predictions p.nc") -> _Run:
    meta = RunMeta("MixedTask", k, members, 10, ("z",), (500.0,), (np.timedelta64(24, "h"),))
    return _Run(meta, name)


def _forecast(m: int = 10) -> xr.Dataset:
    values = np.arange(m * 3, dtype="float32").reshape(m, 3)
    return xr.Dataset({"z": ((MEMBER, "x"), values)}, coords={MEMBER: np.arange(1, m + 1)})


def test_without_runs_the_first_k() -> None:
    assert raw_subset((), None) == Subset.first(DEFAULT_K)
    assert raw_subset((), 3, _forecast()).members == (0, 1, 2)


def test_the_runs_members_are_taken() -> None:
    subset = raw_subset([_run(3, (2, 4, 6))], None, _forecast())
    ensembles = subset.ensembles(_forecast()["z"])
    assert list(ensembles) == ["raw ensemble (10 members)", "raw subset (3 members)"]
    assert ensembles["raw subset (3 members)"][MEMBER].values.tolist() == [3, 5, 7]
    first = raw_subset([_run(3, (0, 1, 2))], 3, _forecast()).take(_forecast()["z"])
    assert first[MEMBER].values.tolist() == [1, 2, 3]


@pytest.mark.parametrize(
    ("runs", "k", "says"),
    [
        ([_run(5, (0, 1, 2, 3, 4))], 3, "k=3 was given, but predictions p.nc was made from k=5 members"),
        ([_run(5, (0, 1, 2, 3, 4)), _run(3, (0, 1, 2), "members m.nc")], None, "score one k at a time"),
        ([_run(2, (0, 1)), _run(2, (1, 2), "members m.nc")], None, "score one member subset at a time"),
        ([_run(3, (0, 1))], None, "says k=3 but names 2 members (0 1)"),
        ([_run(2, (0, 12))], None, "was made from members 0 12, and forecast has 10 members"),
        ([], 11, "cannot take a subset of k=11 members: forecast has 10 members"),
    ],
)
def test_disagreements_are_refused(runs: list[_Run], k: int | None, says: str) -> None:
    with pytest.raises(EnsmlError, match=says.replace("(", r"\(").replace(")", r"\)")):
        raw_subset(runs, k, _forecast())
