"""GPU implicit GEMM: the im2col GEMM with the patch matrix never materialised (CPU twin: ``convalgos.implicit_gemm``).

Per group g the convolution is the GEMM

    Y[g] (Kg x N*Ho*Wo) = W[g] (Kg x Cg*R*S) @ X_patch[g] (Cg*R*S x N*Ho*Wo),
    X_patch[g][(c, r, s), (n, i, j)] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]  (0 outside)

Each T x T block of threads computes a T x T tile of Y[g] (T output channels by T output pixels). It walks the
reduction dimension Cg*R*S in chunks of T: it loads a T x T tile of W and gathers the matching T x T tile of
X_patch straight from x into shared memory (decoding (c, r, s) and (n, i, j), zero outside the image), then
each thread does T multiply-adds from shared memory. The patch matrix exists only tile by tile, in shared
memory, so there is no workspace whatever the layer: with ``workspace_limit=0`` this one still runs, as
cuDNN's IMPLICIT_GEMM does.

Grid: x walks the output pixels in tiles of T, y the (group, channel tile) pairs.

FLOPs: 2*N*K*Cg*R*S*Ho*Wo. Workspace: none. Constraints: groups * ceil(Kg / T) <= 65535 (CUDA's limit on a
grid's y axis) and ceil(N*Ho*Wo / T) <= 2^31 - 1; any stride, padding, dilation and groups otherwise.
Accuracy: each output sums its Cg*R*S products in order in the compute dtype.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import cuda

from ..arrays import simulator_enabled
from ..gpu_base import GPUAlgorithm, grid_fits, launch
from ..params import ConvParams
from .shared import TOLERANCE

#: block tile edge on a GPU, and under the simulator (fewer simulated threads).
TILE = 16
SIM_TILE = 4


@functools.lru_cache(maxsize=None)
def implicit_gemm_kernel(dtype: str, T: int):
    """The tiled kernel for one compute dtype and tile edge T (compiled once per pair)."""
    nb_dtype = numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, w, out, top, left, sh, sw, dh, dw, groups, row_tiles):
        N, H, W = x.shape[0], x.shape[2], x.shape[3]
        K, Cg, R, S = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
        Ho, Wo = out.shape[2], out.shape[3]
        Kg = K // groups
        g = cuda.blockIdx.y // row_tiles                 # the group, then the channel tile within it
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        row = (cuda.blockIdx.y % row_tiles) * T + ty     # output channel within the group
        col = cuda.blockIdx.x * T + tx                   # output pixel (n, i, j) flattened
        gn = col // (Ho * Wo)
        gi, gj = (col // Wo) % Ho, col % Wo
        w_tile = cuda.shared.array((T, T), nb_dtype)
        x_tile = cuda.shared.array((T, T), nb_dtype)
        reduction, RS = Cg * R * S, R * S
        acc = nb_dtype(0)
        for q0 in range(0, reduction, T):
            q = q0 + tx                                  # weight tile: row = channel, column = q
            inside = row < Kg and q < reduction
            w_tile[ty, tx] = w[g * Kg + row, q // RS, (q // S) % R, q % S] if inside else 0
            q = q0 + ty                                  # patch tile: row = q, column = pixel
            c, r, s = q // RS, (q // S) % R, q % S
            yy, xx = gi * sh + r * dh - top, gj * sw + s * dw - left
            inside = q < reduction and gn < N and 0 <= yy < H and 0 <= xx < W
            x_tile[ty, tx] = x[gn, g * Cg + c, yy, xx] if inside else 0
            cuda.syncthreads()
            for e in range(T):
                acc += w_tile[ty, e] * x_tile[e, tx]
            cuda.syncthreads()
        if row < Kg and col < N * Ho * Wo:
            out[col // (Ho * Wo), g * Kg + row, (col // Wo) % Ho, col % Wo] = acc

    return kernel


def tile_edge() -> int:
    return SIM_TILE if simulator_enabled() else TILE


def launch_grid(p: ConvParams, T: int) -> tuple[int, int]:
    """(pixel tiles, groups * channel tiles per group)."""
    Ho, Wo = p.out_hw
    return math.ceil(p.N * Ho * Wo / T), p.groups * math.ceil(p.Kg / T)


class GPUImplicitGemm(GPUAlgorithm):
    """Tiled GEMM gathering patch tiles into shared memory on the fly (see the module docstring)."""

    name = "implicit_gemm"
    tolerance = TOLERANCE

    def constraints(self, p: ConvParams, op: str = "forward"):
        blocks_x, blocks_y = launch_grid(p, TILE)
        return grid_fits(self.name, blocks_x, blocks_y)

    # workspace_bytes: the base's 0 (this kernel allocates nothing); flops: the base's p.flops (every tap).

    def forward(self, x, w, p: ConvParams, out) -> None:
        T = tile_edge()
        blocks_x, blocks_y = launch_grid(p, T)
        (top, _), (left, _) = p.padding
        launch(implicit_gemm_kernel(p.compute_dtype, T), (blocks_x, blocks_y), (T, T))(
            x, w, out, top, left, *p.stride, *p.dilation, p.groups, blocks_y // p.groups)
