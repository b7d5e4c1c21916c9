"""The Numba loop nests of ``direct`` (see direct.py for the maths): the polyphase padded copy, the tap table,
the flat three-taps-per-pass accumulation of output rows, and backward-filter's contiguous dots."""
from __future__ import annotations

from numba import njit, prange

from ._kernels import copy_strided, dot, share


@njit(cache=True, inline="always")
def _col_range(p, left, sw, W, Wq):
    """Columns [q0, q1) of column phase p whose input column q*sw + p - left lies in [0, W)."""
    q0 = max(0, min(Wq, -((p - left) // sw)))       # ceil((left - p) / sw)
    return q0, max(q0, min(Wq, (W - 1 + left - p) // sw + 1))


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
def split_phases(x, top, left, sh, sw, Hq, Wq, xq):
    """xq[n, c] = the phases of x[n, c] zero-padded (``_split_plane``); xq: (N, C, sh*sw*Hq*Wq). With
    sh = sw = 1 this is plain zero padding into an Hq x Wq plane, x's (0, 0) at (top, left)."""
    N, C = x.shape[0], x.shape[1]
    for nc in prange(N * C):
        _split_plane(x[nc // C, nc % C], top, left, sh, sw, Hq, Wq, xq[nc // C, nc % C])


@njit(cache=True)
def tap_table(R, S, sh, sw, dh, dw, Hq, Wq, taps):
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
    """acc[t] = sum over taps q of w[k, q] * xq[n, c0 + taps[0, q], taps[1, q] + first + t] (``tap_table``).

    xq: (N, C, phase planes) flat; w: (K, taps). Three taps per pass over acc."""
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
def _row_block(xq, c0, w, taps, n, k, i0, Wq, block, out):
    """out[n, k, i0:i0 + block.size // Wq] from the planes xq[n, c0:], through the accumulator block."""
    Wo = out.shape[3]
    _accumulate(xq, w, taps, n, k, c0, i0 * Wq, block)
    for i in range(block.size // Wq):
        orow, arow = out[n, k, i0 + i], block[i * Wq:]
        for j in range(Wo):
            orow[j] = arow[j]


@njit(parallel=True, cache=True)
def direct_rows(xq, w, taps, Cg, rows, acc, out):
    """out[n, k] = sum over taps q of w[k, q] * xq[n, (k // Kg)*Cg + taps[0, q], taps[1, q] + i*Wq + j] at
    output (i, j); Cg input channels per group (taps[0] < Cg), Kg = K // groups. One item is a block of
    ``rows`` output rows of one plane (n, k).

    Each thread owns acc[thread] (rows * Wq elements: output (i, j) is element (i - i0)*Wq + j) and takes an
    equal share of the items. ``out`` may be a strided view (backward-data writes one phase of dx)."""
    N, C = xq.shape[0], xq.shape[1]
    K, Ho = out.shape[1], out.shape[2]
    Kg = K // (C // Cg)
    Wq = acc.shape[1] // rows
    n_blocks = (Ho + rows - 1) // rows
    n_threads = acc.shape[0]
    for thread in prange(n_threads):
        start, stop = share(N * K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            n, k, i0 = item // (K * n_blocks), (item // n_blocks) % K, (item % n_blocks) * rows
            block = acc[thread, :min(rows, Ho - i0) * Wq]
            _row_block(xq, (k // Kg) * Cg, w, taps, n, k, i0, Wq, block, out)


@njit(cache=True, fastmath={"reassoc", "contract"}, inline="always")
def _dots3(d, xa, xb, xc, length):
    """(sum d[t]*xa[t], sum d[t]*xb[t], sum d[t]*xc[t]) over t < length: one load of d for three taps. The
    sums may be reassociated (vector lanes); the order is fixed by the compiled code, the same every run."""
    sa, sb, sc = d[0] * xa[0], d[0] * xb[0], d[0] * xc[0]
    for t in range(1, length):
        sa += d[t] * xa[t]
        sb += d[t] * xb[t]
        sc += d[t] * xc[t]
    return sa, sb, sc


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def filter_dots(xq, dyq, taps, Cg, length, out):
    """out[k, q] = sum over n of sum_{t < length} dyq[n, k, t] * xq[n, g*Cg + taps[0, q], taps[1, q] + t], with
    g = k // Kg: backward-filter, each weight tap one contiguous dot per image (dyq: dy at xq's pitch Wq, zero
    in the junk columns). out: (K, Cg*R*S). One item is a pair (k, c): its R*S taps, three per pass over dy,
    summed image by image in order, so each weight is written by one thread in a fixed order."""
    N, C = xq.shape[0], xq.shape[1]
    K, n_taps = out.shape
    RS, Kg = n_taps // Cg, K // (C // Cg)
    for item in prange(K * Cg):
        k, c = item // Cg, item % Cg
        ci, q0 = (k // Kg) * Cg + c, c * RS
        for q in range(q0, q0 + RS):
            out[k, q] = 0.0
        for n in range(N):
            d, plane = dyq[n, k], xq[n, ci]
            q = q0
            while q + 3 <= q0 + RS:
                sa, sb, sc = _dots3(d, plane[taps[1, q]:], plane[taps[1, q + 1]:], plane[taps[1, q + 2]:], length)
                out[k, q] += sa
                out[k, q + 1] += sb
                out[k, q + 2] += sc
                q += 3
            for q in range(q, q0 + RS):
                out[k, q] += dot(d, plane[taps[1, q]:], length)
