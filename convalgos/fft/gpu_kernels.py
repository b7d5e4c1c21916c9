"""The Numba-CUDA kernels of the GPU FFT algorithms: the CUDA twins of ``kernels.py`` (the same index maps,
read there), each a grid-stride loop with one work item per element it writes.

- ``gather_tiles_kernel``: x's (or, shifted, dy's) polyphase tiles, (Th, Tw, phase channel, tile);
- ``gather_flipped_tiles_kernel``: dy's tiles, each reversed in place (backward_filter's "kernel");
- ``scatter_tiles_kernel``: the valid outputs of each output tile into y;
- ``scatter_phases_kernel``: backward_data's phase-image tiles into dx, exact zeros where no output reads.

The kernels are made once per compute dtype, so that a pixel outside the image loads a zero of that dtype
(``x[...] if inside else 0`` would type the load float64 and round-trip float32 through it).
"""
from __future__ import annotations

import functools

import numpy as np

from ..gpu_compiler import cuda


@functools.lru_cache(maxsize=None)
def gather_tiles_kernel(dtype: str):
    """tiles[a, b, (c, ph, pw), (n, i, j)] = padded x[n, c, (i*mh + a)*sh + ph, (j*mw + b)*sw + pw], else 0."""
    zero = np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(x, top, left, sh, sw, mh, mw, nth, ntw, tiles):
        H, W = x.shape[2], x.shape[3]
        Tw, Cs, P = tiles.shape[1], tiles.shape[2], tiles.shape[3]
        for e in range(cuda.grid(1), tiles.size, cuda.gridsize(1)):
            tile, cs, b, a = e % P, (e // P) % Cs, (e // (P * Cs)) % Tw, e // (P * Cs * Tw)
            j, i, n = tile % ntw, (tile // ntw) % nth, tile // (ntw * nth)
            pw, ph, c = cs % sw, (cs // sw) % sh, cs // (sw * sh)
            row, col = (i * mh + a) * sh + ph - top, (j * mw + b) * sw + pw - left
            value = zero
            if 0 <= row < H and 0 <= col < W:
                value = x[n, c, row, col]
            tiles[a, b, cs, tile] = value

    return kernel


@functools.lru_cache(maxsize=None)
def gather_flipped_tiles_kernel(dtype: str):
    """tiles[a, b, k, (n, i, j)] = dy[n, k, i*mh + mh-1-a, j*mw + mw-1-b] for a < mh, b < mw inside dy, else 0."""
    zero = np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(dy, mh, mw, nth, ntw, tiles):
        Ho, Wo = dy.shape[2], dy.shape[3]
        Tw, K, P = tiles.shape[1], tiles.shape[2], tiles.shape[3]
        for e in range(cuda.grid(1), tiles.size, cuda.gridsize(1)):
            tile, k, b, a = e % P, (e // P) % K, (e // (P * K)) % Tw, e // (P * K * Tw)
            j, i, n = tile % ntw, (tile // ntw) % nth, tile // (ntw * nth)
            row, col = i * mh + mh - 1 - a, j * mw + mw - 1 - b
            value = zero
            if a < mh and b < mw and row < Ho and col < Wo:
                value = dy[n, k, row, col]
            tiles[a, b, k, tile] = value

    return kernel


@functools.lru_cache(maxsize=None)
def scatter_tiles_kernel():
    """y[n, k, i*mh + a, j*mw + b] = out_tiles[off_h + a, off_w + b, k, (n, i, j)]: every pixel of y, once."""

    @cuda.jit
    def kernel(out_tiles, off_h, off_w, mh, mw, nth, ntw, y):
        K, Ho, Wo = y.shape[1], y.shape[2], y.shape[3]
        for e in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            col, row, k, n = e % Wo, (e // Wo) % Ho, (e // (Wo * Ho)) % K, e // (Wo * Ho * K)
            tile = (n * nth + row // mh) * ntw + col // mw
            y[n, k, row, col] = out_tiles[off_h + row % mh, off_w + col % mw, k, tile]

    return kernel


@functools.lru_cache(maxsize=None)
def scatter_phases_kernel(dtype: str):
    """dx[n, c, h, w] = out_tiles[a, b, (c, ph, pw), (n, i, j)] with (i, a, ph) = rows[:, h] and (j, b, pw) =
    cols[:, w] (``backward.phase_map``), or 0 where rows[0, h] or cols[0, w] is -1 (no output reads it)."""
    zero = np.dtype(dtype).type(0)

    @cuda.jit
    def kernel(out_tiles, sh, sw, nth, ntw, rows, cols, dx):
        C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
        for e in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
            w, h, c, n = e % W, (e // W) % H, (e // (W * H)) % C, e // (W * H * C)
            i, j = rows[0, h], cols[0, w]
            value = zero
            if i >= 0 and j >= 0:
                value = out_tiles[rows[1, h], cols[1, w], (c * sh + rows[2, h]) * sw + cols[2, w],
                                  (n * nth + i) * ntw + j]
            dx[n, c, h, w] = value

    return kernel
