"""Depthwise convolution, "depthwise": one filter per input channel (groups == C), m = K/C filters per channel
(a channel multiplier; MobileNet's layers have m = 1), each pass plane by plane in per-thread buffers.

Maths. Output channel k reads only input channel c = k // m:

    forward          y[n, k, i, j]  = sum_{r, s} x[n, k // m, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, 0, r, s]
    backward-data    dx[n, c, h, v] = sum over (q < m, r, s, i, j) with i*sh + r*dh - top = h and
                                      j*sw + s*dw - left = v of  dy[n, c*m + q, i, j] * w[c*m + q, 0, r, s]
    backward-filter  dw[k, 0, r, s] = sum_{n, i, j} dy[n, k, i, j] * x[n, k // m, i*sh + r*dh - top, j*sw + s*dw - left]

x is read as zero outside its H x W extent. At stride 1, backward-data is this layer's forward pass applied to
dy with each filter flipped (r -> R-1-r, s -> S-1-s) and padded by (extent - 1 - pad) (for m = 1); backward-
filter is, for each channel, a correlation of the x plane with the dy plane as the kernel (stride and dilation
swapped). The tests check both identities.

A plane has only R*S taps, so the cost is in moving data, not in arithmetic, and a padded copy of the whole
tensor would cost as much as the convolution: every pass here works on one plane at a time, in per-thread
buffers at most a few planes large.

Forward (``rows.depthwise_rows``): an item is a plane (n, k). The thread copies x's plane into its own
zero-bordered buffer (at column stride > 2 as its column phases, so every read is contiguous), then computes
four output rows at a time, a vector of L outputs each, all R*S taps summed in registers. Measured on
MobileNet's depthwise layers (2-core Zen 5, AVX-512, b1, 2026-12-04, ms, this / the flat passes it replaced /
torch): 14x14 C512 0.041 / 0.088 / 0.067, stride 2 0.037 / 0.072 / 0.058; 7x7 C1024 0.054 / 0.082 / 0.059; 28x28
C256 0.063 / 0.082 / 0.083, stride 2 0.042 / 0.090 / 0.064; 112x112 C64 stride 2 0.109 / 0.168 / 0.122; it
loses only on the 112x112 C32 (0.087-0.108 / 0.084-0.091) and 56x56 C128 (0.106-0.179 / 0.101-0.155) layers,
where the flat passes read x in place and this copies it. Those flat passes (per plane and per row: tap
tables, border fixes) and a channels-last route for small planes are gone: one route serves every layer.

Backward-data (``depthwise_data``) gathers, per plane (n, c): the thread copies dy's m planes into a buffer
zero-bordered by (R-1)*dh//sh rows and (S-1)*dw//sw columns, and for each phase (rho_h, rho_w) of dx (input
rows hp = h + top with hp % sh = rho_h receive only the taps with r*dh % sh = rho_h, from dy row
(hp - r*dh) / sh; likewise columns: ``kernels.phases.data_phases``) sums the phase's taps in flat passes of three
over the padded planes, then writes that phase's rows and columns of dx. Phases without taps are zero.

Backward-filter (``depthwise_filter``): one channel k per item, over all images: for each tap, one dot per
output row over the columns where the tap reads inside x, read in place (stride > 1: from the thread's
polyphase copy of the plane), summed in a fixed order (deterministic, no atomics).

FLOPs (``flops``, one multiply and one add per term): forward 2*N*K*R*S * (Ho rounded up to whole blocks of
four rows) * (Wo rounded up to whole vectors), as computed (taps that read the padding multiply zeros);
backward-filter 2*N*K*T, T = the (output, tap) pairs that read inside x; backward-data 2*N*C*sum over phases of
(taps rounded up to a multiple of three) * ((rows - 1)*Wd + columns).

Workspace (``workspace_bytes``), per thread: forward one plane's buffer (``rows.buffer_shape``: Hb x phases x Wc,
plus a vector); backward-data m padded dy planes (m*Hd*Wd, ``kernels.phases.data_plane``), a phase result and two
partial sums (3 * Hmax * Wd, Hmax the most rows of a phase); backward-filter one plane's phases for a stride > 1.

Constraints: groups == C (one group per input channel), any K = m*C, stride, asymmetric padding and dilation;
float32 and float64 (float16 computed in float32 by ``convalgos.run``).
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.phases import data_phases, data_plane
from ..params import ConvParams
from ..registry import SUPPORTED, Algorithm, Support, unsupported
from ..kernels.simd import REGISTER_BYTES
from .kernels import axis_taps, depthwise_data, depthwise_filter
from .rows import ROWS, buffer_shape, depthwise_rows


def phase_split(p: ConvParams) -> int:
    """Elements of one thread's polyphase copy of a plane (none for stride 1)."""
    (sh, sw), (H, W) = p.stride, (p.H, p.W)
    return sh * sw * ((H + sh - 1) // sh) * ((W + sw - 1) // sw) if sh * sw > 1 else 0


def plane_buffer(p: ConvParams) -> tuple[int, int]:
    """(elements of one thread's plane buffer for the forward pass, vector lanes L)."""
    L = REGISTER_BYTES // p.itemsize
    Hb, phases, Wc = buffer_shape(*p.out_hw, *p.stride, p.R, p.S, *p.dilation, L)
    return Hb * phases * Wc + L, L


def tap_ranges(p: ConvParams):
    """(rows, cols): ``axis_taps`` along each axis, (phase, base, first, stop) of each row and column tap."""
    (sh, sw), (dh, dw), ((top, _), (left, _)), (Ho, Wo) = p.stride, p.dilation, p.padding, p.out_hw
    rows, cols = np.empty((4, p.R), np.int64), np.empty((4, p.S), np.int64)
    axis_taps(p.R, dh, top, sh, p.H, Ho, rows)
    axis_taps(p.S, dw, left, sw, p.W, Wo, cols)
    return rows, cols


def data_tables(p: ConvParams):
    """Backward-data's phases of dx as (h0, v0, rows, columns, t0, t1) and their taps as (r*S + s, offset of
    the phase's output (0, 0) in a padded dy plane), for ``depthwise_data`` (phases without outputs left out)."""
    (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
    PT, PL, _, Wd = data_plane(p)
    phases, taps = [], []
    for (rho_h, rt, fh, Ha), (rho_w, st, fw, Wa) in data_phases(p):
        if Ha and Wa:
            t0 = len(taps)
            taps += [(r * p.S + s, (fh + PT - r * dh // sh) * Wd + fw + PL - s * dw // sw) for r in rt for s in st]
            phases.append((fh * sh + rho_h - top, fw * sw + rho_w - left, Ha, Wa, t0, len(taps)))
    return np.array(phases, np.int64).reshape(-1, 6), np.array(taps, np.int64).reshape(-1, 2)


class Depthwise(Algorithm):
    """Depthwise layers plane by plane: four rows of vectors at a time from a buffered plane for the forward
    pass, per-plane phase gathers for backward-data, per-channel row dots for backward-filter."""

    name = "depthwise"
    deterministic = True
    # measured float32 normwise errors (random normal and uniform data, 4x32x112x112 and 64x1024x7x7): forward
    # <= 1.5e-7, backward-data <= 1.4e-7, backward-filter <= 9.3e-7 (row dots summed over 50k terms), so no pass
    # needs a wider tolerance; float16 (in float32) 3e-4.
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def constraints(self, p: ConvParams, op: str) -> Support:
        if p.groups != p.C:
            return unsupported(f"depthwise needs groups == C (one filter per input channel, K = m*C), got "
                               f"groups={p.groups}, C={p.C}, K={p.K}")
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        threads = get_num_threads()
        if op == "forward":
            return threads * plane_buffer(p)[0] * p.itemsize
        if op == "backward_filter":
            return threads * phase_split(p) * p.itemsize
        _, _, Hd, Wd = data_plane(p)
        phases, _ = data_tables(p)
        return threads * (p.K // p.C * Hd * Wd + 3 * int(phases[:, 2].max()) * Wd) * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if op == "forward":
            (Ho, Wo), L = p.out_hw, plane_buffer(p)[1]
            return 2 * p.N * p.K * p.R * p.S * -(-Ho // ROWS) * ROWS * -(-Wo // L) * L
        if op == "backward_filter":
            rows, cols = tap_ranges(p)
            return 2 * p.N * p.K * int((rows[3] - rows[2]).sum() * (cols[3] - cols[2]).sum())
        phases, _ = data_tables(p)
        Wd, m = data_plane(p)[3], p.K // p.C
        terms = sum(-(-m * (t1 - t0) // 3) * 3 * ((Ha - 1) * Wd + Wa) for _, _, Ha, Wa, t0, t1 in phases.tolist())
        return 2 * p.N * p.C * terms

    def forward(self, x, w, p: ConvParams, out) -> None:
        ((top, _), (left, _)), (sh, sw), (dh, dw) = p.padding, p.stride, p.dilation
        buf = self.workspace.get("depthwise.plane", (get_num_threads(), plane_buffer(p)[0]), x.dtype)
        depthwise_rows(x, w.reshape(p.K, -1), top, left, sh, sw, dh, dw, p.R, p.S, buf, out)

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        PT, PL, Hd, Wd = data_plane(p)
        phases, taps = data_tables(p)
        threads, most = get_num_threads(), int(phases[:, 2].max()) * Wd
        pad = self.workspace.get("depthwise.dy_padded", (threads, p.K // p.C * Hd * Wd), dy.dtype)
        partial = self.workspace.get("depthwise.partial", (threads, 2 * most), dy.dtype)
        result = self.workspace.get("depthwise.phase", (threads, most), dy.dtype)
        depthwise_data(dy, w.reshape(p.K, -1), phases, taps, p.stride[0], p.stride[1], PT, PL, Hd, Wd, pad,
                       partial, result, out)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        (sh, sw), Wo = p.stride, p.out_hw[1]
        rows, cols = tap_ranges(p)
        depthwise_filter(x.reshape(p.N, p.C, -1), dy.reshape(p.N, p.K, -1), rows, cols, p.H, p.W, sh, sw, Wo,
                         self._split(p, x.dtype), out.reshape(p.K, -1))

    def _split(self, p: ConvParams, dtype):
        """Each thread's buffer for one plane's phases (an empty one at stride 1)."""
        shape = (get_num_threads(), phase_split(p))
        return self.workspace.get("depthwise.phases", shape, dtype) if shape[1] else np.empty(shape, dtype)

