"""The register type behind ``simd.py``: ``Vec``, one vector register as a Numba value (an LLVM vector held in
SSA form, so a loop-carried ``Vec`` stays in a register), its size on the CPU Numba compiles for, and the
pointer and broadcast steps the operations' code generators share.

A ``Vec`` is a zmm (``<16 x float>``, ``<8 x double>``) on a CPU with AVX-512, else a ymm (``<8 x float>``,
``<4 x double>``; LLVM splits it in two on NEON). With NUMBA_CPU_NAME or NUMBA_CPU_FEATURES set (a portable
cache) the features are unknown here, and the smaller size is taken: register blocks sized for it never spill.
"""
from __future__ import annotations

import os

from llvmlite import ir
from llvmlite.binding import get_host_cpu_features
from numba import types
from numba.core import cgutils
from numba.extending import models, register_model


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


def element_pointer(context, builder, array_type, array, index):
    ary = context.make_array(array_type)(context, builder, array)
    return cgutils.get_item_pointer(context, builder, array_type, ary, [index], wraparound=False)


def vector_pointer(context, builder, sig, args):
    """A pointer to the Vec at element args[1] of the array args[0]."""
    pointer = element_pointer(context, builder, sig.args[0], args[0], args[1])
    return builder.bitcast(pointer, context.get_value_type(Vec(sig.args[0].dtype)).as_pointer())


def broadcast(context, builder, vec, value):
    """``value`` (of vec's lane type) in every lane of a ``vec``."""
    vector_type, i32 = context.get_value_type(vec), ir.IntType(32)
    one = builder.insert_element(ir.Constant(vector_type, ir.Undefined), value, ir.Constant(i32, 0))
    return builder.shuffle_vector(one, ir.Constant(vector_type, ir.Undefined),
                                  ir.Constant(ir.VectorType(i32, vec.lanes), [0] * vec.lanes))
