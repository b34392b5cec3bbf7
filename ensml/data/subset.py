"""The raw ensemble and its K-member subset, derived once for every verb.

Every table scores the raw subset beside the full ensemble: the K members a model read as
input, so that a model is compared with the raw forecast it was given. Which members those are
is a fact of the run: the run metadata of the predictions, spread predictions and members files
(:class:`ensml.predictions.RunMeta`: ``k`` and ``members``, positions along the forecast's
``member`` dimension) says it, and a ``k`` given as an option must agree with it. Without run
files the subset is the first ``k`` members (default :data:`ensml.names.DEFAULT_K`).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TypeVar

import xarray as xr

from ensml.data.open import check_members
from ensml.data.runfiles import RunFiles
from ensml.errors import EnsmlError
from ensml.names import DEFAULT_K, MEMBER, raw_ensemble_name, raw_subset_name
from ensml.predictions import check_k

Members = TypeVar("Members", xr.DataArray, xr.Dataset)


@dataclass(frozen=True)
class Subset:
    """The members of the raw subset, as positions along ``member`` (``0 … K-1`` for the first K)."""

    members: tuple[int, ...]

    @classmethod
    def first(cls, k: int) -> Subset:
        """The first ``k`` members."""
        return cls(tuple(range(int(k))))

    @property
    def k(self) -> int:
        """K, the subset's size."""
        return len(self.members)

    @property
    def positions(self) -> slice | list[int]:
        """Its members along ``member``: a slice for the first K (a lazy, contiguous read), else
        the list of positions."""
        first = self.members == tuple(range(self.k))
        return slice(0, self.k) if first else list(self.members)

    def fits(self, n_members: int) -> bool:
        """Whether an ensemble of ``n_members`` holds every member of the subset."""
        return 0 <= min(self.members) and max(self.members) < n_members

    def take(self, x: Members) -> Members:
        """The subset's members of ``x``."""
        return x.isel({MEMBER: self.positions})

    def ensembles(self, x: xr.DataArray) -> dict[str, xr.DataArray]:
        """``{raw ensemble (M members): x, raw subset (K members): its subset}``, the tables' names."""
        return {raw_ensemble_name(x.sizes[MEMBER]): x, raw_subset_name(self.k): self.take(x)}


def raw_subset(
    runs: Iterable[RunFiles], k: int | None, forecast: xr.Dataset | None = None, name: str = "forecast"
) -> Subset:
    """The raw subset: of the runs' metadata when any run is given, else the first ``k`` (or 5).

    Parameters
    ----------
    runs
        The run files scored beside the forecast (predictions, spread predictions, members).
    k
        K given as an option (``--k``), or ``None``. With runs, it must agree with theirs.
    forecast, name
        The raw forecast (checked to hold the subset's members) and how messages name it.

    Raises
    ------
    EnsmlError
        The runs were made from different members, ``k`` disagrees with them, or the forecast
        has fewer members than the subset takes.
    """
    runs = list(runs)
    for run in runs[1:]:
        first = runs[0]
        if run.meta.k != first.meta.k:
            raise EnsmlError(
                f"{first} was made from k={first.meta.k} members and {run} from k={run.meta.k}; "
                "score one k at a time"
            )
        if run.meta.members != first.meta.members:
            raise EnsmlError(
                f"{first} was made from members {_listed(first.meta.members)} and {run} from members "
                f"{_listed(run.meta.members)}; score one member subset at a time"
            )
    if runs:
        meta, source = runs[0].meta, str(runs[0])
        k = check_k(meta, k, source)
        if meta.members and len(meta.members) != k:
            members = _listed(meta.members)
            raise EnsmlError(f"{source} says k={k} but names {len(meta.members)} members ({members})")
        subset = Subset(meta.members or Subset.first(k).members)
    else:
        subset = Subset.first(DEFAULT_K if k is None else int(k))
    if forecast is not None:
        check_members(forecast, subset.k, name)
        m = forecast.sizes[MEMBER]
        if not subset.fits(m):
            raise EnsmlError(
                f"{runs[0]} was made from members {_listed(subset.members)}, and {name} has {m} members"
            )
    return subset


def _listed(members: tuple[int, ...]) -> str:
    return " ".join(map(str, members))


__all__ = ["Subset", "raw_subset"]
