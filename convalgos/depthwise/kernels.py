"""The Numba loop nests of ``depthwise``'s backward passes (see cpu.py for the maths; the forward pass is
``rows.py``): backward-data's per-phase gathers over a padded dy plane, in flat passes of three taps, and
backward-filter's per-channel row dots."""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels.loops import dot, share


@njit(cache=True)
def axis_taps(S, dw, left, sw, W, Wo, cols):
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


@njit(parallel=True, cache=True, fastmath={"contract"})
def depthwise_data(dy, w, phases, taps, sh, sw, PT, PL, Hd, Wd, pad, partial, result, out):
    """out[n, c] = backward-data of the depthwise layer, one plane (n, c) per item, each thread an equal share.

    The thread copies the m = K/C planes dy[n, c*m:(c+1)*m] into its zero-bordered buffer pad[thread] (m planes
    of Hd x Wd, dy's (0, 0) at (PT, PL); the borders are zeroed once per call), then for each phase of dx
    (phases[ph] = (h0, v0, Ha, Wa, t0, t1): dx rows h0 + a*sh, columns v0 + b*sw for a < Ha, b < Wa, taps
    t0 <= u < t1) sums its taps (taps[u] = (r*S + s, where that tap reads the phase's output (0, 0) in a padded
    plane)) as flat passes of three over the padded planes into result[thread] (pitch Wd), and writes the
    phase's Ha x Wa outputs into dx. A phase without taps (inputs no output reads) is written zero."""
    N, K, Ho, Wo = dy.shape
    C = out.shape[1]
    m, size, n_threads = K // C, Hd * Wd, pad.shape[0]
    most = m * taps.shape[0] + 2
    for thread in prange(n_threads):
        tw, toff = np.empty(most, w.dtype), np.empty(most, np.int64)
        buf, own, res = pad[thread], partial[thread], result[thread]
        buf[:] = 0.0
        start, stop = share(N * C, thread, n_threads)
        for item in range(start, stop):
            n, c = item // C, item % C
            for j in range(m):
                for i in range(Ho):
                    row, src = buf[j * size + (i + PT) * Wd + PL:], dy[n, c * m + j, i]
                    for v in range(Wo):
                        row[v] = src[v]
            plane = out[n, c]
            for ph in range(phases.shape[0]):
                h0, v0, Ha, Wa, t0, t1 = phases[ph]
                t = 0
                for j in range(m):
                    for u in range(t0, t1):
                        tw[t], toff[t] = w[c * m + j, taps[u, 0]], j * size + taps[u, 1]
                        t += 1
                while t % 3 != 0:                       # zero-weight copies, so passes take three taps
                    tw[t], toff[t] = 0.0, toff[t - 1]
                    t += 1
                _tap_passes(buf, 0, t, tw, toff, own, res, 0, (Ha - 1) * Wd + Wa)
                for a in range(Ha):
                    drow, srow = plane[h0 + a * sh], res[a * Wd:]
                    for b in range(Wa):
                        drow[v0 + b * sw] = srow[b]


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def depthwise_filter(x, dy, rows, cols, H, W, sh, sw, Wo, split, out):
    """out[k, r*S + s] = sum over n and the outputs (i, j) whose tap (r, s) reads inside x of
    dy[n, k, i*Wo + j] * x[n, k // m, ...]: one channel k per item (each thread an equal share; images, rows and
    columns summed in a fixed order), one dot per tap and output row over the tap's valid columns, read in place
    (``axis_taps``; for a stride > 1 from the thread's polyphase copy of the plane, split[thread]).
    x: (N, C, H*W), dy: (N, K, Ho*Wo), out: (K, R*S)."""
    N, C, K = x.shape[0], x.shape[1], dy.shape[1]
    R, S = rows.shape[1], cols.shape[1]
    Hc, Wc = (H + sh - 1) // sh, (W + sw - 1) // sw
    n_threads = split.shape[0]
    for thread in prange(n_threads):
        start, stop = share(K, thread, n_threads)
        for k in range(start, stop):
            for q in range(R * S):
                out[k, q] = 0.0
            for n in range(N):
                src, d = x[n, k // (K // C)], dy[n, k]
                if sh * sw > 1:
                    _split_plane_phases(src, H, W, sh, sw, Hc, Wc, split[thread])
                    src = split[thread]
                for r in range(R):
                    for s in range(S):
                        j0, j1 = cols[2, s], cols[3, s]
                        if j1 <= j0:
                            continue
                        base = ((rows[0, r] * sw + cols[0, s]) * Hc + rows[1, r]) * Wc + cols[1, s]
                        for i in range(rows[2, r], rows[3, r]):
                            out[k, r * S + s] += dot(d[i * Wo + j0:], src[base + i * Wc + j0:], j1 - j0)
