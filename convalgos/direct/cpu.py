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

Backward-filter is a GEMM, dw[k, (c, r, s)] = sum over (n, i, j) of dy[n, k, i, j] * X[n, (c, r, s), (i, j)],
whose reduction runs over the pixels (``filter_kernels``). X is never built whole: a work item (a run of
images, a block of input channels) copies its **row patches** into the thread's own buffer, sized to stay in
L2: plane (c, s, b) holds the zero-padded input at padded row a*sh + b, column j*sw + s*dw for a < Hr =
Ho + (R-1)*dh//sh, j < Wo, so tap (c, r, s) reads plane (c, s, (r*dh) % sh) at offset ((r*dh)//sh)*Wo plus the
output's flat index i*Wo + j: every stride and dilation, no junk columns, S*sh copies of the input rather
than im2col's R*S. dy is read in place (or, when Ho*Wo is not a whole number of vectors, from a copy padded
with zeros to one). Register tiles of BLOCK channels x 3 taps (24 accumulators with AVX-512): per vector
step, three loads of the patches and BLOCK of dy feed 3 x BLOCK multiply-adds, over every image of the run,
then the lanes are summed once. Each thread sums its items into its own partial dw, and the partials are
added in thread order: repeatable at a fixed thread count, no atomics.

FLOPs (``flops``, what the loops do, one multiply and one add per term): forward 2*N*K*Cg*R*S*Ho*Wq (the
junk columns included, and each item's span rounded up to whole blocks, ``computed_outputs``; ``p.flops``
counts Wo); backward-data 2*N*C*Kg*sum over phases of (taps * rows * Wd) rounded the same way (the padded
zeros and junk columns included; at stride 1, about 2*N*C*Kg*R*S*H*Wd); backward-filter 2*K*Cg*R*S*N*length
(Ho*Wo rounded up to whole vectors, ``filter_length``).
Padded taps are multiplied by zero, not skipped.

Workspace (``workspace_bytes``): forward keeps the phase planes, N*C*sh*sw*Hq*Wq elements
(Hq = Ho + (R-1)*dh//sh + 1 with one spare row that the junk columns of the last row read,
Wq = Wo + (S-1)*dw//sw) plus one block of zeroed room, and the tap table (2*Cg*R*S int64), and a stage of
BLOCK x ``rows_per_item`` * Wq elements (rounded up to a block) per thread. Backward-filter keeps, per
thread, one item's row patches (``filter_blocking``) and one partial dw (K*Cg*R*S), the tap table, and the
padded dy (N*K*length) when Ho*Wo is not whole vectors. Backward-data keeps the padded dy (N*K*Hd*Wd,
``data_plane``) plus the room, one stage per thread, the per-phase weights (K*Cg*R*S) and tap tables
(2*Kg*R*S int64).

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
from .filter_kernels import filter_patches, patch_taps
from .kernels import direct_rows, phase_weights, split_phases, tap_table, used_phases
from .shared import TOLERANCE

#: output elements per channel of one work item (a block of whole output rows): 8 KiB float32 per channel.
SEGMENT = 2048
#: bytes of one backward-filter item's row patches, streamed from L2 once per channel block (a quarter of a
#: 1 MiB L2: Zen 4/5, Skylake-SP and later Xeons have 1-2 MiB).
PATCH_CACHE = 256 * 1024
#: bytes of the dy rows of one backward-filter register tile (BLOCK channels x the item's images), kept in L1.
DY_CACHE = 16 * 1024


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


def filter_length(p: ConvParams) -> int:
    """Backward-filter's reduction per image: Ho*Wo rounded up to whole vectors (dy is zero past Ho*Wo)."""
    L = REGISTER_BYTES // p.itemsize
    return -(-p.out_hw[0] * p.out_hw[1] // L) * L


def patch_geometry(p: ConvParams) -> tuple[int, int]:
    """(Hr, pitch): rows of one row-patch plane of backward-filter and its length (Hr*Wo, then zeros so that
    every tap's read of ``filter_length`` stays in its own plane)."""
    (Ho, Wo), (sh, _), (dh, _) = p.out_hw, p.stride, p.dilation
    Hr = Ho + (p.R - 1) * dh // sh
    return Hr, (Hr - Ho) * Wo + filter_length(p)


def filter_blocking(p: ConvParams) -> tuple[int, int]:
    """(images, channels) of one backward-filter item: as many images as keep a register tile's dy rows in
    DY_CACHE, then as many input channels as keep their row patches in PATCH_CACHE, fewer when that leaves
    under two items per thread."""
    threads, planes = get_num_threads(), p.S * p.stride[0]
    images = max(1, min(p.N, DY_CACHE // (BLOCK * max(1, filter_length(p)) * p.itemsize)))
    per_channel = images * planes * patch_geometry(p)[1] * p.itemsize
    width = max(1, min(p.Cg, PATCH_CACHE // per_channel))
    others = max(1, -(-p.N // images) * p.groups)                      # items per channel block
    if others * -(-p.Cg // width) < 2 * threads:
        width = max(1, -(-p.Cg // -(-2 * threads // others)))
    return images, width


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
            (images, width), length, pitch = filter_blocking(p), filter_length(p), patch_geometry(p)[1]
            padded = p.N * p.K * length if length != p.out_hw[0] * p.out_hw[1] else 0
            per_thread = images * width * p.S * sh * pitch + p.K * p.Cg * p.R * p.S
            return (get_num_threads() * per_thread + padded) * p.itemsize + table
        _, _, Hd, Wd = data_plane(p)
        elements = p.N * p.K * Hd * Wd + slack + p.K * p.Cg * p.R * p.S
        return elements * p.itemsize + stage_bytes(p, data_rows(p), Wd) + 2 * p.Kg * p.R * p.S * 8

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        (Ho, _), (_, Wq) = p.out_hw, phase_plane(p)
        if op == "forward":
            return 2 * p.N * p.K * p.Cg * p.R * p.S * computed_outputs(Ho, rows_per_item(p), Wq, p.itemsize)
        if op == "backward_filter":
            return 2 * p.N * p.K * p.Cg * p.R * p.S * filter_length(p)
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
        (Ho, Wo), ((top, _), (left, _)), length = p.out_hw, p.padding, filter_length(p)
        (images, width), (Hr, pitch), threads = filter_blocking(p), patch_geometry(p), get_num_threads()
        taps = self.workspace.get("direct.patch_taps", (2, p.Cg * p.R * p.S), np.int64)
        patch_taps(p.R, p.S, p.stride[0], p.dilation[0], Wo, taps)
        dyv = dy.reshape(p.N, p.K, Ho * Wo)
        if length != Ho * Wo:                                  # padded with zeros to whole vectors
            dyv = self.workspace.get("direct.dy_padded", (p.N, p.K, length), x.dtype)
            split_phases(dy, 0, 0, 1, 1, Ho, Wo, dyv)
            dyv[:, :, Ho * Wo:] = 0.0
        patches = self.workspace.get("direct.patches", (threads, width * p.S * p.stride[0], images * pitch), x.dtype)
        partial = self.workspace.get("direct.filter_partial", (threads, p.K, p.Cg * p.R * p.S), x.dtype)
        filter_patches(x, dyv.reshape(-1), taps, p.R, p.S, p.stride + p.dilation, top, left, Hr, Wo, pitch, images,
                       width, patches, partial)
        np.sum(partial, axis=0, out=out.reshape(p.K, -1))

    def _phases_and_taps(self, x, p: ConvParams):
        """The polyphase zero-padded copy of x (``split_phases``, ``phase_plane``) and the tap table of its
        offsets."""
        (sh, sw), (dh, dw), ((top, _), (left, _)), (Hq, Wq) = p.stride, p.dilation, p.padding, phase_plane(p)
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

