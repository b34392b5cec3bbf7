"""Vector building blocks of the CRPS kernels, emitted as LLVM IR (numba ``@intrinsic``).

numba vectorises a loop over the points of a block, but a compare-exchange of two buffer rows
then costs two loads and two stores per vector, and the transposing copy moves one scalar at a
time. These intrinsics work on whole vectors of points (one 64-byte vector, ``VECTOR_BYTES``:
16 float32 or 8 float64) that LLVM keeps in registers:

- :func:`tile8` copies an 8 points x 8 members tile of a members-contiguous array into 8 buffer
  rows with 24 shuffles (the classic 8x8 transpose), instead of 64 scalar moves;
- :func:`sort_group` sorts up to 16 rows and :func:`merge32` merges two sorted runs of 16 rows
  in registers (rows ``r0 + s * i``, so a run may be strided), one load and one store per row;
  :func:`sort_group_chained` chains the rows for the twCRPS as it loads them;
- :func:`cx` is one compare-exchange of two rows;
- :func:`sort_column` sorts a vector of columns of ``P`` = 16, 32, 64 or 128 rows with them
  (Batcher's odd-even merge sort, its merges of 64 and 128 split into strided merges of 32);
- :func:`prefetch` asks for a cache line ahead of use, and :func:`fetch_add` is the atomic
  counter threads take blocks of points from.

The sums of the sorted rows, and the whole score of 9-16 float32 members in registers, are in
:mod:`ensml.scores._simd_sums`.

A compare-exchange swaps when ``b < a`` (ordered), so a NaN stays where it is, as in
:mod:`ensml.scores._sortnet`. Every intrinsic takes the buffer as a 2-D C-ordered array and works
on columns ``k0 .. k0 + lanes - 1``: the caller keeps ``k0 + lanes`` within the row.
"""

from __future__ import annotations

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ensml.scores._sortnet import sorting_network

VECTOR_BYTES = 64  # one AVX-512 register, or two AVX2 ones: LLVM splits where it must

_I64 = ir.IntType(64)


def _vector(context, dtype) -> tuple[ir.Type, ir.VectorType]:
    elt = context.get_data_type(dtype)
    return elt, ir.VectorType(elt, VECTOR_BYTES // context.get_abi_sizeof(elt))


def _row_ptr(context, builder, arrty, arr, row, k0, vty):
    """Pointer to ``arr[row, k0:k0 + lanes]`` as a vector pointer."""
    a = context.make_array(arrty)(context, builder, arr)
    stride = cgutils.unpack_tuple(builder, a.strides, 2)[0]
    elems = builder.sdiv(stride, ir.Constant(_I64, context.get_abi_sizeof(vty.element)))
    off = builder.add(builder.mul(row, elems), k0)
    return builder.bitcast(builder.gep(a.data, [off]), vty.as_pointer())


def _exchange(builder, u, v):
    lt = builder.fcmp_ordered("<", v, u)
    return builder.select(lt, v, u), builder.select(lt, u, v)


def _shuffle(builder, a, b, mask):
    return builder.shuffle_vector(a, b, ir.Constant(ir.VectorType(ir.IntType(32), len(mask)), mask))


def _batcher(n: int, first: int = 0) -> list[tuple[int, int]]:
    a, b = sorting_network(n)
    return list(zip(a[first:].tolist(), b[first:].tolist()))


# Batcher's network for 32 inputs is the sorts of its two halves (2 x 63 comparators) then the
# odd-even merge (65): the merge alone merges two sorted runs of 16.
_MERGE32 = _batcher(32, 2 * len(sorting_network(16)[0]))


def _splat(builder, value, vty):
    """``value`` in every lane of a ``vty`` vector."""
    v = builder.insert_element(ir.Constant(vty, ir.Undefined), value, ir.Constant(ir.IntType(32), 0))
    return _shuffle(builder, v, v, [0] * vty.count)


def _chain(builder, v, bounds):
    """``min(max(v, lo), hi)`` lane by lane, ``bounds = (lo, hi)`` scalars; NaN and ±Inf unchanged
    (as :func:`ensml.scores._kernels._chain`: an infinite member is still found afterwards)."""
    lo, hi = (_splat(builder, b, v.type) for b in bounds)
    c = builder.select(builder.fcmp_ordered("<", v, lo), lo, v)
    c = builder.select(builder.fcmp_ordered(">", c, hi), hi, c)
    inf = ir.Constant(v.type, [float("inf")] * v.type.count)
    ninf = ir.Constant(v.type, [float("-inf")] * v.type.count)
    infinite = builder.or_(builder.fcmp_ordered("==", v, inf), builder.fcmp_ordered("==", v, ninf))
    return builder.select(infinite, v, c)


def _network(context, builder, arrty, buf, rows, k0, pairs, chain=None) -> None:
    """Load the ``rows`` that ``pairs`` use (columns ``k0 ..``), exchange in registers, store them.

    With ``chain = (lo, hi, q)`` the first ``q`` rows are all loaded and chained (:func:`_chain`) first.
    """
    _, vty = _vector(context, arrty.dtype)
    used = sorted({i for pair in pairs for i in pair} | set(range(chain[2] if chain else 0)))
    ptrs = {i: _row_ptr(context, builder, arrty, buf, rows[i], k0, vty) for i in used}
    x = {i: builder.load(ptrs[i], align=1) for i in used}
    if chain:
        x = {i: _chain(builder, xi, chain[:2]) for i, xi in x.items()}
    for a, b in pairs:
        x[a], x[b] = _exchange(builder, x[a], x[b])
    for i in used:
        builder.store(x[i], ptrs[i], align=1)


def _switch(builder, q_v, cases: range, emit) -> None:
    """``emit(q)`` in a block per case of the run-time value ``q_v``; other values do nothing."""
    done = builder.append_basic_block("done")
    switch = builder.switch(q_v, done)
    for q in cases:
        block = builder.append_basic_block(f"case{q}")
        switch.add_case(ir.Constant(q_v.type, q), block)
        builder.position_at_end(block)
        emit(q)
        builder.branch(done)
    builder.position_at_end(done)


@intrinsic
def merge32(typingctx, buf, r0, s, k0, q):
    """Merge the sorted runs ``r0 + s*i`` (i < 16) and ``r0 + s*(16 + i)`` at columns ``k0 ..``.

    Only the first ``q`` of those 32 rows hold members (the rest is ``+inf`` padding): the
    network is pruned to them, one variant per ``q`` in 17 .. 32 (nothing to merge below).
    """

    def codegen(context, builder, sig, args):
        buf_v, r0_v, s_v, k0_v, q_v = args
        rows = [builder.add(r0_v, builder.mul(s_v, ir.Constant(_I64, i))) for i in range(32)]

        def emit(q):
            pairs = [(a, b) for a, b in _MERGE32 if b < q]
            _network(context, builder, sig.args[0], buf_v, rows, k0_v, pairs)

        _switch(builder, q_v, range(17, 33), emit)
        return context.get_dummy_value()

    return types.void(buf, types.int64, types.int64, types.int64, types.int64), codegen


def _bounds(context, builder, sig, args, dtype) -> tuple:
    """The ``lo, hi`` arguments (the last two) in the buffer's dtype."""
    return tuple(context.cast(builder, v, t, dtype) for v, t in zip(args[-2:], sig.args[-2:]))


@intrinsic
def sort_group(typingctx, buf, r0, k0, q):
    """Sort rows ``r0 .. r0+q-1`` at columns ``k0 ..`` in registers, Batcher's network for ``q``.

    ``q`` <= 16 is a run-time value: a switch over the 15 networks (nothing for ``q`` < 2).
    """
    return types.void(buf, types.int64, types.int64, types.int64), _sort_group_codegen


@intrinsic
def sort_group_chained(typingctx, buf, r0, k0, q, lo, hi):
    """:func:`sort_group` of the chained rows ``min(max(x, lo), hi)`` (the twCRPS), chained as
    they are loaded (rows of a group of one too)."""
    return types.void(buf, types.int64, types.int64, types.int64, lo, hi), _sort_group_codegen


def _sort_group_codegen(context, builder, sig, args):
    """Both :func:`sort_group` intrinsics: chained when given ``lo, hi`` (two more arguments)."""
    buf_v, r0_v, k0_v, q_v = args[:4]
    rows = [builder.add(r0_v, ir.Constant(_I64, i)) for i in range(16)]
    bounds = _bounds(context, builder, sig, args, sig.args[0].dtype) if len(args) > 4 else None

    def emit(q):
        chain = (*bounds, q) if bounds else None
        _network(context, builder, sig.args[0], buf_v, rows, k0_v, _batcher(q), chain)

    _switch(builder, q_v, range(1 if bounds else 2, 17), emit)
    return context.get_dummy_value()


@intrinsic
def cx(typingctx, buf, a, b, k0):
    """Compare-exchange rows ``a`` and ``b`` at columns ``k0 ..`` (swap where ``buf[b] < buf[a]``)."""

    def codegen(context, builder, sig, args):
        buf_v, a_v, b_v, k0_v = args
        _, vty = _vector(context, sig.args[0].dtype)
        pa = _row_ptr(context, builder, sig.args[0], buf_v, a_v, k0_v, vty)
        pb = _row_ptr(context, builder, sig.args[0], buf_v, b_v, k0_v, vty)
        u, v = _exchange(builder, builder.load(pa, align=1), builder.load(pb, align=1))
        builder.store(u, pa, align=1)
        builder.store(v, pb, align=1)
        return context.get_dummy_value()

    return types.void(buf, types.int64, types.int64, types.int64), codegen


_UNPACK = ([0, 8, 1, 9, 4, 12, 5, 13], [2, 10, 3, 11, 6, 14, 7, 15])  # unpacklo/hi per 128 bits
_PAIRS = ([0, 1, 8, 9, 4, 5, 12, 13], [2, 3, 10, 11, 6, 7, 14, 15])  # shufps, per 128 bits
_HALVES = ([0, 1, 2, 3, 8, 9, 10, 11], [4, 5, 6, 7, 12, 13, 14, 15])  # permute2f128


@intrinsic
def tile8(typingctx, src, soff, sstride, dst, row, k0):
    """``dst[row + i, k0 + p] = src[soff + p * sstride + i]`` for ``i, p < 8`` (an 8x8 transpose)."""

    def codegen(context, builder, sig, args):
        src_v, soff_v, sstride_v, dst_v, row_v, k0_v = args
        elt = context.get_data_type(sig.args[0].dtype)
        vty = ir.VectorType(elt, 8)
        data = context.make_array(sig.args[0])(context, builder, src_v).data
        v = []
        for p in range(8):
            off = builder.add(soff_v, builder.mul(sstride_v, ir.Constant(_I64, p)))
            v.append(builder.load(builder.bitcast(builder.gep(data, [off]), vty.as_pointer()), align=1))
        t = [_shuffle(builder, v[q], v[q + 1], m) for q in range(0, 8, 2) for m in _UNPACK]
        s = [_shuffle(builder, t[h + j], t[h + j + 2], m) for h in (0, 4) for j in (0, 1) for m in _PAIRS]
        r = [_shuffle(builder, s[j], s[j + 4], _HALVES[h]) for h in (0, 1) for j in range(4)]
        for i in range(8):
            row = builder.add(row_v, ir.Constant(_I64, i))
            builder.store(r[i], _row_ptr(context, builder, sig.args[3], dst_v, row, k0_v, vty), align=1)
        return context.get_dummy_value()

    return types.void(src, types.int64, types.int64, dst, types.int64, types.int64), codegen


@numba.njit(cache=True, nogil=True)
def sort_column(buf, p: int, k0: int, m: int, lo, hi) -> None:
    """Sort rows ``0 .. m-1`` of ``buf`` per column, for the vector of columns from ``k0``.

    A network for ``p`` = 16, 32, 64 or 128 >= ``m`` rows, the rows from ``m`` counting as
    ``+inf`` padding. Groups of 16 rows are sorted and pairs merged in registers; Batcher's merge
    of two runs of 64 (128) rows is the merges of their even and of their odd rows (strided
    merges of 32) then one layer of exchanges of rows ``2i+1, 2i+2``. Every exchange that
    involves a padding row is pruned, as in :func:`ensml.scores._sortnet.sorting_network`
    (padding never moves): the padding rows are never read or written. Unless ``lo, hi`` are
    ``-inf, inf``, the rows are chained (``min(max(x, lo), hi)``) as the groups are loaded.
    """
    chained = lo > -np.inf or hi < np.inf
    for r in range(0, p, 16):
        if chained:
            sort_group_chained(buf, r, k0, min(m - r, 16), lo, hi)
        else:
            sort_group(buf, r, k0, min(m - r, 16))
    for r in range(0, p if p >= 32 else 0, 32):
        _merge(buf, r, 1, k0, m)
    for r in range(0, p if p >= 64 else 0, 64):
        _merge(buf, r, 2, k0, m)
        _merge(buf, r + 1, 2, k0, m)
        _layer(buf, r + 1, 1, 31, k0, m)
    if p == 128:
        for q in range(2):  # the merge of 64 on the even rows, then on the odd ones
            _merge(buf, q, 4, k0, m)
            _merge(buf, q + 2, 4, k0, m)
            _layer(buf, q + 2, 2, 31, k0, m)
        _layer(buf, 1, 1, 63, k0, m)


@numba.njit(cache=True, nogil=True, inline="always")
def _merge(buf, r: int, s: int, k0: int, m: int) -> None:
    """:func:`merge32` of rows ``r + s*i``, told how many of them are members."""
    if m > r:
        merge32(buf, r, s, k0, min(32, (m - r + s - 1) // s))


@numba.njit(cache=True, nogil=True, inline="always")
def _layer(buf, r: int, s: int, count: int, k0: int, m: int) -> None:
    """Exchanges of rows ``r + 2si`` and ``r + 2si + s`` (``i < count``) below row ``m``."""
    for i in range(count):
        if r + 2 * s * i + s < m:
            cx(buf, r + 2 * s * i, r + 2 * s * i + s, k0)


@intrinsic
def prefetch(typingctx, arr, off):
    """Hint the cache line of ``arr[off]`` into L2 (``llvm.prefetch``: read, locality 2, data)."""

    def codegen(context, builder, sig, args):
        arr_v, off_v = args
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        data = context.make_array(sig.args[0])(context, builder, arr_v).data
        ptr = builder.bitcast(builder.gep(data, [off_v]), i8p)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]), "llvm.prefetch.p0i8"
        )
        builder.call(fn, [ptr, ir.Constant(i32, 0), ir.Constant(i32, 2), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return types.void(arr, types.int64), codegen


@intrinsic
def fetch_add(typingctx, counter):
    """Atomically ``counter[0] += 1``; returns the value before (threads take work from it)."""

    def codegen(context, builder, sig, args):
        data = context.make_array(sig.args[0])(context, builder, args[0]).data
        return builder.atomic_rmw("add", data, ir.Constant(_I64, 1), "monotonic")

    return types.int64(counter), codegen
