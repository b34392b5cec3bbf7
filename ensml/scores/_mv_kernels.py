"""Compiled (numba) kernels of the energy and variogram scores.

Layout: the forecast is ``(N cases, D components, M members)`` (apply_ufunc's core dims last),
the observation ``(N, D)``. Each case is first compacted, in float64, into a scratch buffer of
its observed components and valid members (the NaN policy of :mod:`ensml.scores.multivariate`):
member-major ``(M', D')`` for the energy score, whose inner loop runs over components, and
component-major ``(D', M')`` for the variogram score, whose inner loop runs over members.
Cases are split into chunks, one scratch buffer per chunk, run in parallel with ``prange``
(or on the calling thread inside dask's thread pool). Compilation is cached on disk.
"""

from __future__ import annotations

import numba
import numpy as np

#: Exponent modes of the variogram score: |d|^0.5, |d|, |d|^2, |d|^p.
SQRT, ABS, SQUARE, POW = 0, 1, 2, 3


@numba.njit(cache=True, nogil=True)
def _compact(x, y, member_major, buf, ys, comps):
    """Copy the observed components and the valid members of one case; return (D', M').

    ``x`` is ``(D, M)``, ``y`` ``(D,)``. A component whose observation is NaN is dropped; a member
    with a NaN in any remaining component is dropped.
    """
    n_comp, n_mem = x.shape
    d = 0
    for i in range(n_comp):
        v = y[i]
        if v == v:
            comps[d] = i
            ys[d] = v
            d += 1
    m = 0
    for j in range(n_mem):
        ok = True
        for k in range(d):
            v = x[comps[k], j]
            if v != v:
                ok = False
                break
        if ok:
            for k in range(d):
                if member_major:
                    buf[m, k] = x[comps[k], j]
                else:
                    buf[k, m] = x[comps[k], j]
            m += 1
    return d, m


@numba.njit(cache=True, nogil=True)
def _es_case(buf, ys, d, m, fair):
    if d == 0 or m == 0 or (fair and m < 2):
        return np.nan
    e1 = 0.0
    for j in range(m):
        s = 0.0
        for k in range(d):
            t = buf[j, k] - ys[k]
            s += t * t
        e1 += np.sqrt(s)
    e2 = 0.0  # sum over unordered member pairs
    for j in range(m):
        for jj in range(j + 1, m):
            s = 0.0
            for k in range(d):
                t = buf[j, k] - buf[jj, k]
                s += t * t
            e2 += np.sqrt(s)
    if fair:
        return e1 / m - e2 / (m * (m - 1.0))
    return e1 / m - e2 / (m * float(m))


@numba.njit(cache=True, nogil=True, inline="always")
def _pw(a, p, mode):
    if mode == SQRT:
        return np.sqrt(a)
    if mode == ABS:
        return a
    if mode == SQUARE:
        return a * a
    return a**p


@numba.njit(cache=True, nogil=True)
def _vs_case(buf, ys, comps, d, m, p, mode, w, has_w, fair):
    if d < 2 or m == 0 or (fair and m < 2):
        return np.nan
    acc = 0.0
    for a in range(d):
        for b in range(a + 1, d):
            # the score sums over ordered pairs (i, j) and (j, i): only w_ij + w_ji matters
            wab = w[comps[a], comps[b]] + w[comps[b], comps[a]] if has_w else 2.0
            if wab == 0.0:
                continue
            ry = _pw(abs(ys[a] - ys[b]), p, mode)
            r0 = _pw(abs(buf[a, 0] - buf[b, 0]), p, mode)
            s = 0.0  # sums shifted by the first member's value: no cancellation in the variance
            s2 = 0.0
            for j in range(1, m):
                t = _pw(abs(buf[a, j] - buf[b, j]), p, mode) - r0
                s += t
                s2 += t * t
            term = (r0 + s / m - ry) ** 2
            if fair:  # minus the unbiased variance of the member mean: s^2 / M
                term -= (s2 - s * s / m) / ((m - 1.0) * m)
            acc += wab * term
    return acc


@numba.njit(cache=True, nogil=True)
def _range(x, y, kind, fair, p, mode, w, has_w, out, start, stop):
    """Score cases ``start:stop`` into ``out``; ``kind`` 0 is the energy, 1 the variogram score."""
    _, n_comp, n_mem = x.shape
    member_major = kind == 0
    buf = np.empty((n_mem, n_comp)) if member_major else np.empty((n_comp, n_mem))
    ys = np.empty(n_comp)
    comps = np.empty(n_comp, dtype=np.int64)
    for c in range(start, stop):
        d, m = _compact(x[c], y[c], member_major, buf, ys, comps)
        if member_major:
            out[c] = _es_case(buf, ys, d, m, fair)
        else:
            out[c] = _vs_case(buf, ys, comps, d, m, p, mode, w, has_w, fair)


@numba.njit(cache=True, nogil=True, parallel=True)
def _parallel(x, y, kind, fair, p, mode, w, has_w, nchunks):
    n = x.shape[0]
    out = np.empty(n)
    per = (n + nchunks - 1) // nchunks
    for t in numba.prange(nchunks):
        _range(x, y, kind, fair, p, mode, w, has_w, out, t * per, min((t + 1) * per, n))
    return out


@numba.njit(cache=True, nogil=True)
def _serial(x, y, kind, fair, p, mode, w, has_w):
    out = np.empty(x.shape[0])
    _range(x, y, kind, fair, p, mode, w, has_w, out, 0, x.shape[0])
    return out


def _run(x, y, kind, fair, p, w, parallel):
    mode = {0.5: SQRT, 1.0: ABS, 2.0: SQUARE}.get(float(p), POW)
    has_w = w is not None
    w = np.ascontiguousarray(w, dtype=np.float64) if has_w else np.zeros((0, 0))
    n = x.shape[0]
    if parallel and n > 1:
        nchunks = min(n, 4 * numba.get_num_threads())
        with numba.parallel_chunksize(1):
            return _parallel(x, y, kind, bool(fair), float(p), mode, w, has_w, nchunks)
    return _serial(x, y, kind, bool(fair), float(p), mode, w, has_w)


def energy_3d(x: np.ndarray, y: np.ndarray, fair: bool, parallel: bool = True) -> np.ndarray:
    """Energy score (float64, ``(N,)``) of ``x`` ``(N, D, M)`` against ``y`` ``(N, D)``."""
    return _run(x, y, 0, fair, 1.0, None, parallel)


def variogram_3d(
    x: np.ndarray, y: np.ndarray, p: float, w: np.ndarray | None, fair: bool, parallel: bool = True
) -> np.ndarray:
    """Variogram score of order ``p`` (float64, ``(N,)``); ``w`` is ``(D, D)`` or None (all 1)."""
    return _run(x, y, 1, fair, p, w, parallel)
