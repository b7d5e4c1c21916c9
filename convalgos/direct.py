"""Direct convolution, "direct": the defining sum, computed by a Numba loop nest.

Maths. With g = k // Kg the group of output channel k (Cg = C/groups input and Kg = K/groups output channels
per group), top/left the padding and x read as zero outside its H x W extent:

    y[n, k, i, j] = sum_{c < Cg, r < R, s < S} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]

FLOPs (``flops``): one multiply and one add per tap, 2 * N * K * (C/groups) * R * S * Ho * Wo = ``p.flops``;
padded taps are skipped, not multiplied by zero, so near the borders slightly less is done.

Workspace: none (``workspace_bytes`` is 0). Padding is handled by bounds, not by a padded copy: for an output
row i only the kernel rows r whose input row lies inside x are visited, and for a kernel column s the output
columns j whose input column lies inside x form one contiguous range [j0, j1) computed once per tap
(``_col_range``), so the innermost loop has no per-element branch.

Constraints: none; any stride, asymmetric padding, dilation, groups, depthwise; float32 and float64 (each its
own compiled kernel; float16 is computed in float32 by ``conv2d``).

Loop order. ``out`` is the accumulator: each output row is zeroed, then every tap adds its weight times the
matching input row segment into it. The innermost loop runs over the output columns j, contiguous in ``out``
(and in ``x`` when the stride is 1), so it vectorises; the row being accumulated stays in L1.

- Ordinary and grouped layers (``_grouped``): the parallel items are (image n, group g, block of ``K_BLOCK``
  output channels), so even batch 1 keeps both cores busy. A block accumulates ``K_BLOCK`` output rows at once:
  each input element loaded is multiplied by ``K_BLOCK`` weights (register blocking over output channels),
  which cuts the loads of x per multiply-add by that factor. Loops: n, g, k-block (parallel) > i > c > r > s > j.
- Depthwise layers (Cg = 1, ``_depthwise``): there is nothing to share between output channels, so the items
  are the (n, k) planes and a row gathers its R*S taps; each inner loop is one multiply-add per element.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from .params import ConvParams
from .registry import Algorithm, register

#: output elements accumulated per work item (a block of whole output rows): 8 KiB of float32, in L1.
SEGMENT = 2048


def phase_plane(p: ConvParams) -> tuple[int, int]:
    """(Hq, Wq): rows and columns of one phase of the padded input (and Wq is the flat output pitch)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return Ho + (p.R - 1) * dh // sh + 1, Wo + (p.S - 1) * dw // sw


def rows_per_item(p: ConvParams) -> int:
    return max(1, min(p.out_hw[0], SEGMENT // phase_plane(p)[1]))


@njit(cache=True)
def _share(n_items, thread, n_threads):
    """The range of items thread ``thread`` of ``n_threads`` takes (equal contiguous shares)."""
    return thread * n_items // n_threads, (thread + 1) * n_items // n_threads


@njit(parallel=True, cache=True)
def _split_phases(x, top, left, sh, sw, Hq, Wq, xq):
    """xq[n, c] = the phases of x[n, c] zero-padded: padded (ph, pw) goes to phase (ph % sh, pw % sw), at row
    ph // sh and column pw // sw of that phase's Hq x Wq block; padded positions past sh*Hq or sw*Wq are dropped.
    """
    N, C, H, W = x.shape
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        plane = xq[n, c]
        plane[:] = 0.0
        for i in range(max(0, min(H, sh * Hq - top))):
            ph = i + top
            for pw0 in range(left, left + min(sw, W)):     # the first padded column of each column phase
                q0, count = pw0 // sw, min(Wq - pw0 // sw, (W - 1 - (pw0 - left)) // sw + 1)
                if count > 0:
                    start = (((ph % sh) * sw + pw0 % sw) * Hq + ph // sh) * Wq + q0
                    plane[start:start + count] = x[n, c, i, pw0 - left::sw][:count]


@njit(cache=True, fastmath={"contract"})
def _add_taps3(acc, xa, wa, xb, wb, xc, wc):
    """acc[t] += wa*xa[t] + wb*xb[t] + wc*xc[t]: three taps for one load and store of acc."""
    for t in range(acc.size):
        acc[t] += wa * xa[t] + wb * xb[t] + wc * xc[t]


@njit(cache=True, fastmath={"contract"})
def _add_tap(acc, xa, wa):
    """acc[t] += wa * xa[t]."""
    for t in range(acc.size):
        acc[t] += wa * xa[t]


@njit(cache=True)
def _tap_start(q, i0, R, S, sh, sw, dh, dw, Hq, Wq):
    """Where tap q = (c, r, s) reads output element (i0, 0) in its channel's phase planes (c is not needed)."""
    r, s = (q // S) % R, q % S
    phase = ((r * dh) % sh) * sw + (s * dw) % sw
    return ((phase * Hq + i0 + (r * dh) // sh) * Wq + (s * dw) // sw)


@njit(cache=True)
def _accumulate(xq, w, n, k, c0, i0, R, S, sh, sw, dh, dw, Hq, acc):
    """acc[t] = sum over taps q = (c, r, s) of w[k, q] * xq[n, c0 + c, tap_start(q) + t]: rows i0.. of plane k.

    xq: (N, C, sh*sw*Hq*Wq) phase planes; w: (K, Cg*R*S). Three taps per pass over acc."""
    n_taps, Wq = w.shape[1], xq.shape[2] // (sh * sw * Hq)
    acc[:] = 0.0
    q = 0
    while q + 3 <= n_taps:
        xa = xq[n, c0 + q // (R * S), _tap_start(q, i0, R, S, sh, sw, dh, dw, Hq, Wq):]
        xb = xq[n, c0 + (q + 1) // (R * S), _tap_start(q + 1, i0, R, S, sh, sw, dh, dw, Hq, Wq):]
        xc = xq[n, c0 + (q + 2) // (R * S), _tap_start(q + 2, i0, R, S, sh, sw, dh, dw, Hq, Wq):]
        _add_taps3(acc, xa, w[k, q], xb, w[k, q + 1], xc, w[k, q + 2])
        q += 3
    for q in range(q, n_taps):
        _add_tap(acc, xq[n, c0 + q // (R * S), _tap_start(q, i0, R, S, sh, sw, dh, dw, Hq, Wq):], w[k, q])


@njit(parallel=True, cache=True)
def _direct(xq, w, R, S, sh, sw, dh, dw, Hq, rows, acc, out):
    """out = the convolution; one item is a block of ``rows`` output rows of one plane (n, k).

    Each thread owns acc[thread] (rows * Wq elements: output (i, j) is element (i - i0)*Wq + j) and takes an
    equal share of the items."""
    N, C = xq.shape[0], xq.shape[1]
    K, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    Cg = w.shape[1] // (R * S)
    Kg = K // (C // Cg)
    Wq = acc.shape[1] // rows
    n_blocks = (Ho + rows - 1) // rows
    n_threads = acc.shape[0]
    for thread in prange(n_threads):
        start, stop = _share(N * K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            n, k, i0 = item // (K * n_blocks), (item // n_blocks) % K, (item % n_blocks) * rows
            n_rows = min(rows, Ho - i0)
            block = acc[thread, :n_rows * Wq]
            _accumulate(xq, w, n, k, (k // Kg) * Cg, i0, R, S, sh, sw, dh, dw, Hq, block)
            for i in range(n_rows):
                out[n, k, i0 + i] = block[i * Wq:i * Wq + Wo]


class Direct(Algorithm):
    """The defining sum over a zero-padded copy of x, as long flat contiguous loops, three taps per pass."""

    name = "direct"
    deterministic = True
    # float32: sequential accumulation over Cg*R*S taps; measured below 1e-6 on C = 512 3x3 layers.
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def workspace_bytes(self, p: ConvParams) -> int:
        (sh, sw), (Hq, Wq) = p.stride, phase_plane(p)
        return (p.N * p.C * sh * sw * Hq * Wq + get_num_threads() * rows_per_item(p) * Wq) * p.itemsize

    def flops(self, p: ConvParams) -> int:
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        (Hq, Wq), rows = phase_plane(p), rows_per_item(p)
        xq = self.workspace.get("direct.phases", (p.N, p.C, sh * sw * Hq * Wq), x.dtype)
        acc = self.workspace.get("direct.acc", (get_num_threads(), rows * Wq), x.dtype)
        _split_phases(x, top, left, sh, sw, Hq, Wq, xq)
        _direct(xq, w.reshape(p.K, -1), p.R, p.S, sh, sw, dh, dw, Hq, rows, acc, out)


register(Direct())
