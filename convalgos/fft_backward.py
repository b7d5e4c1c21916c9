"""The Numba kernels and index maps of the FFT algorithms' backward passes (the maths is in ``fft``).

- ``gather_flipped_tiles``: dy's tiles, each reversed in place, the "kernel" of backward_filter (reversing a
  real signal conjugates its spectrum, up to the shift that ``pick_lags`` undoes).
- ``scatter_phases``: backward_data's phase-image tiles back into dx, zero at every pixel no output reads, by
  the index maps of ``phase_map`` (computed once per call: no division in the loop).
- ``lags_of``: backward_filter's inverse DFT, evaluated only at the Rq x Sq lags (a pruned inverse by two
  complex GEMMs); ``pick_lags``: the R x S taps of each phase channel out of them.
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np
from numba import njit, prange

from .gemm import matmul
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
def scatter_phases(out_tiles, sh, sw, nth, ntw, rows, cols, dx):
    """dx[n, c, h, w] = out_tiles[a, b, (c, ph, pw), (n, i, j)] with (i, a, ph) = rows[:, h] and (j, b, pw) =
    cols[:, w] (``phase_map``), or 0 where rows[0, h] or cols[0, w] is -1 (no output reads that pixel)."""
    N, C, H, W = dx.shape
    for c in prange(C):
        for n in range(N):
            for h in range(H):
                i, a, ph = rows[0, h], rows[1, h], rows[2, h]
                for w in range(W):
                    j, b, pw = cols[0, w], cols[1, w], cols[2, w]
                    if i < 0 or j < 0:
                        dx[n, c, h, w] = 0
                    else:
                        dx[n, c, h, w] = out_tiles[a, b, (c * sh + ph) * sw + pw, (n * nth + i) * ntw + j]
    return dx


def phase_map(size: int, pad: int, padded: int, outputs: int, stride: int, taps: int, dilation: int,
              per_tile: int) -> np.ndarray:
    """(3, size) ints: for each input row h (or column), the tile, position in the tile and phase of its phase
    pixel m = (h + pad) // stride, phase (h + pad) % stride; tile -1 where no output reads padded row h + pad
    (reads are i*stride + r*dilation for i < outputs, r < taps)."""
    read = np.zeros(padded, np.bool_)
    read[(np.arange(outputs)[:, None] * stride + np.arange(taps)[None, :] * dilation).ravel()] = True
    q = np.arange(size) + pad
    m = q // stride
    return np.stack([np.where(read[q], m // per_tile, -1), m % per_tile, q % stride])


@lru_cache(maxsize=64)
def lag_dft_matrices(t: TilePlan, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The inverse 2-D real DFT at the lags only: rows (Rq x Th) and columns (Sq x Fw), complex, from float64.

    rows[a, fh] = exp(2 pi i fh (mh-1+a) / Th) / Th takes the full inverse along the Th rows of bins at the Rq
    lag rows; cols[b, fw] = c exp(2 pi i fw (mw-1+b) / Tw) / Tw with c = 1 at the bins that are their own
    mirror (0 and Tw/2) and 2 elsewhere folds in the half spectrum rfft dropped; the lag is the real part.
    The lags sit at offset (mh - 1, mw - 1), where the flipped dy tiles put lag 0.
    """
    fh, fw = np.arange(t.Th), np.arange(t.Tw // 2 + 1)
    rows = np.exp(2j * np.pi * np.outer(t.mh - 1 + np.arange(t.Rq), fh) / t.Th) / t.Th
    mirror = np.where((fw == 0) | (2 * fw == t.Tw), 1.0, 2.0)
    cols = mirror * np.exp(2j * np.pi * np.outer(t.mw - 1 + np.arange(t.Sq), fw) / t.Tw) / t.Tw
    cplx = np.result_type(dtype, np.complex64)
    return rows.astype(cplx), cols.astype(cplx)


def lags_of(summed: np.ndarray, p: ConvParams, t: TilePlan, workspace) -> np.ndarray:
    """(Rq, Sq, K, Csg) real lags of the (F, G, Kg, Csg) summed spectrum: two complex GEMMs, Rq x Th over the
    row bins, then Sq x Fw over the column bins of each lag row, instead of inverse FFTs of K*Csg whole planes
    for Rq*Sq values each."""
    rows, cols = lag_dft_matrices(t, p.compute_dtype)
    Fw, KC = t.Tw // 2 + 1, p.K * p.Cg * t.sh * t.sw
    lag_rows = workspace.get("fft.lag_rows", (t.Rq, Fw, KC), summed.dtype)
    matmul(rows, summed.reshape(t.Th, Fw * KC), out=lag_rows.reshape(t.Rq, Fw * KC))
    lags = workspace.get("fft.lags", (t.Rq, t.Sq, KC), summed.dtype)
    matmul(cols, lag_rows, out=lags)
    return lags.real.reshape(t.Rq, t.Sq, p.K, -1)


def pick_lags(lags: np.ndarray, p: ConvParams, t: TilePlan, out: np.ndarray) -> None:
    """out[k, c, r, s] = lags[r*dh // sh, s*dw // sw, k, (c, r*dh % sh, s*dw % sw)]: tap (r, s) is the lag of
    its phase channel."""
    (dh, dw), (sh, sw) = p.dilation, (t.sh, t.sw)
    rpos, spos = np.arange(p.R) * dh, np.arange(p.S) * dw
    cs = (np.arange(p.Cg)[:, None, None] * sh + rpos[None, :, None] % sh) * sw + spos[None, None, :] % sw
    out[...] = lags[(rpos // sh)[None, None, :, None], (spos // sw)[None, None, None, :],
                    np.arange(p.K)[:, None, None, None], cs[None]]
