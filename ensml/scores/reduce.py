"""Input checks and the one reduction every ensml score uses (``reduce_dims``/``preserve_dims``).

The NaN/Inf policy these helpers implement is stated once, in :mod:`ensml.scores`: ±Inf in any
input (:func:`check_no_inf`) or score is an error; NaN is a missing value; the reduction leaves
a point whose score is NaN out of the mean and out of the sum of weights, and a mean with no
valid point is NaN, never 0.
"""

from __future__ import annotations

import functools
from collections.abc import Hashable, Iterable
from typing import Any

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.times import hours_of

__all__ = [
    "check_fcst_obs",
    "check_no_inf",
    "check_same_dims",
    "describe_position",
    "infinite_error",
    "reduce_score",
    "resolve_reduce_dims",
    "weighted_sums",
    "weights_array",
]


def _dims(a: xr.DataArray) -> str:
    return ", ".join(map(str, a.dims)) or "none"


def _coord_text(v: Any) -> str:
    v = np.asarray(v)
    if np.issubdtype(v.dtype, np.datetime64):
        return str(v.astype("datetime64[m]")).replace("T", " ")
    if np.issubdtype(v.dtype, np.timedelta64):
        return f"{hours_of(v):g} h"
    if np.issubdtype(v.dtype, np.number):
        return f"{float(v):g}"
    return str(v)


def describe_position(a: xr.DataArray, flat_index: int) -> str:
    """``"dim=value, ..."`` of the element of ``a`` at ``flat_index`` (row-major), by coordinate."""
    parts = []
    for d, i in zip(a.dims, np.unravel_index(int(flat_index), a.shape)):
        has = d in a.coords and a[d].ndim == 1
        parts.append(f"{d}={_coord_text(a[d].values[i]) if has else i}")
    return ", ".join(parts)


def infinite_error(func: str, name: str, count: int, where: str = "", *, chunk: bool = False) -> EnsmlError:
    """The one message of the Inf policy: the function, the argument and the count."""
    n = f"{count} infinite value{'s' if count != 1 else ''}"
    at = f" (first at {where})" if where else ""
    scope = " in one dask chunk" if chunk else ""
    return EnsmlError(f"{func}: {name} has {n}{scope}{at}; NaN marks missing data, ±Inf is refused")


def _no_inf_block(block: np.ndarray, func: str, name: str) -> np.ndarray:
    n = int(np.count_nonzero(np.isinf(block)))
    if n:
        raise infinite_error(func, name, n, chunk=True)
    return block


def check_no_inf(x: xr.DataArray, func: str, name: str) -> xr.DataArray:
    """Raise :class:`EnsmlError` if ``x`` holds ±Inf (NaN is allowed: a missing value); return ``x``.

    In-memory data are checked now, and the message gives the count and the first position;
    dask-backed data are returned with the check fused into each chunk, so it costs no extra
    pass and raises when computed (the count is that chunk's).
    """
    if not np.issubdtype(x.dtype, np.floating) and not np.issubdtype(x.dtype, np.complexfloating):
        return x
    if x.chunks is not None:
        check = functools.partial(_no_inf_block, func=func, name=name)
        return x.copy(data=x.data.map_blocks(check, dtype=x.dtype))
    values = np.asarray(x.values)
    if values.size and not (
        np.isinf(np.fmax.reduce(values, axis=None)) or np.isinf(np.fmin.reduce(values, axis=None))
    ):
        return x  # two allocation-free passes (fmax/fmin skip NaN) rule out ±Inf
    bad = np.isinf(values)
    n = int(np.count_nonzero(bad))
    if n:
        raise infinite_error(func, name, n, describe_position(x, int(np.argmax(bad.ravel()))))
    return x


def require_dataarray(x: Any, func: str, name: str) -> None:
    """Raise unless ``x`` is an :class:`xarray.DataArray`."""
    if not isinstance(x, xr.DataArray):
        raise EnsmlError(f"{func}: {name} must be an xarray.DataArray, got {type(x).__name__}")


def check_same_dims(a: xr.DataArray, obs: xr.DataArray, func: str, name: str) -> None:
    """Raise unless every dim of ``a`` is a dim of ``obs`` (``a`` may broadcast)."""
    extra = [d for d in a.dims if d not in obs.dims]
    if extra:
        raise EnsmlError(
            f"{func}: {name} has dims ({_dims(a)}) that the observation ({_dims(obs)}) lacks: "
            f"{', '.join(map(str, extra))}"
        )


def aligned_fields(arrays: dict[str, Any], func: str) -> list[xr.DataArray]:
    """Fields scored together, the observation last (``{"mu": …, "sigma": …, "obs": …}``): each
    must be a DataArray with dims among the observation's; aligned whole (:func:`align_whole`)."""
    for name, a in arrays.items():
        require_dataarray(a, func, name)
    *fields, obs = arrays.values()
    for name, a in zip(arrays, fields):
        check_same_dims(a, obs, func, name)
    return align_whole(arrays, func)


def align_whole(arrays: dict[str, xr.DataArray], func: str) -> list[xr.DataArray]:
    """``arrays`` (name → DataArray) aligned by coordinate; an overlap that leaves out points of
    any of them is an error naming the dim and the sizes (a score of the common points only
    would be silent)."""
    try:
        aligned = xr.align(*arrays.values(), join="inner", copy=False)
    except ValueError as exc:
        raise EnsmlError(f"{func}: {', '.join(arrays)} cannot be aligned: {exc}") from exc
    for before, after in zip(arrays.values(), aligned):
        for d in before.dims:
            if after.sizes[d] < before.sizes[d]:
                sizes = ", ".join(f"{n} {a.sizes[d]}" for n, a in arrays.items() if d in a.dims)
                raise EnsmlError(
                    f"{func}: {', '.join(arrays)} overlap only partly along '{d}' ({sizes}, common "
                    f"{after.sizes[d]}); select the common points first, e.g. xr.align(..., join='inner')"
                )
    return list(aligned)


def check_fcst_obs(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    func: str,
    member_dim: str | None = "member",
    *,
    finite: bool = True,
) -> tuple[xr.DataArray, xr.DataArray]:
    """Check an (ensemble) forecast against its observation and align them by coordinate.

    The forecast must have exactly the observation's dims plus ``member_dim`` (when given);
    coordinates are aligned, and a partial or empty overlap is an error, not a score of the
    common points only (or an empty one). With
    ``finite`` (default) ±Inf in either is an error (:func:`check_no_inf`); ``finite=False`` is
    for scores whose kernel checks that itself (the ensemble CRPS).
    """
    require_dataarray(fcst, func, "forecast")
    require_dataarray(obs, func, "observation")
    if member_dim is not None:
        if member_dim not in fcst.dims:
            raise EnsmlError(
                f"{func}: forecast has no member dimension '{member_dim}' (dims: {_dims(fcst)}); "
                "pass member_dim=..."
            )
        if member_dim in obs.dims:
            raise EnsmlError(f"{func}: observation must not have the member dimension '{member_dim}'")
        if fcst.sizes[member_dim] == 0:
            raise EnsmlError(f"{func}: forecast has no members (dimension '{member_dim}' is empty)")
    fdims = {d for d in fcst.dims if d != member_dim}
    if fdims != set(obs.dims):
        raise EnsmlError(
            f"{func}: forecast dims ({_dims(fcst)}) do not match observation dims ({_dims(obs)})"
            + (f" plus member dim '{member_dim}'" if member_dim else "")
        )
    for d in obs.dims:
        if (d not in fcst.coords or d not in obs.coords) and fcst.sizes[d] != obs.sizes[d]:
            raise EnsmlError(
                f"{func}: forecast and observation sizes differ along '{d}' "
                f"({fcst.sizes[d]} vs {obs.sizes[d]}) and there is no coordinate to align them"
            )
    if not fcst.xindexes and not obs.xindexes:
        f2, o2 = fcst, obs  # nothing to align by (the sizes are checked above)
    else:
        try:
            f2, o2 = xr.align(fcst, obs, join="inner", copy=False)  # scores never write to inputs
        except ValueError as exc:
            raise EnsmlError(f"{func}: forecast and observation cannot be aligned: {exc}") from exc
    for d in obs.dims:
        if o2.sizes[d] == 0 and obs.sizes[d] > 0:
            raise EnsmlError(f"{func}: forecast and observation share no coordinates along '{d}'")
    for d in obs.dims:  # a partial overlap would be scored on the common points only, silently
        if o2.sizes[d] < obs.sizes[d] or f2.sizes[d] < fcst.sizes[d]:
            raise EnsmlError(
                f"{func}: forecast and observation overlap only partly along '{d}' (forecast "
                f"{fcst.sizes[d]}, observation {obs.sizes[d]}, common {o2.sizes[d]}); select the "
                f"common points first, e.g. xr.align(fcst, obs, join='inner')"
            )
    for d in obs.dims:
        if f2.sizes[d] != o2.sizes[d]:
            raise EnsmlError(
                f"{func}: forecast and observation sizes differ along '{d}' ({f2.sizes[d]} vs {o2.sizes[d]})"
            )
    if finite:
        f2, o2 = check_no_inf(f2, func, "forecast"), check_no_inf(o2, func, "observation")
    return f2, o2


def resolve_reduce_dims(
    dims: tuple[Hashable, ...],
    reduce_dims: str | Iterable[Hashable] | None,
    preserve_dims: str | Iterable[Hashable] | None,
    func: str = "score",
) -> list[Hashable]:
    """The dims to average over, from ``reduce_dims`` or ``preserve_dims`` (as in ``scores``).

    Neither given: all dims. ``reduce_dims="all"``: all dims; ``preserve_dims="all"``: none.
    """
    if reduce_dims is not None and preserve_dims is not None:
        raise EnsmlError(f"{func}: pass reduce_dims or preserve_dims, not both")

    def as_list(x: str | Iterable[Hashable]) -> list[Hashable]:
        return [x] if isinstance(x, str) else list(x)

    if reduce_dims is None and preserve_dims is None:
        return list(dims)
    if preserve_dims is not None:
        if isinstance(preserve_dims, str) and preserve_dims == "all":
            return []
        keep = as_list(preserve_dims)
        unknown = [d for d in keep if d not in dims]
        if unknown:
            raise EnsmlError(
                f"{func}: preserve_dims {unknown} not among the score dims ({', '.join(map(str, dims))})"
            )
        return [d for d in dims if d not in keep]
    if isinstance(reduce_dims, str) and reduce_dims == "all":
        return list(dims)
    red = as_list(reduce_dims)  # type: ignore[arg-type]
    unknown = [d for d in red if d not in dims]
    if unknown:
        raise EnsmlError(
            f"{func}: reduce_dims {unknown} not among the score dims ({', '.join(map(str, dims))})"
        )
    return red


def check_weights(weights: Any, score: xr.DataArray, func: str = "score") -> xr.DataArray:
    """Check that ``weights`` is a non-negative, finite DataArray over (some of) the score's dims."""
    if not isinstance(weights, xr.DataArray):
        raise EnsmlError(f"{func}: weights must be an xarray.DataArray, got {type(weights).__name__}")
    extra = [d for d in weights.dims if d not in score.dims]
    if extra:
        raise EnsmlError(
            f"{func}: weights dims ({_dims(weights)}) are not among the score dims ({_dims(score)})"
        )
    for d in weights.dims:
        if weights.sizes[d] != score.sizes[d]:
            raise EnsmlError(
                f"{func}: weights have size {weights.sizes[d]} along '{d}', the score {score.sizes[d]}"
            )
        if d in weights.coords and d in score.coords:
            if not np.array_equal(weights[d].values, score[d].values):
                raise EnsmlError(f"{func}: weights coordinates along '{d}' differ from the score's")
    if weights.chunks is None:
        w = np.asarray(weights.values)
        if not np.all(np.isfinite(w)):
            raise EnsmlError(f"{func}: weights contain NaN or infinite values")
        if np.any(w < 0):
            raise EnsmlError(f"{func}: weights must be >= 0 (min {w.min():.6g})")
    return weights


def weights_array(weights: Any, obs: xr.DataArray, order: list[Hashable], func: str) -> np.ndarray:
    """``weights`` checked (:func:`check_weights`) as a float64 array broadcastable to ``obs``
    transposed to ``order``: a dim the weights lack has size 1; None is one weight of 1."""
    if weights is None:
        return np.ones((1,) * len(order))
    if isinstance(weights, xr.DataArray) and weights.chunks is not None:
        weights = weights.compute()  # a few numbers per grid point: not a pass over the data
    weights = check_weights(weights, obs, func)
    vals = weights.transpose(*[d for d in order if d in weights.dims]).values.astype(np.float64)
    return vals.reshape([obs.sizes[d] if d in weights.dims else 1 for d in order])


def reduce_score(
    score: xr.DataArray,
    *,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
    func: str = "score",
) -> xr.DataArray:
    r"""NaN-skipping (weighted) mean of a pointwise score over the resolved dims.

    .. math:: \bar s = \sum_p w_p s_p \,/\, \sum_p w_p \quad (p \text{ with finite } s_p)

    Parameters
    ----------
    score : xr.DataArray
        Pointwise score.
    reduce_dims, preserve_dims
        See :func:`resolve_reduce_dims`.
    weights : xr.DataArray, optional
        Non-negative weights over a subset of the score's dims (e.g.
        :func:`ensml.data.weights.latitude_weights`), broadcast over the others.

    An infinite pointwise score (e.g. float overflow) is an error, as infinite inputs are.
    """
    dims = resolve_reduce_dims(score.dims, reduce_dims, preserve_dims, func)
    score = check_no_inf(score, func, "the pointwise score")
    if weights is not None:
        weights = check_weights(weights, score, func)
        if not dims:
            return score
        # xarray's weighted mean masks the weights of NaN scores: sum(w s) / sum(w over valid).
        weights = weights.drop_vars([c for c in weights.coords if c not in weights.dims])
        if weights.dims and all(d in score.coords for d in weights.dims):
            weights = weights.assign_coords({d: score[d] for d in weights.dims})
        return score.weighted(weights).mean(dim=dims, skipna=True)
    if not dims:
        return score
    return score.mean(dim=dims, skipna=True)


def weighted_sums(
    score: xr.DataArray, weights: xr.DataArray, over: Iterable[Hashable], func: str = "score"
) -> tuple[xr.DataArray, xr.DataArray]:
    r"""The two sums of :func:`reduce_score`'s weighted mean over ``over``, kept apart:
    :math:`\sum_p w_p s_p` and :math:`\sum_p w_p` over the points ``p`` where ``s`` is not NaN,
    for each index of the other dims.

    Each index's sums come from its own values alone (one contiguous row, numpy's pairwise sum),
    so the sums of some init times are the same to the last bit whether those init times are
    summed alone or within a longer array: blocks of init times summed apart (on a cluster's
    workers) and joined give the sums of the whole, which a mean over init times then adds in
    init order. Returns float64 DataArrays over the other dims, in ``score``'s order.
    """
    over = list(over)
    missing = [d for d in over if d not in score.dims]
    if missing:
        raise EnsmlError(f"{func}: no dimension {missing[0]!r} to sum over in ({_dims(score)})")
    score = check_no_inf(score, func, "the pointwise score")
    weights = check_weights(weights, score, func)
    keep = [d for d in score.dims if d not in over]
    s = score.transpose(*keep, *over)
    w = weights.drop_vars([c for c in weights.coords if c not in weights.dims])
    w = np.broadcast_to(w.transpose(*[d for d in s.dims if d in w.dims]).values[_spread(s, w)], s.shape)
    n = int(np.prod([s.sizes[d] for d in over]))
    values = np.ascontiguousarray(s.values, dtype=np.float64).reshape(-1, n)
    w = np.ascontiguousarray(w, dtype=np.float64).reshape(-1, n)
    valid = ~np.isnan(values)
    total = np.where(valid, values * w, 0.0).sum(axis=-1)
    weight = np.where(valid, w, 0.0).sum(axis=-1)
    shape = [s.sizes[d] for d in keep]
    coords = {d: s[d] for d in keep if d in s.coords}
    return (
        xr.DataArray(total.reshape(shape), dims=keep, coords=coords),
        xr.DataArray(weight.reshape(shape), dims=keep, coords=coords),
    )


def _spread(s: xr.DataArray, w: xr.DataArray) -> tuple:
    """The index that gives ``w`` (its dims in ``s``'s order) a length-1 axis for each dim of
    ``s`` it lacks, for numpy to broadcast."""
    return tuple(slice(None) if d in w.dims else np.newaxis for d in s.dims)
