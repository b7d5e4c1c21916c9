"""One vector register as a Numba value, for kernels that keep their accumulators in registers.

LLVM vectorises a Numba loop over contiguous data well, but it will not keep a block of accumulators in
registers across a reduction loop: a local array stays in memory, and each multiply-add then pays a load and a
store. Register blocking (the heart of every fast convolution and GEMM: a block of outputs reused across many
taps) needs the accumulators to be values. ``Vec`` is that value, held in SSA form, so a loop-carried ``Vec``
lives in a register: an LLVM ``<16 x float>`` (``<8 x double>``), a zmm, on a CPU with AVX-512, else
``<8 x float>`` (``<4 x double>``), an AVX ymm (LLVM splits it into two 128-bit registers on NEON). Measured on
Zen 4 (which runs a zmm operation as two 256-bit halves), the 512-bit registers made ``direct``'s kernel
1.06-1.3x faster than 256-bit ones on 3x3 layers of 7-56 px: half the instructions for the same arithmetic.

The operations, all for a 1-D array ``a`` of float32 or float64 and an element index ``i``:

    lanes(a)          the lanes of a's dtype in one register (REGISTER_BYTES / itemsize), a compile-time constant
    zeros(a)          a Vec of zeros
    load(a, i)        a[i : i + lanes] as a Vec (unaligned)
    store(a, i, v)    a[i : i + lanes] = v
    store_head(a, i, v, n)  a[i : i + n] = v[:n] for 0 <= n <= lanes, nothing written past them (a masked store)
    load_head(a, i, n)  a[i : i + n] in the first n lanes, zeros after, nothing read past them (a masked load)
    transpose8(v0, ..., v7) the 8 x lanes matrix whose rows are v0..v7, transposed by lanes of 8 (lanes >= 8; with
                      fewer it compiles, so that a branch for 8 lanes does, and raises ValueError if run):
                      returns u0..u7 with u_m[8h + r] = v_r[8h + m] (column m of each 8-lane half, its 8 rows):
                      3 rounds of 8 two-source shuffles, each swapping one bit of the row index with one
    store8(a, idx, v, h)  a[idx][:8] = v[8h : 8h + 8], idx a tuple of a's indices (the first of 8 contiguous
                      elements along a's last axis); store4(a, idx, v, h) the same for 4 elements, v[4h : 4h + 4]
    splat(a, i)       a[i] in every lane (a broadcast load)
    fma(u, v, acc)    u * v + acc, lane by lane, one rounding (llvm.fma)
    add(u, v), sub(u, v)  u + v, u - v, lane by lane
    mul_add(c, v, acc), mul_sub(c, v, w)  c * v + acc, c * v - w for a scalar c (a constant in a transform's
                      code: the compiler folds its broadcast), one rounding; scale(c, v) c * v
    evens(a, i)       a[i], a[i + 2], ..., a[i + 2*lanes - 2] as a Vec: one load of 2*lanes elements, then the even
                      lanes (a stride-2 gather, for polyphase copies)
    total(v)          the sum of v's lanes, as a fixed tree: the upper half added to the lower half, lane by
                      lane, until one lane is left (log2(lanes) shuffles and adds; deterministic)

No bounds are checked and negative indices do not wrap: the caller keeps i .. i + lanes - 1 inside the
buffer it owns (a view may be read past its end when the memory beyond belongs to the same buffer).
"""
from __future__ import annotations

import os

from llvmlite import ir
from llvmlite.binding import get_host_cpu_features
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic, models, register_model


def target_features() -> dict:
    """The features of the CPU Numba compiles for ({} when NUMBA_CPU_NAME or NUMBA_CPU_FEATURES picks another
    target, for a portable cache: the register blocks then take the smallest size, which never spills)."""
    if os.environ.get("NUMBA_CPU_NAME") or os.environ.get("NUMBA_CPU_FEATURES"):
        return {}
    try:
        return dict(get_host_cpu_features())
    except RuntimeError:                          # llvmlite cannot read the features on this host
        return {}


_FEATURES = target_features()
#: bytes of one Vec: a zmm with AVX-512, else a ymm
REGISTER_BYTES = 64 if _FEATURES.get("avx512f", False) else 32
#: vector registers: 32 with AVX-512 (zmm0-31), else 16 (AVX2's ymm0-15; NEON's 32 are 128-bit, two per Vec)
REGISTERS = 32 if _FEATURES.get("avx512f", False) else 16


class Vec(types.Type):
    """The Numba type of one register of ``dtype`` lanes."""

    def __init__(self, dtype):
        self.dtype = dtype
        self.lanes = REGISTER_BYTES * 8 // dtype.bitwidth
        super().__init__(name=f"Vec({dtype} x {self.lanes})")


@register_model(Vec)
class VecModel(models.PrimitiveModel):
    def __init__(self, dmm, fe_type):
        lane = dmm.lookup(fe_type.dtype).get_value_type()
        super().__init__(dmm, fe_type, ir.VectorType(lane, fe_type.lanes))


def _element_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index], wraparound=False)


def _vector_pointer(context, builder, sig, args):
    """A pointer to the Vec at element args[1] of the array args[0]."""
    pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
    return builder.bitcast(pointer, context.get_value_type(Vec(sig.args[0].dtype)).as_pointer())


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
        return builder.load(_vector_pointer(context, builder, sig, args), align=a.dtype.bitwidth // 8)
    return Vec(a.dtype)(a, i), codegen


@intrinsic
def store(typingctx, a, i, v):
    def codegen(context, builder, sig, args):
        builder.store(args[2], _vector_pointer(context, builder, sig, args), align=a.dtype.bitwidth // 8)
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
        pointer = _vector_pointer(context, builder, sig, args)
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
        pointer = _vector_pointer(context, builder, sig, args)
        name = f"llvm.masked.store.v{width}f{a.dtype.bitwidth}.p0v{width}f{a.dtype.bitwidth}"
        function = cgutils.get_or_insert_function(
            builder.module,
            ir.FunctionType(ir.VoidType(), [vector_type, pointer.type, ir.IntType(32), mask.type]), name)
        builder.call(function, [args[2], pointer, ir.Constant(ir.IntType(32), a.dtype.bitwidth // 8), mask])
        return context.get_dummy_value()
    return types.void(a, i, v, n), codegen


def _broadcast(context, builder, vec, value):
    """``value`` (of vec's lane type) in every lane of a ``vec``."""
    vector_type, i32 = context.get_value_type(vec), ir.IntType(32)
    one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(i32, 0))
    return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(i32, vec.lanes), [0] * vec.lanes))


def _scalar(context, builder, sig, args):
    """The scalar first argument of ``scale``, ``mul_add``, ``mul_sub`` in every lane of their Vec."""
    vec = sig.args[1]
    return _broadcast(context, builder, vec, context.cast(builder, args[0], sig.args[0], vec.dtype))


def _scalar_and_vec(c, v) -> bool:
    return isinstance(v, Vec) and isinstance(c, (types.Number, types.Literal))


@intrinsic
def splat(typingctx, a, i):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        return _broadcast(context, builder, vec, builder.load(_element_pointer(context, builder, sig.args[0],
                                                                               args[0], args[1])))
    return vec(a, i), codegen


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
def evens(typingctx, a, i):
    vec = Vec(a.dtype)

    def codegen(context, builder, sig, args):
        lane = context.get_value_type(a.dtype)
        pointer = _element_pointer(context, builder, sig.args[0], args[0], args[1])
        pair = builder.load(builder.bitcast(pointer, ir.VectorType(lane, 2 * vec.lanes).as_pointer()),
                            align=a.dtype.bitwidth // 8)
        mask = ir.Constant(ir.VectorType(ir.IntType(32), vec.lanes), list(range(0, 2 * vec.lanes, 2)))
        return builder.shuffle_vector(pair, ir.Constant(pair.type, ir.Undefined), mask)
    return vec(a, i), codegen


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


def _transpose_masks(lanes_: int, bit: int):
    """The two shuffle masks of a round of ``transpose8`` over a pair (v, w) whose rows differ in ``bit``: x
    takes the lanes whose ``bit`` is 0 from v (bit 0 of the lane) and w (bit 1); y those whose ``bit`` is 1."""
    step = 1 << bit
    x = [(lanes_ if l & step else 0) + (l & ~step) for l in range(lanes_)]
    y = [(lanes_ if l & step else 0) + (l | step) for l in range(lanes_)]
    return x, y


@intrinsic
def transpose8(typingctx, v0, v1, v2, v3, v4, v5, v6, v7):
    if not isinstance(v0, Vec):
        return None

    def codegen(context, builder, sig, args):
        i32, vectors = ir.IntType(32), list(args)
        if v0.lanes < 8:                          # compiled (a branch a caller takes only with 8 lanes), never run
            with builder.if_then(cgutils.true_bit):
                context.call_conv.return_user_exc(builder, ValueError, ("transpose8 needs 8 lanes",))
            return context.make_tuple(builder, sig.return_type, vectors)
        for bit in range(3):                      # swap row bit ``bit`` with lane bit ``bit``
            x_mask, y_mask = (ir.Constant(ir.VectorType(i32, v0.lanes), m) for m in _transpose_masks(v0.lanes, bit))
            for low in [r for r in range(8) if not r & (1 << bit)]:
                v, w = vectors[low], vectors[low | (1 << bit)]
                vectors[low] = builder.shuffle_vector(v, w, x_mask)
                vectors[low | (1 << bit)] = builder.shuffle_vector(v, w, y_mask)
        return context.make_tuple(builder, sig.return_type, vectors)
    return types.UniTuple(v0, 8)(v0, v1, v2, v3, v4, v5, v6, v7), codegen


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
