"""Direct convolution, "direct": the defining sum of each pass, computed by Numba loop nests over a zero-padded
polyphase copy of its input, for every layer (any stride, asymmetric padding, dilation, groups, depthwise).

Maths. With g = k // Kg the group of output channel k (Cg = C/groups input and Kg = K/groups output channels
per group), (top, left) the padding and x read as zero outside its H x W extent:

    forward          y[n, k, i, j] = sum_{c, r, s} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]
    backward-data    dx[n, g*Cg + c, h, v] = sum over (k in group g, r, s, i, j) with i*sh + r*dh - top = h and
                                             j*sw + s*dw - left = v of  dy[n, k, i, j] * w[k, c, r, s]
    backward-filter  dw[k, c, r, s] = sum_{n, i, j} dy[n, k, i, j] * x[n, g*Cg + c, i*sh + r*dh - top,
                                                                         j*sw + s*dw - left]

The identities between them (the tests check both): at stride 1, backward-data is a forward convolution of dy,
zero-padded by (extent - 1 - pad) on each side, with the kernel flipped (r -> R-1-r, s -> S-1-s) and K and C
swapped within each group; backward-filter is a forward convolution of x (as N channels of one image per
input channel) with dy as the kernel, the layer's stride becoming the dilation and its dilation the stride.

Forward. ``split_phases`` writes each zero-padded input plane as its sh * sw polyphase components (padded row ph,
column pw goes to phase (ph % sh, pw % sw), row ph // sh, column pw // sw; each phase is Hq x Wq,
``phase_plane``). Tap (r, s) of output (i, j) then reads phase ((r*dh) % sh, (s*dw) % sw) at row
i + (r*dh)//sh, column j + (s*dw)//sw: a fixed offset plus i*Wq + j. Numbering the outputs of a plane
t = i*Wq + j (Wq - Wo junk columns per row, dropped at the end), every tap of every layer is one flat stride-1
pass acc[t] += w[k, c, r, s] * xq[offset(c, r, s) + t] with no bounds test.

Register blocking (``direct_rows``). The outputs of 4 channels k0..k0+3 at 2 vectors of consecutive t (16
float32 outputs with 256-bit registers, 32 with AVX-512's 512-bit ones, ``simd``) are 8 accumulators that stay
in CPU registers over all Cg*R*S taps: per tap, two vector loads of xq and four broadcasts of w feed eight
fused multiply-adds, so the loop is bound by the FMA units, not by loads and stores of an accumulator in
memory. A CPU with 32 vector registers (AVX-512) takes 8 channels, 16 accumulators (``kernels.blocks.BLOCK``):
half the loads of x per multiply-add. A work item is a block of whole output rows (about ``SEGMENT`` outputs
per channel) of one such channel block of one group and image; a group's channels left over go four, then
one, at a time. Blocks round the rows' flat span up to whole register blocks, so a block may read up to one
register block past a plane: the planes are followed by that much zeroed room.

Backward-data gathers. Input position hp = h + top (padded) is read by tap r exactly when hp - r*dh is a
multiple of sh, i = (hp - r*dh) / sh. So the input rows of row phase rho = hp % sh receive only the taps with
r*dh % sh = rho, at dy row a - (r*dh)//sh for hp = a*sh + rho: per phase (rho_h, rho_w) of dx, a stride-1
direct pass over dy zero-padded by (R-1)*dh//sh rows and (S-1)*dw//sw columns (``data_phases``), with that
phase's taps, through the same ``direct_rows``, written into the strided view of dx it covers. At stride 1
there is one phase with every tap: the flipped-kernel convolution above. Phases with no taps (input rows no
output reads, cut off by the stride) are zero.

Backward-filter is a dot per weight tap: with dy laid out at the phase pitch Wq (zero in the junk columns, and
past Ho*Wq up to whole vectors, ``filter_plane``), dw[k, c, r, s] = sum_n dot(dyq[n, k], xq[n, g*Cg + c,
offset(r, s):]) over the same polyphase copy as forward, with spare zero rows for the round-up
(``filter_dots``). Register blocks of 4 channels x 3 taps: twelve accumulators, fed per vector step by four
loads of dy and three of x. A work item is a run of images (as many as keep their dy and x in
``FILTER_CACHE`` bytes) and a block of 4 channels; each thread sums its items into its own partial dw, and
the partials are added in thread order: repeatable at a fixed thread count, no atomics.

FLOPs (``flops``, what the loops do, one multiply and one add per term): forward 2*N*K*Cg*R*S*Ho*Wq (the
junk columns included, and each item's span rounded up to whole blocks, ``computed_outputs``; ``p.flops``
counts Wo); backward-data 2*N*C*Kg*sum over phases of (taps * rows * Wd) rounded the same way (the padded
zeros and junk columns included; at stride 1, about 2*N*C*Kg*R*S*H*Wd); backward-filter 2*K*Cg*R*S*N*length
(``filter_plane``).
Padded taps are multiplied by zero, not skipped.

Workspace (``workspace_bytes``): forward and backward-filter keep the phase planes, N*C*sh*sw*Hq*Wq elements
(Hq = Ho + (R-1)*dh//sh + 1 with one spare row that the junk columns of the last row read,
Wq = Wo + (S-1)*dw//sw) plus one block of zeroed room, and the tap table (2*Cg*R*S int64); forward also a
stage of 4 x ``rows_per_item`` * Wq elements (rounded up to a block) per thread; backward-filter the spare
rows of each phase, dy at pitch Wq (N*K*length) and one partial dw (K*Cg*R*S) per thread. Backward-data
keeps the padded dy (N*K*Hd*Wd, ``data_plane``) plus the room, one stage per thread, the per-phase weights
(K*Cg*R*S) and tap tables (2*Kg*R*S int64).

Constraints: none. float32 and float64 are each compiled; float16 is computed in float32 by ``convalgos.run``.
Accuracy: sums in the compute dtype; the float32 errors measured for each pass are in ``shared.py``.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.blocks import BLOCK
from ..kernels.phases import data_phases, data_plane
from ..kernels.simd import REGISTER_BYTES
from ..params import ConvParams
from ..registry import Algorithm
from .kernels import direct_rows, filter_dots, phase_weights, split_phases, tap_table, used_phases
from .shared import TOLERANCE

#: output elements per channel of one work item (a block of whole output rows): 8 KiB float32 per channel.
SEGMENT = 2048
#: bytes of dy and x one backward-filter item keeps in cache over all its taps (half of a 512 KiB L2).
FILTER_CACHE = 256 * 1024


def phase_plane(p: ConvParams) -> tuple[int, int]:
    """(Hq, Wq): rows and columns of one phase of the padded input (and Wq is the flat output pitch)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return Ho + (p.R - 1) * dh // sh + 1, Wo + (p.S - 1) * dw // sw


def rows_per_item(p: ConvParams) -> int:
    """Output rows per work item: as many whole rows as fit in SEGMENT accumulator elements (at least one)."""
    return max(1, min(p.out_hw[0], SEGMENT // phase_plane(p)[1]))


def block_outputs(itemsize: int) -> int:
    """Outputs per channel of one register block: two vectors (16 float32 with 256-bit registers, 32 with 512)."""
    return 2 * REGISTER_BYTES // itemsize


def computed_outputs(Ho: int, rows: int, pitch: int, itemsize: int) -> int:
    """Outputs a plane's work items compute: each block of ``rows`` rows of ``pitch``, rounded up to whole
    register blocks (the junk columns and the round-up included)."""
    T = block_outputs(itemsize)
    return sum(-(-min(rows, Ho - i0) * pitch // T) * T for i0 in range(0, Ho, rows))


def stage_bytes(p: ConvParams, rows: int, pitch: int) -> int:
    """Each thread's stage: BLOCK channels x one item's outputs rounded up to a register block."""
    T = block_outputs(p.itemsize)
    return get_num_threads() * BLOCK * (-(-rows * pitch // T) * T) * p.itemsize


def filter_plane(p: ConvParams) -> tuple[int, int]:
    """Backward-filter's (length, Hq): each dot's length, Ho*Wq rounded up to whole vectors (dy is zero past
    Ho*Wq, so no tap needs a scalar tail: on 8x8 outputs of pitch 9 the tail took two thirds of the time), and
    the phase rows that keep every tap's read of that length inside its own zeroed phase (Hq plus the rows the
    round-up reaches)."""
    (Ho, _), (Hq, Wq), L = p.out_hw, phase_plane(p), REGISTER_BYTES // p.itemsize
    length = -(-Ho * Wq // L) * L
    return length, Hq + -(-(length - Ho * Wq) // Wq)


def filter_images(p: ConvParams) -> int:
    """Images per backward-filter item: as many as keep a block's dy and the group's x in FILTER_CACHE bytes."""
    (sh, sw), (Hq, Wq) = p.stride, phase_plane(p)
    per_image = (4 * p.out_hw[0] * Wq + p.Cg * sh * sw * Hq * Wq) * p.itemsize
    return max(1, min(p.N, FILTER_CACHE // per_image))


def data_rows(p: ConvParams) -> int:
    """Output rows per work item of backward-data (``rows_per_item`` for the padded dy's pitch)."""
    Wd = data_plane(p)[3]
    return max(1, min(max(n for (_, _, _, n), _ in data_phases(p)), SEGMENT // Wd))


class Direct(Algorithm):
    """The defining sum over a polyphase zero-padded copy, as flat contiguous passes in register blocks."""

    name = "direct"
    deterministic = True
    tolerance = TOLERANCE

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        (sh, sw), (Hq, Wq), slack = p.stride, phase_plane(p), block_outputs(p.itemsize)
        phases, table = p.N * p.C * sh * sw * Hq * Wq + slack, 2 * p.Cg * p.R * p.S * 8
        if op == "forward":
            return phases * p.itemsize + stage_bytes(p, rows_per_item(p), Wq) + table
        if op == "backward_filter":
            length, Hf = filter_plane(p)
            partial = get_num_threads() * p.K * p.Cg * p.R * p.S
            return (phases + p.N * p.C * sh * sw * (Hf - Hq) * Wq + p.N * p.K * length + partial) * p.itemsize + table
        _, _, Hd, Wd = data_plane(p)
        elements = p.N * p.K * Hd * Wd + slack + p.K * p.Cg * p.R * p.S
        return elements * p.itemsize + stage_bytes(p, data_rows(p), Wd) + 2 * p.Kg * p.R * p.S * 8

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        (Ho, _), (_, Wq) = p.out_hw, phase_plane(p)
        if op == "forward":
            return 2 * p.N * p.K * p.Cg * p.R * p.S * computed_outputs(Ho, rows_per_item(p), Wq, p.itemsize)
        if op == "backward_filter":
            return 2 * p.N * p.K * p.Cg * p.R * p.S * filter_plane(p)[0]
        Wd, rows = data_plane(p)[3], data_rows(p)
        terms = sum(rt.size * st.size * computed_outputs(Ha, rows, Wd, p.itemsize)
                    for (_, rt, _, Ha), (_, st, _, Wa) in data_phases(p) if Wa > 0)
        return 2 * p.N * p.C * p.Kg * terms

    def forward(self, x, w, p: ConvParams, out) -> None:
        xq, taps = self._phases_and_taps(x, p)
        rows, Wq = rows_per_item(p), phase_plane(p)[1]
        stage = self._stage(rows, Wq, x.dtype)
        direct_rows(xq, w.reshape(p.K, -1), taps, p.Cg, rows, Wq, stage, out)

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        PT, PL, Hd, Wd = data_plane(p)
        dyp = self._planes("direct.dy_padded", p.N, p.K, Hd * Wd, dy.dtype)
        split_phases(dy, PT, PL, 1, 1, Hd, Wd, dyp)
        rows = data_rows(p)
        stage = self._stage(rows, Wd, dy.dtype)
        n_all = p.Kg * p.R * p.S
        w_all = self.workspace.get("direct.phase_weights", (p.C * n_all,), dy.dtype)
        taps_all = self.workspace.get("direct.phase_taps", (2 * n_all,), np.int64)
        start = 0
        for (rho_h, rt, fh, Ha), (rho_w, st, fw, Wa) in data_phases(p):
            view = out[:, :, fh * sh + rho_h - top::sh, fw * sw + rho_w - left::sw][:, :, :Ha, :Wa]
            n_taps = p.Kg * rt.size * st.size
            if view.size == 0:
                continue
            if n_taps == 0:                            # no output reads these inputs
                view[...] = 0.0
                continue
            wq = w_all[p.C * start:p.C * (start + n_taps)].reshape(p.C, n_taps)
            phase_weights(w, p.Kg, rt, st, wq)
            taps = taps_all[2 * start:2 * (start + n_taps)].reshape(2, n_taps)
            offsets = (fh + PT - rt * dh // sh)[:, None] * Wd + (fw + PL - st * dw // sw)[None, :]
            taps[0] = np.repeat(np.arange(p.Kg), offsets.size)
            taps[1] = np.tile(offsets.ravel(), p.Kg)
            direct_rows(dyp, wq, taps, p.Kg, rows, Wd, stage, view)
            start += n_taps

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        (Ho, _), Wq, (length, Hf) = p.out_hw, phase_plane(p)[1], filter_plane(p)
        xq, taps = self._phases_and_taps(x, p, Hf)
        dyq = self.workspace.get("direct.dy_pitched", (p.N, p.K, length), x.dtype)
        split_phases(dy, 0, 0, 1, 1, Ho, Wq, dyq)              # writes the first Ho*Wq of each plane
        dyq[:, :, Ho * Wq:] = 0.0
        partial = self.workspace.get("direct.filter_partial", (get_num_threads(), p.K, p.Cg * p.R * p.S), x.dtype)
        filter_dots(xq, dyq, taps, p.Cg, length, filter_images(p), partial)
        np.sum(partial, axis=0, out=out.reshape(p.K, -1))

    def _phases_and_taps(self, x, p: ConvParams, Hq: int | None = None):
        """The polyphase zero-padded copy of x (``split_phases``; phases of Hq rows, ``phase_plane``'s unless
        given) and the tap table of its offsets."""
        (sh, sw), (dh, dw), ((top, _), (left, _)), (Hp, Wq) = p.stride, p.dilation, p.padding, phase_plane(p)
        Hq = Hp if Hq is None else Hq
        taps = self.workspace.get("direct.taps", (2, p.Cg * p.R * p.S), np.int64)
        tap_table(p.R, p.S, sh, sw, dh, dw, Hq, Wq, taps)
        xq = self._planes("direct.phases", p.N, p.C, sh * sw * Hq * Wq, x.dtype)
        split_phases(x, top, left, sh, sw, Hq, Wq, xq, used_phases(p.R, p.S, sh, sw, dh, dw))
        return xq, taps

    def _planes(self, name: str, N: int, C: int, length: int, dtype):
        """An (N, C, length) buffer followed by one register block of zeros, which the last plane's blocks may
        read past its end (``direct_rows``)."""
        slack = block_outputs(np.dtype(dtype).itemsize)
        flat = self.workspace.get(name, (N * C * length + slack,), dtype)
        flat[N * C * length:] = 0.0
        return flat[:N * C * length].reshape(N, C, length)

    def _stage(self, rows: int, pitch: int, dtype):
        """Each thread's BLOCK channels x (rows * pitch, rounded up to a register block) outputs."""
        T = block_outputs(np.dtype(dtype).itemsize)
        return self.workspace.get("direct.stage", (get_num_threads(), BLOCK, -(-rows * pitch // T) * T), dtype)

