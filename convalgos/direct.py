"""Direct convolution, "direct": the defining sum, computed by Numba loops over a polyphase padded copy of x
(depthwise layers: over x itself).

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
2 * Cg * R * S int64. Depthwise layers (Cg = 1) copy nothing but, per thread, 2 * Ho * Wo partial sums and, for a
stride > 1, one plane's phases, sh * sw * Hc * Wc elements (``phase_split``); the channels-last depthwise
path keeps x and y channels-last (N Hp Wp C and N Ho Wo K) and the weights (R S K).

Constraints: none; any stride, asymmetric padding, dilation, groups, depthwise; float32 and float64 (each its
own compiled kernel; float16 is computed in float32 by ``conv2d``). Accuracy: taps are summed in order in the
compute dtype; the float32 normwise error on C = 512 3x3 layers is about 1.3e-6.

Loop order (``_direct``). The parallel items are blocks of whole output rows of one plane (n, k), about
``SEGMENT`` outputs each, so batch 1 keeps both cores busy and a block's accumulator stays in L1. For a block,
the Cg*R*S taps are taken three at a time and each triple is one pass over the accumulator that loads three
input runs and the accumulator once and stores once (three multiply-adds per store; a pass per tap would store
once per multiply-add). The innermost loop is that contiguous pass over t, which the compiler vectorises; its
length is the block, not one output row, which matters for the short rows of small planes.

Depthwise layers (Cg = 1) have only R*S taps per plane, so the cost is in moving data, not in arithmetic, and
a padded copy would cost as much as the convolution. ``_depthwise`` reads x in place (for a stride > 1, a
per-thread copy of the plane split into its sh * sw phases, each ceil(H/sh) x ceil(W/sw) = Hc x Wc, so that
taps read contiguously): an item is a plane (n, k); the valid outputs of each tap (those reading inside x)
are tabulated once per call, per row tap and per column tap (``_axis_taps``). When Wo = Wc (all MobileNet
layers), an output and its tap are the same distance apart in the flat plane on every row, so the rows whose
taps all lie inside x are one flat pass per three taps (acc[m] = prev[m] + wa*xa[m] + wb*xb[m] + wc*xc[m]
over thousands of m, ping-ponging between two partial-sum buffers: LLVM vectorises that, not an in-place
acc[m] += ...), after which the one or two border columns of each row, where the pass wrapped into the next
row, are recomputed tap by tap. The other rows (top and bottom, or all when Wo != Wc) get the same passes
over their common valid columns, then their border columns. On planes of a few dozen outputs
(MobileNet's 7x7 with 1024 channels) even that leaves loops too short to vectorise, so layers with many
channels and small planes (``channels_last``) are moved channels-last, where each pass runs over all C
channels of one output pixel (acc[c] += w[r, s, c] * x[i + r, j + s, c], three taps per pass), and back.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from ._kernels import copy_strided, share
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


def phase_split(p: ConvParams) -> int:
    """Elements of one thread's polyphase copy of a plane on the depthwise path (none for stride 1)."""
    (sh, sw), (H, W) = p.stride, (p.H, p.W)
    return sh * sw * ((H + sh - 1) // sh) * ((W + sw - 1) // sw) if sh * sw > 1 else 0


def padded_extent(p: ConvParams) -> tuple[int, int]:
    """(Hp, Wp): the part of the zero-padded input that the outputs read (the channels-last copy)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return (Ho - 1) * sh + (p.R - 1) * dh + 1, (Wo - 1) * sw + (p.S - 1) * dw + 1


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
                    copy_strided(row[q0:q1], src[i, q0 * sw + p - left:], sw)
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
        start, stop = share(N * K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            n, k, i0 = item // (K * n_blocks), (item // n_blocks) % K, (item % n_blocks) * rows
            block = acc[thread, :min(rows, Ho - i0) * Wq]
            _row_block(xq, n, (k // Kg) * Cg, w, taps, n, k, i0, Wq, block, out)


@njit(cache=True)
def _axis_taps(S, dw, left, sw, W, Wo, cols):
    """Along one axis: cols[:, s] = (p, base, j0, j1) of tap s: output column j reads column j + base of
    phase p (the input columns p, p + sw, p + 2*sw, ...), which lies inside x for j0 <= j < j1."""
    for s in range(S):
        offset = s * dw - left
        p, base = offset % sw, offset // sw
        count = (W - p + sw - 1) // sw                 # input columns in phase p
        j0 = min(Wo, max(0, -base))
        cols[0, s], cols[1, s], cols[2, s], cols[3, s] = p, base, j0, max(j0, min(Wo, count - base))


@njit(cache=True, inline="always")
def _split_plane_phases(src, H, W, sh, sw, Hc, Wc, dst):
    """dst[((b*sw + p)*Hc + a)*Wc + q] = src[(a*sh + b)*W + q*sw + p]: the flat plane src as its sh*sw
    phases, each Hc x Wc (the unfilled tail of a short phase is never read)."""
    for ih in range(H):
        for p in range(sw):
            row = dst[(((ih % sh) * sw + p) * Hc + ih // sh) * Wc:]
            line = src[ih * W + p:]
            for q in range((W - p + sw - 1) // sw):
                row[q] = line[q * sw]


@njit(cache=True, inline="always")
def _row_taps(w, k, i, rows, cols, sw, Hc, Wc, tw, toff, tj):
    """The taps of output row i that read inside x: weight tw[t], source offset toff[t] (output column j reads
    toff[t] + j of the plane) and valid columns tj[0, t] <= j < tj[1, t]. The list is padded to a multiple of
    three with zero-weight copies of its last tap. Returns its length."""
    R, S, t = rows.shape[1], cols.shape[1], 0
    for r in range(R):
        if rows[2, r] <= i < rows[3, r]:
            for s in range(S):
                tw[t] = w[k, r * S + s]
                toff[t] = ((rows[0, r] * sw + cols[0, s]) * Hc + i + rows[1, r]) * Wc + cols[1, s]
                tj[0, t], tj[1, t] = cols[2, s], cols[3, s]
                t += 1
    while t % 3 != 0:
        tw[t], toff[t], tj[0, t], tj[1, t] = 0.0, toff[t - 1], tj[0, t - 1], tj[1, t - 1]
        t += 1
    return t


@njit(cache=True, inline="always")
def _border_column(src, n_taps, tw, toff, tj, j, shift):
    """The sum over the taps t valid at output column j of tw[t] * src[toff[t] + shift + j]."""
    v = 0.0
    for t in range(n_taps):
        if tj[0, t] <= j < tj[1, t]:
            v += tw[t] * src[toff[t] + shift + j]
    return v


@njit(cache=True, inline="always")
def _first_taps3(dst, d, src, a, b, c, wa, wb, wc, length):
    """dst[d + m] = wa*src[a + m] + wb*src[b + m] + wc*src[c + m] for m < length."""
    d, a, b, c = np.uint64(d), np.uint64(a), np.uint64(b), np.uint64(c)   # unsigned: no wraparound test
    for m in range(np.uint64(length)):
        dst[d + m] = wa * src[a + m] + wb * src[b + m] + wc * src[c + m]


@njit(cache=True, inline="always")
def _next_taps3(dst, d, prev, e, src, a, b, c, wa, wb, wc, length):
    """dst[d + m] = prev[e + m] + (three taps, as ``_first_taps3``): written to another array than it reads,
    which LLVM vectorises (an in-place acc[m] += ... it leaves scalar)."""
    d, e, a, b, c = np.uint64(d), np.uint64(e), np.uint64(a), np.uint64(b), np.uint64(c)
    for m in range(np.uint64(length)):
        dst[d + m] = prev[e + m] + wa * src[a + m] + wb * src[b + m] + wc * src[c + m]


@njit(cache=True, inline="always")
def _tap_passes(src, first, n_taps, tw, toff, partial, dst, d, length):
    """dst[d + m] = sum over taps t of tw[t] * src[toff[t] + first + m] for m < length (n_taps a multiple of
    three): branch-free passes of three taps each, ping-ponging between the two halves of partial (flat,
    2 * half), the last one into dst. Indices, not slices: a slice costs two atomic reference counts."""
    half = partial.size // 2
    for t in range(0, n_taps, 3):
        to, at = (dst, d) if t + 3 == n_taps else (partial, ((t // 3) % 2) * half)
        a, b, c = toff[t] + first, toff[t + 1] + first, toff[t + 2] + first
        if t == 0:
            _first_taps3(to, at, src, a, b, c, tw[t], tw[t + 1], tw[t + 2], length)
        else:
            _next_taps3(to, at, partial, ((t // 3 + 1) % 2) * half, src, a, b, c, tw[t], tw[t + 1], tw[t + 2],
                        length)
    if n_taps == 0:
        dst[d:d + length] = 0.0


@njit(cache=True, inline="always")
def _common_columns(n_taps, tj, Wo):
    """[J0, J1): the output columns where every tap is valid."""
    J0, J1 = 0, Wo
    for t in range(n_taps):
        J0, J1 = max(J0, tj[0, t]), min(J1, tj[1, t])
    return J0, max(J0, J1)


@njit(cache=True, inline="always")
def _taps_at(n_taps, tw, toff, tj, j, cw, coff):
    """The taps valid at output column j, compacted: weight cw[u], source offset coff[u] + j. Returns how many."""
    u = 0
    for t in range(n_taps):
        if tj[0, t] <= j < tj[1, t]:
            cw[u], coff[u] = tw[t], toff[t] + j
            u += 1
    return u


@njit(cache=True, inline="always")
def _fix_flat_borders(src, n_taps, tw, toff, tj, J0, J1, I0, I1, Wc, cw, coff, plane, Wo):
    """plane[i*Wo + j] for rows I0 <= i < I1 and the columns j outside [J0, J1), where the flat pass wrapped
    into the next row: each column's valid taps are compacted once, then summed down the rows."""
    for j in range(Wo):
        if J0 <= j < J1:
            continue
        m = _taps_at(n_taps, tw, toff, tj, j, cw, coff)
        for i in range(I0, I1):
            if m == 0:
                plane[i * Wo + j] = 0.0
                continue
            shift = (i - I0) * Wc
            v = cw[0] * src[coff[0] + shift]                # in the compute dtype
            for u in range(1, m):
                v += cw[u] * src[coff[u] + shift]
            plane[i * Wo + j] = v


@njit(cache=True, inline="always")
def _fix_borders(src, n_taps, tw, toff, tj, J0, J1, shift, plane, row, Wo):
    """plane[row*Wo + j] for the columns j outside [J0, J1), one by one (row taps offset by shift)."""
    for j in range(J0):
        plane[row * Wo + j] = _border_column(src, n_taps, tw, toff, tj, j, shift)
    for j in range(J1, Wo):
        plane[row * Wo + j] = _border_column(src, n_taps, tw, toff, tj, j, shift)


@njit(parallel=True, cache=True, fastmath={"contract"})
def _depthwise(x, w, rows, cols, H, W, sh, sw, Wo, split, partial, out):
    """out = the depthwise (Cg = 1) convolution, read straight from x; x: (N, C, H*W), w: (K, R*S), out:
    (N, K, Ho*Wo), rows and cols: ``_axis_taps``; partial[thread]: 2*Ho*Wo. One item is a plane (n, k); each
    thread takes an equal share of the planes. For a stride > 1 the plane is first split into its sh*sw phases
    (Hc x Wc each) in the thread's own buffer split[thread], so passes are contiguous. When Wo = Wc, output
    (i, j) and its taps are the same distance apart in the flat plane for every row, so the rows [I0, I1)
    whose taps all lie inside x are one flat pass per three taps (the columns that wrap are redone after);
    other rows are computed one by one."""
    N, C = x.shape[0], x.shape[1]
    K, Ho = out.shape[1], out.shape[2] // Wo
    Hc, Wc = (H + sh - 1) // sh, (W + sw - 1) // sw
    n_threads, most = split.shape[0], rows.shape[1] * cols.shape[1] + 2
    I0, I1 = 0, 0                                      # the rows whose taps all lie inside x
    if Wo == Wc:
        I0, I1 = rows[2].max(), rows[3].min()
        I1 = max(I0, I1)
    for thread in prange(n_threads):
        tw, toff, tj = np.empty(most, w.dtype), np.empty(most, np.int64), np.empty((2, most), np.int64)
        cw, coff = np.empty(most, w.dtype), np.empty(most, np.int64)
        start, stop = share(N * K, thread, n_threads)
        own = partial[thread]
        for item in range(start, stop):
            n, k = item // K, item % K
            src, plane = x[n, k // (K // C)], out[n, k]
            if sh * sw > 1:
                _split_plane_phases(src, H, W, sh, sw, Hc, Wc, split[thread])
                src = split[thread]
            if I1 > I0:
                valid = _row_taps(w, k, I0, rows, cols, sw, Hc, Wc, tw, toff, tj)
                J0, J1 = _common_columns(valid, tj, Wo)
                _tap_passes(src, J0, valid, tw, toff, own, plane, I0 * Wo + J0, (I1 - 1 - I0) * Wo + J1 - J0)
                _fix_flat_borders(src, valid, tw, toff, tj, J0, J1, I0, I1, Wc, cw, coff, plane, Wo)
            for i in range(Ho):
                if I0 <= i < I1:
                    continue
                valid = _row_taps(w, k, i, rows, cols, sw, Hc, Wc, tw, toff, tj)
                J0, J1 = _common_columns(valid, tj, Wo)
                _tap_passes(src, J0, valid, tw, toff, own, plane, i * Wo + J0, J1 - J0)
                _fix_borders(src, valid, tw, toff, tj, J0, J1, 0, plane, i, Wo)


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

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if channels_last(p):
            Hp, Wp = padded_extent(p)
            return (p.N * Hp * Wp * p.C + p.N * p.out_hw[0] * p.out_hw[1] * p.K + p.R * p.S * p.K) * p.itemsize
        if p.Cg == 1:
            return get_num_threads() * (phase_split(p) + 2 * p.out_hw[0] * p.out_hw[1]) * p.itemsize
        (sh, sw), (Hq, Wq), threads = p.stride, phase_plane(p), get_num_threads()
        elements = p.N * p.C * sh * sw * Hq * Wq + threads * rows_per_item(p) * Wq
        return elements * p.itemsize + 2 * p.Cg * p.R * p.S * 8

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        if channels_last(p):
            self._forward_channels_last(x, w, p, out)
            return
        if p.Cg == 1:
            self._forward_depthwise(x, w, p, out)
            return
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        (Hq, Wq), rows, threads = phase_plane(p), rows_per_item(p), get_num_threads()
        acc = self.workspace.get("direct.acc", (threads, rows * Wq), x.dtype)
        taps = self.workspace.get("direct.taps", (2, p.Cg * p.R * p.S), np.int64)
        _tap_table(p.R, p.S, sh, sw, dh, dw, Hq, Wq, taps)
        xq = self.workspace.get("direct.phases", (p.N, p.C, sh * sw * Hq * Wq), x.dtype)
        _split_phases(x, top, left, sh, sw, Hq, Wq, xq)
        _direct(xq, w.reshape(p.K, -1), taps, rows, acc, out)

    def _forward_depthwise(self, x, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)), (Ho, Wo) = p.stride, p.dilation, p.padding, p.out_hw
        rows, cols = np.empty((4, p.R), np.int64), np.empty((4, p.S), np.int64)
        _axis_taps(p.R, dh, top, sh, p.H, Ho, rows)
        _axis_taps(p.S, dw, left, sw, p.W, Wo, cols)
        threads = get_num_threads()
        shape = (threads, phase_split(p))
        split = self.workspace.get("direct.phases", shape, x.dtype) if sh * sw > 1 else np.empty(shape, x.dtype)
        partial = self.workspace.get("direct.partial", (threads, 2 * Ho * Wo), x.dtype)
        _depthwise(x.reshape(p.N, p.C, -1), w.reshape(p.K, -1), rows, cols, p.H, p.W, sh, sw, Wo, split,
                   partial, out.reshape(p.N, p.K, -1))

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
