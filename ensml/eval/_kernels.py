"""Compiled (numba) kernels of the ensemble CRPS.

Layout: the forecast is a 2-D view ``(M members, N points)`` of any strides, the observation
``(N,)``. Points are taken in blocks of ``B``; each block is copied, centred on the observation
in float64, into an ``(M, B)`` buffer that fits in L1, sorted along members by a fixed
sorting network (every compare-exchange is a min/max over ``B`` contiguous lanes, so it
vectorises across points), then reduced with the sorted-order identity

.. math::
    \\sum_{i<j} |x_i - x_j| = \\sum_{i=1}^{M} (2i - M - 1)\\, x_{(i)} .

Points with a NaN member or a NaN observation take a scalar path that drops the NaN members.
Compilation is cached on disk (``cache=True``); :func:`warm_up` compiles ahead of timing.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

_L1_BYTES = 24 * 1024  # buffer budget per thread: half of a typical 32-48 KiB L1d


@functools.cache
def sorting_network(m: int) -> tuple[np.ndarray, np.ndarray]:
    """Comparators ``(a[c], b[c])``, a < b, of Batcher's odd-even merge sort for ``m`` inputs.

    Built for the next power of two and pruned to indices < m (padding with +inf never moves,
    so the pruned network still sorts).
    """
    n = 1
    while n < m:
        n *= 2
    pairs: list[tuple[int, int]] = []
    p = 1
    while p < n:
        k = p
        while k >= 1:
            for j in range(k % p, n - k, 2 * k):
                for i in range(min(k, n - j - k)):
                    if (i + j) // (2 * p) == (i + j + k) // (2 * p):
                        pairs.append((i + j, i + j + k))
            k //= 2
        p *= 2
    pairs = [(a, b) for a, b in pairs if b < m]
    a = np.array([q[0] for q in pairs], dtype=np.int64)
    b = np.array([q[1] for q in pairs], dtype=np.int64)
    return a, b


def block_size(m: int) -> int:
    """Points per block so that the float64 ``(m, B)`` buffer fits the L1 budget."""
    b = _L1_BYTES // (8 * max(m, 1))
    return int(max(16, min(512, (b // 16) * 16)))


@numba.njit(cache=True, nogil=True)
def _crps_point(x: np.ndarray, y: float, fair: bool, tmp: np.ndarray) -> float:
    """CRPS of one point with NaN members dropped (NaN when none, or one for fair)."""
    if y != y:
        return np.nan
    m = 0
    for i in range(x.shape[0]):
        v = np.float64(x[i])
        if v == v:
            tmp[m] = v - y
            m += 1
    if m == 0 or (fair and m < 2):
        return np.nan
    s = np.sort(tmp[:m])
    acc_abs = 0.0
    acc_w = 0.0
    for i in range(m):
        acc_abs += abs(s[i])
        acc_w += (2 * i - m + 1) * s[i]
    if fair:
        return acc_abs / m - acc_w / (m * (m - 1.0))
    return acc_abs / m - acc_w / (m * float(m))


@numba.njit(cache=True, nogil=True)
def _crps_block(
    fc: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    net_a: np.ndarray,
    net_b: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
    buf: np.ndarray,
    bad: np.ndarray,
    tmp: np.ndarray,
) -> None:
    m = fc.shape[0]
    n = stop - start
    for k in range(n):
        bad[k] = False
    for i in range(m):
        for k in range(n):
            v = np.float64(fc[i, start + k]) - np.float64(obs[start + k])
            if v != v:
                bad[k] = True
                v = 0.0
            buf[i, k] = v
    for c in range(net_a.shape[0]):
        a = net_a[c]
        b = net_b[c]
        for k in range(n):
            lo = buf[a, k]
            hi = buf[b, k]
            buf[a, k] = min(lo, hi)
            buf[b, k] = max(lo, hi)
    if fair:
        c2 = 1.0 / (m * (m - 1.0)) if m > 1 else np.nan
    else:
        c2 = 1.0 / (m * float(m))
    inv_m = 1.0 / m
    acc_abs = np.zeros(n)
    acc_w = np.zeros(n)
    for i in range(m):
        w = 2.0 * i - m + 1.0
        for k in range(n):
            v = buf[i, k]
            acc_abs[k] += abs(v)
            acc_w[k] += w * v
    for k in range(n):
        if bad[k]:
            out[start + k] = _crps_point(fc[:, start + k], np.float64(obs[start + k]), fair, tmp)
        else:
            out[start + k] = acc_abs[k] * inv_m - acc_w[k] * c2


@numba.njit(cache=True, nogil=True, parallel=True)
def crps_parallel(
    fc: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    net_a: np.ndarray,
    net_b: np.ndarray,
    bsize: int,
    nthreads: int,
) -> np.ndarray:
    """Ensemble CRPS of ``fc`` (M, N) against ``obs`` (N,), ``nthreads`` threads over blocks."""
    m, n = fc.shape
    out = np.empty(n)
    nblocks = (n + bsize - 1) // bsize
    per = (nblocks + nthreads - 1) // nthreads
    for t in numba.prange(nthreads):
        buf = np.empty((m, bsize))
        bad = np.empty(bsize, dtype=np.bool_)
        tmp = np.empty(m)
        for blk in range(t * per, min((t + 1) * per, nblocks)):
            start = blk * bsize
            _crps_block(fc, obs, fair, net_a, net_b, out, start, min(start + bsize, n), buf, bad, tmp)
    return out


@numba.njit(cache=True, nogil=True)
def crps_serial(
    fc: np.ndarray, obs: np.ndarray, fair: bool, net_a: np.ndarray, net_b: np.ndarray, bsize: int
) -> np.ndarray:
    """As :func:`crps_parallel` on the calling thread (for dask workers, which are threads)."""
    m, n = fc.shape
    out = np.empty(n)
    buf = np.empty((m, bsize))
    bad = np.empty(bsize, dtype=np.bool_)
    tmp = np.empty(m)
    for start in range(0, n, bsize):
        _crps_block(fc, obs, fair, net_a, net_b, out, start, min(start + bsize, n), buf, bad, tmp)
    return out


def crps_2d(fc: np.ndarray, obs: np.ndarray, fair: bool, parallel: bool = True) -> np.ndarray:
    """Ensemble CRPS (float64) of a ``(M, N)`` forecast view against ``(N,)`` observations."""
    m = fc.shape[0]
    net_a, net_b = sorting_network(m)
    bsize = block_size(m)
    if parallel and fc.shape[1] > 4 * bsize:
        return crps_parallel(fc, obs, fair, net_a, net_b, bsize, numba.get_num_threads())
    return crps_serial(fc, obs, fair, net_a, net_b, bsize)


def warm_up() -> None:
    """Compile (or load from cache) the kernels for the common dtypes and layouts."""
    for dtype in (np.float32, np.float64):
        fc = np.zeros((3, 4000), dtype=dtype)
        obs = np.zeros(4000, dtype=dtype)
        for f in (fc, fc.T.copy().T, fc[:, ::2]):
            o = obs[: f.shape[1]]
            for fair in (False, True):
                crps_2d(f, o, fair, parallel=True)
                crps_2d(f, o, fair, parallel=False)
