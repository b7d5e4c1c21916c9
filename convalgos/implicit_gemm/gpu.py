"""GPU implicit GEMM: im2col's three matrix products with the patch matrix never materialised (CPU twin:
``convalgos.implicit_gemm``); zero workspace in every pass, so it is the algorithm that always fits.

Per group g, with W[g] = w[g*Kg:(g+1)*Kg] as (Kg x Cg*R*S) and the patch matrix (zero outside the image)

    X_patch[g][(c, r, s), (n, i, j)] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left],

the passes are three GEMMs, each computed by its own tiled kernel (``gpu_kernels.py``):

    forward          Y[g]  (Kg x N*Ho*Wo)    = W[g] @ X_patch[g]                reduction over (c, r, s)
    backward_data    dX[g] (Cg x N*H*W)      = W[g]^T @ dY_patch[g]             reduction over (k, r, s)
    backward_filter  dW[g] (Kg x Cg*R*S)     = dY[g] @ X_patch[g]^T             reduction over (n, i, j)

where dY_patch[g][(k, r, s), (n, h, v)] = dy[n, g*Kg + k, i, j] for the output (i, j) with i*sh + r*dh - top = h
and j*sw + s*dw - left = v, zero where none exists (the stride skips it or it lies in the padding): backward_data
is a gather, each dx element one thread's sum, with no atomics. Each T x T block of threads computes a T x T
tile of the result, walking the reduction in chunks of T: it loads the matching tiles of both operands into
shared memory, gathering the patch tile straight from x (or dy), then each thread does T multiply-adds from
shared memory. The patch matrices exist only tile by tile, in shared memory, so no pass has a workspace: with
``workspace_limit=0`` this one still runs, as cuDNN's IMPLICIT_GEMM does. backward_filter's reduction is long
(N*Ho*Wo) and dw small, so its blocks are T x T x FILTER_SLICES threads, each slice summing every
FILTER_SLICES-th chunk, the slices' sums added in order at the end.

Grid: x walks the result's columns in tiles of T, y the (group, row tile) pairs.

FLOPs (``flops``, as done: tiles' padding to multiples of T aside): forward 2*N*K*Cg*R*S*Ho*Wo = ``p.flops``
(taps in the padding multiplied by zero); backward_data 2*N*C*H*W*Kg*R*S (every (dx pixel, k, r, s), also those
the stride or the padding make zero: about sh*sw times ``p.flops``); backward_filter ``p.flops``.
Workspace: none. Constraints: each pass's grid within CUDA's limits (y: groups * ceil(rows / T) <= 65535, rows
being Kg for forward and backward_filter, Cg for backward_data). Deterministic: every element is one thread's
sum in a fixed order. Accuracy: sums of Cg*R*S (forward), Kg*R*S (backward_data) or N*Ho*Wo (backward_filter,
in FILTER_SLICES partial sums) products in the compute dtype.
"""
from __future__ import annotations

import math

from ..arrays import simulator_enabled
from ..gpu_base import GPUAlgorithm, grid_fits, launch
from ..params import ConvParams
from ..registry import check_pass
from .gpu_kernels import backward_data_kernel, backward_filter_kernel, implicit_gemm_kernel
from .shared import TOLERANCE

#: block tile edge on a GPU, and under the simulator (fewer simulated threads).
TILE = 16
SIM_TILE = 4
#: backward_filter's tile edge and reduction slices per block (8 x 8 x 4 = 256 threads), and the simulator's.
FILTER_TILE, FILTER_SLICES = 8, 4
SIM_FILTER_TILE, SIM_FILTER_SLICES = 4, 2


def tile_edge() -> int:
    return SIM_TILE if simulator_enabled() else TILE


def filter_block() -> tuple[int, int]:
    """(tile edge, slices) of backward_filter's blocks."""
    return (SIM_FILTER_TILE, SIM_FILTER_SLICES) if simulator_enabled() else (FILTER_TILE, FILTER_SLICES)


def launch_grid(p: ConvParams, op: str, T: int) -> tuple[int, int]:
    """(column tiles, groups * row tiles per group) of pass ``op``'s result matrices."""
    check_pass(op)
    Ho, Wo = p.out_hw
    rows, columns = {"forward": (p.Kg, p.N * Ho * Wo), "backward_data": (p.Cg, p.N * p.H * p.W),
                     "backward_filter": (p.Kg, p.Cg * p.R * p.S)}[op]
    return math.ceil(columns / T), p.groups * math.ceil(rows / T)


class GPUImplicitGemm(GPUAlgorithm):
    """Tiled GEMMs gathering patch tiles into shared memory on the fly (see the module docstring)."""

    name = "implicit_gemm"
    deterministic = True
    tolerance = TOLERANCE

    def constraints(self, p: ConvParams, op: str = "forward"):
        T = FILTER_TILE if op == "backward_filter" else TILE
        return grid_fits(self.name, *launch_grid(p, op, T))

    # workspace_bytes: the base's 0 (these kernels allocate nothing).

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if check_pass(op) == "backward_data":
            return 2 * p.N * p.C * p.H * p.W * p.Kg * p.R * p.S
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        self._launch(implicit_gemm_kernel(p.compute_dtype, tile_edge()), "forward", tile_edge(), 1, x, w, out, p)

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        self._launch(backward_data_kernel(p.compute_dtype, tile_edge()), "backward_data", tile_edge(), 1, dy, w,
                     out, p)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        T, Z = filter_block()
        self._launch(backward_filter_kernel(p.compute_dtype, T, Z), "backward_filter", T, Z, x, dy, out, p)

    @staticmethod
    def _launch(kernel, op: str, T: int, Z: int, a, b, out, p: ConvParams) -> None:
        blocks_x, blocks_y = launch_grid(p, op, T)
        (top, _), (left, _) = p.padding
        launch(kernel, (blocks_x, blocks_y), (T, T, Z))(a, b, out, top, left, *p.stride, *p.dilation, p.groups,
                                                        blocks_y // p.groups)
