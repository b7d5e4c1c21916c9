"""The Numba kernels of the FFT algorithms (the maths is in ``whole.py``): the tiles gathered straight from x or
dy (zero outside: the padding is never stored) and the results scattered back.

- ``gather_tiles``: x's polyphase tiles, (Th, Tw, phase channel, tile), for the forward GEMM layout;
- ``scatter_tiles``: the valid outputs of each output tile into y;
- ``gather_flipped_tiles``: dy's tiles, each reversed in place, the "kernel" of backward_filter (reversing a
  real signal conjugates its spectrum, up to the shift that ``backward.pick_lags`` undoes);
- ``scatter_phases``: backward_data's phase-image tiles back into dx, zero at every pixel no output reads, by
  the index maps of ``backward.phase_map`` (computed once per call: no division in the loop).
"""
from __future__ import annotations

from numba import njit, prange

# gather_tiles and gather_flipped_tiles are deliberate twins: one loop nest over (tile position, channel,
# tile), the second reading each tile reversed and without stride phases.


@njit(parallel=True, cache=True)
def gather_tiles(x, top, left, sh, sw, mh, mw, nth, ntw, tiles):
    """tiles[a, b, (c, ph, pw), (n, i, j)] = padded x[n, c, (i*mh + a)*sh + ph, (j*mw + b)*sw + pw], else 0."""
    Th, Tw = tiles.shape[0], tiles.shape[1]
    N, C, H, W = x.shape
    for a in prange(Th):
        for b in range(Tw):
            for c in range(C):
                for ph in range(sh):
                    for pw in range(sw):
                        cs = (c * sh + ph) * sw + pw
                        for n in range(N):
                            for i in range(nth):
                                row = (i * mh + a) * sh + ph - top
                                for j in range(ntw):
                                    col = (j * mw + b) * sw + pw - left
                                    inside = 0 <= row < H and 0 <= col < W
                                    tiles[a, b, cs, (n * nth + i) * ntw + j] = x[n, c, row, col] if inside else 0
    return tiles


@njit(parallel=True, cache=True)
def scatter_tiles(out_tiles, off_h, off_w, mh, mw, nth, ntw, y):
    """y[n, k, i*mh + a, j*mw + b] = out_tiles[off_h + a, off_w + b, k, (n, i, j)], cropped to y."""
    N, K, Ho, Wo = y.shape
    for k in prange(K):
        for n in range(N):
            for i in range(nth):
                for a in range(min(mh, Ho - i * mh)):
                    for j in range(ntw):
                        for b in range(min(mw, Wo - j * mw)):
                            tile = (n * nth + i) * ntw + j
                            y[n, k, i * mh + a, j * mw + b] = out_tiles[off_h + a, off_w + b, k, tile]
    return y


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
