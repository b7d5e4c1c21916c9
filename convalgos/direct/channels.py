"""Direct convolution with the output channels in the vector lanes, "direct_channels": the defining sum, for
small planes and strided layers, the way oneDNN's blocked (nChw16c) kernels hold their accumulators.

Maths. The forward pass is direct's sum (``direct/cpu.py``),

    y[n, k, i, j] = sum_{c, r, s} xp[n, c, i*sh + r*dh, j*sw + s*dw] * w[k, c, r, s]

with xp the zero-padded input. ``direct`` vectorises over consecutive outputs of one channel, so a plane's
row pitch, its junk columns and the round-up of each plane to whole register blocks are all computed: on an
8x8 output, 96 outputs per plane for 64 (AVX-512), and at stride 2 it first splits the input into four phases.
Here a vector holds V output channels of one pixel instead (V = 2L: two registers of L lanes, 32 float32
channels with AVX-512): per tap (c, r, s), two vector loads of the packed weight w[k0:k0+V, c, r, s] and one
broadcast of x per pixel feed 2 x 8 multiply-adds for a tile of 8 consecutive output pixels, sixteen
accumulators in registers over all C*R*S taps. A pixel's x is read in place, at any stride and dilation: no
phase split, no junk columns; a row's last tile computes up to 7 pixels past Wo, never stored. The tile is
then copied out channel by channel (the transposition NCHW needs; oneDNN keeps its tensors blocked instead).

Backward-data at stride 1 is the same kernel on dy: dx is the correlation of dy, zero-padded by
(R-1)*dh - top rows above ((S-1)*dw - left columns left, likewise below and right), with the weight flipped
(r -> R-1-r, s -> S-1-s) and K and C swapped, at the layer's dilation. The idea needs each output pixel to
read its own inputs, which a strided backward-data does not (its taps change with the pixel's phase: ``direct``
splits it by phases); backward-filter reduces over the pixels, not the channels (``direct``'s GEMM over the
pixels serves it). Both are declined with that reason.

FLOPs (``flops``): 2*N*groups*V*blocks * Cin/groups*R*S * rows * (tiles of 8 pixels)*8: channels rounded up to whole blocks
(K = 16 with V = 32 computes 32: a layer of at most L channels takes one vector, V = L) and pixels to whole
tiles (Wo = 7: 8 computed; 14: 16; 16, 32, 56 and 112 exact).

Workspace: the zero-padded input (N*Cin*Hp*Wp elements, plus 8*sw of room the last tile reads), the packed
weight (blocks*V*Cin*R*S, or none when ``prepared``), the tap offsets (Cin*R*S int64) and one tile per thread.

Groups: each group's channels are blocked on their own (a depthwise layer fills one lane of V: the race
leaves it to ``depthwise``). Constraints: backward-data at stride 1, with padding <= (kernel extent - 1) on
every side. float32 and float64 are each
compiled; float16 is computed in float32 by ``convalgos.run``. Sums run over the taps in direct's order, with
the same fused multiply-adds: the tolerance is direct's.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.simd import REGISTER_BYTES, REGISTERS
from ..params import ConvParams
from ..registry import SUPPORTED, Algorithm, unsupported
from .channel_kernels import PIXELS, channel_rows, pack_weight, tap_offsets
from .kernels import split_phases
from .shared import TOLERANCE


def blocking(outputs: int, itemsize: int) -> tuple[bool, int]:
    """(wide, V): two vectors of channels per block (sixteen accumulators) where the CPU has 32 vector
    registers and the pass has more output channels than one vector's lanes, else one vector."""
    L = REGISTER_BYTES // itemsize
    wide = REGISTERS >= 32 and outputs > L
    return wide, 2 * L if wide else L


class DirectChannels(Algorithm):
    """The defining sum with output channels in the vector lanes: no polyphase split, no junk columns."""

    name = "direct_channels"
    deterministic = True
    tolerance = TOLERANCE

    def constraints(self, p: ConvParams, op: str):
        if op == "backward_data":
            if p.stride != (1, 1):
                return unsupported(f"backward_data at stride {p.stride}: an input pixel's taps change with its "
                                   f"phase, so it does not read one window of dy (direct splits it by phases)")
            (top, bottom), (left, right) = p.padding
            (eh, ew) = p.kernel_extent
            if max(top, bottom) > eh - 1 or max(left, right) > ew - 1:
                return unsupported(f"backward_data with padding {p.padding} wider than the kernel extent less "
                                   f"one ({eh - 1}, {ew - 1}): dy would be cropped, not padded")
        return SUPPORTED

    # ---- the pass's geometry ---------------------------------------------------------------------------------
    def _geometry(self, p: ConvParams, op: str):
        """(channels read, outputs per group, inputs per group, top, left, Hp, Wp, stride, (rows, cols) out):
        what the kernel correlates."""
        (top, bottom), (left, right) = p.padding
        if op == "forward":
            return p.C, p.Kg, p.Cg, top, left, p.H + top + bottom, p.W + left + right, p.stride, p.out_hw
        (eh, ew), (Ho, Wo) = p.kernel_extent, p.out_hw
        PT, PL, PB, PR = eh - 1 - top, ew - 1 - left, eh - 1 - bottom, ew - 1 - right
        return p.K, p.Cg, p.Kg, PT, PL, Ho + PT + PB, Wo + PL + PR, (1, 1), (p.H, p.W)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":                    # not a pass of this idea (module docstring)
            return 0
        read, outputs, inputs, _, _, Hp, Wp, (_, sw), _ = self._geometry(p, op)
        _, V = blocking(outputs, p.itemsize)
        elements = p.N * read * Hp * Wp + PIXELS * sw + self.prepare_bytes(p, op) // p.itemsize
        return (elements + get_num_threads() * PIXELS * V) * p.itemsize + inputs * p.R * p.S * 8

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return 0
        _, outputs, inputs, *_, (rows, cols) = self._geometry(p, op)
        _, V = blocking(outputs, p.itemsize)
        channels = p.groups * -(-outputs // V) * V
        return 2 * p.N * channels * inputs * p.R * p.S * rows * -(-cols // PIXELS) * PIXELS

    # ---- prepared weights ------------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """w as (groups * blocks, taps * V): block b's V output channels side by side for each tap (c, r, s),
        channels past a group's last zero. Backward-data's taps are (k, r, s) of the flipped weight with K and
        C swapped within each group."""
        packed = np.empty(self._packed_shape(p, op), dtype=w.dtype)
        pack_weight(w, op == "backward_data", p.groups, packed)
        return packed

    def _packed_shape(self, p: ConvParams, op: str) -> tuple[int, int]:
        _, outputs, inputs, *_ = self._geometry(p, op)
        _, V = blocking(outputs, p.itemsize)
        return p.groups * -(-outputs // V), inputs * p.R * p.S * V

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return 0
        _, outputs, inputs, *_ = self._geometry(p, op)
        _, V = blocking(outputs, p.itemsize)
        return p.groups * -(-outputs // V) * V * inputs * p.R * p.S * p.itemsize

    # ---- the passes ------------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        self._correlate(x, w, p, "forward", out, prepared)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        self._correlate(dy, w, p, "backward_data", out, prepared)

    def _correlate(self, a, w, p: ConvParams, op: str, out, prepared) -> None:
        """out = the correlation of ``a`` zero-padded (``_geometry``) with the packed weight of pass ``op``."""
        read, outputs, inputs, top, left, Hp, Wp, (sh, sw), _ = self._geometry(p, op)
        wide, V = blocking(outputs, p.itemsize)
        packed = prepared
        if packed is None:                             # packed into a kept buffer: no fresh pages per call
            packed = self.workspace.get("direct_channels.packed", self._packed_shape(p, op), a.dtype)
            pack_weight(w, op == "backward_data", p.groups, packed)
        size = p.N * read * Hp * Wp
        flat = self.workspace.get("direct_channels.padded", (size + PIXELS * sw,), a.dtype)
        flat[size:] = 0.0
        split_phases(a, top, left, 1, 1, Hp, Wp, flat[:size].reshape(p.N, read, Hp * Wp))
        taps = self.workspace.get("direct_channels.taps", (inputs * p.R * p.S,), np.int64)
        tap_offsets(p.R, p.S, *p.dilation, Hp, Wp, taps)
        stage = self.workspace.get("direct_channels.stage", (get_num_threads(), PIXELS * V), a.dtype)
        channel_rows(flat[:size].reshape(p.N, -1), packed, taps, p.groups, inputs * Hp * Wp, sh, sw, Wp, wide,
                     stage, out)
