"""Compiled (numba) kernels of the ensemble CRPS.

Layout: the forecast is a 2-D view ``(M members, N points)`` of any strides, the observation
``(N,)``. Points are taken in blocks of ``B``; each block is copied (exactly, in the input dtype:
float32 ordering is the ordering of the values) into an ``(M', B)`` buffer that fits in L1,
``M'`` being ``M`` rounded up to the register group size ``G`` (8 or 16) with ``+inf`` padding
rows. The buffer is sorted along members by a sorting network whose first layers sort each group
of ``G`` rows in registers, the remaining compare-exchanges running over ``B`` contiguous lanes of
the buffer (each vectorises across points), then reduced in float64 with the sorted-order identity

.. math::
    \\sum_{i<j} |x_i - x_j| = \\sum_{i=1}^{M} (2i - M - 1)\\, x_{(i)} ,

both sums centred on the observation (a float32 difference is exact in float64).
Compare-exchanges swap, so a NaN stays in the buffer and makes its point's sum NaN: points whose
result is not finite (a NaN or infinite member or observation) are redone by a scalar path that
drops the NaN members. Members-contiguous inputs (member axis last) are read without a transpose
copy. Compilation is cached on disk (``cache=True``); :func:`warm_up` compiles ahead of timing.
"""

from __future__ import annotations

import functools

import numba
import numpy as np

_L1_BYTES = 24 * 1024  # buffer budget per thread: half of a typical 32-48 KiB L1d
_BLOCKS_PER_THREAD = 8  # dynamic scheduling granularity: a thread slowed by other load is caught up


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


def block_size(m: int, itemsize: int = 4) -> int:
    """Points per block so that the ``(m, B)`` sort buffer (input dtype) fits the L1 budget."""
    b = _L1_BYTES // (itemsize * max(m, 1))
    return int(max(16, min(1024, (b // 16) * 16)))


@functools.cache
def plan(m: int, itemsize: int) -> tuple[int, int, np.ndarray, np.ndarray, int]:
    """``(G, M', a, b, B)``: register group size (0: none), padded rows, buffer comparators, block.

    ``G`` minimises a count of memory operations and exchanges per point; the buffer comparators
    are those of the network for ``M'`` not inside one group, pruned to ``b < m`` (the ``+inf``
    padding rows never move).
    """

    def rest(g: int, cg: int) -> tuple[int, np.ndarray, np.ndarray]:
        # the network's first layers (merges of width < g) are the (M'/g) sorts of the groups
        mp = -(-m // g) * g
        na, nb = sorting_network(mp)
        keep = (np.arange(na.size) >= (mp // g) * cg) & (nb < m)
        return mp, na[keep], nb[keep]

    best = (4 * len(sorting_network(m)[0]), 0, 0)
    for g, cg in ((8, 19), (16, 63)):
        mp, na, _ = rest(g, cg)
        best = min(best, ((mp // g) * (2 * g + 2 * cg) + 4 * na.size, g, cg))
    _, g, cg = best
    if g == 0:
        na, nb = sorting_network(m)
        return 0, m, na, nb, block_size(m, itemsize)
    mp, na, nb = rest(g, cg)
    return g, mp, na, nb, block_size(mp, itemsize)


@numba.njit(cache=True, nogil=True, inline="always")
def _cx(a, b):  # compare-exchange that swaps (a NaN stays in place)
    return (b, a) if b < a else (a, b)


@numba.njit(cache=True, nogil=True)
def _sort8(buf: np.ndarray, r: int, n: int) -> None:
    """Sort rows ``r .. r+7`` of ``buf`` per column in registers (Batcher, 19 exchanges)."""
    for k in range(n):
        x0, x1, x2, x3, x4, x5, x6, x7 = (
            buf[r + 0, k],
            buf[r + 1, k],
            buf[r + 2, k],
            buf[r + 3, k],
            buf[r + 4, k],
            buf[r + 5, k],
            buf[r + 6, k],
            buf[r + 7, k],
        )
        x0, x1 = _cx(x0, x1)
        x2, x3 = _cx(x2, x3)
        x4, x5 = _cx(x4, x5)
        x6, x7 = _cx(x6, x7)
        x0, x2 = _cx(x0, x2)
        x1, x3 = _cx(x1, x3)
        x4, x6 = _cx(x4, x6)
        x5, x7 = _cx(x5, x7)
        x1, x2 = _cx(x1, x2)
        x5, x6 = _cx(x5, x6)
        x0, x4 = _cx(x0, x4)
        x1, x5 = _cx(x1, x5)
        x2, x6 = _cx(x2, x6)
        x3, x7 = _cx(x3, x7)
        x2, x4 = _cx(x2, x4)
        x3, x5 = _cx(x3, x5)
        x1, x2 = _cx(x1, x2)
        x3, x4 = _cx(x3, x4)
        x5, x6 = _cx(x5, x6)
        buf[r + 0, k] = x0
        buf[r + 1, k] = x1
        buf[r + 2, k] = x2
        buf[r + 3, k] = x3
        buf[r + 4, k] = x4
        buf[r + 5, k] = x5
        buf[r + 6, k] = x6
        buf[r + 7, k] = x7


@numba.njit(cache=True, nogil=True)
def _sort16(buf: np.ndarray, r: int, n: int) -> None:
    """Sort rows ``r .. r+15`` of ``buf`` per column in registers (Batcher, 63 exchanges)."""
    for k in range(n):
        x0, x1, x2, x3, x4, x5, x6, x7, x8, x9, x10, x11, x12, x13, x14, x15 = (
            buf[r + 0, k],
            buf[r + 1, k],
            buf[r + 2, k],
            buf[r + 3, k],
            buf[r + 4, k],
            buf[r + 5, k],
            buf[r + 6, k],
            buf[r + 7, k],
            buf[r + 8, k],
            buf[r + 9, k],
            buf[r + 10, k],
            buf[r + 11, k],
            buf[r + 12, k],
            buf[r + 13, k],
            buf[r + 14, k],
            buf[r + 15, k],
        )
        x0, x1 = _cx(x0, x1)
        x2, x3 = _cx(x2, x3)
        x4, x5 = _cx(x4, x5)
        x6, x7 = _cx(x6, x7)
        x8, x9 = _cx(x8, x9)
        x10, x11 = _cx(x10, x11)
        x12, x13 = _cx(x12, x13)
        x14, x15 = _cx(x14, x15)
        x0, x2 = _cx(x0, x2)
        x1, x3 = _cx(x1, x3)
        x4, x6 = _cx(x4, x6)
        x5, x7 = _cx(x5, x7)
        x8, x10 = _cx(x8, x10)
        x9, x11 = _cx(x9, x11)
        x12, x14 = _cx(x12, x14)
        x13, x15 = _cx(x13, x15)
        x1, x2 = _cx(x1, x2)
        x5, x6 = _cx(x5, x6)
        x9, x10 = _cx(x9, x10)
        x13, x14 = _cx(x13, x14)
        x0, x4 = _cx(x0, x4)
        x1, x5 = _cx(x1, x5)
        x2, x6 = _cx(x2, x6)
        x3, x7 = _cx(x3, x7)
        x8, x12 = _cx(x8, x12)
        x9, x13 = _cx(x9, x13)
        x10, x14 = _cx(x10, x14)
        x11, x15 = _cx(x11, x15)
        x2, x4 = _cx(x2, x4)
        x3, x5 = _cx(x3, x5)
        x10, x12 = _cx(x10, x12)
        x11, x13 = _cx(x11, x13)
        x1, x2 = _cx(x1, x2)
        x3, x4 = _cx(x3, x4)
        x5, x6 = _cx(x5, x6)
        x9, x10 = _cx(x9, x10)
        x11, x12 = _cx(x11, x12)
        x13, x14 = _cx(x13, x14)
        x0, x8 = _cx(x0, x8)
        x1, x9 = _cx(x1, x9)
        x2, x10 = _cx(x2, x10)
        x3, x11 = _cx(x3, x11)
        x4, x12 = _cx(x4, x12)
        x5, x13 = _cx(x5, x13)
        x6, x14 = _cx(x6, x14)
        x7, x15 = _cx(x7, x15)
        x4, x8 = _cx(x4, x8)
        x5, x9 = _cx(x5, x9)
        x6, x10 = _cx(x6, x10)
        x7, x11 = _cx(x7, x11)
        x2, x4 = _cx(x2, x4)
        x3, x5 = _cx(x3, x5)
        x6, x8 = _cx(x6, x8)
        x7, x9 = _cx(x7, x9)
        x10, x12 = _cx(x10, x12)
        x11, x13 = _cx(x11, x13)
        x1, x2 = _cx(x1, x2)
        x3, x4 = _cx(x3, x4)
        x5, x6 = _cx(x5, x6)
        x7, x8 = _cx(x7, x8)
        x9, x10 = _cx(x9, x10)
        x11, x12 = _cx(x11, x12)
        x13, x14 = _cx(x13, x14)
        buf[r + 0, k] = x0
        buf[r + 1, k] = x1
        buf[r + 2, k] = x2
        buf[r + 3, k] = x3
        buf[r + 4, k] = x4
        buf[r + 5, k] = x5
        buf[r + 6, k] = x6
        buf[r + 7, k] = x7
        buf[r + 8, k] = x8
        buf[r + 9, k] = x9
        buf[r + 10, k] = x10
        buf[r + 11, k] = x11
        buf[r + 12, k] = x12
        buf[r + 13, k] = x13
        buf[r + 14, k] = x14
        buf[r + 15, k] = x15


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
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    g: int,
    net_a: np.ndarray,
    net_b: np.ndarray,
    out: np.ndarray,
    start: int,
    stop: int,
    buf: np.ndarray,
    acc_abs: np.ndarray,
    acc_w: np.ndarray,
    tmp: np.ndarray,
) -> None:
    m = fc.shape[0]
    n = stop - start
    # 1. copy the block into rows 0..m-1 of buf (rows m.. hold +inf padding)
    if flat.size:  # members contiguous, points dense: read the flat array (no transpose copy)
        base = flat[start * m : stop * m]
        n8 = n - n % 8
        for k0 in range(0, n8, 8):  # tiles of 8 points: fastest measured at 10-100 members
            for i in range(m):
                for kk in range(8):
                    buf[i, k0 + kk] = base[(k0 + kk) * m + i]
        for k in range(n8, n):
            for i in range(m):
                buf[i, k] = base[k * m + i]
    elif fc.strides[0] < fc.strides[1]:
        for k in range(n):
            for i in range(m):
                buf[i, k] = fc[i, start + k]
    else:
        for i in range(m):
            for k in range(n):
                buf[i, k] = fc[i, start + k]
    # 2. sort each column (point) along members
    if g == 8:
        for r in range(0, buf.shape[0], 8):
            _sort8(buf, r, n)
    elif g == 16:
        for r in range(0, buf.shape[0], 16):
            _sort16(buf, r, n)
    for c in range(net_a.shape[0]):
        a = net_a[c]
        b = net_b[c]
        for k in range(n):
            lo = buf[a, k]
            hi = buf[b, k]
            lt = hi < lo
            buf[a, k] = hi if lt else lo
            buf[b, k] = lo if lt else hi
    # 3. reduce in float64, centred on the observation, four rows per pass over the accumulators
    for k in range(n):
        acc_abs[k] = 0.0
        acc_w[k] = 0.0
    i = 0
    while i + 4 <= m:
        w = 2.0 * i - m + 1.0
        for k in range(n):
            y = np.float64(obs[start + k])
            d0 = np.float64(buf[i, k]) - y
            d1 = np.float64(buf[i + 1, k]) - y
            d2 = np.float64(buf[i + 2, k]) - y
            d3 = np.float64(buf[i + 3, k]) - y
            acc_abs[k] += (abs(d0) + abs(d1)) + (abs(d2) + abs(d3))
            acc_w[k] += (w * d0 + (w + 2.0) * d1) + ((w + 4.0) * d2 + (w + 6.0) * d3)
        i += 4
    while i < m:
        w = 2.0 * i - m + 1.0
        for k in range(n):
            d = np.float64(buf[i, k]) - np.float64(obs[start + k])
            acc_abs[k] += abs(d)
            acc_w[k] += w * d
        i += 1
    if fair:
        c2 = 1.0 / (m * (m - 1.0)) if m > 1 else np.nan
    else:
        c2 = 1.0 / (m * float(m))
    inv_m = 1.0 / m
    nbad = 0
    for k in range(n):
        r = acc_abs[k] * inv_m - acc_w[k] * c2
        out[start + k] = r
        nbad += not (abs(r) < np.inf)
    if nbad:  # NaN or infinite member or observation (or m == 1 for fair): scalar path
        for k in range(n):
            if not (abs(out[start + k]) < np.inf):
                out[start + k] = _crps_point(fc[:, start + k], np.float64(obs[start + k]), fair, tmp)


@numba.njit(cache=True, nogil=True)
def _scratch(m: int, mp: int, bsize: int, dtype: np.dtype) -> tuple:
    buf = np.empty((mp, bsize), dtype=dtype)
    buf[m:, :] = np.inf
    return buf, np.empty(bsize), np.empty(bsize), np.empty(m)


@numba.njit(cache=True, nogil=True, parallel=True)
def crps_parallel(
    fc: np.ndarray,
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    g: int,
    mp: int,
    net_a: np.ndarray,
    net_b: np.ndarray,
    bsize: int,
    nchunks: int,
) -> np.ndarray:
    """Ensemble CRPS of ``fc`` (M, N) against ``obs`` (N,), ``nchunks`` chunks of blocks in parallel.

    ``flat`` is ``fc`` as a flat point-major array when its members are contiguous, else empty.
    """
    m, n = fc.shape
    out = np.empty(n)
    nblocks = (n + bsize - 1) // bsize
    per = (nblocks + nchunks - 1) // nchunks
    for t in numba.prange(nchunks):
        buf, acc_abs, acc_w, tmp = _scratch(m, mp, bsize, fc.dtype)
        for blk in range(t * per, min((t + 1) * per, nblocks)):
            start = blk * bsize
            _crps_block(
                fc,
                flat,
                obs,
                fair,
                g,
                net_a,
                net_b,
                out,
                start,
                min(start + bsize, n),
                buf,
                acc_abs,
                acc_w,
                tmp,
            )
    return out


@numba.njit(cache=True, nogil=True)
def crps_serial(
    fc: np.ndarray,
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    g: int,
    mp: int,
    net_a: np.ndarray,
    net_b: np.ndarray,
    bsize: int,
) -> np.ndarray:
    """As :func:`crps_parallel` on the calling thread (for dask workers, which are threads)."""
    m, n = fc.shape
    out = np.empty(n)
    buf, acc_abs, acc_w, tmp = _scratch(m, mp, bsize, fc.dtype)
    for start in range(0, n, bsize):
        _crps_block(
            fc, flat, obs, fair, g, net_a, net_b, out, start, min(start + bsize, n), buf, acc_abs, acc_w, tmp
        )
    return out


def crps_2d(fc: np.ndarray, obs: np.ndarray, fair: bool, parallel: bool = True) -> np.ndarray:
    """Ensemble CRPS (float64) of a ``(M, N)`` forecast view against ``(N,)`` observations."""
    m, n = fc.shape
    g, mp, net_a, net_b, bsize = plan(m, fc.dtype.itemsize)
    item = fc.dtype.itemsize
    if fc.strides[0] == item and fc.strides[1] == m * item:
        flat = fc.T.reshape(-1)  # a view: members contiguous, points dense
    else:
        flat = np.empty(0, dtype=fc.dtype)
    if parallel and n > 4 * bsize:
        nthreads = numba.get_num_threads()
        nblocks = -(-n // bsize)
        nchunks = min(nblocks, _BLOCKS_PER_THREAD * nthreads)
        with numba.parallel_chunksize(1):
            return crps_parallel(fc, flat, obs, fair, g, mp, net_a, net_b, bsize, nchunks)
    return crps_serial(fc, flat, obs, fair, g, mp, net_a, net_b, bsize)


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
