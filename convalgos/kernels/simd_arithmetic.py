"""Arithmetic on ``Vec`` values (``simd.py`` lists them): fma, add, sub; a scalar times a Vec (scale, mul_add,
mul_sub: the scalar is broadcast, and a constant's broadcast folds away); and total, the sum of a Vec's lanes
in a fixed tree (the upper half added to the lower, log2(lanes) rounds: the same bits on every run).

The fused forms call ``llvm.fma`` (one rounding); the others are LLVM's plain vector fadd, fsub and fmul.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd_vec import Vec, broadcast


def _scalar(context, builder, sig, args):
    """The scalar first argument of ``scale``, ``mul_add``, ``mul_sub`` in every lane of their Vec."""
    vec = sig.args[1]
    return broadcast(context, builder, vec, context.cast(builder, args[0], sig.args[0], vec.dtype))


def _scalar_and_vec(c, v) -> bool:
    return isinstance(v, Vec) and isinstance(c, (types.Number, types.Literal))


@intrinsic
def fma(typingctx, u, v, acc):
    def codegen(context, builder, sig, args):
        vector_type = context.get_value_type(sig.args[0])
        name = f"llvm.fma.v{u.lanes}f{u.dtype.bitwidth}"
        function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector_type, [vector_type] * 3), name)
        return builder.call(function, args)
    return u(u, v, acc), codegen


@intrinsic
def add(typingctx, u, v):
    def codegen(context, builder, sig, args):
        return builder.fadd(args[0], args[1])
    return u(u, v), codegen


@intrinsic
def sub(typingctx, u, v):
    def codegen(context, builder, sig, args):
        return builder.fsub(args[0], args[1])
    return u(u, v), codegen


def _scaled_fma(context, builder, sig, args, negate):
    """llvm.fma(splat(c), v, +-w) for ``mul_add`` and ``mul_sub``."""
    vec = sig.args[1]
    vector_type = context.get_value_type(vec)
    w = builder.fneg(args[2]) if negate else args[2]
    function = cgutils.get_or_insert_function(builder.module, ir.FunctionType(vector_type, [vector_type] * 3),
                                              f"llvm.fma.v{vec.lanes}f{vec.dtype.bitwidth}")
    return builder.call(function, [_scalar(context, builder, sig, args), args[1], w])


@intrinsic
def scale(typingctx, c, v):
    if not _scalar_and_vec(c, v):
        return None

    def codegen(context, builder, sig, args):
        return builder.fmul(_scalar(context, builder, sig, args), args[1])
    return v(c, v), codegen


@intrinsic
def mul_add(typingctx, c, v, acc):
    if not _scalar_and_vec(c, v):
        return None

    def codegen(context, builder, sig, args):
        return _scaled_fma(context, builder, sig, args, negate=False)
    return v(c, v, acc), codegen


@intrinsic
def mul_sub(typingctx, c, v, w):
    if not _scalar_and_vec(c, v):
        return None

    def codegen(context, builder, sig, args):
        return _scaled_fma(context, builder, sig, args, negate=True)
    return v(c, v, w), codegen


@intrinsic
def total(typingctx, v):
    def codegen(context, builder, sig, args):
        i32, value, width = ir.IntType(32), args[0], v.lanes
        while width > 1:                          # lanes [0, width/2) += lanes [width/2, width)
            half = width // 2
            low = builder.shuffle_vector(value, value, ir.Constant(ir.VectorType(i32, half), list(range(half))))
            high = builder.shuffle_vector(value, value,
                                          ir.Constant(ir.VectorType(i32, half), list(range(half, width))))
            value, width = builder.fadd(low, high), half
        return builder.extract_element(value, ir.Constant(i32, 0))
    return v.dtype(v), codegen
