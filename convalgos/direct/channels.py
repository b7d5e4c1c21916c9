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
phase split, no junk columns; a row's last tile computes up to 7 pixels past Wo, never stored. Where an
output row spans the whole padded row (stride 1, S = 1, no column padding: pointwise layers), the plane's rows
are one row of Ho*Wo pixels (14 x 14: 200 computed, not 224). The tile is
then turned into NCHW's order on its way out (below; oneDNN keeps its tensors blocked instead).

Backward-data is the same kernel on dy, by phases as ``direct`` computes it (``convalgos.kernels.phases``):
each phase of dx (its rows of one residue modulo sh, its columns of one residue modulo sw) is a stride-1
correlation of the zero-padded dy with the taps that reach it, and K and C swap roles (the layer's input
channels are the lanes); at stride 1 that is one phase with the flipped kernel. Phases no tap reaches (a 1x1
kernel at stride 2 reaches one of four) are zero. Backward-filter reduces over the pixels, not over the
channels the lanes hold: the idea does not apply, and the algorithm has no such pass (``direct``'s GEMM over
the pixels serves it).

FLOPs (``flops``): forward 2*N*groups*V*blocks * Cg*R*S * Ho * (tiles of 8 pixels)*8: channels rounded up to
whole blocks (a group of at most L channels takes one vector, V = L) and pixels to whole tiles (Wo = 7: 8
computed; 14: 16; 16, 32, 56 and 112 exact); backward-data the same sum over its phases, each with its taps.

Workspace: the zero-padded input or dy (N*channels*Hp*Wp elements, plus one tile of room the last row's
tile reads; none for a forward pass that reads x in place), the packed weight (blocks*V*inputs*R*S over all
phases; none kept when ``prepared``), the tap offsets (inputs*R*S int64) and one tile per thread.

The tile's way out. The accumulators hold 8 pixels x V channels; NCHW wants each channel's 8 pixels side by
side. The tile is staged, read back a vector of L channels at a time for the 8 pixels and turned in registers
(``simd.transpose8``: three rounds of 8 two-source shuffles), then stored 8 pixels a channel. A channel by
channel copy (8 scalar stores each, through a row view per channel) took most of the time on shallow layers:
timed against the kernel with no copy-out at all (2 threads, 2026-12-04), ms, MobileNet's C32 112x112 1x1
0.52 / 0.12 with the view per channel, 0.36 with the stores indexed in place, 0.16 turned; C128 56x56 1x1
0.41 / 0.21 -> 0.33 -> 0.23; ResNet-20's C16 32 px stride-2 0.29 / 0.16 -> 0.23 -> 0.21. Where out's rows are
strided (backward-data's phases of dx at stride > 1) or a row's last tile is partial, the channel by channel
copy stays. Work items: a run of tiles of one output row times a chunk of channel blocks whose packed weights
fit CHUNK_BYTES (L2), each tile's inputs reused from cache by every block of the chunk; rows are cut into runs
only as far as the threads need items. An unpadded input whose output rows are at least a tile wide is read
in place (no copy: a row's last tile is moved back to end at its last pixel, so it reads nothing past x).

Measured (2-core AMD EPYC Zen 5, AVX-512, float32, 2 threads, 2026-12-04, medians of 20-30 interleaved calls,
weights packed on every call but the 1x1 layers', which are prepared; ms, direct_channels / direct / torch):
MobileNet's 1x1 layers C32 112x112 0.27 / 0.35 / 0.36 (torch's own run in the net), C128 56x56 0.28 / 0.37 /
0.31, C256 28x28 0.27 / 0.35 / 0.29, C512 14x14 0.27 / 0.41 / 0.30, C1024 7x7 0.29 / 0.42 / 0.33; ResNet-20
b32's stride-2 3x3 forward 0.30 / 0.43 / 0.31 (C16 32 px) and 0.30 / 0.44 / 0.23 (C32 16 px); its C64 8 px
layer forward 0.44 / 0.59 / 0.37 and backward-data 0.46 / 0.64. It loses where a block of 32 channels meets
few pixels per weight (C512 7x7 b1 unprepared: 2.1 against direct's 0.79: the packed weight, 590 KB per block,
is streamed for each row of 7 pixels) and on 16-channel layers (one vector: 8 accumulators, 0.63 against
0.48). The race keeps it where it wins.

Constraints: none (every layer, every stride, dilation, padding and groups; a depthwise layer fills one lane
of V, and the race leaves it to ``depthwise``). float32 and float64 are each compiled; float16 is computed in
float32 by ``convalgos.run``. Sums run over the taps in direct's order, with the same fused multiply-adds: the
tolerance is direct's.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.phases import data_phases, data_plane
from ..kernels.lane_tiles import tile_lanes
from ..kernels.simd import REGISTER_BYTES
from ..params import ConvParams
from ..registry import Algorithm
from .channel_kernels import PIXELS, channel_rows, pack_weight, tap_offsets
from .kernels import split_phases
from .shared import TOLERANCE


#: packed weights a work item keeps in cache while it runs its blocks over each tile (L2-sized).
CHUNK_BYTES = 256 << 10


def turns(out) -> bool:
    """Whether a whole tile is turned in registers on its way into ``out`` (``channel_rows``): out's rows are
    contiguous and a vector has at least 8 lanes."""
    return out.strides[-1] == out.itemsize and REGISTER_BYTES // out.itemsize >= 8


def whole_tiles(columns: int) -> int:
    """Pixels a row of ``columns`` outputs computes: whole tiles of PIXELS."""
    return -(-columns // PIXELS) * PIXELS


class DirectChannels(Algorithm):
    """The defining sum with output channels in the vector lanes: no polyphase copy, no junk columns."""

    name = "direct_channels"
    deterministic = True
    tolerance = TOLERANCE

    def _roles(self, p: ConvParams, op: str) -> tuple[int, int, int]:
        """(output channels per group, input channels per group, V) of pass ``op``: backward-data's outputs
        are the layer's input channels."""
        outputs, inputs = (p.Kg, p.Cg) if op == "forward" else (p.Cg, p.Kg)
        return outputs, inputs, tile_lanes(outputs, p.itemsize)[1]

    def _channels(self, p: ConvParams, op: str) -> int:
        """Output channels the pass computes: each group's rounded up to whole blocks of V."""
        outputs, _, V = self._roles(p, op)
        return p.groups * -(-outputs // V) * V

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":                    # not a pass of this idea (module docstring)
            return 0
        _, inputs, V = self._roles(p, op)
        planes, (Hp, Wp) = (p.C, self._padded(p)[2:]) if op == "forward" else (p.K, data_plane(p)[2:])
        room = PIXELS * (p.stride[1] if op == "forward" else 1)
        copy = 0 if op == "forward" and self._in_place(p) else p.N * planes * Hp * Wp + room
        elements = copy + self.prepare_bytes(p, op) // p.itemsize
        return (elements + get_num_threads() * PIXELS * V) * p.itemsize + inputs * p.R * p.S * 8

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return 0
        _, inputs, _ = self._roles(p, op)
        if op == "forward":
            terms = p.R * p.S * p.out_hw[0] * whole_tiles(p.out_hw[1])
        else:
            terms = sum(rt.size * st.size * Ha * whole_tiles(Wa) for (_, rt, _, Ha), (_, st, _, Wa)
                        in data_phases(p) if Ha > 0 and Wa > 0)
        return 2 * p.N * self._channels(p, op) * inputs * terms

    # ---- prepared weights ------------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """The packed weight (``_pack``), a fresh array."""
        packed = np.empty(self.prepare_bytes(p, op) // p.itemsize, dtype=w.dtype)
        self._pack(w, p, op, packed)
        return packed

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return 0
        _, inputs, _ = self._roles(p, op)
        return self._channels(p, op) * inputs * p.R * p.S * p.itemsize

    def _pack(self, w, p: ConvParams, op: str, flat) -> None:
        """flat = each phase's weight as (groups * blocks, taps * V), one phase after another (forward: one
        phase with every tap): block b's V output channels side by side for each tap, channels past a group's
        last zero. Backward-data's outputs are the layer's input channels (K and C swapped)."""
        for (rows, cols, _), start, size in self._phase_slices(p, op):
            if size:
                pack_weight(w, op == "backward_data", p.groups, rows, cols,
                            flat[start:start + size].reshape(self._blocks(p, op), -1))

    def _blocks(self, p: ConvParams, op: str) -> int:
        """Register blocks of V output channels over all groups: the packed weight's rows."""
        return self._channels(p, op) // self._roles(p, op)[2]

    def _phase_slices(self, p: ConvParams, op: str):
        """((row taps, column taps, the phase), start, size) of each phase's packed weight in the flat form."""
        if op == "forward":
            phases = [(np.arange(p.R), np.arange(p.S), None)]
        else:
            phases = [(row[1], col[1], (row, col)) for row, col in data_phases(p)]
        _, inputs, _ = self._roles(p, op)
        start, result = 0, []
        for rows, cols, phase in phases:
            size = self._channels(p, op) * inputs * rows.size * cols.size
            result.append(((rows, cols, phase), start, size))
            start += size
        return result

    # ---- the passes ------------------------------------------------------------------------------------------
    def _padded(self, p: ConvParams) -> tuple[int, int, int, int]:
        """(top, left, Hp, Wp) of the forward pass's zero-padded input."""
        (top, bottom), (left, right) = p.padding
        return top, left, p.H + top + bottom, p.W + left + right

    def _in_place(self, p: ConvParams) -> bool:
        """Whether the forward pass reads x itself: no padding, and every output row (one row of Ho*Wo pixels
        when ``_one_row``) at least a tile wide, so that its last tile reads inside x (``channel_rows``)."""
        return p.padding == ((0, 0), (0, 0)) and (p.out_hw[0] * p.out_hw[1] if self._one_row(p) else
                                                   p.out_hw[1]) >= PIXELS

    @staticmethod
    def _one_row(p: ConvParams) -> bool:
        """Whether an output plane is one row of Ho*Wo pixels: rows as wide as the padded plane's (stride 1, S =
        1, no column padding: pointwise layers)."""
        return p.stride == (1, 1) and p.S == 1 and p.padding[1] == (0, 0)

    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        top, left, Hp, Wp = self._padded(p)
        (sh, sw), (dh, dw) = p.stride, p.dilation
        if self._in_place(p):                            # no copy: x is its own padded form
            padded = x.reshape(p.N, -1)
        else:
            padded = self._padded_planes(x, top, left, Hp, Wp, PIXELS * sw)
        packed = self._weights(w, p, "forward", prepared)
        taps = self.workspace.get("direct_channels.taps", (p.Cg * p.R * p.S,), np.int64)
        tap_offsets(np.arange(p.R) * dh, np.arange(p.S) * dw, Hp * Wp, Wp, taps)
        wide, V = tile_lanes(p.Kg, p.itemsize)
        if self._one_row(p) and out.flags.c_contiguous:
            out = out.reshape(p.N, p.K, 1, -1)         # one row of Ho*Wo pixels
        channel_rows(padded, packed.reshape(self._blocks(p, "forward"), -1), taps, p.groups,
                     p.Cg * Hp * Wp, sh, sw, Wp, wide, self._chunk(taps.size, V, p), turns(out),
                     self._stage(V, x.dtype), out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        """Per phase of dx (``convalgos.kernels.phases``): a stride-1 pass over the padded dy with that phase's
        taps, written into the strided view of dx it covers; phases no tap reaches are zero."""
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        PT, PL, Hd, Wd = data_plane(p)
        padded = self._padded_planes(dy, PT, PL, Hd, Wd, PIXELS)
        packed = self._weights(w, p, "backward_data", prepared)
        taps = self.workspace.get("direct_channels.taps", (p.Kg * p.R * p.S,), np.int64)
        wide, V = tile_lanes(p.Cg, p.itemsize)
        stage, blocks = self._stage(V, dy.dtype), self._blocks(p, "backward_data")
        for (rt, st, phase), start, size in self._phase_slices(p, "backward_data"):
            (rho_h, _, fh, Ha), (rho_w, _, fw, Wa) = phase
            view = out[:, :, fh * sh + rho_h - top::sh, fw * sw + rho_w - left::sw][:, :, :Ha, :Wa]
            if view.size == 0:
                continue
            if size == 0:                              # no output reads these inputs
                view[...] = 0.0
                continue
            n_taps = p.Kg * rt.size * st.size
            tap_offsets(fh + PT - rt * dh // sh, fw + PL - st * dw // sw, Hd * Wd, Wd, taps[:n_taps])
            channel_rows(padded, packed[start:start + size].reshape(blocks, -1), taps[:n_taps], p.groups,
                         p.Kg * Hd * Wd, 1, 1, Wd, wide, self._chunk(n_taps, V, p), turns(view), stage, view)

    @staticmethod
    def _chunk(n_taps: int, V: int, p: ConvParams) -> int:
        """Channel blocks a work item runs over each tile: as many as keep their packed weights within
        CHUNK_BYTES (at least one)."""
        return max(1, CHUNK_BYTES // (n_taps * V * p.itemsize))

    def _padded_planes(self, a, top, left, Hp, Wp, room):
        """``a`` zero-padded into (N, channels * Hp * Wp) planes, followed by ``room`` zeros that a row's last
        tile may read past the last plane."""
        N, C = a.shape[:2]
        size = N * C * Hp * Wp
        flat = self.workspace.get("direct_channels.padded", (size + room,), a.dtype)
        flat[size:] = 0.0
        split_phases(a, top, left, 1, 1, Hp, Wp, flat[:size].reshape(N, C, Hp * Wp))
        return flat[:size].reshape(N, -1)

    def _weights(self, w, p: ConvParams, op: str, prepared):
        """The prepared form, else the weight packed into a kept buffer (no fresh pages per call)."""
        if prepared is not None:
            return prepared
        flat = self.workspace.get("direct_channels.packed", (self.prepare_bytes(p, op) // p.itemsize,), w.dtype)
        self._pack(w, p, op, flat)
        return flat

    def _stage(self, V: int, dtype):
        return self.workspace.get("direct_channels.stage", (get_num_threads(), PIXELS * V), dtype)
