r"""Hersbach (2000) decomposition of the ensemble CRPS into reliability, resolution and uncertainty.

Hersbach, H. (2000): Decomposition of the continuous ranked probability score for ensemble
prediction systems. Wea. Forecasting 15, 559–570. For a case k (a point of the reduced dims)
with the N members sorted, :math:`x_1 \le \dots \le x_N`, and the observation y, the ensemble
CDF is :math:`p_i = i/N` on bin i, :math:`(x_i, x_{i+1})` for 0 < i < N, and on the outlier
bins :math:`(-\infty, x_1)` (i = 0) and :math:`(x_N, \infty)` (i = N). The parts of bin i
below and above y (eqs 26–27) are

.. math::
    \alpha_i^k = \min(\max(y, x_i), x_{i+1}) - x_i, \quad
    \beta_i^k = x_{i+1} - \min(\max(y, x_i), x_{i+1}) \quad (0 < i < N), \\
    \alpha_0^k = 0, \ \beta_0^k = \max(x_1 - y, 0), \quad
    \alpha_N^k = \max(y - x_N, 0), \ \beta_N^k = 0,

and their weighted means over the cases, :math:`\alpha_i = \sum_k w_k \alpha_i^k / \sum_k w_k`
(:math:`\beta_i` alike), give

.. math::
    \mathrm{CRPS} = \sum_{i=0}^N \alpha_i p_i^2 + \beta_i (1 - p_i)^2
                  = \sum_i g_i \left[(1 - o_i) p_i^2 + o_i (1 - p_i)^2\right], \\
    \mathrm{Reli} = \sum_i g_i (o_i - p_i)^2, \quad
    \mathrm{CRPS_{pot}} = \sum_i g_i o_i (1 - o_i), \quad
    \mathrm{CRPS} = \mathrm{Reli} + \mathrm{CRPS_{pot}},

with :math:`g_i = \alpha_i + \beta_i`, :math:`o_i = \beta_i / g_i` for 0 < i < N, and for the
outliers (eq 33) :math:`o_0` = the (weighted) fraction of cases with :math:`y < x_1`,
:math:`1 - o_N` = the fraction with :math:`y > x_N`, :math:`g_0 = \beta_0 / o_0`,
:math:`g_N = \alpha_N / (1 - o_N)` (0 without such outliers). The CRPS is exactly the mean
empirical-CDF ensemble CRPS (:func:`~ensml.scores.crps_ensemble`). The uncertainty is the CRPS
of the (weighted) sample climatology of the observations, :math:`P(x) = \sum_k w_k 1\{y_k \le
x\} / W`, and the resolution what the forecast gains on it:

.. math::
    \mathrm{Unc} = \int P (1 - P)\, dx
        = \frac{\sum_{k,l} w_k w_l |y_k - y_l|}{2 W^2}
        = \sum_j (y_{(j+1)} - y_{(j)}) \frac{C_j (W - C_j)}{W^2}, \quad
    \mathrm{Resol} = \mathrm{Unc} - \mathrm{CRPS_{pot}},

:math:`C_j` the weight of the j smallest observations: exact, computed from the sorted
observations of each kept group (a sum of non-negative terms, no cancellation).

One pass: under dask, one ``dask.compute`` reads every forecast chunk once, sorts its members
and reduces its weighted per-bin sums (with the outlier weights, the weight and a finiteness
check) to 2N + 6 numbers per kept point, and loads the observation (1/N of the forecast's
size, kept in memory for the uncertainty's sort). NaN or ±Inf in the forecast or observation
is an error, unlike the other scores' NaN policy: every case needs all N members and y.

In parts: the per-bin sums are additive over disjoint sets of cases, so :func:`case_sums` of
each part (a block of init times read by one dask worker) and :func:`decomposition_of_sums` of
their sums over the parts give the decomposition of the whole; the uncertainty takes the
observations of every part, sorted per part and merged (:mod:`ensml.scores.uncertainty`).
Summing per-init sums in init order makes the result independent of how the init times were
split into parts.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable

import numpy as np
import xarray as xr

from ensml.errors import EnsmlError
from ensml.names import MEMBER
from ensml.scores.reduce import check_fcst_obs, resolve_reduce_dims, weights_array
from ensml.scores.uncertainty import uncertainty_of_groups

__all__ = ["case_sums", "crps_decomposition", "decomposition_of_sums"]

BIN = "bin"
REFERENCE = "Hersbach (2000), Wea. Forecasting 15, 559-570"
_BATCH = 1 << 19  # members per batch inside a block: ~4 MB per float64 temporary


def _batch_sums(f: np.ndarray, y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Per-group sums over the cases of a batch: f (G, n, N), y and w (G, n) -> (G, 2N + 6).

    Columns: Σwα_0..N, Σwβ_0..N, Σw[y < x_1], Σw[y > x_N], Σw, Σ(x_1 + x_N) (unweighted:
    non-finite iff a member is NaN or infinite; np.sort puts NaN last).
    """
    x = np.sort(f.astype(np.float64, copy=False), axis=-1)
    y = y.astype(np.float64, copy=False)
    m, g = x.shape[-1], x.shape[0]
    lo, hi = x[..., :-1], x[..., 1:]
    c = np.minimum(np.maximum(y[..., None], lo), hi)
    x1, xn = x[..., 0], x[..., -1]
    out = np.zeros((g, 2 * m + 6))
    # Sums over the contiguous last axis (numpy's pairwise sum of each row), not a matmul or
    # einsum, whose order of summation depends on BLAS's threads or on the batch's shape: a block
    # of init times scored by a worker (``evaluate --cluster``) gets the sums of one process.
    out[:, 1:m] = _row_sums(c - lo, w)  # α_i, 0 < i < N
    out[:, m] = _row_sums(np.maximum(y - xn, 0.0), w)  # α_N
    out[:, m + 1] = _row_sums(np.maximum(x1 - y, 0.0), w)  # β_0
    out[:, m + 2 : 2 * m + 1] = _row_sums(hi - c, w)  # β_i, 0 < i < N
    out[:, 2 * m + 2] = _row_sums(y < x1, w)
    out[:, 2 * m + 3] = _row_sums(y > xn, w)
    out[:, 2 * m + 4] = _row_sums(w)
    out[:, 2 * m + 5] = _row_sums(x1 + xn)
    return out


def _row_sums(d: np.ndarray, w: np.ndarray | None = None) -> np.ndarray:
    """Σ_n w[g, n] d[g, n, k] -> (G, K) (d (G, n): -> (G,); no w: unweighted), each row summed
    alone over a C-contiguous last axis (numpy's pairwise sum: its order depends on n only)."""
    rows = np.ascontiguousarray(np.moveaxis(d, -1, 1) if d.ndim == 3 else d)
    if w is not None:
        rows = rows * (w[:, None, :] if d.ndim == 3 else w)
    return np.ascontiguousarray(rows).sum(-1)


def _case_sums(f: np.ndarray, y: np.ndarray, w: np.ndarray, nred: int) -> np.ndarray:
    """f (*kept, *reduced, N), y and w (broadcast) without N -> sums (*kept, 1, ..., 2N + 6)."""
    m = f.shape[-1]
    kept = y.shape[: y.ndim - nred]
    g = int(np.prod(kept, dtype=np.int64))
    n = int(np.prod(y.shape[y.ndim - nred :], dtype=np.int64))
    out = np.zeros((g, 2 * m + 6))
    if g and n:
        f3, y2 = f.reshape(g, n, m), y.reshape(g, n)
        w2 = np.broadcast_to(np.asarray(w, dtype=np.float64), y.shape).reshape(g, n)
        nb = max(1, min(n, _BATCH // m))
        gb = max(1, _BATCH // (m * nb))
        for g0 in range(0, g, gb):
            for n0 in range(0, n, nb):
                s = (slice(g0, g0 + gb), slice(n0, n0 + nb))
                out[g0 : g0 + gb] += _batch_sums(f3[s], y2[s], w2[s])
    return out.reshape(*kept, *(1,) * nred, 2 * m + 6)


def _one_pass(f: xr.DataArray, y: xr.DataArray, w: np.ndarray, nred: int) -> tuple[np.ndarray, np.ndarray]:
    """(sums over the reduced dims, observation values): numpy, or one ``dask.compute``."""
    nd = y.ndim
    if f.chunks is None and y.chunks is None:  # in slabs along the first axis: no copy of the whole
        fv, yv = f.values, y.values
        if nd == 0 or yv.size == 0:
            return _case_sums(fv, yv, w, nred).reshape(*y.shape[: nd - nred], -1), yv
        step = max(1, 8 * _BATCH // fv[0].size)
        slabs = [slice(i, i + step) for i in range(0, len(yv), step)]
        parts = [_case_sums(fv[s], yv[s], w[s] if w.shape[0] > 1 else w, nred) for s in slabs]
        sums = np.sum(parts, axis=0) if nred == nd else np.concatenate(parts, axis=0)
        return sums.reshape(*y.shape[: nd - nred], -1), yv
    import dask
    import dask.array as da

    member = f.dims[-1]
    cases = {d: y.chunksizes[d] for d in y.dims} if f.chunks is None else {}  # y's, if f in memory
    f = f.chunk({**cases, member: -1})  # every chunk needs all members
    y = y.chunk({d: f.chunksizes[d] for d in y.dims})
    yd = y.data
    w_chunks = tuple(c if ws == ys else (1,) for c, ws, ys in zip(yd.chunks, w.shape, yd.shape))
    wd = da.broadcast_to(da.from_array(w, chunks=w_chunks), yd.shape, chunks=yd.chunks)
    ind, red = tuple(range(nd)), tuple(range(nd - nred, nd))
    part = da.blockwise(
        *(_case_sums, (*ind, nd + 1), f.data, (*ind, nd), yd, ind, wd, ind),
        new_axes={nd + 1: 2 * f.shape[-1] + 6},
        adjust_chunks=dict.fromkeys(red, 1),
        concatenate=True,
        meta=np.empty((0,) * (nd + 1)),
        nred=nred,
    )
    sums, yv = dask.compute(part.sum(axis=red), yd)
    return np.asarray(sums), np.asarray(yv)


def _terms(sums: np.ndarray, m: int) -> dict[str, np.ndarray]:
    """α, β, g, o per bin and CRPS, Reli, CRPS_pot from the per-bin sums (module docstring)."""
    a, b = sums[..., : m + 1], sums[..., m + 1 : 2 * m + 2]
    below, above, total = sums[..., 2 * m + 2], sums[..., 2 * m + 3], sums[..., 2 * m + 4]
    p = np.arange(m + 1) / m
    with np.errstate(invalid="ignore", divide="ignore"):
        wsum = np.where(total > 0, total, np.nan)  # no weight: NaN, never 0
        alpha, beta = a / wsum[..., None], b / wsum[..., None]
        g = alpha + beta
        o = beta / np.where(g > 0, g, np.nan)
        o[..., 0], frac_above = below / wsum, above / wsum
        o[..., m] = 1.0 - frac_above
        g[..., 0] = np.where(below > 0, beta[..., 0] / o[..., 0], 0.0)
        g[..., m] = np.where(above > 0, alpha[..., m] / frac_above, 0.0)
        g = np.where(np.isnan(wsum)[..., None], np.nan, g)
        reli = np.where(g == 0, 0.0, g * (o - p) ** 2).sum(-1)
        pot = np.where(g == 0, 0.0, g * o * (1 - o)).sum(-1)
    crps = (alpha * p**2 + beta * (1 - p) ** 2).sum(-1)
    return dict(crps=crps, reliability=reli, crps_potential=pot, alpha=alpha, beta=beta, g=g, o=o)


def _weights(weights: xr.DataArray | None, obs: xr.DataArray, order: list[Hashable], func: str) -> np.ndarray:
    """Checked weights as a float64 array broadcastable to ``obs`` transposed to ``order``, not
    all zero."""
    vals = weights_array(weights, obs, order, func)
    if not np.any(vals > 0):
        raise EnsmlError(f"{func}: weights are all zero")
    return vals


def crps_decomposition(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    reduce_dims: str | Iterable[Hashable] | None = None,
    preserve_dims: str | Iterable[Hashable] | None = None,
    weights: xr.DataArray | None = None,
) -> xr.Dataset:
    """Hersbach (2000) decomposition of the mean ensemble CRPS (see the module docstring).

    Parameters
    ----------
    fcst : xr.DataArray
        Ensemble with the dims of ``obs`` plus ``member_dim`` (at least 2 members); numpy- or
        dask-backed (dask: one pass, chunk by chunk; the member dim is put in one chunk).
    obs : xr.DataArray
        Observation; coordinates must match the forecast's (a partial overlap is an error).
    member_dim : str
        Name of the member dimension.
    reduce_dims, preserve_dims
        The cases are the points of the reduced dims (default: all dims of ``obs``); every kept
        point gets its own decomposition, as ``scores``' keywords.
    weights : xr.DataArray, optional
        Non-negative case weights over some dims of ``obs`` (e.g.
        :func:`ensml.data.weights.latitude_weights`), not all zero.

    Returns
    -------
    xr.Dataset
        Over the kept dims: ``crps`` (= the weighted mean :func:`~ensml.scores.crps_ensemble`),
        ``reliability``, ``crps_potential`` (crps = reliability + crps_potential),
        ``uncertainty`` and ``resolution`` (= uncertainty - crps_potential); over the kept
        dims and ``bin`` (0..N, coordinate ``probability`` = i/N): ``alpha``, ``beta``, ``g``
        (units of ``obs``) and ``o`` (1; NaN in an interior bin of zero width). A kept point
        with zero total weight is NaN throughout.

    Raises
    ------
    EnsmlError
        No member dim, fewer than 2 members, dims or coordinates that do not match, NaN or
        ±Inf in the forecast or the observation, negative, non-finite or all-zero weights.
    """
    func = "crps_decomposition"
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim, finite=False)
    m = fcst.sizes[member_dim]
    if m < 2:
        raise EnsmlError(f"{func}: the decomposition needs at least 2 members along '{member_dim}', got {m}")
    for name, a in (("forecast", fcst), ("observation", obs)):
        if not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
            raise EnsmlError(f"{func}: {name} must be numeric, got dtype {a.dtype}")
    red = resolve_reduce_dims(obs.dims, reduce_dims, preserve_dims, func)
    kept = [d for d in obs.dims if d not in red]
    w = _weights(weights, obs, [*kept, *red], func)
    f, y = fcst.transpose(*kept, *red, member_dim), obs.transpose(*kept, *red)
    sums, yv = _one_pass(f, y, w, len(red))
    if not np.all(np.isfinite(sums[..., -1])):  # only now, on this error path, count them
        n = int((~np.isfinite(fcst)).sum())
        raise EnsmlError(f"{func}: forecast has {n} NaN or infinite values; every case needs all members")
    n = int(np.count_nonzero(~np.isfinite(yv)))
    if n:
        raise EnsmlError(f"{func}: observation has {n} NaN or infinite values; every case needs one")
    terms = _terms(sums, m)
    terms["uncertainty"] = uncertainty_of_groups(yv, w, len(red))
    terms["resolution"] = terms["uncertainty"] - terms["crps_potential"]
    return _dataset(terms, obs, kept, m)


def case_sums(
    fcst: xr.DataArray,
    obs: xr.DataArray,
    *,
    member_dim: str = MEMBER,
    preserve_dims: str | Iterable[Hashable],
    weights: xr.DataArray | None = None,
) -> xr.DataArray:
    """The per-bin sums of :func:`crps_decomposition` over the cases of each kept point.

    ``fcst``, ``obs`` and ``weights`` as :func:`crps_decomposition`'s (numpy-backed); the sums
    (dims ``preserve_dims`` + ``sum``, 2N + 6 of them per kept point: Σwα_i, Σwβ_i, the
    outlier weights, Σw) are over the other dims of ``obs``. Keep a dim here that
    :func:`decomposition_of_sums` then sums over (``init_time``) to split the cases in parts.

    Raises
    ------
    EnsmlError
        As :func:`crps_decomposition`: fewer than 2 members, NaN or ±Inf in the forecast or
        the observation, bad weights.
    """
    func = "crps_decomposition"
    fcst, obs = check_fcst_obs(fcst, obs, func, member_dim, finite=False)
    m = fcst.sizes[member_dim]
    if m < 2:
        raise EnsmlError(f"{func}: the decomposition needs at least 2 members along '{member_dim}', got {m}")
    red = resolve_reduce_dims(obs.dims, None, preserve_dims, func)
    kept = [d for d in obs.dims if d not in red]
    w = _weights(weights, obs, [*kept, *red], func)
    f, y = fcst.transpose(*kept, *red, member_dim).values, obs.transpose(*kept, *red).values
    sums = _case_sums(f, y, w, len(red)).reshape(*y.shape[: len(kept)], 2 * m + 6)
    if not np.all(np.isfinite(sums[..., -1])):
        n = int((~np.isfinite(f)).sum())
        raise EnsmlError(f"{func}: forecast has {n} NaN or infinite values; every case needs all members")
    n = int(np.count_nonzero(~np.isfinite(y)))
    if n:
        raise EnsmlError(f"{func}: observation has {n} NaN or infinite values; every case needs one")
    coords = {k: v.variable for k, v in obs.coords.items() if set(v.dims) <= set(kept)}
    return xr.DataArray(sums, dims=[*kept, "sum"], coords=coords, attrs=dict(obs.attrs, members=m))


def decomposition_of_sums(
    sums: xr.DataArray,
    obs: xr.DataArray,
    *,
    over: str | Iterable[Hashable] = (),
    weights: xr.DataArray | None = None,
    uncertainty: xr.DataArray | None = None,
) -> xr.Dataset:
    """:func:`crps_decomposition` from :func:`case_sums`, summed over the dims ``over``.

    ``obs`` and ``weights``: every case's observation and weight (for the uncertainty, which
    needs all of them: the sorted observations of each kept point); the kept dims are those of
    ``sums`` but ``over`` and ``sum``. The sums over ``over`` are taken in its order.
    ``uncertainty``: the uncertainty term over the kept dims, computed already (from the
    observations pooled, :func:`~ensml.scores.uncertainty.pooled_uncertainty`, once for every
    ensemble scored against them); ``obs`` then gives only the coordinates and units.
    """
    over = [over] if isinstance(over, str) else list(over)
    kept = [d for d in sums.dims if d not in (*over, "sum")]
    m = int(sums.attrs["members"])
    total = sums.transpose(*over, *kept, "sum").values.sum(axis=tuple(range(len(over))))
    terms = _terms(total, m)
    if uncertainty is None:
        red = [d for d in obs.dims if d not in kept]
        w = _weights(weights, obs, [*kept, *red], "crps_decomposition")
        terms["uncertainty"] = uncertainty_of_groups(obs.transpose(*kept, *red).values, w, len(red))
    else:
        terms["uncertainty"] = np.asarray(uncertainty.transpose(*kept).values, dtype=np.float64)
    terms["resolution"] = terms["uncertainty"] - terms["crps_potential"]
    return _dataset(terms, obs, kept, m)


def _dataset(terms: dict[str, np.ndarray], obs: xr.DataArray, kept: list[Hashable], m: int) -> xr.Dataset:
    """The result over the kept dims (and ``bin``), with the observation's coordinates on them."""
    units = {"units": obs.attrs["units"]} if "units" in obs.attrs else {}
    long = {
        "crps": "mean ensemble CRPS",
        "reliability": "reliability term of the CRPS (Hersbach 2000)",
        "resolution": "resolution term of the CRPS (Hersbach 2000)",
        "uncertainty": "CRPS of the sample climatology of the observations",
        "crps_potential": "potential CRPS, crps - reliability (Hersbach 2000)",
        "alpha": "mean width of each bin below the observation",
        "beta": "mean width of each bin above the observation",
        "g": "mean bin width (outlier bins: mean outlier distance)",
        "o": "frequency of the observation below the bin (beta / g; outliers: eq 33)",
    }
    coords = {k: v.variable for k, v in obs.coords.items() if set(v.dims) <= set(kept)}
    coords[BIN] = np.arange(m + 1)
    coords["probability"] = (BIN, np.arange(m + 1) / m, {"long_name": "ensemble CDF p_i = i/N in the bin"})
    out = {}
    for name, text in long.items():  # in this order
        dims = [*kept, BIN] if terms[name].ndim > len(kept) else kept
        attrs = {"long_name": text, **({"units": "1"} if name == "o" else units)}
        out[name] = xr.DataArray(terms[name], dims=dims, attrs=attrs)
    return xr.Dataset(out, coords=coords, attrs={"reference": REFERENCE})
