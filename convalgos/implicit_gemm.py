"""Implicit GEMM, "implicit_gemm": im2col's matrix products with the patch matrix never built; no workspace.

Maths. im2col writes, per group g, the patch matrix (zero outside x; (top, left) the leading pads)

    P[(c, r, s), (n, i, j)] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]

and the three passes are three matrix products with it, W[g] being w[g*Kg:(g+1)*Kg] as (Kg, Cg*R*S):

    forward          Y[g]  = W[g] @ P             y[n, k, i, j]  = sum_{c,r,s} w[k, c, r, s] P[(c, r, s), (n, i, j)]
    backward_data    dP    = W[g]^T @ dY[g]       then dx = col2im(dP): each x element sums the dP entries of the
                                                  (output, tap) pairs that read it
    backward_filter  dW[g] = dY[g] @ P^T          dw[k, c, r, s] = sum_{n,i,j} dy[n, k, i, j] P[(c, r, s), (n, i, j)]

Here no P (nor dP) is ever stored: every row of P is a strided run of one input row read in place. For tap
(c, r, s) and output row i, P's entries are x's row i*sh + r*dh - top at columns j*sw + s*dw - left, for the
outputs j in the tap's valid range ``valid_range(s*dw - left, sw, W, Wo)`` (the rest read padding, and are
neither stored nor multiplied; a row outside x is skipped whole). So the borders cost no copy and no branch
in the inner loops, which are contiguous passes over output columns (over x's columns too at stride 1) that
the compiler vectorises:

The arrays are indexed flat with unsigned offsets (no views, so no reference counting in the loops, and no
negative-index test, which would stop vectorisation).

- forward: one work item per block of output rows of a plane (n, k) (Numba ``prange``; ``SEGMENT``
  outputs, so the block stays in L1 over all its taps). For every input channel and kernel row inside x, the
  taps s, s+1, s+2 are one pass over the columns where all three are valid (three multiply-adds per load and
  store of y), then each tap alone over the one or two border columns the others miss:
  y[n, k, i, j] += w[k, c, r, s] * x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left], j in its range.
- backward_data (a gather): one item per block of input rows of a plane (n, c). The outputs that read input
  row h are, for each kernel row r with h + top - r*dh = i*sh, output row i; the item sums
  dy[n, k, i, j] * w[k, c, r, s] over those rows, the group's k and the taps s into dx's row at columns
  j*sw + s*dw - left. Every dx row is owned by one item (no races, no atomics) and starts at zero, so
  elements no output reads stay zero.
- backward_filter: one item per (k, c) slice of dw, so each weight is one thread's sum in a fixed order
  (deterministic whatever the thread count): image by image (its planes stay in cache over the R*S taps), a
  dot product of dy's row with x's strided row over the valid columns, for every valid row. The dot product
  may be reassociated (``fastmath`` "reassoc") so it vectorises; the order is fixed at compile time, so
  runs repeat bitwise.

FLOPs (``flops``, every pass): 2 per (output, tap) pair that reads inside x, 2*N*K*Cg*(sum_r rows_r)*
(sum_s cols_s), rows_r and cols_s the valid output rows and columns of kernel row r and column s; at most
``p.flops`` (padded taps are skipped, not multiplied by zero).

Workspace: none, in all three passes (``workspace_bytes`` is 0 and nothing is allocated but the caller's
result): why it exists. A memory cap of zero (``set_workspace_cap(0)``, the tuner's ``workspace_limit=0``)
must still leave an algorithm that runs, as cuDNN's IMPLICIT_GEMM does; its GPU twin is
``convalgos.cuda.implicit_gemm``. The price: the inner loops are one output row long (direct's are whole
planes of a padded copy), and the compiler's vector loop takes 32 float32 per iteration, so rows of a few
dozen columns run partly scalar: measured on one thread, forward 10 GFLOP/s on 224-column rows, 6 on 56 and
2 on 14 (direct: 11-18), the backward passes down to 2-3x slower again; strided rows do not vectorise.

Constraints: none; any stride, asymmetric padding, dilation, groups and depthwise; float32 and float64 (each
its own compiled kernel; float16 is computed in float32 by ``run``).
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._kernels import valid_range
from .params import ConvParams
from .registry import Algorithm, register

#: elements of the result one work item of forward and backward_data accumulates (8 KiB of float32: L1).
SEGMENT = 2048


@njit(cache=True, inline="always")
def _axpy(dst, d0, j0, j1, a, src, s0, step):
    """dst[d0 + j] += a * src[s0 + j*step] for j0 <= j < j1 (flat arrays; contiguous when step is 1).
    Indices are unsigned, so Numba adds no negative-index wraparound test and the loop vectorises."""
    d0, s0, step = np.uint64(d0), np.uint64(s0), np.uint64(step)
    if step == 1:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[s0 + j]
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[s0 + j * step]


@njit(cache=True, inline="always")
def _axpy3(dst, d0, j0, j1, a, b, c, src, sa, sb, sc, step):
    """dst[d0 + j] += a*src[sa + j*step] + b*src[sb + j*step] + c*src[sc + j*step] for j0 <= j < j1: three
    taps per pass, so the destination is loaded and stored once per three multiply-adds (unsigned indices)."""
    d0, sa, sb, sc, step = np.uint64(d0), np.uint64(sa), np.uint64(sb), np.uint64(sc), np.uint64(step)
    if step == 1:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[sa + j] + b * src[sb + j] + c * src[sc + j]
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[sa + j * step] + b * src[sb + j * step] + c * src[sc + j * step]


@njit(cache=True, inline="always")
def _scatter_axpy(dst, d0, j0, j1, a, src, s0, step):
    """dst[d0 + j*step] += a * src[s0 + j] for j0 <= j < j1 (the transpose of ``_axpy``; unsigned indices)."""
    d0, s0, step = np.uint64(d0), np.uint64(s0), np.uint64(step)
    if step == 1:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j] += a * src[s0 + j]
    else:
        for j in range(np.uint64(j0), np.uint64(j1)):
            dst[d0 + j * step] += a * src[s0 + j]


@njit(cache=True, inline="always")
def _dot(acc, a, a0, b, b0, j0, j1, step):
    """acc + sum_j a[a0 + j] * b[b0 + j*step] for j0 <= j < j1 (unsigned indices; vectorised when the caller
    allows reassociation)."""
    a0, b0, step = np.uint64(a0), np.uint64(b0), np.uint64(step)
    for j in range(np.uint64(j0), np.uint64(j1)):
        acc += a[a0 + j] * b[b0 + j * step]
    return acc


@njit(cache=True, inline="always")
def _rows_in_block(i0, i1, b0, b1):
    """The rows [i0, i1) that lie in the block [b0, b1)."""
    return max(i0, b0), max(max(i0, b0), min(i1, b1))


@njit(parallel=True, cache=True)
def _forward(xf, wf, shape, top, left, sh, sw, dh, dw, rows, yf):
    """Flat x, w and y; ``shape`` = (N, C, H, W, K, Cg, R, S, Ho, Wo); an item is ``rows`` output rows of a
    plane (n, k)."""
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
                i0, i1 = _rows_in_block(i0, i1, b0, b1)
                w0 = ((k * Cg + c) * R + r) * S
                for s in range(0, S - S % 3, 3):         # taps s, s+1, s+2 together where all three are valid:
                    c0 = valid_range(s * dw - left, sw, W, Wo)[0]          # a tap further right starts no later
                    c1 = max(c0, valid_range((s + 2) * dw - left, sw, W, Wo)[1])    # and ends no later
                    for i in range(i0, i1):
                        xr = x0 + (i * sh + r * dh - top) * W - left
                        _axpy3(yf, y0 + i * Wo, c0, c1, wf[w0 + s], wf[w0 + s + 1], wf[w0 + s + 2], xf,
                               xr + s * dw, xr + (s + 1) * dw, xr + (s + 2) * dw, sw)
                    for t in range(s, s + 3):             # then each tap alone outside [c0, c1)
                        j0, j1 = valid_range(t * dw - left, sw, W, Wo)
                        for i in range(i0, i1):
                            xr = x0 + (i * sh + r * dh - top) * W + t * dw - left
                            _axpy(yf, y0 + i * Wo, j0, min(j1, c0), wf[w0 + t], xf, xr, sw)
                            _axpy(yf, y0 + i * Wo, max(j0, c1), j1, wf[w0 + t], xf, xr, sw)
                for s in range(S - S % 3, S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    for i in range(i0, i1):
                        xr = x0 + (i * sh + r * dh - top) * W + s * dw - left
                        _axpy(yf, y0 + i * Wo, j0, j1, wf[w0 + s], xf, xr, sw)


@njit(parallel=True, cache=True)
def _backward_data(dyf, wf, shape, top, left, sh, sw, dh, dw, rows, dxf):
    """Flat dy, w and dx; an item is ``rows`` input rows of a plane (n, c) of dx."""
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
            i0, i1 = valid_range(r * dh - top, sh, H, Ho)
            i0, i1 = _rows_in_block(i0, i1, (h0 - r * dh + top + sh - 1) // sh, (h1 - r * dh + top + sh - 1) // sh)
            for k in range(g * Kg, (g + 1) * Kg):
                y0 = (n * K + k) * Ho * Wo
                for s in range(S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    a = wf[((k * Cg + c) * R + r) * S + s]
                    for i in range(i0, i1):
                        _scatter_axpy(dxf, x0 + (i * sh + r * dh - top) * W + s * dw - left, j0, j1, a, dyf,
                                      y0 + i * Wo, sw)


@njit(parallel=True, cache=True, fastmath={"reassoc"})
def _backward_filter(xf, dyf, shape, top, left, sh, sw, dh, dw, dwf):
    """Flat x, dy and dw; an item is the (k, c) slice of dw (R*S weights, each one sum in a fixed order)."""
    N, C, H, W, K, Cg, R, S, Ho, Wo = shape
    Kg = K // (C // Cg)
    for item in prange(K * Cg):
        k, c = item // Cg, item % Cg
        w0 = item * R * S
        for e in range(w0, w0 + R * S):
            dwf[e] = 0
        for n in range(N):                             # one image's planes stay in cache over its R*S taps
            x0, y0 = (n * C + (k // Kg) * Cg + c) * H * W, (n * K + k) * Ho * Wo
            for r in range(R):
                i0, i1 = valid_range(r * dh - top, sh, H, Ho)
                for s in range(S):
                    j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                    acc = dwf[w0 + r * S + s]
                    for i in range(i0, i1):
                        acc = _dot(acc, dyf, y0 + i * Wo, xf, x0 + (i * sh + r * dh - top) * W + s * dw - left,
                                   j0, j1, sw)
                    dwf[w0 + r * S + s] = acc


def valid_taps(p: ConvParams) -> tuple[int, int]:
    """(sum over kernel rows of their valid output rows, sum over kernel columns of their valid output
    columns): the (output, tap) pairs reading inside x are N*K*Cg times their product."""
    (top, _), (left, _), (sh, sw), (dh, dw), (Ho, Wo) = *p.padding, p.stride, p.dilation, p.out_hw
    rows = sum(i1 - i0 for i0, i1 in (valid_range(r * dh - top, sh, p.H, Ho) for r in range(p.R)))
    cols = sum(j1 - j0 for j0, j1 in (valid_range(s * dw - left, sw, p.W, Wo) for s in range(p.S)))
    return rows, cols


def layer_shape(p: ConvParams) -> tuple[int, ...]:
    """(N, C, H, W, K, Cg, R, S, Ho, Wo): what the flat kernels index with."""
    return (p.N, p.C, p.H, p.W, p.K, p.Cg, p.R, p.S) + p.out_hw


def corner(p: ConvParams) -> tuple[int, int]:
    """(top, left): the leading pads, where output (0, 0)'s first tap reads."""
    return p.padding[0][0], p.padding[1][0]


def rows_per_item(row_length: int) -> int:
    """Rows of ``row_length`` per work item: as many as fit SEGMENT elements (at least one), so an item's
    rows stay in L1 over all its taps."""
    return max(1, SEGMENT // row_length)


class ImplicitGemm(Algorithm):
    """The three passes as patch-matrix products with the patches read in place (see the module docstring)."""

    name = "implicit_gemm"
    deterministic = True
    # forward and backward_data sum their products in a fixed order in the compute dtype, as direct does;
    # backward_filter sums N*Ho*Wo products per weight (reassociated), like im2col's GEMM
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        rows, cols = valid_taps(p)
        return 2 * p.N * p.K * p.Cg * rows * cols

    def forward(self, x, w, p: ConvParams, out) -> None:
        _forward(x.reshape(-1), w.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                 rows_per_item(p.out_hw[1]), out.reshape(-1))

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        _backward_data(dy.reshape(-1), w.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                       rows_per_item(p.W), out.reshape(-1))

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        _backward_filter(x.reshape(-1), dy.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                         out.reshape(-1))


register(ImplicitGemm())
