r"""The uncertainty term of Hersbach's CRPS decomposition: the CRPS of the sample climatology.

.. math::
    \mathrm{Unc} = \int P (1 - P)\, dx
        = \frac{\sum_{k,l} w_k w_l |y_k - y_l|}{2 W^2}
        = \sum_j (y_{(j+1)} - y_{(j)}) \frac{C_j (W - C_j)}{W^2},

:math:`P` the weighted empirical CDF of the observations, :math:`C_j` the weight of the j
smallest (:mod:`ensml.scores.hersbach`). Exact, from the observations sorted stably: ties keep
their order, so the sums depend only on the order the observations are pooled in (init time,
then point, for ``evaluate``'s tables), never on how a run split them. float32 observations are
sorted as 64-bit keys (the value's order in the high half, the position in the low half), which
gives the stable order several times faster than numpy's stable argsort (a timsort).
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.scores.reduce import weights_array

__all__ = ["pooled_uncertainty", "stable_order", "uncertainty_of_groups"]


def uncertainty_of_groups(y: np.ndarray, w: np.ndarray, nred: int) -> np.ndarray:
    """Unc of each kept group (module docstring), exact, from the sorted observations.

    ``y``: the kept dims, then the ``nred`` dims pooled; ``w``: float64 weights broadcastable to
    ``y``. Groups go in batches of ~1e6 values (sorted in their own dtype, summed in float64);
    ties keep their order (a stable sort), so the sums follow the order of the pooled dims.
    """
    kept = y.shape[: y.ndim - nred]
    g = int(np.prod(kept, dtype=np.int64))
    y2 = y.reshape(g, -1)
    n = y2.shape[1]
    if all(s == 1 for s in w.shape[w.ndim - nred :]):  # one weight per group: the values alone
        wk = np.broadcast_to(w.reshape(w.shape[: w.ndim - nred]), kept).reshape(g)
        unc = np.empty(g)
        for rows in _batches(g, n):
            cum = np.arange(1.0, n + 1) * wk[rows, None]
            unc[rows] = _sorted_uncertainty(np.sort(y2[rows], axis=1), cum)
        return unc.reshape(kept)
    wt, tail = _weight_rows(w, kept, y.shape[y.ndim - nred :])
    unc = np.empty(g)
    for rows in _batches(g, n):
        idx = stable_order(y2[rows])
        ws = _gather(wt[rows] if wt.shape[0] > 1 else wt, idx % tail if tail < n else idx)
        unc[rows] = _sorted_uncertainty(_gather(y2[rows], idx), ws.cumsum(1))
    return unc.reshape(kept)


def _weight_rows(w: np.ndarray, kept: tuple[int, ...], red: tuple[int, ...]) -> tuple[np.ndarray, int]:
    """The weights of each group over the last pooled dims they vary along, as rows (one row
    for all groups when they do not vary by group), and the number of values in such a row:
    a pooled value at position p has the weight at ``p % tail`` (the area weights of a grid
    repeat for every init time; no copy of them per value)."""
    nk = len(kept)
    wred = w.shape[nk:]
    first = next(i for i, s in enumerate(wred) if s > 1)  # the weights vary along some pooled dim
    tail = int(np.prod(red[first:], dtype=np.int64))
    lead = kept if any(s > 1 for s in w.shape[:nk]) else (1,) * nk
    rows = np.broadcast_to(w.reshape(*w.shape[:nk], *wred[first:]), (*lead, *red[first:]))
    return np.ascontiguousarray(rows).reshape(-1, tail), tail


def _gather(a: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """``a``'s values at the positions ``idx`` of each row (a row of ``a`` serves all rows of
    ``idx`` when it has one)."""
    if idx.shape[0] == 1:  # one long row: a plain take, without take_along_axis' index arrays
        return np.take(a[0], idx[0])[None]
    return np.take_along_axis(a, idx, 1)


def _batches(g: int, n: int) -> Iterable[slice]:
    """Rows of a (g, n) array in batches of about 1e6 values."""
    step = max(1, (1 << 20) // max(n, 1))
    return (slice(i, i + step) for i in range(0, g, step))


def stable_order(y2: np.ndarray) -> np.ndarray:
    """The positions that sort each row of ``y2`` stably (ties, -0.0 and 0.0 among them, in
    their order; NaN last): numpy's ``argsort(kind="stable")``, found for float32 rows of fewer
    than 2**32 values without NaN by sorting 64-bit keys (module docstring)."""
    n = y2.shape[1]
    if y2.dtype != np.float32 or n >= 1 << 32 or np.isnan(y2).any():
        return np.argsort(y2, axis=1, kind="stable")
    bits = (y2 + np.float32(0.0)).view(np.uint32)  # + 0.0: -0.0 becomes 0.0, a tie as in argsort
    negative = bits >= np.uint32(1 << 31)
    ordered = np.where(negative, ~bits, bits | np.uint32(1 << 31))  # the values' order, as integers
    keys = ordered.astype(np.uint64) << np.uint64(32)
    keys |= np.arange(n, dtype=np.uint64)  # the position breaks ties: a stable order
    keys.sort(axis=1)
    return (keys & np.uint64(0xFFFFFFFF)).astype(np.intp)


def _sorted_uncertainty(ys: np.ndarray, cum: np.ndarray) -> np.ndarray:
    """Unc of each row of sorted observations ``ys`` whose weights add up to ``cum``."""
    gaps = np.subtract(ys[:, 1:], ys[:, :-1], dtype=np.float64)
    total, below = cum[:, -1], cum[:, :-1]  # C_j and W of the module docstring
    with np.errstate(invalid="ignore", divide="ignore"):
        num = np.einsum("ij,ij,ij->i", gaps, below, total[:, None] - below)
        return num / np.where(total > 0, total, np.nan) ** 2


def pooled_uncertainty(
    obs: xr.DataArray, *, keep: Iterable[Hashable] = (), weights: xr.DataArray | None = None
) -> xr.DataArray:
    """The uncertainty term (module docstring) of the observations of each index of the ``keep``
    dims, pooled over the others in ``obs``' order of them, weighted by ``weights`` (dims among
    ``obs``', non-negative; a group of zero total weight is NaN).

    ``evaluate`` pools the analysis over the init times and points of a lead, once for all the
    ensembles it decomposes (:func:`ensml.scores.hersbach.decomposition_of_sums`): the init
    times joined from a cluster's blocks pool as those of one process, to the last bit.
    """
    keep = list(keep)
    red = [d for d in obs.dims if d not in keep]
    order = [*keep, *red]
    w = weights_array(weights, obs, order, "pooled_uncertainty")
    unc = uncertainty_of_groups(obs.transpose(*order).values, w, len(red))
    coords = {k: v.variable for k, v in obs.coords.items() if set(v.dims) <= set(keep)}
    return xr.DataArray(unc, dims=keep, coords=coords, name="uncertainty")
