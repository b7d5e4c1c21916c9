"""The Numba kernels and index maps of the FFT algorithms' backward passes (the maths is in ``fft``).

- ``gather_flipped_tiles``: dy's tiles, each reversed in place, the "kernel" of backward_filter (reversing a
  real signal conjugates its spectrum, up to the shift that ``pick_lags`` undoes).
- ``scatter_phases``: backward_data's phase-image tiles back into dx, zero at every pixel no output reads.
- ``pick_lags``: backward_filter's R x S taps out of the inverse transform of the summed spectrum.
"""
from __future__ import annotations

import numpy as np
from numba import njit, prange

from .fft_plan import TilePlan
from .params import ConvParams


@njit(parallel=True, cache=True)
def gather_flipped_tiles(dy, mh, mw, nth, ntw, tiles):
    """tiles[a, b, k, (n, i, j)] = dy[n, k, i*mh + mh-1-a, j*mw + mw-1-b] for a < mh, b < mw inside dy, else 0."""
    Th, Tw = tiles.shape[0], tiles.shape[1]
    N, K, Ho, Wo = dy.shape
    for a in prange(Th):
        for b in range(Tw):
            for k in range(K):
                for n in range(N):
                    for i in range(nth):
                        row = i * mh + mh - 1 - a
                        for j in range(ntw):
                            col = j * mw + mw - 1 - b
                            inside = a < mh and b < mw and row < Ho and col < Wo
                            tiles[a, b, k, (n * nth + i) * ntw + j] = dy[n, k, row, col] if inside else 0
    return tiles


@njit(parallel=True, cache=True)
def scatter_phases(out_tiles, top, left, sh, sw, mh, mw, nth, ntw, rows_read, cols_read, dx):
    """dx[n, c, h, w] = phase pixel (m, l) of phase channel (c, ph, pw) where h + top = m*sh + ph and
    w + left = l*sw + pw, read from its tile out_tiles[m % mh, l % mw, (c, ph, pw), (n, m // mh, l // mw)];
    0 where no output reads padded row h + top (``rows_read``) or column w + left (``cols_read``)."""
    N, C, H, W = dx.shape
    for c in prange(C):
        for n in range(N):
            for h in range(H):
                m, ph = (h + top) // sh, (h + top) % sh
                for w in range(W):
                    l, pw = (w + left) // sw, (w + left) % sw
                    if rows_read[h + top] and cols_read[w + left]:
                        tile = (n * nth + m // mh) * ntw + l // mw
                        dx[n, c, h, w] = out_tiles[m % mh, l % mw, (c * sh + ph) * sw + pw, tile]
                    else:
                        dx[n, c, h, w] = 0
    return dx


def read_mask(padded: int, outputs: int, stride: int, taps: int, dilation: int) -> np.ndarray:
    """Which of the ``padded`` input rows (or columns) some output reads: i*stride + r*dilation, i < outputs."""
    mask = np.zeros(padded, np.bool_)
    mask[(np.arange(outputs)[:, None] * stride + np.arange(taps)[None, :] * dilation).ravel()] = True
    return mask


def pick_lags(lags: np.ndarray, p: ConvParams, t: TilePlan, out: np.ndarray) -> None:
    """out[k, c, r, s] = the lag (r*dh // sh, s*dw // sw) of phase channel (c, r*dh % sh, s*dw % sw), read from
    ``lags`` (Th, Tw, K, Csg) at offset (mh - 1, mw - 1), where the flipped dy tiles put lag 0."""
    (dh, dw), (sh, sw) = p.dilation, (t.sh, t.sw)
    rpos, spos = np.arange(p.R) * dh, np.arange(p.S) * dw
    cs = (np.arange(p.Cg)[:, None, None] * sh + rpos[None, :, None] % sh) * sw + spos[None, None, :] % sw
    out[...] = lags[(t.mh - 1 + rpos // sh)[None, None, :, None], (t.mw - 1 + spos // sw)[None, None, None, :],
                    np.arange(p.K)[:, None, None, None], cs[None]]
