"""The Numba loop nests of ``direct`` (see cpu.py for the maths): the polyphase padded copy, the tap table,
and the register-blocked accumulation of output rows (``simd``); backward-filter's are in filter_kernels.py."""
from __future__ import annotations

from numba import njit, prange

from ..kernels.blocks import BLOCK, channel_block, channel_blocks, register_block
from ..kernels.loops import copy_strided, share
from ..kernels.simd import lanes


@njit(cache=True, inline="always")
def _col_range(p, left, sw, W, Wq):
    """Columns [q0, q1) of column phase p whose input column q*sw + p - left lies in [0, W)."""
    q0 = max(0, min(Wq, -((p - left) // sw)))       # ceil((left - p) / sw)
    return q0, max(q0, min(Wq, (W - 1 + left - p) // sw + 1))


@njit(parallel=True, cache=True)
def split_phases(x, top, left, sh, sw, Hq, Wq, xq, used=-1):
    """xq[n, c] = the phases of x[n, c] zero-padded; xq: (N, C, sh*sw*Hq*Wq). Padded (ph, pw) goes to phase
    (ph % sh, pw % sw), at row ph // sh and column pw // sw of that phase's Hq x Wq block; padded positions
    past sh*Hq or sw*Wq are dropped. Only the phases whose bit is set in ``used`` (bit b*sw + p; all by
    default) are written: the others are never read. With sh = sw = 1 this is plain zero padding into an
    Hq x Wq plane, x's (0, 0) at (top, left).

    Each row is copied between two slices that start at their first element (written as row[q] = line[q], the
    copy vectorises; indexed at an offset, row[q0 + q], it did not: 1.4-1.6x slower on 8-56 px planes,
    minimum over 200 interleaved calls)."""
    N, C, H, W = x.shape
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        planes = xq[n, c]
        for p in range(sw):
            q0, q1 = _col_range(p, left, sw, W, Wq)        # the same columns on every row of the phase
            for b in range(sh):
                if not (used >> (b * sw + p)) & 1:
                    continue
                first = (b * sw + p) * Hq
                for a in range(Hq):
                    row, i = planes[(first + a) * Wq:(first + a + 1) * Wq], a * sh + b - top
                    if 0 <= i < H and q1 > q0:
                        for q in range(q0):
                            row[q] = 0.0
                        copy_strided(row[q0:q1], x[n, c, i, q0 * sw + p - left:], sw)
                        for q in range(q1, Wq):
                            row[q] = 0.0
                    else:
                        for q in range(Wq):
                            row[q] = 0.0


@njit(cache=True)
def used_phases(R, S, sh, sw, dh, dw):
    """The bit mask of the phases some tap reads: bit ((r*dh) % sh) * sw + (s*dw) % sw for every tap (r, s). A
    1x1 kernel at stride 2 reads one phase of four."""
    used = 0
    for r in range(R):
        for s in range(S):
            used |= 1 << (((r * dh) % sh) * sw + (s * dw) % sw)
    return used


@njit(cache=True)
def tap_table(R, S, sh, sw, dh, dw, Hq, Wq, taps):
    """taps[0, q] = input channel (within the group) of tap q = (c, r, s); taps[1, q] = where it reads output
    (0, 0) in that channel's phase planes. Output (i, j) of that tap is then read at taps[1, q] + i*Wq + j."""
    for q in range(taps.shape[1]):
        r, s = (q // S) % R, q % S
        phase = ((r * dh) % sh) * sw + (s * dw) % sw
        taps[0, q] = q // (R * S)
        taps[1, q] = (phase * Hq + (r * dh) // sh) * Wq + (s * dw) // sw


@njit(parallel=True, cache=True)
def phase_weights(w, Kg, rows, cols, wq):
    """wq[c, (kk*len(rows) + a)*len(cols) + b] = w[g*Kg + kk, c % Cg, rows[a], cols[b]] for input channel c of
    group g = c // Cg: backward-data's weights for one phase of dx (its row and column taps), the output
    channels of c's group as the taps of a direct pass over dy."""
    C, Cg = wq.shape[0], w.shape[1]
    nr, nc = rows.size, cols.size
    for c in prange(C):
        k0, cc = (c // Cg) * Kg, c % Cg
        for kk in range(Kg):
            for a in range(nr):
                for b in range(nc):
                    wq[c, (kk * nr + a) * nc + b] = w[k0 + kk, cc, rows[a], cols[b]]


@njit(parallel=True, cache=True)
def direct_rows(xq, w, taps, Cg, rows, Wq, stage, out):
    """out[n, k] = sum over taps q of w[k, q] * xq[n, (k // Kg)*Cg + taps[0, q], taps[1, q] + i*Wq + j] at
    output (i, j); Cg input channels per group (taps[0] < Cg), Kg = K // groups. One item is a block of
    ``rows`` output rows of a block of BLOCK, four or one channels of one group (``channel_block``).

    Each thread owns stage[thread] (BLOCK channels): output (i, j) of channel k0 + kk is stage[kk, (i - i0)*Wq
    + j], computed in register blocks of 2L outputs (the item's rows*Wq rounded up), of which the Wo valid
    columns of each row are copied out. So xq is read up to 2L elements past a plane's end: the caller leaves
    that much room after the last plane. ``out`` may be a strided view (backward-data writes one phase of dx)."""
    N, C = xq.shape[0], xq.shape[1]
    K, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    Kg = K // (C // Cg)
    blocks = channel_blocks(Kg, BLOCK)
    T = 2 * lanes(stage)
    n_rows = (Ho + rows - 1) // rows
    n_items = N * (C // Cg) * blocks * n_rows
    n_threads = stage.shape[0]
    for thread in prange(n_threads):
        start, stop = share(n_items, thread, n_threads)
        for item in range(start, stop):
            n, rest = item // (n_items // N), item % (n_items // N)
            g, b, i0 = rest // (blocks * n_rows), (rest // n_rows) % blocks, (rest % n_rows) * rows
            first, width = channel_block(Kg, b, BLOCK)
            k0, c0, span = g * Kg + first, g * Cg, min(rows, Ho - i0) * Wq
            for t in range(0, span, T):
                register_block(xq, w, taps, n, c0, k0, width, i0 * Wq + t, stage[thread], t)
            for kk in range(width):
                for i in range(span // Wq):
                    orow, srow = out[n, k0 + kk, i0 + i], stage[thread, kk, i * Wq:]
                    for j in range(Wo):
                        orow[j] = srow[j]
