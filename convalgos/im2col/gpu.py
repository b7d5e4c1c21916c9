"""GPU im2col + GEMM: a Numba-CUDA kernel builds the patch matrix, cuBLAS (through ``xp.matmul``) multiplies.

Patch matrix of a chunk of n images, one column per output pixel:

    cols[n, g, (c, r, s), (i, j)] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]   (0 outside)

then one batched GEMM over (image, group) writes straight into the output, whose (N, K, Ho, Wo) layout is
(N, G, Kg, Ho*Wo):

    out[n, g] = w[g] (Kg x Cg*R*S)  @  cols[n, g] (Cg*R*S x Ho*Wo)

The kernel is a grid-stride loop, one work item per (image, output pixel), walking (c, r, s) so consecutive
threads write consecutive columns. A 1x1, stride-1, unpadded layer needs no patch matrix: x is already it.

FLOPs: 2*N*K*Cg*R*S*Ho*Wo. Workspace: the patch matrix of one chunk of images, n*C*R*S*Ho*Wo elements, the
chunk as large as fits CHUNK_BYTES (at least one image). Constraints: none.
"""
from __future__ import annotations

import functools

from numba import cuda

from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..params import ConvParams
from .shared import TOLERANCE

#: the patch matrix of one chunk of images stays within this many bytes (at least one image).
CHUNK_BYTES = 1 << 30


@functools.lru_cache(maxsize=None)
def im2col_kernel():
    """The patch-matrix kernel (Numba compiles one specialisation per dtype, once)."""

    @cuda.jit
    def kernel(x, cols, top, left, sh, sw, dh, dw, R, S, Wo):
        n_img, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        P = cols.shape[2]
        for item in range(cuda.grid(1), n_img * P, cuda.gridsize(1)):
            n, pix = item // P, item % P
            i, j = pix // Wo, pix % Wo
            row = 0
            for c in range(C):
                for r in range(R):
                    yy = i * sh + r * dh - top
                    for s in range(S):
                        xx = j * sw + s * dw - left
                        inside = 0 <= yy < H and 0 <= xx < W
                        cols[n, row, pix] = x[n, c, yy, xx] if inside else 0
                        row += 1

    return kernel


def is_plain_gemm(p: ConvParams) -> bool:
    """A 1x1, stride-1, unpadded layer: x (N, C, H*W) is its own patch matrix."""
    return (p.R, p.S) == (1, 1) and p.stride == (1, 1) and p.padding == ((0, 0), (0, 0))


class GPUIm2col(GPUAlgorithm):
    """Numba-CUDA patch matrix, then one batched GEMM per chunk of images (see the module docstring)."""

    name = "im2col"
    tolerance = TOLERANCE

    def chunk(self, p: ConvParams) -> int:
        Ho, Wo = p.out_hw
        image_bytes = p.C * p.R * p.S * Ho * Wo * p.itemsize
        return max(1, min(p.N, CHUNK_BYTES // image_bytes))

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if is_plain_gemm(p):
            return 0
        Ho, Wo = p.out_hw
        return self.chunk(p) * p.C * p.R * p.S * Ho * Wo * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        xp = array_module(x)
        Ho, Wo = p.out_hw
        G, crs = p.groups, p.Cg * p.R * p.S
        wg = w.reshape(G, p.Kg, crs)
        if is_plain_gemm(p):
            xp.matmul(wg, x.reshape(p.N, G, crs, Ho * Wo), out=out.reshape(p.N, G, p.Kg, Ho * Wo))
            return
        chunk = self.chunk(p)
        cols = self.buffer(x, "im2col.cols", (chunk, p.C * p.R * p.S, Ho * Wo))
        (top, _), (left, _) = p.padding
        for n0 in range(0, p.N, chunk):
            n = min(chunk, p.N - n0)
            blocks, threads = launch_1d(n * Ho * Wo)
            launch(im2col_kernel(), blocks, threads)(x[n0:n0 + n], cols[:n], top, left, *p.stride, *p.dilation,
                                             p.R, p.S, Wo)
            xp.matmul(wg, cols[:n].reshape(n, G, crs, Ho * Wo), out=out[n0:n0 + n].reshape(n, G, p.Kg, Ho * Wo))
