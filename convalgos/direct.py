"""Direct convolution, "direct": the defining sum, computed by Numba loops over a polyphase padded copy of x.

Maths. With g = k // Kg the group of output channel k (Cg = C/groups input and Kg = K/groups output channels
per group), (top, left) the padding and x read as zero outside its H x W extent:

    y[n, k, i, j] = sum_{c < Cg, r < R, s < S} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]

FLOPs (``flops``): one multiply and one add per tap, 2 * N * K * (C/groups) * R * S * Ho * Wo = ``p.flops``
(padded taps are multiplied by zero, not skipped).

Padding and stride are handled by a copy, not by bounds: ``_split_phases`` writes each zero-padded input plane
as its sh * sw polyphase components (padded row ph, column pw goes to phase (ph % sh, pw % sw), row ph // sh,
column pw // sw; each phase is Hq x Wq, ``phase_plane``). Tap (r, s) of output (i, j) then reads phase
((r*dh) % sh, (s*dw) % sw) at row i + (r*dh)//sh, column j + (s*dw)//sw: a fixed offset plus i*Wq + j. So,
numbering the outputs of a plane t = i*Wq + j (Wq - Wo junk columns per row, dropped at the end), every tap
of every layer, strided or dilated, is one flat stride-1 pass  acc[t] += w[k, c, r, s] * xq[offset(c, r, s) + t]
with no bounds test; the offsets are tabulated once per call (``_tap_table``).

Workspace (``workspace_bytes``): the phase planes, N * C * sh * sw * Hq * Wq elements (about the padded input),
with Hq = Ho + (R-1)*dh // sh + 1 (one spare row, which the junk columns of the last row read) and
Wq = Wo + (S-1)*dw // sw; one accumulator of ``rows_per_item`` * Wq elements per thread; the tap table,
2 * Cg * R * S int64. Depthwise layers keep one phase buffer per thread instead of N * C of them; the
channels-last depthwise path keeps x and y channels-last (N Hp Wp C and N Ho Wo K) and the weights (R S K).

Constraints: none; any stride, asymmetric padding, dilation, groups, depthwise; float32 and float64 (each its
own compiled kernel; float16 is computed in float32 by ``conv2d``). Accuracy: taps are summed in order in the
compute dtype; the float32 normwise error on C = 512 3x3 layers is about 1.3e-6.

Loop order (``_direct``). The parallel items are blocks of whole output rows of one plane (n, k), about
``SEGMENT`` outputs each, so batch 1 keeps both cores busy and a block's accumulator stays in L1. For a block,
the Cg*R*S taps are taken three at a time and each triple is one pass over the accumulator that loads three
input runs and the accumulator once and stores once (three multiply-adds per store; a pass per tap would store
once per multiply-add). The innermost loop is that contiguous pass over t, which the compiler vectorises; its
length is the block, not one output row, which matters for the short rows of small planes.

Depthwise layers (Cg = 1) have only R*S taps per plane, so the cost is in moving data, not in arithmetic:
``_depthwise`` makes an item a whole plane and splits it into the thread's own phase buffer just before
computing it, so the copy is read back from L1/L2 instead of memory. On planes of a few dozen outputs
(MobileNet's 7x7 with 1024 channels) even that leaves loops too short to vectorise, so layers with many
channels and small planes (``channels_last``) are moved channels-last, where each pass runs over all C
channels of one output pixel (acc[c] += w[r, s, c] * x[i + r, j + s, c], three taps per pass), and back.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from .params import ConvParams
from .registry import Algorithm, register

#: output elements accumulated per work item (a block of whole output rows): 8 KiB of float32, in L1.
SEGMENT = 2048
#: depthwise layers with at least this many channels and at most this many outputs per plane run channels-last
#: (passes as long as C instead of a plane); measured 1.8x faster on 1024 channels of 7x7, no gain at 14x14.
CHANNELS_LAST_MIN_C, CHANNELS_LAST_MAX_PLANE = 64, 100
#: channels moved together by the layout changes of the channels-last path (a cache-friendly transpose).
TILE = 16


def phase_plane(p: ConvParams) -> tuple[int, int]:
    """(Hq, Wq): rows and columns of one phase of the padded input (and Wq is the flat output pitch)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return Ho + (p.R - 1) * dh // sh + 1, Wo + (p.S - 1) * dw // sw


def rows_per_item(p: ConvParams) -> int:
    """Output rows per work item: as many whole rows as fit in SEGMENT accumulator elements (at least one)."""
    return max(1, min(p.out_hw[0], SEGMENT // phase_plane(p)[1]))


def channels_last(p: ConvParams) -> bool:
    """Whether the layer takes the channels-last depthwise path (many channels, small planes)."""
    return (p.Cg == 1 and p.K == p.C and p.C >= CHANNELS_LAST_MIN_C
            and p.out_hw[0] * p.out_hw[1] <= CHANNELS_LAST_MAX_PLANE)


def padded_extent(p: ConvParams) -> tuple[int, int]:
    """(Hp, Wp): the part of the zero-padded input that the outputs read (the channels-last copy)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return (Ho - 1) * sh + (p.R - 1) * dh + 1, (Wo - 1) * sw + (p.S - 1) * dw + 1


@njit(cache=True)
def _share(n_items, thread, n_threads):
    """The range of items thread ``thread`` of ``n_threads`` takes (equal contiguous shares)."""
    return thread * n_items // n_threads, (thread + 1) * n_items // n_threads


@njit(cache=True, inline="always")
def _split_plane(src, top, left, sh, sw, Hq, Wq, dst):
    """dst = the phases of the plane src zero-padded: padded (ph, pw) goes to phase (ph % sh, pw % sw), at row
    ph // sh and column pw // sw of that phase's Hq x Wq block; padded positions past sh*Hq or sw*Wq are dropped.
    """
    H, W = src.shape
    for b in range(sh):
        for a in range(Hq):
            i = a * sh + b - top
            for p in range(sw):
                row = dst[((b * sw + p) * Hq + a) * Wq:((b * sw + p) * Hq + a + 1) * Wq]
                q0, q1 = _col_range(p, left, sw, W, Wq) if 0 <= i < H else (0, 0)
                for q in range(q0):
                    row[q] = 0.0
                if q1 > q0:
                    _copy_strided(row[q0:q1], src[i, q0 * sw + p - left:], sw)
                for q in range(q1, Wq):
                    row[q] = 0.0


@njit(parallel=True, cache=True)
def _split_phases(x, top, left, sh, sw, Hq, Wq, xq):
    """xq[n, c] = the phases of x[n, c] zero-padded (``_split_plane``); xq: (N, C, sh*sw*Hq*Wq)."""
    N, C = x.shape[0], x.shape[1]
    for nc in prange(N * C):
        _split_plane(x[nc // C, nc % C], top, left, sh, sw, Hq, Wq, xq[nc // C, nc % C])


@njit(cache=True, inline="always")
def _col_range(p, left, sw, W, Wq):
    """Columns [q0, q1) of column phase p whose input column q*sw + p - left lies in [0, W)."""
    q0 = max(0, min(Wq, -((p - left) // sw)))       # ceil((left - p) / sw)
    return q0, max(q0, min(Wq, (W - 1 + left - p) // sw + 1))


@njit(cache=True, inline="always")
def _copy_strided(dst, src, step):
    """dst[q] = src[q * step]; step 1 is literal so that copy is contiguous."""
    if step == 1:
        for q in range(dst.size):
            dst[q] = src[q]
    else:
        for q in range(dst.size):
            dst[q] = src[q * step]


@njit(cache=True)
def _tap_table(R, S, sh, sw, dh, dw, Hq, Wq, taps):
    """taps[0, q] = input channel (within the group) of tap q = (c, r, s); taps[1, q] = where it reads output
    (0, 0) in that channel's phase planes. Output (i, j) of that tap is then read at taps[1, q] + i*Wq + j."""
    for q in range(taps.shape[1]):
        r, s = (q // S) % R, q % S
        phase = ((r * dh) % sh) * sw + (s * dw) % sw
        taps[0, q] = q // (R * S)
        taps[1, q] = (phase * Hq + (r * dh) // sh) * Wq + (s * dw) // sw


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_taps3(acc, xa, wa, xb, wb, xc, wc):
    """acc[t] += wa*xa[t] + wb*xb[t] + wc*xc[t]: three taps for one load and store of acc."""
    for t in range(acc.size):
        acc[t] += wa * xa[t] + wb * xb[t] + wc * xc[t]


@njit(cache=True, fastmath={"contract"}, inline="always")
def _set_taps3(acc, xa, wa, xb, wb, xc, wc):
    """acc[t] = wa*xa[t] + wb*xb[t] + wc*xc[t]."""
    for t in range(acc.size):
        acc[t] = wa * xa[t] + wb * xb[t] + wc * xc[t]


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_tap(acc, xa, wa):
    """acc[t] += wa * xa[t]."""
    for t in range(acc.size):
        acc[t] += wa * xa[t]


@njit(cache=True, inline="always")
def _accumulate(xq, w, taps, n, k, c0, first, acc):
    """acc[t] = sum over taps q of w[k, q] * xq[n, c0 + taps[0, q], taps[1, q] + first + t] (``_tap_table``).

    xq: (N, C, phase planes) flat; w: (K, Cg*R*S). Three taps per pass over acc."""
    n_taps = w.shape[1]
    q = 0
    if n_taps >= 3:                              # the first three taps set acc, so it needs no zeroing
        xa = xq[n, c0 + taps[0, 0], first + taps[1, 0]:]
        xb = xq[n, c0 + taps[0, 1], first + taps[1, 1]:]
        xc = xq[n, c0 + taps[0, 2], first + taps[1, 2]:]
        _set_taps3(acc, xa, w[k, 0], xb, w[k, 1], xc, w[k, 2])
        q = 3
    else:
        for t in range(acc.size):
            acc[t] = 0.0
    while q + 3 <= n_taps:
        xa = xq[n, c0 + taps[0, q], first + taps[1, q]:]
        xb = xq[n, c0 + taps[0, q + 1], first + taps[1, q + 1]:]
        xc = xq[n, c0 + taps[0, q + 2], first + taps[1, q + 2]:]
        _add_taps3(acc, xa, w[k, q], xb, w[k, q + 1], xc, w[k, q + 2])
        q += 3
    for q in range(q, n_taps):
        _add_tap(acc, xq[n, c0 + taps[0, q], first + taps[1, q]:], w[k, q])


@njit(cache=True, inline="always")
def _row_block(xq, xn, c0, w, taps, n, k, i0, Wq, block, out):
    """out[n, k, i0:i0 + block.size // Wq] from the phase planes xq[xn, c0:], through the accumulator block."""
    Wo = out.shape[3]
    _accumulate(xq, w, taps, xn, k, c0, i0 * Wq, block)
    for i in range(block.size // Wq):
        orow, arow = out[n, k, i0 + i], block[i * Wq:]
        for j in range(Wo):
            orow[j] = arow[j]


@njit(parallel=True, cache=True)
def _direct(xq, w, taps, rows, acc, out):
    """out = the convolution; one item is a block of ``rows`` output rows of one plane (n, k).

    Each thread owns acc[thread] (rows * Wq elements: output (i, j) is element (i - i0)*Wq + j) and takes an
    equal share of the items."""
    N, C = xq.shape[0], xq.shape[1]
    K, Ho = out.shape[1], out.shape[2]
    Cg = taps[0, -1] + 1
    Kg = K // (C // Cg)
    Wq = acc.shape[1] // rows
    n_blocks = (Ho + rows - 1) // rows
    n_threads = acc.shape[0]
    for thread in prange(n_threads):
        start, stop = _share(N * K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            n, k, i0 = item // (K * n_blocks), (item // n_blocks) % K, (item % n_blocks) * rows
            block = acc[thread, :min(rows, Ho - i0) * Wq]
            _row_block(xq, n, (k // Kg) * Cg, w, taps, n, k, i0, Wq, block, out)


@njit(parallel=True, cache=True)
def _depthwise(x, w, taps, top, left, sh, sw, Hq, rows, planes, acc, out):
    """out = the depthwise (Cg = 1) convolution; one item is a plane (n, k), split into the thread's own
    phase buffer planes[thread] (1, 1, sh*sw*Hq*Wq) just before its rows are computed, so it is read hot."""
    N, C = x.shape[0], x.shape[1]
    K, Ho = out.shape[1], out.shape[2]
    Wq = acc.shape[1] // rows
    n_threads = acc.shape[0]
    for thread in prange(n_threads):
        start, stop = _share(N * K, thread, n_threads)
        xq = planes[thread]
        for item in range(start, stop):
            n, k = item // K, item % K
            _split_plane(x[n, k // (K // C)], top, left, sh, sw, Hq, Wq, xq[0, 0])
            for i0 in range(0, Ho, rows):
                block = acc[thread, :min(rows, Ho - i0) * Wq]
                _row_block(xq, 0, 0, w, taps, n, k, i0, Wq, block, out)


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_products3(acc, xa, wa, xb, wb, xc, wc):
    """acc[c] += wa[c]*xa[c] + wb[c]*xb[c] + wc[c]*xc[c]: three taps of every channel, one store."""
    for c in range(acc.size):
        acc[c] += wa[c] * xa[c] + wb[c] * xb[c] + wc[c] * xc[c]


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_products(acc, xa, wa):
    """acc[c] += wa[c] * xa[c]."""
    for c in range(acc.size):
        acc[c] += wa[c] * xa[c]


@njit(parallel=True, cache=True)
def _to_channels_last(x, top, left, xt):
    """xt[n, ph, pw, c] = x[n, c, ph - top, pw - left], zero outside x; xt: (N, Hp, Wp, C).

    Each padded row is transposed in tiles of TILE channels, so the TILE input rows read stay in cache."""
    N, C, H, W = x.shape
    Hp, Wp = xt.shape[1], xt.shape[2]
    for nh in prange(N * Hp):
        n, ph = nh // Hp, nh % Hp
        i, rows = ph - top, xt[n, ph]
        j0, j1 = (min(Wp, left), min(Wp, left + W)) if 0 <= i < H else (Wp, Wp)
        rows[:j0, :] = 0.0
        rows[j1:, :] = 0.0
        if j1 > j0:
            for c0 in range(0, C, TILE):
                for pw in range(j0, j1):
                    pixel = rows[pw]
                    for c in range(c0, min(C, c0 + TILE)):
                        pixel[c] = x[n, c, i, pw - left]


@njit(parallel=True, cache=True)
def _depthwise_channels_last(xt, wt, R, S, sh, sw, dh, dw, yt):
    """yt[n, i, j, :] = sum_{r, s} wt[r*S + s, :] * xt[n, i*sh + r*dh, j*sw + s*dw, :]: the channels innermost,
    so every pass is as long as C; three taps per pass. xt: (N, Hp, Wp, C), wt: (R*S, C), yt: (N, Ho, Wo, C)."""
    N, Ho, Wo = yt.shape[0], yt.shape[1], yt.shape[2]
    n_taps = R * S
    for ni in prange(N * Ho):
        n, i = ni // Ho, ni % Ho
        for j in range(Wo):
            acc = yt[n, i, j]
            for c in range(acc.size):
                acc[c] = 0.0
            q = 0
            while q + 3 <= n_taps:
                xa = xt[n, i * sh + (q // S) * dh, j * sw + (q % S) * dw]
                xb = xt[n, i * sh + ((q + 1) // S) * dh, j * sw + ((q + 1) % S) * dw]
                xc = xt[n, i * sh + ((q + 2) // S) * dh, j * sw + ((q + 2) % S) * dw]
                _add_products3(acc, xa, wt[q], xb, wt[q + 1], xc, wt[q + 2])
                q += 3
            for q in range(q, n_taps):
                _add_products(acc, xt[n, i * sh + (q // S) * dh, j * sw + (q % S) * dw], wt[q])


@njit(parallel=True, cache=True)
def _from_channels_last(yt, out):
    """out[n, k, i, j] = yt[n, i, j, k], each output row transposed in tiles of TILE channels."""
    N, K, Ho, Wo = out.shape
    for ni in prange(N * Ho):
        n, i = ni // Ho, ni % Ho
        row = yt[n, i]
        for k0 in range(0, K, TILE):
            for j in range(Wo):
                for k in range(k0, min(K, k0 + TILE)):
                    out[n, k, i, j] = row[j, k]


class Direct(Algorithm):
    """The defining sum over a polyphase zero-padded copy of x, as long flat contiguous passes, three taps each."""

    name = "direct"
    deterministic = True
    # measured: float32 1.3e-6 on C = 512 3x3 (14x14, 7x7 s2); float16 (in float32) 3e-4; float64 3e-15.
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def workspace_bytes(self, p: ConvParams) -> int:
        if channels_last(p):
            Hp, Wp = padded_extent(p)
            return (p.N * Hp * Wp * p.C + p.N * p.out_hw[0] * p.out_hw[1] * p.K + p.R * p.S * p.K) * p.itemsize
        (sh, sw), (Hq, Wq), threads = p.stride, phase_plane(p), get_num_threads()
        planes = threads if p.Cg == 1 else p.N * p.C           # depthwise: one phase buffer per thread
        elements = planes * sh * sw * Hq * Wq + threads * rows_per_item(p) * Wq
        return elements * p.itemsize + 2 * p.Cg * p.R * p.S * 8

    def flops(self, p: ConvParams) -> int:
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        if channels_last(p):
            self._forward_channels_last(x, w, p, out)
            return
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        (Hq, Wq), rows, threads = phase_plane(p), rows_per_item(p), get_num_threads()
        acc = self.workspace.get("direct.acc", (threads, rows * Wq), x.dtype)
        taps = self.workspace.get("direct.taps", (2, p.Cg * p.R * p.S), np.int64)
        _tap_table(p.R, p.S, sh, sw, dh, dw, Hq, Wq, taps)
        if p.Cg == 1:
            planes = self.workspace.get("direct.plane", (threads, 1, 1, sh * sw * Hq * Wq), x.dtype)
            _depthwise(x, w.reshape(p.K, -1), taps, top, left, sh, sw, Hq, rows, planes, acc, out)
        else:
            xq = self.workspace.get("direct.phases", (p.N, p.C, sh * sw * Hq * Wq), x.dtype)
            _split_phases(x, top, left, sh, sw, Hq, Wq, xq)
            _direct(xq, w.reshape(p.K, -1), taps, rows, acc, out)

    def _forward_channels_last(self, x, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)), (Ho, Wo) = p.stride, p.dilation, p.padding, p.out_hw
        Hp, Wp = padded_extent(p)
        xt = self.workspace.get("direct.x_channels_last", (p.N, Hp, Wp, p.C), x.dtype)
        yt = self.workspace.get("direct.y_channels_last", (p.N, Ho, Wo, p.K), x.dtype)
        wt = self.workspace.get("direct.w_channels_last", (p.R * p.S, p.K), x.dtype)
        wt[...] = w.reshape(p.K, p.R * p.S).T
        _to_channels_last(x, top, left, xt)
        _depthwise_channels_last(xt, wt, p.R, p.S, sh, sw, dh, dw, yt)
        _from_channels_last(yt, out)


register(Direct())
