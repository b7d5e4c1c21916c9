"""Moving ``Vec`` values between registers and arrays (``simd.py`` lists them): lanes, zeros, load, store, the
masked head load and store, splat (a broadcast load), evens (a stride-2 gather) and the 8- and 4-lane stores
of one part of a register.

Each is a Numba intrinsic that emits one LLVM load, store or masked-memory call on a pointer to element i of a
1-D array (``store8`` / ``store4``: an element of any rank, by an index tuple). No bounds are checked and a
negative index does not wrap: the caller keeps every lane it touches inside the buffer it owns.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd_vec import Vec, broadcast, element_pointer, vector_pointer


@intrinsic
def lanes(typingctx, a):
    count = Vec(a.dtype).lanes

    def codegen(context, builder, sig, args):
        return context.get_constant(types.intp, count)
    return types.intp(a), codegen


@intrinsic
def zeros(typingctx, a):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        return ir.Constant(context.get_value_type(vec), None)
    return vec(a), codegen


@intrinsic
def load(typingctx, a, i):
    def codegen(context, builder, sig, args):
        return builder.load(vector_pointer(context, builder, sig, args), align=a.dtype.bitwidth // 8)
    return Vec(a.dtype)(a, i), codegen


@intrinsic
def store(typingctx, a, i, v):
    def codegen(context, builder, sig, args):
        builder.store(args[2], vector_pointer(context, builder, sig, args), align=a.dtype.bitwidth // 8)
        return context.get_dummy_value()
    return types.void(a, i, v), codegen


def _head_mask(builder, width, n):
    """The lanes < n of a ``width``-lane vector, as an i1 vector."""
    i64 = ir.IntType(64)
    count = builder.insert_element(ir.Constant(ir.VectorType(i64, width), ir.Undefined),
                                   builder.sext(n, i64) if n.type.width < 64 else n, ir.Constant(ir.IntType(32), 0))
    count = builder.shuffle_vector(count, count, ir.Constant(ir.VectorType(ir.IntType(32), width), [0] * width))
    return builder.icmp_signed("<", ir.Constant(ir.VectorType(i64, width), list(range(width))), count)


@intrinsic
def load_head(typingctx, a, i, n):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        vector_type, width = context.get_value_type(vec), vec.lanes
        mask = _head_mask(builder, width, args[2])
        pointer = vector_pointer(context, builder, sig, args)
        name = f"llvm.masked.load.v{width}f{a.dtype.bitwidth}.p0v{width}f{a.dtype.bitwidth}"
        function = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(vector_type, [pointer.type, ir.IntType(32), mask.type, vector_type]), name)
        return builder.call(function, [pointer, ir.Constant(ir.IntType(32), a.dtype.bitwidth // 8), mask,
                                       ir.Constant(vector_type, None)])
    return vec(a, i, n), codegen


@intrinsic
def store_head(typingctx, a, i, v, n):
    def codegen(context, builder, sig, args):
        vector_type, width = context.get_value_type(sig.args[2]), sig.args[2].lanes
        mask = _head_mask(builder, width, args[3])
        pointer = vector_pointer(context, builder, sig, args)
        name = f"llvm.masked.store.v{width}f{a.dtype.bitwidth}.p0v{width}f{a.dtype.bitwidth}"
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [vector_type, pointer.type, ir.IntType(32), mask.type]), name)
        builder.call(function, [args[2], pointer, ir.Constant(ir.IntType(32), a.dtype.bitwidth // 8), mask])
        return context.get_dummy_value()
    return types.void(a, i, v, n), codegen


@intrinsic
def splat(typingctx, a, i):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        return broadcast(context, builder, vec, builder.load(element_pointer(context, builder, sig.args[0],
                                                                               args[0], args[1])))
    return vec(a, i), codegen


@intrinsic
def evens(typingctx, a, i):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        lane = context.get_value_type(a.dtype)
        pointer = element_pointer(context, builder, sig.args[0], args[0], args[1])
        pair = builder.load(builder.bitcast(pointer, ir.VectorType(lane, 2 * vec.lanes).as_pointer()),
                            align=a.dtype.bitwidth // 8)
        mask = ir.Constant(ir.VectorType(ir.IntType(32), vec.lanes), list(range(0, 2 * vec.lanes, 2)))
        return builder.shuffle_vector(pair, ir.Constant(pair.type, ir.Undefined), mask)
    return vec(a, i), codegen


def _store_part(context, builder, sig, args, width):
    """a[idx][:width] = v[width h : width h + width] (``store8``, ``store4``)."""
    array_type, index_type, v = sig.args[0], sig.args[1], sig.args[2]
    indices = cgutils.unpack_tuple(builder, args[1], len(index_type))
    ary = context.make_array(array_type)(context, builder, args[0])
    pointer = cgutils.get_item_pointer(context, builder, array_type, ary, indices, wraparound=False)
    lane, i32 = context.get_value_type(array_type.dtype), ir.IntType(32)
    part = builder.shuffle_vector(args[2], args[2], ir.Constant(ir.VectorType(i32, width), list(range(width))))
    for h in range(1, v.lanes // width):          # the part h (a select the compiler folds for a constant h)
        lanes_h = ir.Constant(ir.VectorType(i32, width), list(range(width * h, width * h + width)))
        other = builder.shuffle_vector(args[2], args[2], lanes_h)
        part = builder.select(builder.icmp_signed("==", args[3], ir.Constant(args[3].type, h)), other, part)
    builder.store(part, builder.bitcast(pointer, ir.VectorType(lane, width).as_pointer()),
                  align=array_type.dtype.bitwidth // 8)
    return context.get_dummy_value()


@intrinsic
def store8(typingctx, a, idx, v, h):
    def codegen(context, builder, sig, args):
        return _store_part(context, builder, sig, args, 8)
    return types.void(a, idx, v, h), codegen


@intrinsic
def store4(typingctx, a, idx, v, h):
    def codegen(context, builder, sig, args):
        return _store_part(context, builder, sig, args, 4)
    return types.void(a, idx, v, h), codegen
