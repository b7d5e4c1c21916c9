"""The Numba kernels of "winograd_fused_4x4"'s backward-filter (``fused.py``, where the maths is): per block of
TB tiles, both transforms (channels in the lanes, from pixel-major copies of x's and dy's rows) and the alpha^2
products in the worker's own scratch, summed into the worker's S; then the workers' sums added
(``add_thread_sums``)."""
from __future__ import annotations

from numba import njit, prange

from ..kernels.lane_tiles import ROWS, narrow_tile, wide_tile
from ..kernels.loops import share
from ..kernels.simd import lanes
from .f43 import gradient_tile, input_tile
from .fused_kernels import pixel_row


@njit(parallel=True, cache=True)
def fused_filter_sums(x, dy, top, left, tiles_h, tiles_w, TB, wide, taps, XB, DB, XC, DC, T, stage, S):
    """S[worker, xi, g, k, c] = sum over the worker's tiles t of DC[xi, t, k] * XC[xi, t, c] (``fused_filter``):

        XC[xi][t, c] = (B'^T x[tile t, c] B')[xi]    x's 6 x 6 patch at (4 ty - top, 4 tx - left) (``f43.input_tile``)
        DC[xi][t, k] = (G' dy[tile t, k] G'^T)[xi]   dy's 4 x 4 tile at (4 ty, 4 tx) (``f43.gradient_tile``)

    for the groups g and the worker's share of the blocks of TB tiles (numbered n-major over the tiles_h x tiles_w
    grid), zero outside x and past dy's Ho, Wo. x, dy: NCHW, contiguous. The channels are the lanes of both
    transforms, so each reads its tile as whole vectors, from the tile row's rows laid out pixel-major in the
    worker's bands (``pixel_row``: XB (6, >= 4 tiles_w + 2, Cgp) of x, DB (4, >= 4 tiles_w, Kgp) of dy), made
    again when the tile row changes; the products are ``lane_tiles``' register tiles with the
    rows as 8 output channels k, the lanes as V input channels c (V = 2L ``wide``, else L) and the taps as the
    block's tiles, summed over them, then added to S. Per worker: XC (36, >= chunks TB V) with chunk j of V
    channels at XC[xi, j TB V + t V], DC (36, >= TB Kgp), T (36 L), stage (8 V); S (workers, 36, groups, Kp, Cgp),
    Kp the group's output channels rounded up to 8 (<= Kgp). taps: t Kgp for t < TB (int64)."""
    N, groups, Kp = x.shape[0], S.shape[2], S.shape[3]
    Cg, Kg = x.shape[1] // groups, dy.shape[1] // groups
    Wp, Cgp, Wd, Kgp = XB.shape[2], XB.shape[3], DB.shape[2], DB.shape[3]
    n_workers = S.shape[0]
    xstep, dstep = XC.shape[2], DC.shape[2]
    L = lanes(T[0])
    V = 2 * L if wide else L
    per_image = tiles_h * tiles_w
    P = N * per_image
    n_blocks = (P + TB - 1) // TB
    for worker in prange(n_workers):
        sums, xc, dc, tt, st = S[worker], XC[worker].reshape(-1), DC[worker].reshape(-1), T[worker], stage[worker]
        xband, dband = XB[worker], DB[worker]
        xsource, dsource = xband.reshape(-1), dband.reshape(-1)
        sums[:] = 0.0
        start, stop = share(groups * n_blocks, worker, n_workers)
        for item in range(start, stop):
            g, p0 = item // n_blocks, item % n_blocks * TB
            count, held = min(TB, P - p0), -1
            for t in range(count):                                # both transforms, tile by tile
                tile = p0 + t
                n, ty, tx = tile // per_image, (tile // tiles_w) % tiles_h, tile % tiles_w
                if tile // tiles_w != held:                       # the tile row's rows of x and dy, pixel-major
                    held = tile // tiles_w
                    for k in range(6):
                        pixel_row(x, n, g * Cg, Cg, 4 * ty + k - top, left, xband[k])
                    for k in range(4):
                        pixel_row(dy, n, g * Kg, Kg, 4 * ty + k, 0, dband[k])
                for c0 in range(0, Cgp, L):
                    at = (c0 // V * TB + t) * V + c0 % V
                    input_tile(xsource, 4 * tx * Cgp + c0, Wp * Cgp, Cgp, tt, xc, at, xstep)
                for k0 in range(0, Kgp, L):
                    gradient_tile(dsource, 4 * tx * Kgp + k0, Wd * Kgp, Kgp, tt, dc, t * Kgp + k0, dstep)
            used = taps[:count]
            for xi in range(36):                                  # the products: S[xi] += DC[xi]^T @ XC[xi]
                for j in range(Cgp // V):
                    wb = xc[xi * xstep + j * TB * V:]
                    for k0 in range(0, Kp, ROWS):
                        if wide:
                            wide_tile(dc, wb, used, xi * dstep + k0, 1, st, 0)
                        else:
                            narrow_tile(dc, wb, used, xi * dstep + k0, 1, st, 0)
                        for r in range(ROWS):
                            row = sums[xi, g, k0 + r, j * V:(j + 1) * V]
                            for v in range(V):
                                row[v] += st[r * V + v]


@njit(parallel=True, cache=True)
def add_thread_sums(S, out):
    """out[xi, g, k, c] = sum over threads of S[thread, xi, g, k, c], for k < Kg and c < Cg (out's sizes)."""
    n_threads, a2, groups = S.shape[0], S.shape[1], S.shape[2]
    Kg, Cg = out.shape[2], out.shape[3]
    for item in prange(a2 * groups):
        xi, g = item // groups, item % groups
        for k in range(Kg):
            into = out[xi, g, k]
            first = S[0, xi, g, k]
            for c in range(Cg):
                into[c] = first[c]
            for thread in range(1, n_threads):
                more = S[thread, xi, g, k]
                for c in range(Cg):
                    into[c] += more[c]
