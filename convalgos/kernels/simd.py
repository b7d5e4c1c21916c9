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

The kernels import every name from here. The code is in four files by job: ``simd_vec.py`` (the type, its size
on this CPU: ``REGISTER_BYTES``, ``REGISTERS``), ``simd_memory.py`` (loads and stores), ``simd_arithmetic.py``
(fma, add, sub, the scalar forms, total), ``simd_transpose.py`` (transpose8). Every kernel that uses one inlines
it: after editing any of them, delete convalgos' ``__pycache__/*.nbi`` and ``*.nbc`` (README).
"""
from __future__ import annotations

from .simd_arithmetic import add, fma, mul_add, mul_sub, scale, sub, total
from .simd_memory import evens, lanes, load, load_head, splat, store, store4, store8, store_head, zeros
from .simd_transpose import transpose8
from .simd_vec import REGISTER_BYTES, REGISTERS, Vec, target_features

__all__ = ["REGISTER_BYTES", "REGISTERS", "Vec", "target_features", "lanes", "zeros", "load", "store", "store_head",
           "load_head", "splat", "evens", "store8", "store4", "fma", "add", "sub", "scale", "mul_add", "mul_sub",
           "total", "transpose8"]
