"""GPU direct convolution: every output summed tap by tap, with shared-memory tiles of input and weight.

    y[n, k, i, j] = sum_{c, r, s} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]

A block computes a TH x TW tile of output pixels of one image for KB output channels of one group; each
thread owns one pixel and KB accumulators in registers. For every input channel c, kernel row r and chunk of
kernel columns [s0, s0 + sc), the block loads into shared memory
- the input rows that tap row touches: TH rows of (TW-1)*sw + (sc-1)*dw + 1 columns (zero outside the image,
  so padding costs no branch in the inner loop), shared by the TW*TH threads and KB channels;
- the KB x sc weights of those taps, shared by all pixels;
then each thread does sc*KB multiply-adds from shared memory. The column chunk sc is as large as fits
PATCH_W columns, so any kernel width, stride and dilation fit (TW shrinks for very large strides).

The (image, group, channel block) index and the column tile share the grid's x axis (up to 2^31 - 1
blocks), so a large batch of depthwise channels does not meet CUDA's 65535-block limit on y and z; y holds the
row tiles.

FLOPs: 2*N*K*Cg*R*S*Ho*Wo (the direct-equivalent count). Workspace: none (shared memory only).
Constraints: the grid within CUDA's limits (at most 65535 row tiles: Ho <= 65535 * TH); any stride, padding,
dilation and groups (depthwise included). Accuracy: taps summed in order in the compute dtype.
"""
from __future__ import annotations

import functools
import math

import numba
import numpy as np
from numba import cuda

from ..gpu_base import GPUAlgorithm, grid_fits, launch
from ..params import ConvParams
from .shared import TOLERANCE

#: output channels per block (register accumulators per thread).
KB = 4
#: output tile (rows, columns) per block, and the shared input row width in elements.
TH, TW = 8, 8
PATCH_W = 256


@functools.lru_cache(maxsize=None)
def direct_kernel(dtype: str):
    """The direct kernel for one compute dtype (compiled once per dtype)."""
    nb_dtype = numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, w, out, top, left, sh, sw, dh, dw, s_chunk, k_blocks, col_tiles):
        C_, H, W = x.shape[1], x.shape[2], x.shape[3]
        K, Cg, R, S = w.shape[0], w.shape[1], w.shape[2], w.shape[3]
        Ho, Wo = out.shape[2], out.shape[3]
        Kg = K // (C_ // Cg)
        tw, th = cuda.blockDim.x, cuda.blockDim.y
        tx, ty = cuda.threadIdx.x, cuda.threadIdx.y
        tid, nthreads = ty * tw + tx, tw * th
        z = cuda.blockIdx.x // col_tiles                 # (image, group, channel block)
        i0, j0 = cuda.blockIdx.y * th, (cuda.blockIdx.x % col_tiles) * tw
        i, j = i0 + ty, j0 + tx
        n = z // (k_blocks * (C_ // Cg))
        gk = z % (k_blocks * (C_ // Cg))
        g, kb = gk // k_blocks, gk % k_blocks
        k0 = g * Kg + kb * KB
        nk = min(KB, Kg - kb * KB)
        patch = cuda.shared.array((TH, PATCH_W), nb_dtype)
        wtile = cuda.shared.array((KB, PATCH_W), nb_dtype)
        acc = cuda.local.array(KB, nb_dtype)
        for q in range(KB):
            acc[q] = 0
        for c in range(Cg):
            cin = g * Cg + c
            for r in range(R):
                for s0 in range(0, S, s_chunk):
                    sc = min(s_chunk, S - s0)
                    width = (tw - 1) * sw + (sc - 1) * dw + 1
                    for e in range(tid, th * width, nthreads):
                        row, col = e // width, e % width
                        yy = (i0 + row) * sh + r * dh - top
                        xx = j0 * sw + s0 * dw + col - left
                        inside = 0 <= yy < H and 0 <= xx < W
                        patch[row, col] = x[n, cin, yy, xx] if inside else 0
                    for e in range(tid, KB * sc, nthreads):
                        kk, q = e // sc, e % sc
                        wtile[kk, q] = w[k0 + kk, c, r, s0 + q] if kk < nk else 0
                    cuda.syncthreads()
                    for q in range(sc):
                        v = patch[ty, tx * sw + q * dw]
                        for kk in range(KB):
                            acc[kk] += v * wtile[kk, q]
                    cuda.syncthreads()
        if i < Ho and j < Wo:
            for kk in range(nk):
                out[n, k0 + kk, i, j] = acc[kk]

    return kernel


def launch_shape(p: ConvParams) -> tuple[tuple[int, int], tuple[int, int], int, int, int]:
    """(grid, block, s_chunk, k_blocks, col_tiles): the tile shrinks to the output and to strides too wide to
    share; grid x is (image, group, channel block) by column tile."""
    Ho, Wo = p.out_hw
    sw, dw = p.stride[1], p.dilation[1]
    tw = max(1, min(TW, Wo, (PATCH_W - 1) // sw + 1))
    th = min(TH, Ho)
    s_chunk = max(1, min(p.S, (PATCH_W - 1 - (tw - 1) * sw) // dw + 1))
    k_blocks = math.ceil(p.Kg / KB)
    col_tiles = math.ceil(Wo / tw)
    grid = (col_tiles * p.N * p.groups * k_blocks, math.ceil(Ho / th))
    return grid, (tw, th), s_chunk, k_blocks, col_tiles


class GPUDirect(GPUAlgorithm):
    """Direct convolution with shared-memory input and weight tiles (see the module docstring)."""

    name = "direct"
    tolerance = TOLERANCE

    def constraints(self, p: ConvParams, op: str = "forward"):
        (blocks_x, row_tiles) = launch_shape(p)[0]
        return grid_fits(self.name, blocks_x, row_tiles)

    # workspace_bytes: the base's 0 (this kernel allocates nothing); flops: the base's p.flops (every tap).

    def forward(self, x, w, p: ConvParams, out) -> None:
        grid, block, s_chunk, k_blocks, col_tiles = launch_shape(p)
        (top, _), (left, _) = p.padding
        launch(direct_kernel(p.compute_dtype), grid, block)(x, w, out, top, left, *p.stride, *p.dilation, s_chunk,
                                                    k_blocks, col_tiles)
