"""im2col + GEMM, "im2col": copy every receptive field into a column of a patch matrix, then one matrix product.

Maths. For image n and group g (Cg = C/groups input and Kg = K/groups output channels per group), the patch
matrix P has one row per (c, r, s) tap and one column per output pixel (i, j), with x read as zero outside its
H x W extent (the padding is written as zeros, top/left being the leading pads):

    P[(c*R + r)*S + s, i*Wo + j] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]

and the weights of the group flatten the same way, W_g[k, (c*R + r)*S + s] = w[g*Kg + k, c, r, s], so

    y[n, g*Kg:(g+1)*Kg] (viewed as Kg x Ho*Wo) = W_g (Kg x Cg*R*S) @ P (Cg*R*S x Ho*Wo)

which is exactly the NCHW output slice. The groups are one ``np.matmul`` over stacked operands (weights
(groups, Kg, Cg*R*S) against patches (groups, Cg*R*S, columns)); NumPy hands each product to OpenBLAS's GEMM.

- One image per chunk: the GEMM writes straight into ``out[n]`` viewed as (groups, Kg, Ho*Wo): no copy.
- Several images per chunk (small images at large batch): their patch columns sit side by side, column
  b*Ho*Wo + i*Wo + j for image b, so each group is ONE wide GEMM (Kg x Cg*R*S) @ (Cg*R*S x nb*Ho*Wo) into a
  product buffer (groups, Kg, nb*Ho*Wo), then scattered to out (nb, groups, Kg, Ho*Wo). Measured on CIFAR
  3x3 layers at batch 32 (16..64 channels, 32..8 px) this wide GEMM plus scatter took 2-3x less time than 32
  separate per-image GEMMs written straight into out (two interleaved runs on the loaded 2-core machine).

A 1x1, stride-1, unpadded layer needs no patch matrix (dilation spreads no taps of a 1x1 kernel): P is
x[n, group g] itself viewed as (Cg, H*W), so it is a zero-copy GEMM straight into out.

FLOPs (``flops``): the GEMMs do exactly the direct arithmetic, 2 * N * K * Cg * R * S * Ho * Wo = ``p.flops``
(padded taps are multiplied by the zeros written for them). Building P is memory traffic, not arithmetic: it
writes C * R * S * Ho * Wo elements per image, R * S times the input for a stride-1 layer; so is the scatter.

Workspace (``workspace_bytes``), for chunks of nb images: the patch matrix nb * C*R*S * Ho*Wo * itemsize, plus,
when nb > 1, the product buffer nb * K * Ho*Wo * itemsize; 0 for the zero-copy 1x1 layer. Both are kept in
``self.workspace`` and reused between calls.

Chunking. nb is as many images as let the patch matrix and the product buffer fit in
``workspace_budget_bytes`` (64 MiB), at least one and at most N, so a layer whose single patch matrix is larger
than the budget still runs, one image at a time (VGG-16's 64->64 3x3 layer at 224x224 takes 115 MB).
Per chunk: fill P (a Numba kernel, parallel over the (image, tap row) pairs), then the GEMM(s). Each output
column is the same dot product whatever nb is, and the tests check the result is bitwise the same for any
chunking.

Constraints: none; any stride, asymmetric padding, dilation, groups (depthwise included); float32 and float64
(float16 is computed in float32 by ``conv2d``). Deterministic: OpenBLAS is repeatable at a fixed thread count.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from ._kernels import copy_strided, valid_range
from .params import ConvParams
from .registry import Algorithm, register


def is_zero_copy(p: ConvParams) -> bool:
    """A 1x1, stride-1, unpadded layer (any dilation: one tap has nothing to spread): x is the patch matrix."""
    return (p.R, p.S) == (1, 1) and p.stride == (1, 1) and p.padding == ((0, 0), (0, 0))


def patch_bytes_per_image(p: ConvParams) -> int:
    Ho, Wo = p.out_hw
    return p.C * p.R * p.S * Ho * Wo * p.itemsize


def product_bytes_per_image(p: ConvParams) -> int:
    """One image's share of the wide GEMM's product buffer (used when a chunk holds several images)."""
    Ho, Wo = p.out_hw
    return p.K * Ho * Wo * p.itemsize


@njit(cache=True)
def _zero(line):
    for j in range(len(line)):
        line[j] = 0.0


@njit(parallel=True, cache=True)
def _fill_patches(x, n0, nb, R, S, sh, sw, top, left, dh, dw, Ho, Wo, patches):
    """patches[(c*R + r)*S + s, b*Ho*Wo + i*Wo + j] = x[n0 + b, c, i*sh + r*dh - top, j*sw + s*dw - left] for the
    nb images b of the chunk, 0 outside x."""
    rows, H, W = patches.shape[0], x.shape[2], x.shape[3]
    for item in prange(nb * rows):
        b, row = item // rows, item % rows
        c, r, s = row // (R * S), (row // S) % R, row % S
        j0, j1 = valid_range(s * dw - left, sw, W, Wo)
        dst = patches[row, b * Ho * Wo:(b + 1) * Ho * Wo]
        src_image = x[n0 + b, c]
        for i in range(Ho):
            line = dst[i * Wo:(i + 1) * Wo]
            ih = i * sh + r * dh - top
            if ih < 0 or ih >= H:
                _zero(line)
                continue
            _zero(line[:j0])
            _zero(line[j1:])
            copy_strided(line[j0:j1], src_image[ih, j0 * sw + s * dw - left:], sw)


class Im2col(Algorithm):
    """Patch matrix (Numba) + one stacked BLAS GEMM per chunk of the batch; see the module docstring."""

    name = "im2col"
    deterministic = True
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}
    #: the most bytes one chunk's patch matrix and product buffer may take (a chunk holds at least one image).
    workspace_budget_bytes = 64 << 20

    def images_per_chunk(self, p: ConvParams) -> int:
        per_image = patch_bytes_per_image(p) + product_bytes_per_image(p)
        return max(1, min(p.N, self.workspace_budget_bytes // per_image))

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if is_zero_copy(p):
            return 0
        nb = self.images_per_chunk(p)
        return nb * patch_bytes_per_image(p) + (nb * product_bytes_per_image(p) if nb > 1 else 0)

    def forward(self, x, w, p, out):
        Ho, Wo = p.out_hw
        G, taps = p.groups, p.Cg * p.R * p.S
        w_groups = w.reshape(G, p.Kg, taps)
        if is_zero_copy(p):
            np.matmul(w_groups, x.reshape(p.N, G, p.Cg, Ho * Wo), out=out.reshape(p.N, G, p.Kg, Ho * Wo))
            return
        nb = self.images_per_chunk(p)
        patches = self.workspace.get("im2col.patches", (G, taps, nb * Ho * Wo), x.dtype)
        products = self.workspace.get("im2col.products", (G, p.Kg, nb * Ho * Wo), x.dtype) if nb > 1 else None
        (top, _), (left, _) = p.padding
        for n0 in range(0, p.N, nb):
            chunk = min(nb, p.N - n0)
            _fill_patches(x, n0, chunk, p.R, p.S, *p.stride, top, left, *p.dilation, Ho, Wo,
                          patches.reshape(G * taps, nb * Ho * Wo))
            columns = chunk * Ho * Wo
            if products is None:        # one image: the GEMM writes straight into its output slice
                np.matmul(w_groups, patches, out=out[n0].reshape(G, p.Kg, Ho * Wo))
            else:                       # several: one wide GEMM, then scatter (g, k, b, pixel) to (b, g, k, pixel)
                np.matmul(w_groups, patches[:, :, :columns], out=products[:, :, :columns])
                out[n0:n0 + chunk].reshape(chunk, G, p.Kg, Ho * Wo)[...] = (
                    products[:, :, :columns].reshape(G, p.Kg, chunk, Ho * Wo).transpose(2, 0, 1, 3))

register(Im2col())
