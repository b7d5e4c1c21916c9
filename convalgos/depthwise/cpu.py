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

Forward (``depthwise_planes``): an item is a plane (n, k); the valid outputs of each tap (those reading inside
x) are tabulated once per call, per row tap and per column tap (``axis_taps``); for a stride > 1 the thread
first splits the plane into its sh * sw phases (each Hc x Wc = ceil(H/sh) x ceil(W/sw), ``phase_split``) so
taps read contiguously. When Wo = Wc (all MobileNet layers), an output and its tap are the same distance apart
in the flat plane on every row, so the rows whose taps all lie inside x are one flat pass per three taps
(acc[t] = prev[t] + wa*xa[t] + wb*xb[t] + wc*xc[t] over thousands of t, ping-ponging between two partial-sum
buffers, which LLVM vectorises), after which the one or two border columns of each row, where the pass wrapped
into the next row, are recomputed tap by tap. Other rows get the same passes over their common valid columns,
then their border columns.
Channels-last rule (``channels_last``, forward only): with K == C >= CHANNELS_LAST_MIN_C channels and planes of
at most CHANNELS_LAST_MAX_PLANE outputs (MobileNet's 7x7 with 1024 channels) the plane passes are too short to
vectorise, so x is moved channels-last (zero-padded, N Hp Wp C), each pass runs over all C channels of one
output pixel (acc[c] += w[r, s, c] * x[i + r, j + s, c], three taps per pass), and y is moved back.

Backward-data (``depthwise_data``) gathers, per plane (n, c): the thread copies dy's m planes into a buffer
zero-bordered by (R-1)*dh//sh rows and (S-1)*dw//sw columns, and for each phase (rho_h, rho_w) of dx (input
rows hp = h + top with hp % sh = rho_h receive only the taps with r*dh % sh = rho_h, from dy row
(hp - r*dh) / sh; likewise columns: ``kernels.phases.data_phases``) sums the phase's taps in flat passes of three
over the padded planes, then writes that phase's rows and columns of dx. Phases without taps are zero.

Backward-filter (``depthwise_filter``): one channel k per item, over all images: for each tap, one dot per
output row over the columns where the tap reads inside x, read in place (stride > 1: from the thread's
polyphase copy of the plane), summed in a fixed order (deterministic, no atomics).

FLOPs (``flops``, one multiply and one add per term): forward 2*N*K*T, T = the (output, tap) pairs that read
inside x (the zero-weight taps that pad a row's list to a multiple of three and the wrapped border columns the
flat passes recompute, up to two per row, are not counted); channels-last 2*N*K*R*S*Ho*Wo (padded taps
multiplied by zero); backward-filter 2*N*K*T; backward-data 2*N*C*sum over phases of
(taps rounded up to a multiple of three) * ((rows - 1)*Wd + columns).

Workspace (``workspace_bytes``), per thread: forward 2*Ho*Wo partial sums plus, for a stride > 1, one plane's
phases (``phase_split``); channels-last keeps x and y channels-last (N Hp Wp C and N Ho Wo K) and the weights
(R S K); backward-data m padded dy planes (m*Hd*Wd, ``kernels.phases.data_plane``), a phase result and two partial
sums (3 * Hmax * Wd, Hmax the most rows of a phase); backward-filter one plane's phases for a stride > 1.

Constraints: groups == C (one group per input channel), any K = m*C, stride, asymmetric padding and dilation;
float32 and float64 (float16 computed in float32 by ``convalgos.run``).
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.phases import data_phases, data_plane
from ..params import ConvParams
from ..registry import SUPPORTED, Algorithm, Support, unsupported
from .channels_last import depthwise_channels_last, from_channels_last, to_channels_last
from .kernels import axis_taps, depthwise_data, depthwise_filter, depthwise_planes

#: depthwise layers with at least this many channels and at most this many outputs per plane run channels-last
#: (passes as long as C instead of a plane); measured 1.8x faster on 1024 channels of 7x7, no gain at 14x14.
CHANNELS_LAST_MIN_C, CHANNELS_LAST_MAX_PLANE = 64, 100


def channels_last(p: ConvParams) -> bool:
    """Whether the forward pass runs channels-last (many channels, small planes, no channel multiplier)."""
    return p.K == p.C and p.C >= CHANNELS_LAST_MIN_C and p.out_hw[0] * p.out_hw[1] <= CHANNELS_LAST_MAX_PLANE


def phase_split(p: ConvParams) -> int:
    """Elements of one thread's polyphase copy of a plane (none for stride 1)."""
    (sh, sw), (H, W) = p.stride, (p.H, p.W)
    return sh * sw * ((H + sh - 1) // sh) * ((W + sw - 1) // sw) if sh * sw > 1 else 0


def padded_extent(p: ConvParams) -> tuple[int, int]:
    """(Hp, Wp): the part of the zero-padded input that the outputs read (the channels-last copy)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    return (Ho - 1) * sh + (p.R - 1) * dh + 1, (Wo - 1) * sw + (p.S - 1) * dw + 1


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
    """Depthwise layers plane by plane: in-place flat passes (or channels-last on small planes), per-plane
    phase gathers for backward-data, per-channel row dots for backward-filter."""

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
        if op == "forward" and channels_last(p):
            Hp, Wp = padded_extent(p)
            return (p.N * Hp * Wp * p.C + p.N * p.out_hw[0] * p.out_hw[1] * p.K + p.R * p.S * p.K) * p.itemsize
        if op == "forward":
            return threads * (phase_split(p) + 2 * p.out_hw[0] * p.out_hw[1]) * p.itemsize
        if op == "backward_filter":
            return threads * phase_split(p) * p.itemsize
        _, _, Hd, Wd = data_plane(p)
        phases, _ = data_tables(p)
        return threads * (p.K // p.C * Hd * Wd + 3 * int(phases[:, 2].max()) * Wd) * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if op == "forward" and channels_last(p):
            return p.flops
        if op in ("forward", "backward_filter"):
            rows, cols = tap_ranges(p)
            return 2 * p.N * p.K * int((rows[3] - rows[2]).sum() * (cols[3] - cols[2]).sum())
        phases, _ = data_tables(p)
        Wd, m = data_plane(p)[3], p.K // p.C
        terms = sum(-(-m * (t1 - t0) // 3) * 3 * ((Ha - 1) * Wd + Wa) for _, _, Ha, Wa, t0, t1 in phases.tolist())
        return 2 * p.N * p.C * terms

    def forward(self, x, w, p: ConvParams, out) -> None:
        if channels_last(p):
            self._forward_channels_last(x, w, p, out)
            return
        (sh, sw), Wo = p.stride, p.out_hw[1]
        rows, cols = tap_ranges(p)
        threads = get_num_threads()
        split = self._split(p, x.dtype)
        partial = self.workspace.get("depthwise.partial", (threads, 2 * p.out_hw[0] * Wo), x.dtype)
        depthwise_planes(x.reshape(p.N, p.C, -1), w.reshape(p.K, -1), rows, cols, p.H, p.W, sh, sw, Wo, split,
                         partial, out.reshape(p.N, p.K, -1))

    def _forward_channels_last(self, x, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)), (Ho, Wo) = p.stride, p.dilation, p.padding, p.out_hw
        Hp, Wp = padded_extent(p)
        xt = self.workspace.get("depthwise.x_channels_last", (p.N, Hp, Wp, p.C), x.dtype)
        yt = self.workspace.get("depthwise.y_channels_last", (p.N, Ho, Wo, p.K), x.dtype)
        wt = self.workspace.get("depthwise.w_channels_last", (p.R * p.S, p.K), x.dtype)
        wt[...] = w.reshape(p.K, p.R * p.S).T
        to_channels_last(x, top, left, xt)
        depthwise_channels_last(xt, wt, p.R, p.S, sh, sw, dh, dw, yt)
        from_channels_last(yt, out)

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

