"""The Numba kernels of "winograd_fused_4x4"'s backward-filter (``fused.py``, where the maths is): per block of TB
tiles, both transforms (channels in the lanes, from pixel-major copies of x and dy) and the alpha^2 products in the
worker's own scratch, summed into the worker's S; then the workers' sums added (``add_thread_sums``)."""
from __future__ import annotations

from numba import njit, prange

from ..kernels.lane_tiles import ROWS, narrow_tile, wide_tile
from ..kernels.loops import share
from ..kernels.simd import lanes
from .f43 import gradient_tile, input_tile


@njit(parallel=True, cache=True)
def fused_filter_sums(xl, dyl, tiles_h, tiles_w, TB, wide, taps, XC, DC, T, stage, S):
    """S[worker, xi, g, k, c] = sum over the worker's tiles t of DC[xi, t, k] * XC[xi, t, c] (``fused_filter``):

        XC[xi][t, c] = (B'^T x[tile t, c] B')[xi]    the 6 x 6 patch of xl at (4 ty, 4 tx) (``f43.input_tile``)
        DC[xi][t, k] = (G' dy[tile t, k] G'^T)[xi]   the 4 x 4 tile of dyl at (4 ty, 4 tx) (``f43.gradient_tile``)

    for the groups g and the worker's share of the blocks of TB tiles (numbered n-major over the tiles_h x tiles_w
    grid). xl: (N, 4 tiles_h + 2, 4 tiles_w + 2, groups, Cgp), x placed at the padding (``to_channels_last``);
    dyl: (N, 4 tiles_h, 4 tiles_w, groups, Kgp), dy with zeros past Ho, Wo. The channels are the lanes of both
    transforms, so each reads its tile as whole vectors; the products are ``lane_tiles``' register tiles with the
    rows as 8 output channels k, the lanes as V input channels c (V = 2L ``wide``, else L) and the taps as the
    block's tiles, summed over them, then added to S. Per worker: XC (36, >= chunks TB V) with chunk j of V
    channels at XC[xi, j TB V + t V], DC (36, >= TB Kgp), T (36 L), stage (8 V); S (workers, 36, groups, Kp, Cgp),
    Kp the group's output channels rounded up to 8 (<= Kgp). taps: t Kgp for t < TB (int64)."""
    N, Hp, Wp, groups, Cgp = xl.shape
    Hd, Wd, Kgp = dyl.shape[1], dyl.shape[2], dyl.shape[4]
    n_workers, Kp = S.shape[0], S.shape[3]
    xstep, dstep = XC.shape[2], DC.shape[2]
    L = lanes(T[0])
    V = 2 * L if wide else L
    per_image, xpixel, dpixel = tiles_h * tiles_w, groups * Cgp, groups * Kgp
    P = N * per_image
    n_blocks = (P + TB - 1) // TB
    xsource, dsource = xl.reshape(-1), dyl.reshape(-1)
    for worker in prange(n_workers):
        sums, xc, dc, tt, st = S[worker], XC[worker].reshape(-1), DC[worker].reshape(-1), T[worker], stage[worker]
        sums[:] = 0.0
        start, stop = share(groups * n_blocks, worker, n_workers)
        for item in range(start, stop):
            g, p0 = item // n_blocks, item % n_blocks * TB
            count = min(TB, P - p0)
            for t in range(count):                                # both transforms, tile by tile
                tile = p0 + t
                n, ty, tx = tile // per_image, (tile // tiles_w) % tiles_h, tile % tiles_w
                at = ((n * Hp + 4 * ty) * Wp + 4 * tx) * xpixel + g * Cgp
                for c0 in range(0, Cgp, L):
                    input_tile(xsource, at + c0, Wp * xpixel, xpixel, tt, xc, (c0 // V * TB + t) * V + c0 % V, xstep)
                at = ((n * Hd + 4 * ty) * Wd + 4 * tx) * dpixel + g * Kgp
                for k0 in range(0, Kgp, L):
                    gradient_tile(dsource, at + k0, Wd * dpixel, dpixel, tt, dc, t * Kgp + k0, dstep)
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
