"""The forward pass of ``depthwise`` (see cpu.py for the maths): each plane copied into a zero-bordered buffer
of the thread's, then four output rows at a time computed a vector of L outputs each, every tap summed in
registers (no partial sums in memory):

    y[n, k, i, j0:j0+L] = sum_{r, s} w[k, r*S + s] * xpad[i*sh + r*dh, j0*sw + s*dw :: sw][:L]

Stride 1 and 2 keep the padded rows as they are, copied a vector at a time; at column stride 2 a read is one
load of 2L elements and its even lanes (``simd.evens``). At sw > 2 a buffer row holds the padded row's sw
column phases one after the other (phase f: columns f, f + sw, ...; Wc each), copied element by element, so tap
s reads phase (s*dw) % sw from column j0 + (s*dw) // sw on: every read is one contiguous vector. (Phases at
sw = 2 too, copied element by element, made MobileNet's stride-2 layers 2-4x slower.)

Why this shape: a plane of MobileNet's 28x28 to 7x7 layers has 784 to 49 outputs, and whatever a pass pays per
plane or per row (tap tables, border fixes: the flat passes this replaced, 0.07-0.09 ms on each such layer,
1.2-1.5x torch's) is most of its time; here a plane costs its copy and R*S vector multiply-adds per L outputs.
Four rows at a time give four independent chains of multiply-adds: a single row's 9 taps wait on each other
(4 cycles each), which took 3x as long. A row's last vector computes up to L - 1 outputs past Wo (a masked
store keeps the first Wo - j0: through a scalar copy they cost as much as the sums), the last block up to 3
rows past Ho: computed from the buffer's zeros, never stored.
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.loops import share
from ..kernels.simd import evens, fma, lanes, load, splat, store, store_head, zeros

#: output rows computed together (independent accumulators).
ROWS = 4


@njit(cache=True)
def buffer_shape(Ho, Wo, sh, sw, R, S, dh, dw, L):
    """(Hb, phases, Wc): rows of a plane's buffer (whole blocks of ROWS output rows), the column phases of a
    row (sw when sw > 2, else 1) and the columns of each (whole vectors of outputs, the furthest tap's shift
    and, at sw = 2, the 2L-wide reads); a buffer row is phases * Wc."""
    phases = sw if sw > 2 else 1
    span = sw // phases                                  # buffer columns per output column: 1 or 2
    return ((-(-Ho // ROWS) * ROWS - 1) * sh + (R - 1) * dh + 1, phases,
            -(-Wo // L) * L * span + (S - 1) * dw // phases + 1)


@njit(cache=True, inline="always")
def _copy_plane(xflat, at, H, W, top, left, phases, Wc, buf):
    """The H x W plane at xflat[at:] into buf's rows top .. top + H - 1 at column left (as phases when there
    are several), columns past the row dropped. One phase: by vectors of L where they stay inside the row and
    xflat, then the columns a vector wrote past W zeroed again. buf's other elements are zero and stay so
    (``depthwise_rows`` zeroes it once): these writes land on the same elements for every plane."""
    L = lanes(buf)
    chunks, pitch = -(-W // L), phases * Wc
    for y in range(H):
        src, dst = at + y * W, (top + y) * pitch
        if phases == 1 and left + chunks * L <= Wc and src + chunks * L <= xflat.size:
            for q in range(chunks):
                store(buf, dst + left + q * L, load(xflat, src + q * L))
            for pw in range(left + W, left + chunks * L):
                buf[dst + pw] = 0.0
        else:
            for col in range(min(W, pitch - left)):
                pw = left + col
                buf[dst + (pw % phases) * Wc + pw // phases] = xflat[src + col]


@njit(parallel=True, cache=True)
def depthwise_rows(x, w, top, left, sh, sw, dh, dw, R, S, buf, out):
    """out[n, k] = the depthwise (Cg = 1) correlation of plane x[n, k // m] (m = K / C) with w[k] (R*S taps),
    stride (sh, sw), dilation (dh, dw), zero padding (top, left) and whatever the output size asks for below and
    right. buf: (threads, Hb * phases * Wc + L) (``buffer_shape``). One item is a plane; each thread takes an equal
    share."""
    N, C, H, W = x.shape
    K, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    m, n_threads = K // C, buf.shape[0]
    L = lanes(buf[0])
    Hb, phases, Wc = buffer_shape(Ho, Wo, sh, sw, R, S, dh, dw, L)
    span, pitch, xflat, rows_in = sw // phases, phases * Wc, x.reshape(-1), max(0, min(H, Hb - top))
    for thread in prange(n_threads):
        plane = buf[thread]
        plane[:] = 0.0
        start, stop = share(N * K, thread, n_threads)
        for item in range(start, stop):
            n, k = item // K, item % K
            _copy_plane(xflat, (n * C + k // m) * H * W, rows_in, W, top, left, phases, Wc, plane)
            wk = w[k]
            for i0 in range(0, Ho, ROWS):
                for j0 in range(0, Wo, L):
                    a0, a1, a2, a3 = zeros(plane), zeros(plane), zeros(plane), zeros(plane)
                    for r in range(R):
                        for s in range(S):
                            u = splat(wk, r * S + s)
                            q = (i0 * sh + r * dh) * pitch + ((s * dw) % phases) * Wc + j0 * span + s * dw // phases
                            if span == 1:
                                a0 = fma(u, load(plane, q), a0)
                                a1 = fma(u, load(plane, q + sh * pitch), a1)
                                a2 = fma(u, load(plane, q + 2 * sh * pitch), a2)
                                a3 = fma(u, load(plane, q + 3 * sh * pitch), a3)
                            else:
                                a0 = fma(u, evens(plane, q), a0)
                                a1 = fma(u, evens(plane, q + sh * pitch), a1)
                                a2 = fma(u, evens(plane, q + 2 * sh * pitch), a2)
                                a3 = fma(u, evens(plane, q + 3 * sh * pitch), a3)
                    for ii, acc in enumerate((a0, a1, a2, a3)):
                        if i0 + ii < Ho:
                            if j0 + L <= Wo:
                                store(out[n, k, i0 + ii], j0, acc)
                            else:
                                store_head(out[n, k, i0 + ii], j0, acc, Wo - j0)
