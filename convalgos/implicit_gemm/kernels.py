"""The Numba kernels of ``implicit_gemm`` (the maths, the loop order and the two paths: its module docstring).

Every array is flat and indexed with unsigned offsets: no views (no reference counting in the loops) and no
negative-index test (which would stop vectorisation). ``shape`` is (N, C, H, W, K, Cg, R, S, Ho, Wo).
``flat`` selects the flat path (stride 1 and Wo = W), where one pass covers a whole block of rows and the
border columns [0, J0) and [J1, row length) of the result, which that pass runs through, are summed again
column by column (``_output_column``, ``_input_column``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ..kernels.loops import valid_range


@njit(cache=True)
def _axpy(dst, d0, j0, j1, a, src, s0, step):
    """dst[d0 + j] += a * src[s0 + j*step] for j0 <= j < j1 (contiguous when step is 1)."""
    d0, s0, step = np.uint64(d0), np.uint64(s0), np.uint64(step)
    if step == 1:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[s0 + j]
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[s0 + j * step]


@njit(cache=True)
def _axpy3(dst, d0, j0, j1, a, b, c, src, sa, sb, sc, step):
    """dst[d0 + j] += a*src[sa + j*step] + b*src[sb + j*step] + c*src[sc + j*step] for j0 <= j < j1: three
    taps per pass, so the destination is loaded and stored once per three multiply-adds."""
    d0, sa, sb, sc, step = np.uint64(d0), np.uint64(sa), np.uint64(sb), np.uint64(sc), np.uint64(step)
    if step == 1:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[sa + j] + b * src[sb + j] + c * src[sc + j]
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[sa + j * step] + b * src[sb + j * step] + c * src[sc + j * step]


@njit(cache=True)
def _scatter_axpy(dst, d0, j0, j1, a, src, s0, step):
    """dst[d0 + j*step] += a * src[s0 + j] for j0 <= j < j1 (the transpose of ``_axpy``)."""
    d0, s0, step = np.uint64(d0), np.uint64(s0), np.uint64(step)
    for j in range(np.uint64(j0), np.uint64(j1)):
        dst[d0 + j * step] += a * src[s0 + j]


@njit(cache=True, fastmath={"reassoc"})
def _dot(acc, a, a0, b, b0, j0, j1, step):
    """acc + sum_j a[a0 + j] * b[b0 + j*step] for j0 <= j < j1, reassociated so that it vectorises (the order
    is fixed by the compiled code: the same on every run)."""
    a0, b0, step = np.uint64(a0), np.uint64(b0), np.uint64(step)
    for j in range(np.uint64(j0), np.uint64(j1)):
        acc += a[a0 + j] * b[b0 + j * step]
    return acc


@njit(cache=True)
def _overlap(i0, i1, b0, b1):
    """The part of [i0, i1) inside [b0, b1) (empty as (i, i))."""
    lo = max(i0, b0)
    return lo, max(lo, min(i1, b1))


@njit(cache=True)
def _output_column(xf, wf, shape, n, k, j, b0, b1, top, left, dh, dw, yf):
    """y[n, k, b0:b1, j] at stride 1 (Wo = W), summed again tap by tap: for each tap that reads inside x at
    column j, one pass down the column over the rows whose tap row is inside x."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    c0, y0 = (k // (K // (C // Cg))) * Cg, (n * K + k) * Ho * Wo + j
    for i in range(b0, b1):
        yf[y0 + i * Wo] = 0
    for c in range(Cg):
        for r in range(R):
            i0, i1 = valid_range(r * dh - top, 1, H, Ho)
            i0, i1 = _overlap(i0, i1, b0, b1)
            for s in range(S):
                col = j + s * dw - left
                if 0 <= col < W:
                    a, xr = wf[((k * Cg + c) * R + r) * S + s], ((n * C + c0 + c) * H + r * dh - top) * W + col
                    for i in range(i0, i1):
                        yf[y0 + i * Wo] += a * xf[xr + i * W]


@njit(cache=True)
def _input_column(dyf, wf, shape, n, ci, col, h0, h1, top, left, dh, dw, dxf):
    """dx[n, ci, h0:h1, col] at stride 1 (Wo = W), summed again: for each output channel of the group and tap
    whose output column is valid, one pass down the column over the rows with a valid output row."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    Kg, g, c, x0 = K // (C // Cg), ci // Cg, ci % Cg, (n * C + ci) * H * W + col
    for h in range(h0, h1):
        dxf[x0 + h * W] = 0
    for k in range(g * Kg, (g + 1) * Kg):
        for r in range(R):
            lo, hi = _overlap(r * dh - top, Ho + r * dh - top, h0, h1)     # rows h with i = h - r*dh + top valid
            for s in range(S):
                j = col - s * dw + left
                if 0 <= j < Wo:
                    a, yr = wf[((k * Cg + c) * R + r) * S + s], ((n * K + k) * Ho - r * dh + top) * Wo + j
                    for h in range(lo, hi):
                        dxf[x0 + h * W] += a * dyf[yr + h * Wo]


# forward and backward_data below are deliberate twins: the same item loop over row blocks of a plane, one
# gathering y's rows from x, the other dx's rows from dy (each reads its own operand in place).
@njit(parallel=True, cache=True)
def forward(xf, wf, shape, top, left, sh, sw, dh, dw, rows, flat, J0, J1, yf):
    """y = conv(x, w); an item is ``rows`` output rows of a plane (n, k)."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    Kg, blocks = K // (C // Cg), (Ho + rows - 1) // rows
    for item in prange(N * K * blocks):
        b, k, n = item % blocks, (item // blocks) % K, item // (blocks * K)
        b0, b1 = b * rows, min(Ho, (b + 1) * rows)
        y0 = (n * K + k) * Ho * Wo
        for e in range(y0 + b0 * Wo, y0 + b1 * Wo):
            yf[e] = 0
        for c in range(Cg):
            x0 = (n * C + (k // Kg) * Cg + c) * H * W
            for r in range(R):
                i0, i1 = valid_range(r * dh - top, sh, H, Ho)
                i0, i1 = _overlap(i0, i1, b0, b1)
                w0, xr = ((k * Cg + c) * R + r) * S, x0 + (r * dh - top) * W - left   # xr: output row 0's
                for s in range(0, S - S % 3, 3):         # taps s, s+1, s+2 together where all three are valid:
                    c0 = valid_range(s * dw - left, sw, W, Wo)[0]           # a tap further right starts no later
                    c1 = max(c0, valid_range((s + 2) * dw - left, sw, W, Wo)[1])    # and ends no later
                    a, bb, cc = wf[w0 + s], wf[w0 + s + 1], wf[w0 + s + 2]
                    if flat and i1 > i0:                 # one pass over the rows: y's and x's rows align
                        _axpy3(yf, y0, i0 * Wo + c0, (i1 - 1) * Wo + c1, a, bb, cc, xf, xr + s * dw,
                               xr + (s + 1) * dw, xr + (s + 2) * dw, 1)
                        continue
                    for i in range(i0, i1):
                        xi = xr + i * sh * W
                        _axpy3(yf, y0 + i * Wo, c0, c1, a, bb, cc, xf, xi + s * dw, xi + (s + 1) * dw,
                               xi + (s + 2) * dw, sw)
                        for t in range(s, s + 3):         # then each tap alone outside [c0, c1)
                            j0, j1 = valid_range(t * dw - left, sw, W, Wo)
                            _axpy(yf, y0 + i * Wo, j0, min(j1, c0), wf[w0 + t], xf, xi + t * dw, sw)
                            _axpy(yf, y0 + i * Wo, max(j0, c1), j1, wf[w0 + t], xf, xi + t * dw, sw)
                for s in range(S - S % 3, S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    if flat and i1 > i0:
                        _axpy(yf, y0, i0 * Wo + j0, (i1 - 1) * Wo + j1, wf[w0 + s], xf, xr + s * dw, 1)
                        continue
                    for i in range(i0, i1):
                        _axpy(yf, y0 + i * Wo, j0, j1, wf[w0 + s], xf, xr + i * sh * W + s * dw, sw)
        if flat:                                         # the border columns the passes ran through
            for j in range(J0):
                _output_column(xf, wf, shape, n, k, j, b0, b1, top, left, dh, dw, yf)
            for j in range(J1, Wo):
                _output_column(xf, wf, shape, n, k, j, b0, b1, top, left, dh, dw, yf)


@njit(parallel=True, cache=True)
def backward_data(dyf, wf, shape, top, left, sh, sw, dh, dw, rows, flat, J0, J1, dxf):
    """dx = the gradient of conv with respect to x; an item is ``rows`` input rows of a plane (n, c)."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    Kg, blocks = K // (C // Cg), (H + rows - 1) // rows
    for item in prange(N * C * blocks):
        b, ci, n = item % blocks, (item // blocks) % C, item // (blocks * C)
        h0, h1 = b * rows, min(H, (b + 1) * rows)
        g, c = ci // Cg, ci % Cg
        x0 = (n * C + ci) * H * W
        for e in range(x0 + h0 * W, x0 + h1 * W):
            dxf[e] = 0
        for r in range(R):
            # the output rows i whose kernel row r reads an input row h = i*sh + r*dh - top of this block
            lo, hi = (h0 - r * dh + top + sh - 1) // sh, (h1 - r * dh + top + sh - 1) // sh
            i0, i1 = valid_range(r * dh - top, sh, H, Ho)
            i0, i1 = _overlap(i0, i1, lo, hi)
            for k in range(g * Kg, (g + 1) * Kg):
                y0, w0 = (n * K + k) * Ho * Wo, ((k * Cg + c) * R + r) * S
                if flat and i1 > i0:   # gather: dx[q] += w[s] * dy[q - shift(s)], q = h*W + col, one pass
                    h_first, h_last = i0 + r * dh - top, i1 - 1 + r * dh - top
                    yr = y0 - (r * dh - top) * W + left  # dy index of dx index q for tap s: yr - s*dw + q
                    for s in range(0, S - S % 3, 3):     # columns where the three taps read valid outputs
                        c0, c1 = max(0, (s + 2) * dw - left), min(W, Wo + s * dw - left)
                        _axpy3(dxf, x0, h_first * W + c0, h_last * W + max(c0, c1), wf[w0 + s], wf[w0 + s + 1],
                               wf[w0 + s + 2], dyf, yr - s * dw, yr - (s + 1) * dw, yr - (s + 2) * dw, 1)
                    for s in range(S - S % 3, S):
                        c0, c1 = max(0, s * dw - left), min(W, Wo + s * dw - left)
                        _axpy(dxf, x0, h_first * W + c0, h_last * W + max(c0, c1), wf[w0 + s], dyf,
                              yr - s * dw, 1)
                    continue
                for s in range(S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    for i in range(i0, i1):
                        _scatter_axpy(dxf, x0 + (i * sh + r * dh - top) * W + s * dw - left, j0, j1,
                                      wf[w0 + s], dyf, y0 + i * Wo, sw)
        if flat:                                         # the border columns the passes ran through
            for col in range(J0):
                _input_column(dyf, wf, shape, n, ci, col, h0, h1, top, left, dh, dw, dxf)
            for col in range(J1, W):
                _input_column(dyf, wf, shape, n, ci, col, h0, h1, top, left, dh, dw, dxf)


@njit(parallel=True, cache=True)
def backward_filter(xf, dyf, shape, top, left, sh, sw, dh, dw, flat, dwf):
    """dw = the gradient of conv with respect to w; an item is the (k, c) slice of dw (R*S weights, each one
    thread's sum in a fixed order). On the flat path a tap's dot runs through the columns between its valid
    rows too; those products are subtracted again (a run as long as the plane vectorises; per-row dots of a
    few dozen products mostly do not)."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    Kg = K // (C // Cg)
    for item in prange(K * Cg):
        k, c = item // Cg, item % Cg
        w0 = item * R * S
        for e in range(w0, w0 + R * S):
            dwf[e] = 0
        for n in range(N):                               # one image's planes stay in cache over its R*S taps
            x0, y0 = (n * C + (k // Kg) * Cg + c) * H * W, (n * K + k) * Ho * Wo
            for r in range(R):
                i0, i1 = valid_range(r * dh - top, sh, H, Ho)
                for s in range(S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    acc = dwf[w0 + r * S + s]
                    if flat and i1 > i0:
                        xr = x0 + (r * dh - top) * W + s * dw - left
                        acc = _dot(acc, dyf, y0, xf, xr, i0 * Wo + j0, (i1 - 1) * Wo + j1, 1)
                        for i in range(i0, i1 - 1):      # minus the between-rows products
                            acc = -_dot(-acc, dyf, y0, xf, xr, i * Wo + j1, (i + 1) * Wo + j0, 1)
                    else:
                        for i in range(i0, i1):
                            acc = _dot(acc, dyf, y0 + i * Wo, xf, x0 + (i * sh + r * dh - top) * W + s * dw - left,
                                       j0, j1, sw)
                    dwf[w0 + r * S + s] = acc
