"""Register sums of the CRPS kernels, emitted as LLVM IR (numba ``@intrinsic``).

The sorting intrinsics (:mod:`ensml.scores._simd`) leave each column of the buffer sorted;
:func:`reduce_columns` takes the two float64 sums of the sorted-order identity from it, and
:func:`crps_small` (:func:`crps_small_chained` for the twCRPS) does the whole score of 16 points
of 9-16 float32 members in registers, reading, transposing, sorting and summing without a buffer.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from ensml.scores._simd import (
    _I64,
    _batcher,
    _bounds,
    _chain,
    _exchange,
    _row_ptr,
    _shuffle,
    _switch,
    _vector,
)


@intrinsic
def reduce_columns(typingctx, buf, m, k0, yb, acc_abs, acc_w):
    """Sums of sorted rows ``0 .. m-1`` at columns ``k0 ..``, centred on ``yb``, in float64.

    ``acc_abs[k] = sum_i |x_ik - y_k|`` and ``acc_w[k] = sum_i (2i - m + 1)(x_ik - y_k)``, written at
    ``k0 ..`` of the float64 arrays; two rows per step into two sets of accumulators.
    """

    def codegen(context, builder, sig, args):
        buf_v, m_v, k0_v, yb_v, aa_v, aw_v = args
        _, vty = _vector(context, sig.args[0].dtype)
        dty = ir.VectorType(ir.DoubleType(), vty.count)
        f64 = ir.DoubleType()

        def f64_ptr(arrty, arr):
            data = context.make_array(arrty)(context, builder, arr).data
            return builder.bitcast(builder.gep(data, [k0_v]), dty.as_pointer())

        y = builder.load(f64_ptr(sig.args[3], yb_v), align=1)
        zero = ir.Constant(dty, [0.0] * vty.count)
        accs = [cgutils.alloca_once_value(builder, zero) for _ in range(4)]  # |d| and w*d, two rows
        fma = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(dty, [dty, dty, dty]), f"llvm.fma.v{vty.count}f64"
        )
        fabs = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(dty, [dty]), f"llvm.fabs.v{vty.count}f64"
        )
        w0 = builder.fsub(ir.Constant(f64, 1.0), builder.sitofp(m_v, f64))  # weight of row 0

        def add_row(row, a_acc, w_acc):
            x = builder.load(_row_ptr(context, builder, sig.args[0], buf_v, row, k0_v, vty), align=1)
            if vty.element != f64:
                x = builder.fpext(x, dty)
            d = builder.fsub(x, y)
            builder.store(builder.fadd(builder.load(a_acc), builder.call(fabs, [d])), a_acc)
            w = builder.fadd(w0, builder.fmul(ir.Constant(f64, 2.0), builder.sitofp(row, f64)))
            wv = builder.insert_element(ir.Constant(dty, ir.Undefined), w, ir.Constant(ir.IntType(32), 0))
            wv = _shuffle(builder, wv, wv, [0] * vty.count)
            builder.store(builder.call(fma, [wv, d, builder.load(w_acc)]), w_acc)

        pairs = builder.sdiv(m_v, ir.Constant(_I64, 2))
        with cgutils.for_range(builder, pairs) as loop:
            row = builder.mul(loop.index, ir.Constant(_I64, 2))
            add_row(row, accs[0], accs[1])
            add_row(builder.add(row, ir.Constant(_I64, 1)), accs[2], accs[3])
        odd = builder.icmp_signed("!=", builder.mul(pairs, ir.Constant(_I64, 2)), m_v)
        with builder.if_then(odd):
            add_row(builder.sub(m_v, ir.Constant(_I64, 1)), accs[0], accs[1])
        total_abs = builder.fadd(builder.load(accs[0]), builder.load(accs[2]))
        total_w = builder.fadd(builder.load(accs[1]), builder.load(accs[3]))
        builder.store(total_abs, f64_ptr(sig.args[4], aa_v), align=1)
        builder.store(total_w, f64_ptr(sig.args[5], aw_v), align=1)
        return context.get_dummy_value()

    return types.void(buf, types.int64, types.int64, yb, acc_abs, acc_w), codegen


_INTERLEAVE = (
    [j for i in range(8) for j in (i, 16 + i)],  # lanes 0..7 of two vectors, interleaved
    [j for i in range(8, 16) for j in (i, 16 + i)],  # lanes 8..15
)


@intrinsic
def crps_small(typingctx, src, soff, m, yb, k0, acc_abs, acc_w):
    """:func:`reduce_columns` sums of 16 points of 9 .. 16 float32 members, all in registers.

    Point ``p`` is ``src[soff + p*m : soff + p*m + m]`` (members contiguous): each is read as
    one 16-float vector (the caller keeps ``soff + 15*m + 16`` within ``src``), the 16 x 16 tile
    transposed by four rounds of interleaving (perfect shuffles), the ``m`` member rows sorted
    by Batcher's network for ``m`` and reduced against ``yb[k0 ..]`` into ``acc_abs``/``acc_w``
    at ``k0 ..``: no buffer, one switch over ``m``.
    """
    return types.void(src, types.int64, types.int64, yb, types.int64, acc_abs, acc_w), _crps_small_codegen


@intrinsic
def crps_small_chained(typingctx, src, soff, m, yb, k0, acc_abs, acc_w, lo, hi):
    """:func:`crps_small` of the chained members ``min(max(x, lo), hi)`` (the twCRPS)."""
    sig = types.void(src, types.int64, types.int64, yb, types.int64, acc_abs, acc_w, lo, hi)
    return sig, _crps_small_codegen


def _crps_small_codegen(context, builder, sig, args):
    src_v, soff_v, m_v, yb_v, k0_v, aa_v, aw_v = args[:7]
    f32 = ir.FloatType()
    vty, dty = ir.VectorType(f32, 16), ir.VectorType(ir.DoubleType(), 16)
    data = context.make_array(sig.args[0])(context, builder, src_v).data
    bounds = _bounds(context, builder, sig, args, types.float32) if len(args) > 7 else None
    v = []
    for p in range(16):
        off = builder.add(soff_v, builder.mul(m_v, ir.Constant(_I64, p)))
        x = builder.load(builder.bitcast(builder.gep(data, [off]), vty.as_pointer()), align=1)
        v.append(_chain(builder, x, bounds) if bounds else x)
    for _ in range(4):
        v = [_shuffle(builder, v[i], v[i + 8], mask) for i in range(8) for mask in _INTERLEAVE]

    def f64_ptr(arrty, arr):
        d = context.make_array(arrty)(context, builder, arr).data
        return builder.bitcast(builder.gep(d, [k0_v]), dty.as_pointer())

    y = builder.load(f64_ptr(sig.args[3], yb_v), align=1)
    fabs = cgutils.get_or_insert_function(builder.module, ir.FunctionType(dty, [dty]), "llvm.fabs.v16f64")
    fma = cgutils.get_or_insert_function(
        builder.module, ir.FunctionType(dty, [dty, dty, dty]), "llvm.fma.v16f64"
    )

    def emit(q):
        x = list(v[:q])
        for a, b in _batcher(q):
            x[a], x[b] = _exchange(builder, x[a], x[b])
        acc = [ir.Constant(dty, [0.0] * 16)] * 4  # |d| and w*d, even and odd rows
        for i in range(q):
            d = builder.fsub(builder.fpext(x[i], dty), y)
            j = 2 * (i % 2)
            acc[j] = builder.fadd(acc[j], builder.call(fabs, [d]))
            w = ir.Constant(dty, [float(2 * i - q + 1)] * 16)
            acc[j + 1] = builder.call(fma, [w, d, acc[j + 1]])
        builder.store(builder.fadd(acc[0], acc[2]), f64_ptr(sig.args[5], aa_v), align=1)
        builder.store(builder.fadd(acc[1], acc[3]), f64_ptr(sig.args[6], aw_v), align=1)

    _switch(builder, m_v, range(9, 17), emit)
    return context.get_dummy_value()
