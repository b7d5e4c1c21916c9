"""The Numba kernels of "winograd_fused_4x4"'s backward-filter (``fused.py``, where the maths is): per block of TB
tiles, both transforms and the alpha^2 products in the thread's own scratch, summed into the thread's S; then the
threads' sums added (``add_thread_sums``)."""
from __future__ import annotations

from numba import njit, prange

from ..kernels.lane_tiles import ROWS, narrow_tile, wide_tile
from ..kernels.loops import share
from .block_kernels import sandwich_block, sandwich_block4


@njit(cache=True, inline="always")
def _gather(flat, plane, where, count, H, W, into):
    """into[k, l, t] = element (where[1, t] + k, where[2, t] + l) of the H x W plane at flat[where[0, t] + plane],
    zero outside the plane, for the block's tiles t < count: one pass over the block per (k, l), reading at
    offsets kept in where[4] (inside patches: no checks, a loop the compiler turns into vector gathers)."""
    offsets, inside = where[4], True
    for t in range(count):
        offsets[t] = where[0, t] + plane + where[1, t] * W + where[2, t]
        inside = inside and where[3, t] == 1
    for k in range(into.shape[0]):
        for l in range(into.shape[1]):
            d, at = into[k, l], k * W + l
            if inside:
                for t in range(count):
                    d[t] = flat[offsets[t] + at]
            else:
                for t in range(count):
                    y, xx = where[1, t] + k, where[2, t] + l
                    d[t] = flat[offsets[t] + at] if 0 <= y < H and 0 <= xx < W else 0.0


@njit(cache=True)
def _block_tiles(p0, count, per_image, tiles_w, top, left, C, H, W, a, where):
    """For tile p0 + t of a block (t < count): where[0, t] = the flat offset of image n's first plane, where[1,
    t] and [2, t] the patch's first row and column (a x a at (4 ty - top, 4 tx - left)), where[3, t] 1 when the
    patch lies inside the H x W plane."""
    for t in range(count):
        tile = p0 + t
        n, ty, tx = tile // per_image, (tile % per_image) // tiles_w, tile % tiles_w
        y0, x0 = 4 * ty - top, 4 * tx - left
        where[0, t], where[1, t], where[2, t] = n * C * H * W, y0, x0
        where[3, t] = 1 if (y0 >= 0 and x0 >= 0 and y0 + a <= H and x0 + a <= W) else 0


@njit(parallel=True, cache=True)
def fused_filter_sums(x, dy, top, left, BT, G, tiles_h, tiles_w, wide, taps, D6, T6, Y6, D4, T4, Y4, XC, DC,
                      stage, where, S):
    """S[thread, xi, g, k, c] = sum over the thread's tiles t of DC[xi, k, t] * XC[xi, t, c] (``fused_filter``):

        XC[xi][t, c] = (B'^T x[c, tile t] B')[xi]    the 6 x 6 patch of x (zero outside it) at (4 ty - top, 4 tx - left)
        DC[xi][k, t] = (G' dy[k, tile t] G'^T)[xi]   the 4 x 4 tile of dy (zero beyond Ho, Wo) at (4 ty, 4 tx)

    for the groups g and the thread's share of the blocks of TB tiles (tiles numbered n-major over the tiles_h x
    tiles_w grid). Lanes: tile t of a transform is lane t (``sandwich_block``, ``sandwich_block4``; x's, for V
    channels at a time, is then turned channel-minor: one scatter per channel into XC, whose 36 x TB rows do not fit
    L1, cost 5x more); the products put the input channels in the lanes instead, 8 output channels x V channels (V =
    2L ``wide``, else L) per register tile (``lane_tiles``), summed over the block's tiles, then added to S. Scratch
    per thread: D6, T6 (6, 6, TB), Y6 (36, V, TB), D4 (4, 4, TB), T4 (6, 4, TB), Y4 (6, 6, TB), XC (36, Cgp / V, TB,
    V), DC (36, Kp, TB), stage (8 V), where (2, 5, TB) int64 (``_block_tiles``, ``_gather``); S (threads, 36,
    groups, Kp, Cgp), Kp and Cgp the group's channels rounded up to 8 and V. taps: 0 .. TB - 1 (int64)."""
    N, C, H, W = x.shape
    K, Ho, Wo = dy.shape[1], dy.shape[2], dy.shape[3]
    n_threads, a2, groups, Kp, Cgp = S.shape
    Kg, Cg = K // groups, C // groups
    TB, V = D6.shape[3], XC.shape[4]
    xflat, dyflat = x.reshape(-1), dy.reshape(-1)
    per_image = tiles_h * tiles_w
    P = N * per_image
    n_blocks = (P + TB - 1) // TB
    for thread in prange(n_threads):
        sums, xc, dc, st = S[thread], XC[thread], DC[thread], stage[thread]
        sums[:] = 0.0
        xc[:] = 0.0                                    # lanes past Cg stay zero
        dc[:] = 0.0                                    # rows past Kg: read by a last tile, never summed
        D6[thread][:] = 0.0                            # lanes past a last block's tiles: computed, never kept
        D4[thread][:] = 0.0
        flat = dc.reshape(-1)
        start, stop = share(groups * n_blocks, thread, n_threads)
        for item in range(start, stop):
            g, p0 = item // n_blocks, item % n_blocks * TB
            count = min(TB, P - p0)
            x_tiles, dy_tiles = where[thread, 0], where[thread, 1]
            _block_tiles(p0, count, per_image, tiles_w, top, left, C, H, W, 6, x_tiles)
            _block_tiles(p0, count, per_image, tiles_w, 0, 0, K, Ho, Wo, 4, dy_tiles)
            for block in range(Cgp // V):              # x's transform, V channels at a time, then turned
                valid = min(V, Cg - block * V)         # so that the channels are the lanes
                for cc in range(valid):
                    plane = (g * Cg + block * V + cc) * H * W
                    _gather(xflat, plane, x_tiles, count, H, W, D6[thread])
                    sandwich_block(BT, D6[thread], T6[thread], Y6[thread], cc)
                for xi in range(a2):
                    into, value = xc[xi, block], Y6[thread, xi]
                    for t in range(count):
                        for cc in range(valid):
                            into[t, cc] = value[cc, t]
            for k in range(Kg):                        # dy's transform, kept tile-major
                plane = (g * Kg + k) * Ho * Wo
                _gather(dyflat, plane, dy_tiles, count, Ho, Wo, D4[thread])
                sandwich_block4(G, D4[thread], T4[thread], Y4[thread])
                for xi in range(a2):
                    into, value = dc[xi, k], Y4[thread, xi // 6, xi % 6]
                    for t in range(count):
                        into[t] = value[t]
            used = taps[:count]
            for xi in range(a2):                       # the products: S[xi] += DC[xi] @ XC[xi]
                for block in range(Cgp // V):
                    wb = xc[xi, block].reshape(-1)
                    for k0 in range(0, Kg, ROWS):
                        rows = (xi * Kp + k0) * TB               # DC[xi, k0:k0 + 8] in the flat DC
                        if wide:
                            wide_tile(flat, wb, used, rows, TB, st, 0)
                        else:
                            narrow_tile(flat, wb, used, rows, TB, st, 0)
                        for r in range(min(ROWS, Kg - k0)):
                            row = sums[xi, g, k0 + r, block * V:(block + 1) * V]
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
