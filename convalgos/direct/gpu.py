"""GPU direct convolution: each pass's defining sum, tap by tap, with shared-memory tiles (CPU twin:
``convalgos.direct``; the kernels: ``gpu_kernels.py``).

    forward          y[n, k, i, j]  = sum_{c, r, s} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] w[k, c, r, s]
    backward_data    dx[n, g*Cg + c, h, v] = sum over (k in group g, r, s, i, j) with i*sh + r*dh - top = h and
                                             j*sw + s*dw - left = v of dy[n, k, i, j] w[k, c, r, s]
    backward_filter  dw[k, c, r, s] = sum_{n, i, j} dy[n, k, i, j] x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]

- forward (``direct_kernel``): a block computes a TH x TW tile of output pixels of one image for KB output
  channels of one group, each thread one pixel with KB accumulators in registers; per input channel, kernel
  row and chunk of kernel columns it loads the input rows that tap row touches (zero outside the image: the
  padding costs no branch) and the weights into shared memory. The column chunk is as large as fits PATCH_W
  columns, so any kernel width, stride and dilation fit (the tile narrows for very large strides). Grid x:
  (image, group, channel block) by column tile (up to 2^31 - 1 blocks); y: the row tiles.
- backward_data, polyphase (as on the CPU, ``kernels.phases``): the dx elements of row phase rho_h = (h + top)
  % sh are reached only by the taps r with r*dh % sh == rho_h, and along that phase the sum is a stride-1
  correlation of dy with those taps flipped, at dilation dh / gcd(sh, dh). So for each of the sh*sw phases of
  dx, ``phase_weights_kernel`` writes the phase's taps flipped, K and C swapped within each group, and the
  forward kernel runs on dy with them (stride 1, that dilation, a leading pad that may be negative) straight
  into the strided view of dx that the phase covers. Phases no tap reaches (cut off by the stride) are zero.
  Each dx element is one thread's sum: no atomics.
- backward_filter (``filter_kernel``): a block computes KB output channels by one input channel by a chunk of
  up to FILTER_TAPS taps; its threads walk the N*Ho*Wo output pixels FILTER_LANES at a time, dy's values for
  the KB channels staged in shared memory, each thread multiplying its pixel's x value at its tap into KB
  accumulators (skipped where the tap reads padding), then the lanes' sums are added by a fixed tree in shared
  memory. Grid x only: (group, channel block, input channel, tap chunk).

FLOPs (``flops``, as done; the channel blocks' padding to multiples of KB aside): forward 2*N*K*Cg*R*S*Ho*Wo =
``p.flops`` (padded taps multiplied by zero); backward_data the phases' forward passes, 2*N*C*Kg* sum over
phases of (taps * rows * columns) (at stride 1: 2*N*C*Kg*R*S*H*W), padded taps multiplied by zero;
backward_filter 2*K*Cg*N*(sum_r rows_r)*(sum_s cols_s), rows_r and cols_s the output rows and columns whose tap
r, s reads inside x (padded taps skipped).
Workspace: none for forward and backward_filter (shared memory only); backward_data the phases' weights,
K*Cg*R*S elements in all. Constraints: every launch within CUDA's grid limits (forward and backward_data: at
most 65535 row tiles of TH rows). Any stride, padding, dilation and groups (depthwise included).
Deterministic: every element is one thread's sum, or a fixed tree of them, in a fixed order.
"""
from __future__ import annotations

import math

from .. import gpu_ops
from ..arrays import simulator_enabled
from ..gpu_base import GPUAlgorithm, grid_fits, launch, launch_1d
from ..kernels.loops import valid_range
from ..kernels.phases import axis_phases
from ..params import ConvParams
from ..registry import SUPPORTED, check_pass
from .gpu_kernels import KB, PATCH_W, TH, TW, direct_kernel, filter_kernel, phase_weights_kernel
from .shared import TOLERANCE

#: backward_filter's block: pixel lanes (a power of two) by taps, on a GPU and under the simulator.
FILTER_LANES, FILTER_TAPS = 32, 16
SIM_FILTER_LANES, SIM_FILTER_TAPS = 4, 4


def tiling(N: int, groups: int, Kg: int, Ho: int, Wo: int, S: int, sw: int, dw: int):
    """(grid, block, s_chunk, k_blocks, col_tiles) of the forward kernel writing an (N, groups*Kg, Ho, Wo)
    result with an S-column kernel at column stride sw and dilation dw: the tile shrinks to the output and to
    strides too wide to share."""
    tw = max(1, min(TW, Wo, (PATCH_W - 1) // sw + 1))
    th = min(TH, Ho)
    s_chunk = max(1, min(S, (PATCH_W - 1 - (tw - 1) * sw) // dw + 1))
    k_blocks = math.ceil(Kg / KB)
    col_tiles = math.ceil(Wo / tw)
    grid = (col_tiles * N * groups * k_blocks, math.ceil(Ho / th))
    return grid, (tw, th), s_chunk, k_blocks, col_tiles


def axis_plan(size: int, kernel: int, dilation: int, stride: int, before: int):
    """backward_data along one axis, per phase: (start, count, taps) with dx positions start + t*stride for
    t < count, and taps = (first tap, tap step, number of taps, dilation in dy, leading pad in dy), or None when
    no tap reaches the phase."""
    plan = []
    for rho, taps, first, count in axis_phases(size, kernel, dilation, stride, before):
        start = first * stride + rho - before
        if taps.size == 0:
            plan.append((start, count, None))
            continue
        q = (taps * dilation - rho) // stride            # dy offset of each tap: dx position a*stride + rho
        many = taps.size > 1                             # reads dy row a - q
        plan.append((start, count, (int(taps[0]), int(taps[1] - taps[0]) if many else 1, int(taps.size),
                                    int(q[1] - q[0]) if many else 1, int(q[-1]) - first)))
    return plan


def data_phases(p: ConvParams):
    """backward_data's phases of dx: (rows plan, columns plan) pairs (``axis_plan``), row phase major."""
    (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
    return [(a, b) for a in axis_plan(p.H, p.R, dh, sh, top) for b in axis_plan(p.W, p.S, dw, sw, left)]


def filter_block(p: ConvParams) -> tuple[int, int, int]:
    """(lanes, taps per block, most taps per block) of backward_filter's blocks."""
    lanes, most = (SIM_FILTER_LANES, SIM_FILTER_TAPS) if simulator_enabled() else (FILTER_LANES, FILTER_TAPS)
    return lanes, min(most, p.R * p.S), most


def valid_pairs(p: ConvParams) -> int:
    """(output pixel, tap) pairs of one image and channel pair whose tap reads inside x."""
    (top, _), (left, _), (sh, sw), (dh, dw), (Ho, Wo) = *p.padding, p.stride, p.dilation, p.out_hw
    rows = sum(i1 - i0 for i0, i1 in (valid_range(r * dh - top, sh, p.H, Ho) for r in range(p.R)))
    cols = sum(j1 - j0 for j0, j1 in (valid_range(s * dw - left, sw, p.W, Wo) for s in range(p.S)))
    return rows * cols


class GPUDirect(GPUAlgorithm):
    """The defining sums with shared-memory tiles; backward_data by phases (see the module docstring)."""

    name = "direct"
    deterministic = True
    tolerance = TOLERANCE

    def constraints(self, p: ConvParams, op: str = "forward"):
        if check_pass(op) == "forward":
            return grid_fits(self.name, *tiling(p.N, p.groups, p.Kg, *p.out_hw, p.S, *p.stride[1:],
                                                p.dilation[1])[0])
        if op == "backward_filter":
            _, taps, _ = filter_block(p)
            blocks = p.groups * math.ceil(p.Kg / KB) * p.Cg * math.ceil(p.R * p.S / taps)
            return grid_fits(self.name, blocks, 1)
        for (_, rows, row_taps), (_, cols, col_taps) in data_phases(p):
            if row_taps and col_taps and rows and cols:
                fits = grid_fits(self.name, *tiling(p.N, p.groups, p.Cg, rows, cols, col_taps[2], 1,
                                                    col_taps[3])[0])
                if not fits:
                    return fits
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return p.K * p.Cg * p.R * p.S * p.itemsize if check_pass(op) == "backward_data" else 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if check_pass(op) == "backward_data":
            terms = sum(row_taps[2] * col_taps[2] * rows * cols
                        for (_, rows, row_taps), (_, cols, col_taps) in data_phases(p) if row_taps and col_taps)
            return 2 * p.N * p.C * p.Kg * terms
        if op == "backward_filter":
            return 2 * p.N * p.K * p.Cg * valid_pairs(p)
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        (top, _), (left, _) = p.padding
        self._direct(x, w, out, top, left, p.stride, p.dilation, p.groups, p.Kg, p.out_hw, (0, 1, 0, 1))

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        sh, sw = p.stride
        weights = self.buffer(w, "direct.phase_weights", (p.K * p.Cg * p.R * p.S,))
        used = 0
        for (row0, rows, row_taps), (col0, cols, col_taps) in data_phases(p):
            if rows == 0 or cols == 0:
                continue
            if row_taps is None or col_taps is None:     # no output reads these inputs
                gpu_ops.record("cupy.fill")
                out[:, :, row0::sh, col0::sw][:, :, :rows, :cols] = 0
                continue
            (r0, r_step, mh, dh, top), (s0, s_step, mw, dw, left) = row_taps, col_taps
            wq = weights[used:used + p.C * p.Kg * mh * mw].reshape(p.C, p.Kg, mh, mw)
            used += wq.size
            blocks, threads = launch_1d(wq.size)
            launch(phase_weights_kernel(), blocks, threads)(w, wq, r0, r_step, s0, s_step)
            self._direct(dy, wq, out, top, left, (1, 1), (dh, dw), p.groups, p.Cg, (rows, cols),
                         (row0, sh, col0, sw))

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        (top, _), (left, _) = p.padding
        lanes, taps, most = filter_block(p)
        k_blocks, tap_chunks = math.ceil(p.Kg / KB), math.ceil(p.R * p.S / taps)
        blocks = p.groups * k_blocks * p.Cg * tap_chunks
        launch(filter_kernel(p.compute_dtype, lanes, most), blocks, (lanes, taps))(
            x, dy, out, top, left, *p.stride, *p.dilation, k_blocks, tap_chunks)

    @staticmethod
    def _direct(a, w, out, top: int, left: int, stride, dilation, groups: int, Kg: int, out_hw, placement):
        """The forward kernel from a and w: an (N, groups*Kg) x out_hw result written into out at ``placement``
        (row0, row step, column 0, column step; ``direct_kernel``)."""
        grid, block, s_chunk, k_blocks, col_tiles = tiling(out.shape[0], groups, Kg, *out_hw, w.shape[3],
                                                           stride[1], dilation[1])
        launch(direct_kernel(str(out.dtype)), grid, block)(a, w, out, top, left, *stride, *dilation, s_chunk,
                                                           k_blocks, col_tiles, *out_hw, *placement)
