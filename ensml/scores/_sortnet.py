"""Sorting networks for the CRPS kernels (:mod:`ensml.scores._kernels`).

``sorting_network(m)`` gives the compare-exchange pairs of an ``m``-input network; ``plan`` picks
how ``m`` members are sorted (whole in registers, or by register groups of 8/16 and a network
over the buffer) and the block size; ``_sort8``/``_sort16``
sort groups of 8/16 buffer rows in registers with hard-coded networks (``_sort8_values`` on 8
values, and ``_merge8x8_values`` of two sorted halves for 16). Compare-exchanges swap
rather than take min/max, so a NaN stays in the buffer (and is caught by the caller).
"""

from __future__ import annotations

import functools

import numba
import numpy as np

_L1_BYTES = 24 * 1024  # buffer budget per thread: half of a typical 32-48 KiB L1d
_MAX_BLOCK = 512
_REGISTER_RANGE = (9, 128)  # members sorted whole in registers (ensml.scores._simd.sort_column)


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
    return int(max(16, min(_MAX_BLOCK, (b // 16) * 16)))


@functools.cache
def plan(m: int, itemsize: int) -> tuple[int, int, int, int, np.ndarray, np.ndarray, int]:
    """``(P, G, R, M', a, b, B)`` for ``m`` members: how the kernels sort them.

    ``P > 0`` (``_REGISTER_RANGE``): the ``P`` = 16, 32, 64 or 128 buffer rows (``+inf`` padding
    from ``m``) are sorted whole by :func:`ensml.scores._simd.sort_column`, in registers.
    Otherwise ``G`` is the register group size (0: none) of the generic network for ``M'`` (``m``
    rounded up to ``G``), which begins with the sorts of its groups of ``G`` rows. The ``R`` rows
    of the groups that hold only members are sorted in registers; the buffer comparators ``a, b``
    are all the others (the partial last group's own first, then the merges), pruned to ``b < m``
    (the ``+inf`` padding rows never move). ``G`` minimises a count of memory operations and
    exchanges per point. ``B`` is the block of points whose ``(M', B)`` buffer fits in L1.
    """
    lo, hi = _REGISTER_RANGE
    if lo <= m <= hi:
        p = 16
        while p < m:
            p *= 2
        none = np.zeros(0, dtype=np.int64)
        return p, 0, 0, p, none, none, block_size(p, itemsize)

    def rest(g: int, cg: int) -> tuple[int, int, np.ndarray, np.ndarray]:
        mp = -(-m // g) * g
        nreg = (m // g) * g
        na, nb = sorting_network(mp)
        first = np.arange(na.size) < (mp // g) * cg  # the group sorts: merges of width < g
        keep = (nb < m) & (~first | (na >= nreg))
        return nreg, mp, na[keep], nb[keep]

    best = (4 * len(sorting_network(m)[0]), 0, 0)
    for g, cg in ((8, 19), (16, 63)):
        nreg, _, na, _ = rest(g, cg)
        best = min(best, ((nreg // g) * (2 * g + 2 * cg) + 4 * na.size, g, cg))
    _, g, cg = best
    if g == 0:
        na, nb = sorting_network(m)
        return 0, 0, 0, m, na, nb, block_size(m, itemsize)
    nreg, mp, na, nb = rest(g, cg)
    return 0, g, nreg, mp, na, nb, block_size(mp, itemsize)


@numba.njit(cache=True, nogil=True, inline="always")
def _cx(a, b):  # compare-exchange that swaps (a NaN stays in place)
    return (b, a) if b < a else (a, b)


@numba.njit(cache=True, nogil=True, inline="always")
def _load8(buf: np.ndarray, r: int, k: int) -> tuple:
    """Rows ``r .. r+7`` of column ``k`` of ``buf``, as 8 values."""
    return (
        buf[r + 0, k],
        buf[r + 1, k],
        buf[r + 2, k],
        buf[r + 3, k],
        buf[r + 4, k],
        buf[r + 5, k],
        buf[r + 6, k],
        buf[r + 7, k],
    )


@numba.njit(cache=True, nogil=True, inline="always")
def _store8(buf: np.ndarray, r: int, k: int, x: tuple) -> None:
    """Store 8 values ``x`` in rows ``r .. r+7`` of column ``k`` of ``buf``."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x
    buf[r + 0, k] = x0
    buf[r + 1, k] = x1
    buf[r + 2, k] = x2
    buf[r + 3, k] = x3
    buf[r + 4, k] = x4
    buf[r + 5, k] = x5
    buf[r + 6, k] = x6
    buf[r + 7, k] = x7


@numba.njit(cache=True, nogil=True, inline="always")
def _sort8_values(x: tuple) -> tuple:
    """8 values sorted: Batcher's odd-even merge sort, 19 exchanges in 6 layers."""
    x0, x1, x2, x3, x4, x5, x6, x7 = x
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
    return x0, x1, x2, x3, x4, x5, x6, x7


@numba.njit(cache=True, nogil=True, inline="always")
def _merge8x8_values(lo: tuple, hi: tuple) -> tuple:
    """Two sorted runs of 8 values merged into 16 (Batcher's odd-even merge, 25 exchanges).

    Returns the lower and the upper 8 of the 16 sorted values.
    """
    x0, x1, x2, x3, x4, x5, x6, x7 = lo
    x8, x9, x10, x11, x12, x13, x14, x15 = hi
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
    return (x0, x1, x2, x3, x4, x5, x6, x7), (x8, x9, x10, x11, x12, x13, x14, x15)


@numba.njit(cache=True, nogil=True)
def _sort8(buf: np.ndarray, r: int, n: int) -> None:
    """Sort rows ``r .. r+7`` of ``buf`` per column in registers (Batcher, 19 exchanges)."""
    for k in range(n):
        _store8(buf, r, k, _sort8_values(_load8(buf, r, k)))


@numba.njit(cache=True, nogil=True)
def _sort16(buf: np.ndarray, r: int, n: int) -> None:
    """Sort rows ``r .. r+15`` of ``buf`` per column in registers (Batcher, 63 exchanges).

    Batcher's network for 16 is its networks for the two halves (2 x 19) then their merge (25).
    """
    for k in range(n):
        lo = _sort8_values(_load8(buf, r, k))
        hi = _sort8_values(_load8(buf, r + 8, k))
        lo, hi = _merge8x8_values(lo, hi)
        _store8(buf, r, k, lo)
        _store8(buf, r + 8, k, hi)
