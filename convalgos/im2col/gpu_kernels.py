"""The Numba-CUDA kernels of the GPU im2col (the maths: ``gpu.py``): the patch matrix and its adjoint, col2im.
Both are grid-stride loops (``gpu_base.launch_1d``), made once per compute dtype. A load outside the image
reads ``zero``, a zero of the compute dtype: ``a if inside else 0`` would be typed float64 by Numba, and a
float32 kernel would round-trip every load through float64.

Tap (c, r, s) of output pixel (i, j) of image n reads x[n, c, i*sh + r*dh - top, j*sw + s*dw - left] (zero
outside x); row (c*R + r)*S + s of a patch matrix is that tap, c counted over all C channels, so group g's rows
are the g-th block of Cg*R*S.
"""
from __future__ import annotations

import functools

from ..gpu_compiler import cuda, numba_dtype


@functools.lru_cache(maxsize=None)
def im2col_kernel(dtype: str):
    """Tap (c, r, s) of pixel (i, j) of image n into the flat ``cols`` at n*image_stride + ((c*R + r)*S + s)*
    row_stride + i*Wo + j: one work item per (image, pixel), walking the taps, so consecutive threads write
    consecutive columns. forward and backward_data lay the matrix out (image, tap, pixel): image_stride C*R*S*P,
    row_stride P; backward_filter (tap, image, pixel): image_stride P, row_stride n*P, so that a group's rows of
    the whole chunk are one contiguous matrix for its GEMM."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(x, cols, image_stride, row_stride, top, left, sh, sw, dh, dw, R, S, Wo, P):
        n_img, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        zero = nb_dtype(0)
        for item in range(cuda.grid(1), n_img * P, cuda.gridsize(1)):
            n, pix = item // P, item % P
            i, j = pix // Wo, pix % Wo
            at = n * image_stride + pix
            for c in range(C):
                for r in range(R):
                    yy = i * sh + r * dh - top
                    for s in range(S):
                        xx = j * sw + s * dw - left
                        inside = 0 <= yy < H and 0 <= xx < W
                        cols[at] = x[n, c, yy, xx] if inside else zero
                        at += row_stride

    return kernel


@functools.lru_cache(maxsize=None)
def col2im_kernel(dtype: str):
    """The adjoint of ``im2col_kernel`` as a gather: dx[n, c, h, v] = the sum of the column-matrix entries of
    the (tap, pixel) pairs that read it, cols[n, (c*R + r)*S + s, i*Wo + j] over the (r, s) with
    i*sh + r*dh - top = h and j*sw + s*dw - left = v for an output (i, j), in the fixed order (r, s). One work
    item per dx element: no two threads write one element (no atomics), elements no output reads get zero."""
    nb_dtype = numba_dtype(dtype)

    @cuda.jit
    def kernel(cols, dx, top, left, sh, sw, dh, dw, R, S, Wo):
        n_img, C, H, W = dx.shape[0], dx.shape[1], dx.shape[2], dx.shape[3]
        Ho = cols.shape[2] // Wo
        for item in range(cuda.grid(1), n_img * C * H * W, cuda.gridsize(1)):
            v, h = item % W, (item // W) % H
            c, n = (item // (H * W)) % C, item // (C * H * W)
            acc = nb_dtype(0)
            for r in range(R):
                hp = h + top - r * dh
                i = hp // sh
                if hp >= 0 and i * sh == hp and i < Ho:
                    for s in range(S):
                        vp = v + left - s * dw
                        j = vp // sw
                        if vp >= 0 and j * sw == vp and j < Wo:
                            acc += cols[n, (c * R + r) * S + s, i * Wo + j]
            dx[n, c, h, v] = acc

    return kernel
