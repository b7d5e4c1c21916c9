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
in the inner loops, which are contiguous passes over output columns that the compiler vectorises. The kernels
(``kernels.py``) index flat arrays with unsigned offsets (no views, no negative-index test).

- forward: one work item per block of output rows of a plane (n, k) (Numba ``prange``; ``SEGMENT``
  outputs, so the block stays in L1 over all its taps). For every input channel and kernel row inside x, the
  taps s, s+1, s+2 are one pass over the columns where all three are valid (three multiply-adds per load and
  store of y), then each tap alone over the border columns the others miss.
- backward_data (a gather): one item per block of input rows of a plane (n, c). The outputs that read input
  row h are, for each kernel row r with h + top - r*dh = i*sh, output row i; the item sums
  dy[n, k, i, j] * w[k, c, r, s] over those rows, the group's k and the taps s into dx's row at columns
  j*sw + s*dw - left. Every dx row is owned by one item (no races, no atomics) and starts at zero, so
  elements no output reads stay zero.
- backward_filter: one item per (k, c) slice of dw, so each weight is one thread's sum in a fixed order
  (deterministic whatever the thread count): image by image (its planes stay in cache over the R*S taps), a
  dot product of dy's row with x's row over the valid columns, for every valid row. The dot product may be
  reassociated (``fastmath`` "reassoc") so it vectorises; the order is fixed at compile time, so runs repeat
  bitwise.

The flat path (``is_flat``: stride 1 and Wo = W, the "same" layers). One output row is short (the compiler's
vector loop takes 32 float32 per iteration, so rows of a few dozen columns ran mostly scalar: 2-6 GFLOP/s on
one thread for 14- to 56-column rows). When x's and y's rows are equally long, output m = i*Wo + j of a tap
reads x's flat m plus a constant, so one pass covers a whole block of rows. It runs through the border
columns between rows (reading the ends of the neighbouring rows, always inside x's plane), so those columns,
[0, J0) and [J1, Wo) (``interior``), are summed again afterwards, a pass down each column per tap.
backward_data does the same in gather form, dx[q] += w[k, c, r, s] * dy[q - shift(r, s)], three taps per
pass; backward_filter's dot runs over the block and subtracts the products of the between-row columns.
Measured on one thread (noisy shared machine; direct in brackets): forward 14 (16) GFLOP/s on 224x224,
11-13 (22) on 56x56, 3-4 (21) on 14x14, backward_filter 11 on 56x56 (was 1.7 row by row). Strided rows do
not vectorise: a stride-2 layer runs about 10x slower than direct.

FLOPs (``flops``, every pass): 2 per (output, tap) pair that reads inside x, 2*N*K*Cg*(sum_r rows_r)*
(sum_s cols_s), rows_r and cols_s the valid output rows and columns of kernel row r and column s; at most
``p.flops`` (padded taps are skipped, not multiplied by zero; the flat path's border sums and subtracted
products are not counted).

Workspace: none, in all three passes (``workspace_bytes`` is 0 and nothing is allocated but the caller's
result): why it exists. A memory cap of zero (``set_workspace_cap(0)``, the tuner's ``workspace_limit=0``)
must still leave an algorithm that runs, as cuDNN's IMPLICIT_GEMM does; its GPU twin is
``gpu.py``.

Constraints: none; any stride, asymmetric padding, dilation, groups and depthwise; float32 and float64 (each
its own compiled kernel; float16 is computed in float32 by ``run``).
"""
from __future__ import annotations

from ..kernels.loops import valid_range
from ..params import ConvParams
from ..registry import Algorithm
from . import kernels
from .shared import TOLERANCE

#: elements of the result one work item of forward and backward_data accumulates (8 KiB of float32: L1).
SEGMENT = 2048


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


def interior(p: ConvParams, op: str) -> tuple[int, int]:
    """[J0, J1): the columns of the pass's result (y for forward, dx for backward_data) that every kernel
    column reaches with a tap inside x (forward) or from a valid output (backward_data); stride 1."""
    left, dw, Wo = p.padding[1][0], p.dilation[1], p.out_hw[1]
    if op == "forward":
        return valid_range(-left, 1, p.W, Wo)[0], valid_range((p.S - 1) * dw - left, 1, p.W, Wo)[1]
    return max(0, (p.S - 1) * dw - left), min(p.W, Wo - left)


def is_flat(p: ConvParams) -> bool:
    """Stride 1 and rows of x as long as rows of y (Wo = W), with some interior columns: one pass per tap
    covers a block of rows, the flat offset from y to x being the same on every row."""
    J0, J1 = interior(p, "forward")
    return p.stride == (1, 1) and p.out_hw[1] == p.W and J1 > J0


class ImplicitGemm(Algorithm):
    """The three passes as patch-matrix products with the patches read in place (see the module docstring)."""

    name = "implicit_gemm"
    deterministic = True
    tolerance = TOLERANCE

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        rows, cols = valid_taps(p)
        return 2 * p.N * p.K * p.Cg * rows * cols

    def forward(self, x, w, p: ConvParams, out) -> None:
        kernels.forward(x.reshape(-1), w.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                        rows_per_item(p.out_hw[1]), is_flat(p), *interior(p, "forward"), out.reshape(-1))

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        kernels.backward_data(dy.reshape(-1), w.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                              rows_per_item(p.W), is_flat(p), *interior(p, "backward_data"), out.reshape(-1))

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        kernels.backward_filter(x.reshape(-1), dy.reshape(-1), layer_shape(p), *corner(p), *p.stride, *p.dilation,
                                is_flat(p), out.reshape(-1))

