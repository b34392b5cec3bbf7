r"""The uncertainty term of Hersbach's CRPS decomposition: the CRPS of the sample climatology.

.. math::
    \mathrm{Unc} = \int P (1 - P)\, dx
        = \frac{\sum_{k,l} w_k w_l |y_k - y_l|}{2 W^2}
        = \sum_j (y_{(j+1)} - y_{(j)}) \frac{C_j (W - C_j)}{W^2},

:math:`P` the weighted empirical CDF of the observations, :math:`C_j` the weight of the j
smallest (:mod:`ensml.scores.hersbach`). Exact, from the observations sorted stably: ties keep
their order, so runs sorted apart (:func:`sorted_observations`, per init time on a cluster's
workers) and merged (:func:`uncertainty_of_runs`) give the same sums as one sort of the whole.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.scores.reduce import check_weights

__all__ = ["CASE", "observation_order", "sorted_observations", "uncertainty_of_groups", "uncertainty_of_runs"]

#: The dim of :func:`sorted_observations`' runs: the observations of a kept index, sorted.
CASE = "case"


def uncertainty_of_groups(y: np.ndarray, w: np.ndarray, nred: int) -> np.ndarray:
    """Unc of each kept group (module docstring), exact, from the sorted observations; groups
    in batches of ~1e6 values (sorted in their own dtype, summed in float64). Ties keep their
    order (a stable sort), so that runs sorted apart and merged give the same sums
    (:func:`uncertainty_of_runs`)."""
    kept = y.shape[: y.ndim - nred]
    g = int(np.prod(kept, dtype=np.int64))
    y2 = y.reshape(g, -1)
    n = y2.shape[1]
    const = all(s == 1 for s in w.shape[w.ndim - nred :])  # one weight per group: no argsort
    if const:
        wk = np.broadcast_to(w.reshape(w.shape[: w.ndim - nred]), kept).reshape(g)
    else:
        w2 = np.broadcast_to(w, y.shape).reshape(g, n)
    unc = np.empty(g)
    for rows in _batches(g, n):
        if const:
            unc[rows] = _sorted_uncertainty(np.sort(y2[rows], axis=1), np.arange(1.0, n + 1) * wk[rows, None])
        else:
            unc[rows] = _merged_uncertainty(y2[rows], w2[rows])
    return unc.reshape(kept)


def _batches(g: int, n: int) -> Iterable[slice]:
    """Rows of a (g, n) array in batches of about 1e6 values."""
    step = max(1, (1 << 20) // max(n, 1))
    return (slice(i, i + step) for i in range(0, g, step))


def _merged_uncertainty(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Unc of each row of observations ``y`` with weights ``w``, sorted stably (ties in their
    order: for rows of presorted runs, a merge)."""
    idx = np.argsort(y, axis=1, kind="stable")
    return _sorted_uncertainty(np.take_along_axis(y, idx, 1), np.take_along_axis(w, idx, 1).cumsum(1))


def _sorted_uncertainty(ys: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Unc of each row of sorted observations ``ys`` whose weights add up to ``cum``."""
    gaps = np.subtract(ys[:, 1:], ys[:, :-1], dtype=np.float64)
    total, below = cum[:, -1], cum[:, :-1]  # C_j and W of the module docstring
    with np.errstate(invalid="ignore", divide="ignore"):
        num = np.einsum("ij,ij,ij->i", gaps, below, total[:, None] - below)
        return num / np.where(total > 0, total, np.nan) ** 2


def _rows(obs: xr.DataArray, keep: list[Hashable]) -> tuple[np.ndarray, tuple[int, ...], list[Hashable]]:
    """``obs`` as rows: one per index of the ``keep`` dims, its values over the other dims (in
    ``obs``' order of them); the kept shape; the other dims."""
    red = [d for d in obs.dims if d not in keep]
    y = obs.transpose(*keep, *red).values
    kept = y.shape[: len(keep)]
    return y.reshape(int(np.prod(kept, dtype=np.int64)), -1), kept, red


def _kept_coords(obj: xr.DataArray | xr.Dataset, keep: list[Hashable]) -> dict[Hashable, xr.Variable]:
    """The coordinates of ``obj`` that lie along the kept dims alone."""
    return {k: v.variable for k, v in obj.coords.items() if set(v.dims) <= set(keep)}


def _stable_order(y2: np.ndarray) -> np.ndarray:
    """The positions that sort each row of ``y2``, ties in their order: int32 (int64 beyond
    2**31 values a row)."""
    small = y2.shape[1] <= np.iinfo(np.int32).max
    return np.argsort(y2, axis=1, kind="stable").astype(np.int32 if small else np.int64, copy=False)


def observation_order(obs: xr.DataArray, *, keep: Iterable[Hashable]) -> xr.DataArray:
    """The positions that sort the observations of each index of the ``keep`` dims over the
    others (flattened in ``obs``' order of them), ties in their order: int32 along a new dim
    ``case`` (int64 beyond 2**31 values an index).

    This is all a run (:func:`sorted_observations`) needs besides the observations and weights
    themselves: ``evaluate --cluster``'s workers sort their blocks and send only these positions
    (4 bytes a value, against 12 for the sorted values and their float64 weights); the client,
    which has the observations and the weights, makes the runs from them.
    """
    keep = list(keep)
    y2, kept, _ = _rows(obs, keep)
    idx = _stable_order(y2)
    return xr.DataArray(
        idx.reshape(*kept, -1), dims=[*keep, CASE], coords=_kept_coords(obs, keep), name="order"
    )


def sorted_observations(
    obs: xr.DataArray,
    *,
    keep: Iterable[Hashable],
    weights: xr.DataArray | None = None,
    order: xr.DataArray | None = None,
) -> xr.Dataset:
    """The observations of each index of the ``keep`` dims sorted over the others (ties in their
    order), with their weights in the same order: ``value`` and ``weight`` along a new dim
    ``case``, the runs :func:`uncertainty_of_runs` merges.

    Sorted per init time (``keep`` = the init time and the level), the runs of blocks of init
    times scored apart (``evaluate --cluster``) are those of the whole, and the uncertainty of
    their merge does not depend on the blocks. ``order``: the sorting positions, already found
    (:func:`observation_order` of the same ``obs`` and ``keep``, possibly elsewhere and joined);
    by default they are found here.
    """
    keep = list(keep)
    y2, kept, red = _rows(obs, keep)
    if weights is None:
        w = np.ones((1,) * obs.ndim)
    else:
        weights = check_weights(weights, obs, "sorted_observations")
        w = weights.transpose(*[d for d in [*keep, *red] if d in weights.dims]).values.astype(np.float64)
        w = w.reshape([obs.sizes[d] if d in weights.dims else 1 for d in [*keep, *red]])
    w2 = np.broadcast_to(w, (*kept, *(obs.sizes[d] for d in red))).reshape(y2.shape)
    if order is None:
        idx = _stable_order(y2)
    else:
        ordered = order.transpose(*keep, CASE)
        if ordered.shape != (*kept, y2.shape[1]):
            raise ValueError(
                f"sorted_observations: an order of {ordered.shape[-1]} cases for {y2.shape[1]} "
                f"observations (kept shape {ordered.shape[:-1]} against {kept})"
            )
        idx = ordered.values.reshape(y2.shape)
    values, wts = np.take_along_axis(y2, idx, 1), np.take_along_axis(w2, idx, 1)
    dims = [*keep, CASE]
    return xr.Dataset(
        {"value": (dims, values.reshape(*kept, -1)), "weight": (dims, wts.reshape(*kept, -1))},
        coords=_kept_coords(obs, keep),
    )


def uncertainty_of_runs(runs: xr.Dataset, over: Iterable[Hashable]) -> xr.DataArray:
    """The uncertainty term (module docstring) of the observations pooled over ``over``, from
    their runs (:func:`sorted_observations`, joined along the dims of ``over`` but ``case``).

    The runs, taken in the order of ``over``, are merged by a stable sort, so ties stay in the
    order of the observations pooled that way: the same sums as :func:`crps_decomposition`'s
    uncertainty of those observations, whichever runs they were sorted in (a sort of presorted
    runs is a merge).
    """
    over = list(over)
    kept = [d for d in runs["value"].dims if d not in over]
    y = runs["value"].transpose(*kept, *over).values
    w = runs["weight"].transpose(*kept, *over).values
    shape = y.shape[: len(kept)]
    g = int(np.prod(shape, dtype=np.int64))
    y2, w2 = y.reshape(g, -1), w.reshape(g, -1)
    unc = np.empty(g)
    for rows in _batches(g, y2.shape[1]):
        unc[rows] = _merged_uncertainty(y2[rows], w2[rows])
    return xr.DataArray(unc.reshape(shape), dims=kept, coords=_kept_coords(runs, kept), name="uncertainty")
