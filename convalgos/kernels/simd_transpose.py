"""``transpose8``: eight ``Vec`` rows turned into eight columns in registers, by lanes of 8 (``simd.py``).

With L lanes the 8 x L matrix whose rows are v0..v7 is read as L/8 blocks of 8 x 8, each transposed: u_m[8h + r]
= v_r[8h + m]. Three rounds of 8 two-source shuffles, round b swapping bit b of the row index with bit b of the
lane index (24 shuffles in all, no memory). With fewer than 8 lanes it still compiles, so that a kernel's branch
for 8 lanes does, and raises ValueError if run.
"""
from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic

from .simd_vec import Vec


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
