"""The Numba kernels of "winograd_fused_4x4"'s forward and backward-data passes (``fused.py``, where the maths
is): channels in the lanes. ``fused_correlate`` takes one block of TB tiles at a time, and in the thread's own
scratch lays out each tile row's input rows pixel-major with zeros around them (``pixel_row``), transforms each
tile's input (``f43.input_tile``: 36 vector loads per tile and L channels, no gather), multiplies
(``lane_tiles``: 8 tiles x V output channels per register tile) and transforms its output (``f43.output_tile``),
which it turns into the NCHW output; ``transform_filters`` makes the packed filter transforms it multiplies."""
from __future__ import annotations

from numba import njit, prange

from ..kernels.lane_tiles import ROWS, narrow_tile, wide_tile
from ..kernels.loops import share
from ..kernels.simd import lanes, load, load_head, store4, store8, transpose8
from .f43 import filter_tile, input_tile, output_tile


@njit(cache=True, inline="always")
def pixel_row(x, n, c0, Cg, y, left, row):
    """row[j, c] = x[n, c0 + c, y, j - left] where that lies inside x and c < Cg, else 0: one row of Cg channels
    laid out pixel-major. x: (N, C, H, W) contiguous; row: (Wp, Cgp), Cgp >= Cg, its rows contiguous; a negative
    offset crops. Where the row of x is read whole, 8 channels x L pixels (or 8 at the row's end) at a time are
    turned in registers (``simd.transpose8``) and stored 8 channels a pixel (L >= 8); the rest is copied one by
    one (a scalar copy of a C64 8 px layer took 2x as long)."""
    N, C, H, W = x.shape
    Wp, Cgp = row.shape
    source = x.reshape(-1)
    L = lanes(source)
    j0, j1 = max(0, left), min(Wp, W + left)          # the columns of row that x covers
    if not 0 <= y < H:
        row[:] = 0.0
        return
    row[:j0] = 0.0
    row[j1:] = 0.0
    for j in range(j0, j1):                           # channels past Cg
        for c in range(Cg, Cgp):
            row[j, c] = 0.0
    turned_c, turned_x = (Cg // 8) * 8 if L >= 8 else 0, j0 - left
    if j0 == left and j1 == W + left:                 # a whole row: blocks of 8 pixels turned, the rest copied
        turned_x = (W // 8) * 8
    for b in range(0, turned_c, 8):
        at = ((n * C + c0 + b) * H + y) * W
        for x0 in range(0, turned_x, L):
            q, head = at + x0, min(L, turned_x - x0)          # a multiple of 8 pixels: a masked load
            u = transpose8(load_head(source, q, head), load_head(source, q + H * W, head),
                           load_head(source, q + 2 * H * W, head), load_head(source, q + 3 * H * W, head),
                           load_head(source, q + 4 * H * W, head), load_head(source, q + 5 * H * W, head),
                           load_head(source, q + 6 * H * W, head), load_head(source, q + 7 * H * W, head))
            for m in range(8):
                for h in range(head // 8):
                    store8(row, (left + x0 + 8 * h + m, b), u[m], h)
    for c in range(Cg):                               # what was not turned, one by one
        plane = x[n, c0 + c, y]
        for j in range(j0 if c >= turned_c else left + turned_x, j1):
            row[j, c] = plane[j - left]


@njit(cache=True, inline="always")
def _products(vs, wb, taps, Cgp, wide, TB, V, ms, m0):
    """ms[m0 + t V + v] = sum_c vs[t Cgp + c] wb[c V + v] for the block's TB tiles t (rows) and one chunk of V
    output channels: ``lane_tiles``' register tiles, 8 tiles at a time."""
    for t0 in range(0, TB, ROWS):
        if wide:
            wide_tile(vs, wb, taps, t0 * Cgp, Cgp, ms, m0 + t0 * V)
        else:
            narrow_tile(vs, wb, taps, t0 * Cgp, Cgp, ms, m0 + t0 * V)


@njit(cache=True, inline="always")
def _turned_tile(out, n, k0, valid, y0, x0, Y):
    """out[n, k0 + lane, y0 + i, x0:x0 + 4] = Y[(4 i + j) L + lane] for j < 4, i < 4 and the valid lanes (L >= 8):
    two rows of the tile at a time, 8 pixel vectors turned in registers (``simd.transpose8``) so that each
    channel's 4 + 4 pixels are two quarter-vector stores (``store4``), where a scalar copy is 32 loads and stores."""
    L = lanes(Y)
    for i in range(0, 4, 2):
        a, b = 4 * i * L, 4 * (i + 1) * L
        u = transpose8(load(Y, a), load(Y, a + L), load(Y, a + 2 * L), load(Y, a + 3 * L),
                       load(Y, b), load(Y, b + L), load(Y, b + 2 * L), load(Y, b + 3 * L))
        for m in range(8):
            for h in range(L // 8):
                if 8 * h + m < valid:
                    store4(out, (n, k0 + 8 * h + m, y0 + i, x0), u[m], 2 * h)
                    store4(out, (n, k0 + 8 * h + m, y0 + i + 1, x0), u[m], 2 * h + 1)


@njit(parallel=True, cache=True)
def fused_correlate(x, top, left, Upk, tiles_h, tiles_w, TB, wide, taps, Band, Vs, Ms, T, Y, out):
    """out = the 3x3 correlation (stride 1) of x placed at (top, left) inside zeros with the filters whose
    transforms are Upk, one block of TB tiles at a time (``winograd_fused``), channels in the lanes:

        Vs[xi, t, c] = (B^T d[t, c] B)[xi]                          input transform, L channels a vector
        Ms[xi, j, t, v] = sum_c Vs[xi, t, c] Upk[xi, g, j, c, v]     alpha^2 products (TB x Cg) @ (Cg x V)
        out tile t of channel j V + v = A^T Ms[:, j, t, v] A          output transform, cropped to out

    x: (N, C, H, W) contiguous; Upk: (36, groups, chunks, Cg, V), output channel j V + v in chunk j (zero past
    the group's Kg); out: (N, Kout, Ho, Wo) contiguous; TB: a multiple of 8; taps: 0 .. Cg - 1. Tiles are
    numbered n-major over the tiles_h x tiles_w grid; a block's missing tiles repeat its tiles (read, never
    written). A tile reads the six rows of its tile row, laid out pixel-major in the thread's Band (``pixel_row``,
    made again when the tile row changes: 1.5x the copying of the whole input, but in cache, where a whole
    pixel-major copy made first was written to memory and read back). Scratch per thread: Band (6, Wp >= 4
    tiles_w + 2, Cgp), Vs (36, >= TB Cgp), Ms (36, >= chunks TB V), T (36 L), Y (16 L). Rows of Vs and Ms are a
    vector longer than they need, so that a tile's 36 vectors are not a power of two apart (2 KB apart, they
    share two of L1's sets and evict each other).
    One item is one group, one block and a part of its chunks: all of them, unless there are fewer than two
    blocks per thread (a deep layer on a small image), when each part transforms the block's input again."""
    N, groups, Cg = x.shape[0], Upk.shape[1], Upk.shape[3]
    Wp, Cgp = Band.shape[2], Band.shape[3]
    chunks, V = Upk.shape[2], Upk.shape[4]
    Kout, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    Kg = Kout // groups
    n_threads, vstep, mstep = Vs.shape[0], Vs.shape[2], Ms.shape[2]
    L = lanes(T[0])
    per_image = tiles_h * tiles_w
    P = N * per_image
    n_blocks = (P + TB - 1) // TB
    n_parts = min(chunks, max(1, -(-2 * n_threads // (groups * n_blocks))))
    target = out.reshape(-1)
    for thread in prange(n_threads):
        band, source = Band[thread], Band[thread].reshape(-1)
        vs, ms, tt, y = Vs[thread].reshape(-1), Ms[thread].reshape(-1), T[thread], Y[thread]
        start, stop = share(groups * n_blocks * n_parts, thread, n_threads)
        for item in range(start, stop):
            g, p0, part = item // (n_blocks * n_parts), (item // n_parts) % n_blocks * TB, item % n_parts
            j0, j1 = part * chunks // n_parts, (part + 1) * chunks // n_parts
            count, held = min(TB, P - p0), -1
            for t in range(TB):                                   # input transform
                tile = p0 + t % count
                n, ty, tx = tile // per_image, (tile // tiles_w) % tiles_h, tile % tiles_w
                if tile // tiles_w != held:                       # the tile row's six rows, pixel-major
                    held = tile // tiles_w
                    for k in range(6):
                        pixel_row(x, n, g * Cg, Cg, 4 * ty + k - top, left, band[k])
                for c0 in range(0, Cgp, L):
                    input_tile(source, 4 * tx * Cgp + c0, Wp * Cgp, Cgp, tt, vs, t * Cgp + c0, vstep)
            for xi in range(36):                                  # the products
                for j in range(j0, j1):
                    _products(vs[xi * vstep:], Upk[xi, g, j].reshape(-1), taps, Cgp, wide, TB, V, ms,
                              xi * mstep + j * TB * V)
            for t in range(count):                                # output transform
                tile = p0 + t
                n, ty, tx = tile // per_image, (tile // tiles_w) % tiles_h, tile % tiles_w
                rows, cols = min(4, Ho - 4 * ty), min(4, Wo - 4 * tx)
                for k0 in range(j0 * V, min(j1 * V, Kg), L):
                    valid, k = min(L, Kg - k0), g * Kg + k0
                    output_tile(ms, (k0 // V * TB + t) * V + k0 % V, mstep, tt, y)
                    if L >= 8 and rows == 4 and cols == 4:
                        _turned_tile(out, n, k, valid, 4 * ty, 4 * tx, y)
                    else:
                        for lane in range(valid):
                            at = ((n * Kout + k + lane) * Ho + 4 * ty) * Wo + 4 * tx
                            for i in range(rows):
                                for jj in range(cols):
                                    target[at + i * Wo + jj] = y[(4 * i + jj) * L + lane]


@njit(parallel=True, cache=True)
def transform_filters(w, swap, Upk, stage, T):
    """Upk[xi, g, j, i, v] = (G f G^T)[xi] for the filter f from input channel i to output channel o = j V + v
    of group g of the correlation (zero past the group's outputs): ``lane_tiles``' vectors of V output channels.
    Forward (swap False): f = w[g Kg + o, i]; backward-data (swap True: the layer's input channels are the
    outputs): f = w[g Kg + i, o] turned by 180 degrees. w: (K, Cg, 3, 3); Upk: (36, groups, chunks, inputs, V);
    per thread stage (9 V), T (18 L). One item is one (group, chunk, input channel): its V filters gathered
    into the stage a tap at a time, then transformed L at a time (``f43.filter_tile``)."""
    K, Cg = w.shape[0], w.shape[1]
    groups, chunks, n_in, V = Upk.shape[1], Upk.shape[2], Upk.shape[3], Upk.shape[4]
    Kg = K // groups
    n_out, n_threads, L = Cg if swap else Kg, stage.shape[0], lanes(T[0])
    target, step = Upk.reshape(-1), groups * chunks * n_in * V
    for thread in prange(n_threads):
        st, tt = stage[thread], T[thread]
        start, stop = share(groups * chunks * n_in, thread, n_threads)
        for item in range(start, stop):
            g, j, i = item // (chunks * n_in), (item // n_in) % chunks, item % n_in
            for v in range(V):
                o = j * V + v
                for r in range(3):
                    for s in range(3):
                        if o >= n_out:
                            st[(3 * r + s) * V + v] = 0.0
                        elif swap:
                            st[(3 * r + s) * V + v] = w[g * Kg + i, o, 2 - r, 2 - s]
                        else:
                            st[(3 * r + s) * V + v] = w[g * Kg + o, i, r, s]
            for h in range(0, V, L):
                filter_tile(st[h:], V, tt, target, (((g * chunks) + j) * n_in + i) * V + h, step)
