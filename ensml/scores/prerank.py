r"""Multivariate rank histograms through pre-rank functions.

A univariate rank histogram checks each component of an ensemble forecast on its own; it cannot
see whether the members carry the right joint structure (the spatial correlation of a field,
the persistence of a trajectory). A pre-rank function :math:`\rho_S` maps each of the
:math:`M + 1` vectors of a case, :math:`S = \{\mathbf y, \mathbf x_1, \dots, \mathbf x_M\}`
(the observation and the members, D components each), to one number; the rank of the
observation is then the univariate rank of :math:`\rho_S(\mathbf y)` among the
:math:`\rho_S(\mathbf x_m)`,

.. math::
    r = 1 + \sum_{m=1}^{M} \mathbb 1\{\rho_S(\mathbf x_m) < \rho_S(\mathbf y)\}
        + \text{(a uniform share of the ties)},

and its histogram over many cases is flat when the observation is exchangeable with the members
(Gneiting et al. 2008, Test 17, 211; Thorarinsdottir, Scheuerer & Heinz 2016, J. Comput. Graph.
Stat. 25(1), 105–122, the pre-ranks below). Which departures a histogram shows depends on the
pre-rank; with :math:`\operatorname{rank}_l(\mathbf x_j) = \sum_{i \in S} \mathbb 1\{x_i^l \le
x_j^l\}` (1 … M + 1) the componentwise rank of vector j in component l:

* ``"area_mean"``: :math:`\rho = \sum_l w_l x^l / \sum_l w_l`, the (area-weighted) mean of the
  vector, e.g. a basin's rain total. Shows the calibration of the aggregate: a ∪ shape when the
  members' means are too close together, e.g. because their components are too weakly
  correlated.
* ``"average"``: the average rank :math:`\rho = \frac1D \sum_l \operatorname{rank}_l`
  (Thorarinsdottir et al. 2016). Under-dispersion and too weak a correlation give a
  ∪ shape, over-dispersion and too strong a correlation a ∩ shape, a bias a slope.
* ``"band_depth"``: :math:`\rho = \frac1D \sum_l \big[\operatorname{rank}_l\,(M + 1 -
  \operatorname{rank}_l) + (\operatorname{rank}_l - 1)\, e_l\big]`, with :math:`e_l = \sum_{i
  \in S} \mathbb 1\{x_i^l = x_j^l\}` the number of values tied with :math:`x_j^l` (itself
  included). Without ties the bracket is the number of pairs :math:`\{i, k\} \subset S`
  whose band :math:`[\min(x_i^l, x_k^l), \max(x_i^l, x_k^l)]` holds :math:`x_j^l`: ρ is
  :math:`\binom{M+1}{2}` times the modified band depth of López-Pintado & Romo (2009, JASA 104,
  718) with bands of two vectors (Thorarinsdottir et al. 2016, whose tie rule this
  is). High for central vectors: an outlying observation (under-dispersion, bias, too weak a
  correlation) fills the low ranks, over-dispersion or too strong a correlation the high ones.
* ``"mst"``: :math:`\rho(\mathbf x_j)` is the length of the Euclidean minimum spanning tree of
  :math:`S \setminus \{\mathbf x_j\}` (Smith & Hansen 2004, Mon. Wea. Rev. 132, 1522; Wilks
  2004, Mon. Wea. Rev. 132, 1329). Low when :math:`\mathbf x_j` is an outlier. It depends on the
  scale of each component: standardise components that differ in unit or spread first.
  Lengths that agree to a relative 1e-10 count as ties (the same set of points summed in
  another order). With one member every length is 0 and the rank is uniform at random.

Ties among the pre-ranks (frequent for the integer-valued average and band-depth pre-ranks) are
broken uniformly at random by a :func:`numpy.random.default_rng` generator seeded by ``seed``.
With D = 1, ``"average"`` and ``"area_mean"`` give the univariate rank histogram
(:func:`~ensml.scores.calibration.rank_histogram`). Measure the flatness of these histograms
with :func:`~ensml.scores.calibration.histogram_flatness`.

NaN/Inf policy: a case with a NaN in any component of the observation or of any member is left
out (its ranks would be among other vectors or fewer members; to rank over the observed
components only, select them first); ±Inf is an :class:`~ensml.errors.EnsmlError`.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import Any

import numpy as np
import xarray as xr
from scipy.stats import rankdata

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.calibration import RANK
from ensml.scores.multivariate import vector_dims
from ensml.scores.reduce import check_fcst_obs, check_weights, resolve_reduce_dims

__all__ = ["PRERANK_METHODS", "prerank_histogram", "prerank_ranks"]

#: The pre-rank functions :func:`prerank_histogram` knows.
PRERANK_METHODS = ("area_mean", "average", "band_depth", "mst")

#: Minimum spanning tree lengths closer than this, relative to the largest in the case, are ties.
_MST_RTOL = 1e-10
#: About how many float64 values the MST pre-rank holds at once (cases are taken in chunks).
_MST_CHUNK_VALUES = 4_000_000


def _check_method(method: Any, func: str) -> str:
    if not isinstance(method, str) or method not in PRERANK_METHODS:
        raise EnsmlError(f"{func}: unknown method {method!r} (known: {', '.join(PRERANK_METHODS)})")
    return method


def _componentwise_rank(z: np.ndarray) -> np.ndarray:
    # z (N, n, D): rank_l = #{i: z_i^l <= z_j^l}, 1 … n
    return rankdata(z, method="max", axis=1).astype(np.int64)


def _componentwise_ties(z: np.ndarray, rank: np.ndarray) -> np.ndarray:
    # e_l = #{i: z_i^l == z_j^l}, itself included
    return rank - rankdata(z, method="min", axis=1).astype(np.int64) + 1


def _mst_lengths(dist: np.ndarray) -> np.ndarray:
    """Length of the minimum spanning tree of each complete graph ``dist`` (B, k, k), by Prim's
    algorithm on the dense matrix (zero distances, i.e. repeated points, are edges like any
    other), vectorised over the B graphs: k − 1 steps of O(B k)."""
    b, k, _ = dist.shape
    total = np.zeros(b)
    if k < 2:
        return total
    rows = np.arange(b)
    in_tree = np.zeros((b, k), dtype=bool)
    in_tree[:, 0] = True
    best = dist[:, 0, :].copy()  # distance of each node to the tree so far
    for _ in range(k - 1):
        cand = np.where(in_tree, np.inf, best)
        nxt = cand.argmin(axis=1)
        total += cand[rows, nxt]
        in_tree[rows, nxt] = True
        np.minimum(best, dist[rows, nxt, :], out=best)
    return total


def _mst_preranks(z: np.ndarray) -> np.ndarray:
    # z (N, n, D) -> (N, n): the MST length of the n - 1 vectors left when vector j is removed
    n_case, n, d = z.shape
    keep = np.array([[i for i in range(n) if i != j] for j in range(n)], dtype=np.intp).reshape(n, n - 1)
    out = np.empty((n_case, n))
    chunk = max(1, _MST_CHUNK_VALUES // (n**3 + n * d))
    for start in range(0, n_case, chunk):
        zc = z[start : start + chunk]
        dist = np.empty((zc.shape[0], n, n))
        for j in range(n):  # row by row: memory O(n D) per case, exactly symmetric
            dist[:, j, :] = np.sqrt(((zc - zc[:, j : j + 1, :]) ** 2).sum(axis=-1))
        sub = dist[:, keep[:, :, None], keep[:, None, :]]  # (c, n, n-1, n-1)
        out[start : start + chunk] = _mst_lengths(sub.reshape(-1, n - 1, n - 1)).reshape(-1, n)
    return out


def _preranks(z: np.ndarray, method: str, weights: np.ndarray | None) -> np.ndarray:
    """Pre-rank values (N, n) of the n = M + 1 vectors of each case, z (N, n, D)."""
    if method == "area_mean":
        if weights is None:
            return z.mean(axis=-1)
        return (z * weights).sum(axis=-1) / weights.sum()
    if method == "mst":
        return _mst_preranks(z)
    rank = _componentwise_rank(z)
    if method == "average":
        return rank.sum(axis=-1)  # D times the average rank: integers, so ties are exact
    n = z.shape[1]
    ties = _componentwise_ties(z, rank)
    return (rank * (n - rank) + (rank - 1) * ties).sum(axis=-1)  # band depth, times D


def _ranks_core(
    x: np.ndarray, y: np.ndarray, u: np.ndarray, method: str, weights: np.ndarray | None
) -> np.ndarray:
    # x (N, M, D), y (N, D), u (N,) uniform in [0, 1) -> ranks 1 … M + 1, 0 for a left-out case
    z = np.concatenate([y[:, None, :], x], axis=1).astype(np.float64, copy=False)
    bad = np.isnan(z).any(axis=(1, 2))
    if bad.any():
        z = np.where(bad[:, None, None], 0.0, z)
    rho = _preranks(z, method, weights)
    obs, members = rho[:, :1], rho[:, 1:]
    if method == "mst":
        tol = _MST_RTOL * np.abs(rho).max(axis=1, keepdims=True)
        below = (members < obs - tol).sum(axis=1)
        ties = (np.abs(members - obs) <= tol).sum(axis=1)
    else:
        below = (members < obs).sum(axis=1)
        ties = (members == obs).sum(axis=1)
    rank = 1 + below + np.floor(u * (ties + 1)).astype(np.int64)
    return np.where(bad, 0, rank)


def _array_weights(weights: Any, d: int, method: str, func: str) -> np.ndarray | None:
    if weights is None:
        return None
    if method != "area_mean":
        raise EnsmlError(f"{func}: component_weights apply to method 'area_mean' only, not {method!r}")
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EnsmlError(f"{func}: weights must be numbers: {exc}") from exc
    if w.shape != (d,):
        raise EnsmlError(f"{func}: weights have shape {w.shape}, expected ({d},), one per component")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or not w.sum() > 0:
        raise EnsmlError(f"{func}: weights must be finite, >= 0 and not all 0")
    return w


def prerank_ranks(
    fcst: np.ndarray,
    obs: np.ndarray,
    method: str,
    seed: int = 0,
    *,
    component_weights: np.ndarray | None = None,
) -> np.ndarray:
    """Multivariate rank of each case's observation among its members, via a pre-rank function.

    The array kernel of :func:`prerank_histogram`; the pre-ranks, ties and NaN policy are those
    of the module docstring.

    Parameters
    ----------
    fcst : np.ndarray, shape (N, M, D)
        N cases of M members, each a vector of D components.
    obs : np.ndarray, shape (N, D)
        The observed vectors.
    method : {"area_mean", "average", "band_depth", "mst"}
        Pre-rank function.
    seed : int
        Seeds the uniform draws (one per case, in order) that break ties.
    component_weights : np.ndarray, shape (D,), optional
        Non-negative component weights of ``"area_mean"`` (e.g. cell areas); default equal.

    Returns
    -------
    np.ndarray, shape (N,), int64
        Ranks 1 … M + 1 (1: the observation's pre-rank is below every member's); 0 for a case
        left out for a NaN.
    """
    func = "prerank_ranks"
    method = _check_method(method, func)
    x = np.asarray(fcst)
    y = np.asarray(obs)
    for name, a in (("forecast", x), ("observation", y)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise EnsmlError(f"{func}: {name} must be numeric, got dtype {a.dtype}")
    if x.ndim != 3 or y.ndim != 2:
        raise EnsmlError(
            f"{func}: expected fcst of shape (N, M, D) and obs of shape (N, D), got {x.shape} and {y.shape}"
        )
    if x.shape[0] != y.shape[0] or x.shape[2] != y.shape[1]:
        raise EnsmlError(
            f"{func}: fcst {x.shape} and obs {y.shape} differ in N or D (fcst (N, M, D), obs (N, D))"
        )
    if x.shape[1] < 1:
        raise EnsmlError(f"{func}: needs at least 1 member (fcst has shape {x.shape}, members on axis 1)")
    if x.shape[2] < 1:
        raise EnsmlError(f"{func}: the vectors have no components (D = 0)")
    if np.isinf(x).any() or np.isinf(y).any():
        raise EnsmlError(f"{func}: forecast or observation has infinite values; NaN marks missing data")
    w = _array_weights(component_weights, x.shape[2], method, func)
    u = np.random.default_rng(seed).random(x.shape[0])
    return _ranks_core(x, y, u, method, w)


def _component_weights(
    weights: xr.DataArray | None, obs: xr.DataArray, dims: list[Hashable], method: str, func: str
) -> np.ndarray | None:
    if weights is None:
        return None
    if method != "area_mean":
        raise EnsmlError(f"{func}: component_weights apply to method 'area_mean' only, not {method!r}")
    check_weights(weights, obs, func)
    outside = [d for d in weights.dims if d not in dims]
    if outside:
        raise EnsmlError(
            f"{func}: weights are over the components (over: {', '.join(map(str, dims))}), but have "
            f"the dim(s) {', '.join(map(str, outside))}"
        )
    template = xr.DataArray(np.zeros([obs.sizes[d] for d in dims]), dims=dims)
    w = weights.variable.set_dims(template.sizes).transpose(*dims).values.astype(np.float64).ravel()
    if weights.chunks is not None:  # check_weights checks in-memory weights only
        _array_weights(w, w.size, method, func)
    if not w.sum() > 0:
        raise EnsmlError(f"{func}: weights are all 0")
    return w


def _core(
    fcst: np.ndarray, obs: np.ndarray, u: np.ndarray, n_over: int, method: str, weights: np.ndarray | None
) -> np.ndarray:
    # apply_ufunc puts the core dims last: fcst (..., M, *over), obs (..., *over), u (...)
    case_shape = obs.shape[: obs.ndim - n_over]
    d = int(np.prod(obs.shape[obs.ndim - n_over :]))
    m = fcst.shape[fcst.ndim - n_over - 1]
    rank = _ranks_core(fcst.reshape((-1, m, d)), obs.reshape((-1, d)), u.reshape(-1), method, weights)
    return rank.reshape(case_shape)


def prerank_histogram(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    over: str | Sequence[Hashable],
    method: str,
    member_dim: str = MEMBER,
    seed: int = 0,
    component_weights: xr.DataArray | None = None,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
) -> xr.DataArray:
    """Multivariate rank histogram of an ensemble of vectors, through a pre-rank function.

    The counts of the observation's multivariate rank (:func:`prerank_ranks`; the pre-ranks,
    their references and the ties are in the module docstring) over the cases. The dims named by
    ``over`` form the vector of D components; every other dim indexes cases. A flat histogram
    is what an ensemble exchangeable with the observation gives; compare methods to see which
    departure it has (e.g. flat univariate and ``"average"`` histograms but a ∪-shaped
    ``"area_mean"`` one: the margins are right, the correlation between components too weak).
    Measure flatness with :func:`~ensml.scores.calibration.histogram_flatness`.

    Cost: ``"area_mean"`` O(M D), ``"average"`` and ``"band_depth"`` O(M log M · D), ``"mst"``
    O(M² D + M³) per case, in float64.

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with the dims of ``obs`` plus ``member_dim``; numpy- or dask-backed (dask: chunk
        by chunk, each chunk holding whole vectors and all members).
    obs : xr.DataArray
        Observation; coordinates are aligned with the forecast (inner join; a partial overlap is
        an error).
    over : str or sequence of str
        The dims whose values form the vector, e.g. ``("latitude", "longitude")`` or
        ``"lead_time"``; not ``member_dim``.
    method : {"area_mean", "average", "band_depth", "mst"}
        The pre-rank function.
    member_dim : str
        Name of the member dimension (at least 1 member).
    seed : int
        Seeds the uniform draws that break ties (one per case), so the result is reproducible
        for a given chunking, as :func:`~ensml.scores.calibration.rank_histogram`'s.
    component_weights : xr.DataArray, optional
        ``"area_mean"`` only: non-negative weights of the components, over some of the ``over``
        dims and broadcast over the others, e.g.
        :func:`ensml.data.weights.latitude_weights`; not all 0. Default equal weights. (Not
        weights of the cases: select or subsample cases instead.)
    reduce_dims, preserve_dims
        Case dims to count over, or to keep; neither: count over all cases.

    Returns
    -------
    xr.DataArray
        float64 counts named ``prerank_histogram`` over the kept case dims, with a ``rank`` dim of
        length M + 1 whose coordinate r = 0 … M is, as in
        :func:`~ensml.scores.calibration.rank_histogram`, the number of members whose pre-rank is
        below the observation's (the 1-based rank of Thorarinsdottir et al. minus 1). A case
        with a NaN in the observation or any member is left out; a kept slice without a valid
        case is NaN in every rank, not 0.

    Examples
    --------
    >>> prerank_histogram(fc, obs, over=("latitude", "longitude"), method="band_depth")  # doctest: +SKIP
    """
    func = "prerank_histogram"
    method = _check_method(method, func)
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim)
    dims = vector_dims(over, obs, member_dim, func)
    for name, a in (("forecast", fcst), ("observation", obs)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise EnsmlError(f"{func}: {name} must be numeric, got dtype {a.dtype}")
    if int(np.prod([obs.sizes[d] for d in dims])) == 0:
        raise EnsmlError(f"{func}: the vector over {', '.join(map(str, dims))} has no components")
    w = _component_weights(component_weights, obs, dims, method, func)
    m = fcst.sizes[member_dim]

    case = obs.isel(dict.fromkeys(dims, 0), drop=True)
    chunked = fcst.chunks is not None or obs.chunks is not None
    if chunked:
        import dask.array as da

        case = case.chunk()
        u_data = da.random.default_rng(seed).random(case.shape, chunks=case.chunks)
        fcst = fcst.chunk(dict.fromkeys([*dims, member_dim], -1))
        obs = obs.chunk(dict.fromkeys(dims, -1))
    else:
        u_data = np.asarray(np.random.default_rng(seed).random(case.shape))
    u = case.copy(data=u_data)
    rank = xr.apply_ufunc(
        _core,
        fcst,
        obs,
        u,
        input_core_dims=[[member_dim, *dims], list(dims), []],
        kwargs={"n_over": len(dims), "method": method, "weights": w},
        dask="parallelized",
        output_dtypes=[np.int64],
    )
    red = resolve_reduce_dims(rank.dims, reduce_dims, preserve_dims, func)
    ranks = xr.DataArray(np.arange(m + 1), dims=[RANK], coords={RANK: np.arange(m + 1)})
    hit = ((rank - 1) == ranks).astype(np.float64)
    out = hit.sum(red).where((rank > 0).any(red))  # no valid case: NaN, not a row of zeros
    long_name = f"{method} pre-rank histogram count over {', '.join(map(str, dims))}"
    return out.rename("prerank_histogram").assign_attrs(units="1", long_name=long_name)
