"""Compiled (numba) kernels of the ensemble CRPS.

Layout: the forecast is a 2-D view ``(M members, N points)`` of any strides, the observation
``(N,)``. Points are taken in blocks of ``B``; each block is copied (exactly, in the input dtype:
float32 ordering is the ordering of the values; members-contiguous input by 8x8 tiles transposed
in registers, :func:`ensml.scores._simd.tile8`) into an ``(M, B)`` buffer, ``B`` chosen so that
``M'`` rows fit in L1: the networks are those for ``M'`` rows pruned to the ``M`` member rows,
as if the rows from ``M`` held ``+inf``. For 9 to 128 members ``M'`` is 16, 32, 64 or 128 and the
columns are sorted a vector of points at a time in registers (:func:`ensml.scores._simd.sort_column`);
otherwise ``M'`` is ``M`` rounded up to the register group size ``G`` (8 or 16) and a sorting
network sorts each group of ``G`` rows in registers, its remaining compare-exchanges running over
``B`` contiguous lanes of the buffer (each vectorises across points). The sorted buffer is
reduced in float64 with the sorted-order identity

.. math::
    \\sum_{i<j} |x_i - x_j| = \\sum_{i=1}^{M} (2i - M - 1)\\, x_{(i)} ,

both sums centred on the observation (a float32 difference is exact in float64).
Compare-exchanges swap, so a NaN stays in the buffer and makes its point's sum NaN: points whose
result is not finite (a NaN or infinite member or observation) are redone by a scalar path that
drops the NaN members. Members-contiguous inputs (member axis last) are read without a whole-array
transpose copy. The twCRPS chains the members (``min(max(x, lo), hi)``) as the register networks
load them, or in one pass over the block for other member counts. In parallel, each thread takes
runs of ``_GRAB`` blocks from a shared atomic counter until none is left. Compilation is cached
on disk (``cache=True``); :func:`warm_up` compiles ahead of timing.
"""

from __future__ import annotations

import numba
import numpy as np

from ensml.scores._simd import VECTOR_BYTES, fetch_add, prefetch, sort_column, tile8
from ensml.scores._simd_sums import crps_small, crps_small_chained, reduce_columns
from ensml.scores._sortnet import _sort8, _sort16, plan

_GRAB = 32  # blocks a thread takes from the shared counter at a time: one stream, ~0.6 MB of input


@numba.njit(cache=True, nogil=True, inline="always")
def _chain(v, lo: float, hi: float):
    """``min(max(v, lo), hi)`` (``lo``, ``hi`` in ``v``'s dtype); NaN and ±Inf pass unchanged."""
    c = lo if v < lo else v
    c = hi if c > hi else c
    return v if abs(v) == np.inf else c


@numba.njit(cache=True, nogil=True)
def _crps_point(x: np.ndarray, y: float, fair: bool, tmp: np.ndarray, lo: float, hi: float) -> float:
    """CRPS of one point with NaN members dropped (NaN when none, or one for fair)."""
    if y != y:
        return np.nan
    m = 0
    for i in range(x.shape[0]):
        v = np.float64(_chain(x[i], lo, hi))
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


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_part(flat: np.ndarray, pf0: int, pf1: int, per: int, v: int, step: int) -> None:
    """Prefetch part ``v`` (``per`` elements, a line every ``step``) of ``flat[pf0:pf1]``."""
    for o in range(pf0 + v * per, min(pf1, pf0 + (v + 1) * per), step):
        prefetch(flat, o)


@numba.njit(cache=True, nogil=True, inline="always")
def _prefetch_window(flat: np.ndarray, start: int, stop: int, m: int, p: int, lanes: int) -> tuple:
    """``(pf0, pf1, per)``: the lines ``flat[pf0:pf1]`` of the block after next (register path),
    prefetched ``per`` elements per vector of points by :func:`_prefetch_part`."""
    n = stop - start
    pf0 = (stop + n) * m if flat.size and p else 0
    pf1 = min(flat.size, pf0 + n * m)
    per = ((pf1 - pf0) // ((n + lanes - 1) // lanes) + lanes) // lanes * lanes if pf1 > pf0 else 0
    return pf0, pf1, per


@numba.njit(cache=True, nogil=True, inline="always")
def _score_small(flat, start, n, m, yb, acc_abs, acc_w, lo, hi, pf: tuple, lanes: int) -> int:
    """9..16 float32 members, contiguous: tiles of 16 points scored (and chained) in registers.

    Returns how many points of the block (from its first) were scored: the tiles whose 16-float
    reads stay in bounds.
    """
    pf0, pf1, per = pf
    chained = lo > -np.inf or hi < np.inf
    n0 = max(0, min(n, (flat.size - 16) // m - start + 1)) // 16 * 16  # 16-float reads in bounds
    for k0 in range(0, n0, 16):
        _prefetch_part(flat, pf0, pf1, per, k0 // 16, lanes)
        if chained:
            crps_small_chained(flat, (start + k0) * m, m, yb, k0, acc_abs, acc_w, lo, hi)
        else:
            crps_small(flat, (start + k0) * m, m, yb, k0, acc_abs, acc_w)
    return n0


@numba.njit(cache=True, nogil=True, inline="always")
def _load_flat(flat: np.ndarray, buf: np.ndarray, start: int, stop: int, m: int, n0: int) -> None:
    """Points ``start + n0 .. stop`` of the flat point-major array into the ``m`` rows of ``buf``
    (no transpose copy)."""
    n = stop - start
    base = flat[start * m : stop * m]
    n8 = n - n % 8
    m8 = m - m % 8 if m >= 8 else 0
    for k0 in range(n0, n8, 8):  # tiles of 8 points x 8 members, transposed in registers
        for i0 in range(0, m8, 8):
            tile8(base, k0 * m + i0, m, buf, i0, k0)
        if m8 and m8 < m:  # the last members: a tile overlapping the previous one
            tile8(base, k0 * m + m - 8, m, buf, m - 8, k0)
        for i in range(m8, m if m < 8 else 0):
            for kk in range(8):
                buf[i, k0 + kk] = base[(k0 + kk) * m + i]
    for k in range(n8, n):
        for i in range(m):
            buf[i, k] = base[k * m + i]


@numba.njit(cache=True, nogil=True, inline="always")
def _load_block(fc: np.ndarray, flat: np.ndarray, buf: np.ndarray, start: int, stop: int, n0: int) -> None:
    """Points ``start:stop`` of ``fc`` (from ``start + n0`` when read from ``flat``) into ``buf``."""
    m = fc.shape[0]
    n = stop - start
    if flat.size:  # members contiguous, points dense: read the flat array (no transpose copy)
        _load_flat(flat, buf, start, stop, m, n0)
    elif fc.strides[0] < fc.strides[1]:
        fb = fc[:, start:stop]  # block views: indices from 0 let LLVM vectorise the loops
        for k in range(n):
            for i in range(m):
                buf[i, k] = fb[i, k]
    else:
        fb = fc[:, start:stop]
        for i in range(m):
            for k in range(n):
                buf[i, k] = fb[i, k]


@numba.njit(cache=True, nogil=True, inline="always")
def _sort_block(buf, m, n, n0, lo, hi, net: tuple, flat, pf: tuple, lanes: int) -> None:
    """Sort each column (point) of ``buf[:m, n0:n]`` along members (all of ``buf[:m, :n]`` for
    the register groups and the network over the buffer)."""
    p, g, nreg, net_a, net_b, _ = net
    pf0, pf1, per = pf
    if p:  # a vector of columns at a time, with a part of the prefetches
        for v in range(n0 // lanes, (n + lanes - 1) // lanes):
            _prefetch_part(flat, pf0, pf1, per, v, lanes)
            sort_column(buf, p, v * lanes, m, lo, hi)
    elif g == 8:
        for r in range(0, nreg, 8):
            _sort8(buf, r, n)
    elif g == 16:
        for r in range(0, nreg, 16):
            _sort16(buf, r, n)
    for c in range(net_a.shape[0]):
        a = net_a[c]
        b = net_b[c]
        for k in range(n):
            u = buf[a, k]
            v = buf[b, k]
            lt = v < u
            buf[a, k] = v if lt else u
            buf[b, k] = u if lt else v


@numba.njit(cache=True, nogil=True, inline="always")
def _reduce_block(buf, m, n, n0, lanes, yb, acc_abs, acc_w, fair: bool, ob: np.ndarray) -> int:
    """Reduce the sorted ``buf`` in float64, centred on the observation, a vector of points at a
    time, into ``ob`` (the block of ``out``); returns how many are not finite."""
    for k0 in range(n0, n, lanes):
        reduce_columns(buf, m, k0, yb, acc_abs, acc_w)
    if fair:
        c2 = 1.0 / (m * (m - 1.0)) if m > 1 else np.nan
    else:
        c2 = 1.0 / (m * float(m))
    inv_m = 1.0 / m
    nbad = 0
    for k in range(n):
        r = acc_abs[k] * inv_m - acc_w[k] * c2
        ob[k] = r
        nbad += not (abs(r) < np.inf)
    return nbad


@numba.njit(cache=True, nogil=True)
def _crps_block(
    fc: np.ndarray,
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    lo: float,
    hi: float,
    net: tuple,
    out: np.ndarray,
    start: int,
    stop: int,
    scratch: tuple,
) -> int:
    """CRPS of points ``start:stop`` into ``out`` (its dtype); returns how many are not finite.

    ``net`` is ``(P, G, R, comparators a, comparators b, B)`` of
    :func:`ensml.scores._sortnet.plan`; ``scratch`` the buffers of :func:`_scratch`.
    """
    p = net[0]
    buf, acc_abs, acc_w, yb, tmp = scratch
    m = fc.shape[0]
    n = stop - start
    lanes = VECTOR_BYTES // buf.itemsize  # one vector is one 64-byte cache line
    chained = lo > -np.inf or hi < np.inf  # the twCRPS
    ob = obs[start:stop]
    for k in range(n):
        yb[k] = np.float64(_chain(ob[k], lo, hi))
    # the lines of the block after next, prefetched a part per vector of points (register path)
    pf = _prefetch_window(flat, start, stop, m, p, lanes)
    # 0. 9..16 float32 members, contiguous: tiles of 16 points scored (and chained) in registers
    n0 = 0
    if p == 16 and flat.size and lanes == 16:
        n0 = _score_small(flat, start, n, m, yb, acc_abs, acc_w, lo, hi, pf, lanes)
    # 1. copy the (other) points of the block into the m rows of buf
    _load_block(fc, flat, buf, start, stop, n0)
    if chained and not p:  # twCRPS: the chaining function, on the block in L1 (sort_column chains)
        for i in range(m):
            for k in range(n):
                buf[i, k] = _chain(buf[i, k], lo, hi)
    # 2. sort each column (point) along members
    _sort_block(buf, m, n, n0, lo, hi, net, flat, pf, lanes)
    # 3. reduce in float64, centred on the observation, a vector of points at a time
    ob = out[start:stop]
    nbad = _reduce_block(buf, m, n, n0, lanes, yb, acc_abs, acc_w, fair, ob)
    if nbad == 0:
        return 0
    # NaN or infinite member or observation (or m == 1 for fair): scalar path
    nbad = 0
    for k in range(n):
        if not (abs(ob[k]) < np.inf):
            ob[k] = _crps_point(fc[:, start + k], yb[k], fair, tmp, lo, hi)
            nbad += not (abs(ob[k]) < np.inf)
    return nbad


@numba.njit(cache=True, nogil=True)
def _scratch(m: int, bsize: int, dtype: np.dtype) -> tuple:
    # the networks are pruned to the member rows, so the padding rows from m (which size the
    # block) are never read or written and need no buffer
    buf = np.empty((m, bsize), dtype=dtype)
    return buf, np.empty(bsize), np.empty(bsize), np.empty(bsize), np.empty(m)


@numba.njit(cache=True, nogil=True)
def _blocks(
    fc: np.ndarray,
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    lo: float,
    hi: float,
    net: tuple,
    out: np.ndarray,
    counter: np.ndarray,
    grab: int,
) -> int:
    """The blocks (of ``net[-1]`` points) on the calling thread, with their own scratch.

    With ``grab`` 0 all of them; else runs of ``grab`` blocks it takes from ``counter``
    (:func:`ensml.scores._simd.fetch_add`) until none is left, so the threads share the blocks
    whenever each of them starts (a thread that wakes late, or is slowed, takes fewer runs).
    """
    m, n = fc.shape
    bsize = net[-1]
    nblocks = (n + bsize - 1) // bsize
    scratch = _scratch(m, bsize, fc.dtype)
    bad = 0
    blk = fetch_add(counter) * grab if grab else 0
    end = min(blk + grab, nblocks) if grab else nblocks
    while blk < nblocks:
        start = blk * bsize
        stop = min(start + bsize, n)
        bad += _crps_block(fc, flat, obs, fair, lo, hi, net, out, start, stop, scratch)
        blk += 1
        if blk == end and grab:
            blk = fetch_add(counter) * grab
            end = min(blk + grab, nblocks)
    return bad


@numba.njit(cache=True, nogil=True, parallel=True)
def crps_parallel(
    fc: np.ndarray,
    flat: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    lo: float,
    hi: float,
    net: tuple,
    nthreads: int,
    out: np.ndarray,
) -> int:
    """Ensemble CRPS of ``fc`` (M, N) against ``obs`` (N,) into ``out`` on ``nthreads`` threads.

    ``flat`` is ``fc`` as a flat point-major array when its members are contiguous, else empty.
    Returns the number of points whose CRPS is not finite. The threads take blocks from a shared
    counter: numba's OpenMP and workqueue layers hand out ``prange`` chunks statically, so a
    thread that wakes late (an idle vCPU can take milliseconds) would otherwise hold up its
    share. Dask workers (threads) call :func:`_blocks` for all blocks on their own thread instead.
    """
    counter = np.zeros(1, dtype=np.int64)
    nblocks = (fc.shape[1] + net[-1] - 1) // net[-1]
    grab = max(1, min(_GRAB, nblocks // (4 * nthreads)))  # at least 4 runs a thread
    bad = np.zeros(nthreads, dtype=np.int64)
    for t in numba.prange(nthreads):
        bad[t] = _blocks(fc, flat, obs, fair, lo, hi, net, out, counter, grab)
    return bad.sum()


def crps_2d(
    fc: np.ndarray,
    obs: np.ndarray,
    fair: bool,
    parallel: bool = True,
    dtype: type = np.float64,
    lo: float = -np.inf,
    hi: float = np.inf,
) -> tuple[np.ndarray, int]:
    """Ensemble CRPS of a ``(M, N)`` forecast view against ``(N,)`` observations.

    Returns the ``(N,)`` CRPS in ``dtype`` (computed in float64, rounded once on store) and the
    number of points where it is not finite (a NaN or infinite input), so callers search the
    input only when there is something to find. Finite ``lo``/``hi`` score the chained values
    ``min(max(x, lo), hi)`` (the threshold-weighted CRPS), chained block by block in cache;
    ±Inf inputs are not chained, so they are still found.
    """
    m, n = fc.shape
    p, g, nreg, _, net_a, net_b, bsize = plan(m, fc.dtype.itemsize)
    net = (p, g, nreg, net_a, net_b, bsize)
    # in the input's dtype: clamping to the rounded threshold is clamping in float64, then rounding
    lo, hi = fc.dtype.type(lo), fc.dtype.type(hi)
    item = fc.dtype.itemsize
    if fc.strides[0] == item and fc.strides[1] == m * item:
        flat = fc.T.reshape(-1)  # a view: members contiguous, points dense
    else:
        flat = np.empty(0, dtype=fc.dtype)
    out = np.empty(n, dtype=dtype)
    if parallel and n > 4 * bsize:
        nthreads = numba.get_num_threads()
        with numba.parallel_chunksize(1):  # one prange iteration per thread
            bad = crps_parallel(fc, flat, obs, fair, lo, hi, net, nthreads, out)
    else:
        none = np.empty(0, dtype=np.int64)
        bad = _blocks(fc, flat, obs, fair, lo, hi, net, out, none, 0)
    return out, int(bad)


def warm_up() -> None:
    """Compile (or load from cache) the kernels for the common dtypes and layouts."""
    for dtype in (np.float32, np.float64):
        fc = np.zeros((3, 4000), dtype=dtype)
        obs = np.zeros(4000, dtype=dtype)
        for f in (fc, fc.T.copy().T, fc[:, ::2]):
            o = obs[: f.shape[1]]
            for fair in (False, True):
                for parallel in (True, False):
                    crps_2d(f, o, fair, parallel=parallel, dtype=dtype)
                    crps_2d(f, o, fair, parallel=parallel, dtype=dtype, lo=0.0)
