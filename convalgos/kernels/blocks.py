"""Register blocks: a few output channels x two vectors of outputs, accumulated in registers over every tap.

The inner product of ``direct``: for a block of output channels k0 .. k0 + width - 1 and 2L consecutive
outputs (L = SIMD lanes), sum over taps q of w[k, q] * xq[n, c0 + taps[0, q], taps[1, q] + t0 + j]. The
accumulators never leave the registers while the taps go by; per tap, two loads of x and one broadcast of w per
channel feed 2 x width multiply-adds. ``channel_block`` cuts a group's channels into blocks of BLOCK (8 or 4),
then fours, then ones.

The eight- and four-channel blocks are near-copies on purpose: Numba cannot write N accumulators once.
"""
from __future__ import annotations

from numba import njit

from .simd import REGISTERS, fma, lanes, load, splat, store, zeros

#: output channels of ``direct_rows``' register block: 8 (16 accumulators) where the CPU has 32 vector
#: registers, else 4 (8 accumulators; 16 would spill). Measured on AVX-512 Zen 4 with 256-bit vectors, kernel
#: alone: 8 channels ran 1.08-1.25x faster than 4 on CIFAR, ResNet-18 and stride-2 3x3 layers.
BLOCK = 8 if REGISTERS >= 32 else 4


@njit(cache=True, inline="always")
def four_channels(xq, w, taps, n, c0, k0, t0, stage, s0):
    """stage[kk, s0:s0 + 2L] = sum over taps q of w[k0 + kk, q] * xq[n, c0 + taps[0, q], taps[1, q] + t0:][:2L]
    for kk < 4 (L = lanes): a register block of 4 channels x 2 vectors of outputs, eight accumulators that stay
    in registers over every tap; per tap two loads of x and four broadcasts of w feed eight multiply-adds."""
    L = lanes(stage)
    w0, w1, w2, w3 = w[k0], w[k0 + 1], w[k0 + 2], w[k0 + 3]
    a00, a01, a10, a11 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    a20, a21, a30, a31 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    for q in range(w.shape[1]):
        plane, at = xq[n, c0 + taps[0, q]], taps[1, q] + t0
        x0, x1 = load(plane, at), load(plane, at + L)
        u = splat(w0, q)
        a00, a01 = fma(u, x0, a00), fma(u, x1, a01)
        u = splat(w1, q)
        a10, a11 = fma(u, x0, a10), fma(u, x1, a11)
        u = splat(w2, q)
        a20, a21 = fma(u, x0, a20), fma(u, x1, a21)
        u = splat(w3, q)
        a30, a31 = fma(u, x0, a30), fma(u, x1, a31)
    store(stage[0], s0, a00)
    store(stage[0], s0 + L, a01)
    store(stage[1], s0, a10)
    store(stage[1], s0 + L, a11)
    store(stage[2], s0, a20)
    store(stage[2], s0 + L, a21)
    store(stage[3], s0, a30)
    store(stage[3], s0 + L, a31)


@njit(cache=True, inline="always")
def eight_channels(xq, w, taps, n, c0, k0, t0, stage, s0):
    """``four_channels`` for 8 channels: sixteen accumulators (for CPUs with 32 vector registers); per tap two
    loads of x and eight broadcasts of w feed sixteen multiply-adds."""
    L = lanes(stage)
    w0, w1, w2, w3 = w[k0], w[k0 + 1], w[k0 + 2], w[k0 + 3]
    w4, w5, w6, w7 = w[k0 + 4], w[k0 + 5], w[k0 + 6], w[k0 + 7]
    a00, a01, a10, a11 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    a20, a21, a30, a31 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    a40, a41, a50, a51 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    a60, a61, a70, a71 = zeros(stage), zeros(stage), zeros(stage), zeros(stage)
    for q in range(w.shape[1]):
        plane, at = xq[n, c0 + taps[0, q]], taps[1, q] + t0
        x0, x1 = load(plane, at), load(plane, at + L)
        u = splat(w0, q)
        a00, a01 = fma(u, x0, a00), fma(u, x1, a01)
        u = splat(w1, q)
        a10, a11 = fma(u, x0, a10), fma(u, x1, a11)
        u = splat(w2, q)
        a20, a21 = fma(u, x0, a20), fma(u, x1, a21)
        u = splat(w3, q)
        a30, a31 = fma(u, x0, a30), fma(u, x1, a31)
        u = splat(w4, q)
        a40, a41 = fma(u, x0, a40), fma(u, x1, a41)
        u = splat(w5, q)
        a50, a51 = fma(u, x0, a50), fma(u, x1, a51)
        u = splat(w6, q)
        a60, a61 = fma(u, x0, a60), fma(u, x1, a61)
        u = splat(w7, q)
        a70, a71 = fma(u, x0, a70), fma(u, x1, a71)
    for kk, (lo, hi) in enumerate(((a00, a01), (a10, a11), (a20, a21), (a30, a31),
                                    (a40, a41), (a50, a51), (a60, a61), (a70, a71))):
        store(stage[kk], s0, lo)
        store(stage[kk], s0 + L, hi)


@njit(cache=True, inline="always")
def one_channel(xq, w, taps, n, c0, k, t0, stage, s0):
    """stage[0, s0:s0 + 2L] for the single channel k (``four_channels`` for the channels left over)."""
    L = lanes(stage)
    wk, a0, a1 = w[k], zeros(stage), zeros(stage)
    for q in range(w.shape[1]):
        plane, at = xq[n, c0 + taps[0, q]], taps[1, q] + t0
        u = splat(wk, q)
        a0, a1 = fma(u, load(plane, at), a0), fma(u, load(plane, at + L), a1)
    store(stage[0], s0, a0)
    store(stage[0], s0 + L, a1)


@njit(cache=True, inline="always")
def register_block(xq, w, taps, n, c0, k0, width, t0, stage, s0):
    """stage[kk, s0:s0 + 2L] for the ``width`` channels k0 .. k0 + width - 1 (BLOCK, four or one, as
    ``channel_block`` cut them): ``eight_channels``, ``four_channels`` or ``one_channel``."""
    if BLOCK == 8 and width == 8:
        eight_channels(xq, w, taps, n, c0, k0, t0, stage, s0)
    elif width == 4:
        four_channels(xq, w, taps, n, c0, k0, t0, stage, s0)
    else:
        one_channel(xq, w, taps, n, c0, k0, t0, stage, s0)


@njit(cache=True)
def channel_blocks(Kg, widest):
    """How many blocks ``channel_block`` cuts a group's Kg output channels into."""
    rest = Kg % widest
    return Kg // widest + (rest // 4 if widest == 8 else 0) + rest % 4


@njit(cache=True)
def channel_block(Kg, b, widest):
    """(first channel within the group, width) of channel block b: blocks of ``widest`` (4 or 8) channels,
    then, when widest is 8, one of four where at least four are left, then single ones."""
    wide = Kg // widest
    if b < wide:
        return widest * b, widest
    fours = (Kg - widest * wide) // 4 if widest == 8 else 0
    if b < wide + fours:
        return widest * wide, 4
    return widest * wide + 4 * fours + b - wide - fours, 1
