"""Fused Winograd F(4x4, 3x3), "winograd_fused_4x4": the same maths as "winograd_4x4" (convalgos.winograd),
one block of tiles at a time, so the transformed tiles never leave the cache.

The non-fused passes (cuDNN's WINOGRAD_NONFUSED) run each step over the whole image: every tile's transform
V (alpha^2 x C x P) is written to memory, alpha^2 GEMMs read it and write M (alpha^2 x K x P), and the output
transform reads M back. On a large plane with few channels V and M are tens of MB (VGG's C = 64 224x224
layer: 29 MB each), so the steps run at memory speed, not at the FMA units'. The fused pass (cuDNN's
WINOGRAD, NNPACK's per-block transform strategy) takes TB tiles at a time (32 float32 tiles with AVX-512, 16
with AVX2; fewer on a layer with fewer tiles), and for each block, in one thread's scratch:

    V[xi][t, c] = (B^T d[t, c] B)[xi]                  every input channel c of the group, tile t < TB
    M[xi][t, k] = sum_c V[xi][t, c] U[xi][c, k]        alpha^2 products (TB x Cg) @ (Cg x Kg)
    y[k, tile t] = A^T M[:, t, k] A                     every output channel, cropped to the output

The channels are the vector lanes, as in oneDNN's blocked layouts (``fused_kernels.py``). The six input rows
of a tile row are laid out pixel-major in the thread's scratch (zero-padded; ``pixel_row``, 8 channels x L
pixels turned in registers at a time), so a tile's 6 x 6 patch is 36 vector loads of L channels, no gather;
the transforms are F(4x4, 3x3)'s matrices written out and factored (``f43.py``: 14 and 10 operations a row
where the dense rows took 36 and 24 multiply-adds, each with a broadcast of the matrix's entry); the products are
``direct_channels``' register tile (``kernels.lane_tiles``: 8 tiles x 2L output channels, per input channel
two vector loads of U and eight broadcasts of V for sixteen multiply-adds); and each transformed output tile
(16 vectors: pixels x L channels) is turned two rows at a time in registers into 4-pixel stores of each
channel. U is packed to match once per call, or once with ``prepare`` (``transform_filters``: 36 x V x Cg
per chunk of V output channels; backward-data's from the filters turned by 180 degrees, K and C swapped,
so it is the same pass).

Where the time went (ResNet-20 b32, 2 threads, C16 32x32 / C64 8x8, ms; with the whole input copied pixel-major
first, as the first version of this kernel did): the pixel-major copy 0.11 / 0.06,
the input transform 0.06 / 0.02, the products 0.13 / 0.05, the output transform and stores 0.18 / 0.05. The
kernel it replaced (tiles in the lanes: each 6 x 6 patch gathered a scalar at a time, dense transforms, a
scalar scatter) spent 0.17 / 0.05 on the gather, 0.16 / 0.07 on the input transform and 0.19 / 0.05 on the
output, and took 0.74 / 0.32 ms in all, against 0.50 / 0.21 now. Rows of V and M are padded by a vector: at
2 KB apart a tile's 36 vectors shared two of L1's sets (C32 16x16: 0.27 ms -> 0.16 ms for the kernel). That
whole copy was written to memory and read back: with the caches flushed before each call, as inside a training
step, it cost the pass 0.14-0.26 ms more than warm (``direct``: 0.05); made per tile row in cache instead (1.5x
the copying, the rows of neighbouring tile rows overlap), ms cold before / after / direct: C32 16x16 0.61 /
0.48 / 0.51, C64 8x8 0.45 / 0.31 / 0.64, C16 32x32 0.79 / 0.67 / 0.49. That copy then spent most of its time
testing, element by element, what its register transposes had already turned; copying only the rest, ms warm,
C16 32x32 0.51 -> 0.44, C32 16x16 0.26 -> 0.20, C64 8x8 0.18 -> 0.145 (parts of the C16 pass now: the copy
~0.07, input transform 0.05, products 0.13, output transform 0.06, stores 0.08, loops 0.03).

The trade-off, which the tuner weighs per layer: every block reads all of U (alpha^2 K Cg elements) once,
where the non-fused GEMMs read it once per call. With C = K = 512, U is 37 MB, read again for every 32 tiles:
on deep layers with small planes the non-fused pass or ``direct`` wins; elsewhere this one. Measured (2-core
AMD EPYC Zen 5, AVX-512, float32, prepared weights, medians of 20 interleaved calls, 2026-12-05; the machine
drifted ~30% during the run), ms, this / winograd_4x4 / direct_channels / torch: VGG b1 C64 224x224 5.7 /
16.3 / 9.2 / 9.1; C128 112x112 3.8 / 9.3 / 7.8 / 8.2; C256 56x56 4.3 / 7.5 / 7.7 / 8.2; C512 28x28 4.8 / 7.4 /
9.6 / 8.6; C512 14x14 1.8 / 3.7 / 2.7 / 2.9; ResNet-18 b1 C512 7x7 1.2 / 2.9 / 0.84 / 1.5 (direct 0.84);
ResNet-20 b32 C64 8x8 0.29 / 1.1 / 0.46 / 0.47, C32 16x16 0.37 / 1.7 / 0.50 / 0.46, C16 32x32 0.76 / 2.5 /
0.88 / 0.76 (direct 0.54: with 16 channels a tile's products are 8 broadcasts per 8 multiply-adds, and the
copies cost as much as the arithmetic).

Backward-filter, F(3x3, 4x4) (the maths of convalgos.winograd: dy's tiles are the "filters"), fused the same way
(cuDNN documents its fused BWD_FILTER_ALGO_WINOGRAD as not implemented; ``fused_filter_kernels.py``). Per block
of TB tiles, in the thread's scratch:

    X[xi][t, c] = (B'^T x[c, t] B')[xi]                every input channel c of the group (6 x 6 patches of x)
    D[xi][k, t] = (G' dy[k, t] G'^T)[xi]               every output channel k (4 x 4 tiles of dy)
    S_thread[xi] += D[xi] @ X[xi]    (Kg x TB) @ (TB x Cg)  alpha^2 products summed over the block's tiles
    dw[k, c] = A'^T (sum over threads of S_thread)[:, k, c] A'      once, after every block

Both transforms run with the channels in the lanes, as the forward pass's do: a tile row's rows of x and dy
are copied pixel-major (x placed at the padding, dy with zeros past Ho, Wo), a tile's patch is whole vectors,
B' is F(4x4, 3x3)'s B (``f43.input_tile``) and G' is written out too (``f43.gradient_tile``). The products are
an outer-product register tile (``kernels.lane_tiles``, ``direct_channels``' tile): 8 output channels k
(broadcasts of D) x two vectors of input channels c (X; one vector when a group has at most L) per tile,
summed over the block's tiles.
Where the non-fused pass writes X and D for every tile (36 (C + K) P elements: 9.4 MB on ResNet-20 b32's C16
32x32 layers) and hands alpha^2 small GEMMs to BLAS (64 x 128 x 64 on its C64 8x8 layers: 80 GFLOP/s
measured), here nothing but the sums leaves the cache. Each worker keeps its own S (alpha^2 Kg Cg per group,
channels rounded up to the tile), added at the end: the cost that grows with K C (C = K = 512: 38 MB a worker;
a layer of one block runs on one worker, one S).
Measured (2-core AMD EPYC Zen 5, AVX-512, float32, 2 threads, 2026-12-05, ``bench.train_passes``, medians of 5
interleaved rounds), ms, this / direct / torch: ResNet-20 b32 C64 8x8 0.37 / 0.55 / 0.41, C32 16x16 0.35 /
0.44 / 0.41, C16 32x32 0.54 / 0.51 / 1.34; ResNet-18 b1 C64 56x56 0.44 / 0.69 / 0.59, C128 28x28 0.57 / 0.72 /
0.59, C256 14x14 2.1 / 1.1 / 2.3 (one block: one worker), C512 7x7 13 / 2.9 / 6.5. The kernel it replaced (tiles
in the lanes: each patch gathered a scalar at a time, dense transforms, then turned channel-minor) took 0.54,
0.73 and 1.35 ms on ResNet-20's layers and lost to ``direct`` on all but the C64 8x8 one: per tile and channel
its transforms cost ~100 cycles against the 36 K / 32 of products they save (on C16 32x32: the gather 0.56 ms,
the sandwich 0.15, turning 0.12, dy's transform 0.24, the products 0.16).

FLOPs (``flops``): alpha^2 products per tile and (k, c) pair, 36 against direct's 144 (4x fewer), over P
rounded up to whole blocks and the output channels to V, plus the transforms (``f43``'s operation counts per
tile and channel; backward-filter's as in convalgos.winograd, X d X^T costing 2 nnz(X) (a + b)).
Workspace (``workspace_bytes``): the pixel-major input (channels rounded up to L), the packed U (output
channels rounded up to V) with its stage (9 V) and scratch (18 L) per thread, and per thread V (alpha^2 TB Cgp
+ L), M (alpha^2 TB Kp + L), the transforms' T (36 L) and Y (16 L); the products' tap table (Cg integers).
Backward-filter: per thread X (alpha^2 Cgp TB), D (alpha^2 Kp TB), the
transforms' scratch (6 x 6 and 4 x 4: 184 TB), a tile's stage (8 V) and S (alpha^2 groups Kp Cgp; Kp, Cgp: a
group's channels rounded up to 8 and to V); the summed S (alpha^2 K Cg), the output transform's scratch and a
tap table (TB integers).
Constraints: a 3x3 kernel, stride 1, dilation 1 (any padding, any groups). Accuracy: as winograd_4x4's.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..kernels.lane_tiles import ROWS, tile_lanes
from ..kernels.simd import REGISTER_BYTES
from ..params import ConvParams
from ..registry import Algorithm
from .cooktoom import cook_toom
from .f43 import FILTER_FLOPS, GRADIENT_FLOPS, INPUT_FLOPS, OUTPUT_FLOPS
from .fused_filter_kernels import add_thread_sums, fused_filter_sums
from .fused_kernels import fused_correlate, transform_filters
from .kernels import block_tiles, filter_block_size, filter_transform, scratch_elements
from .shared import TOLERANCES, f3x3_constraints, sandwich_flops, tile_grid


class FusedWinograd(Algorithm):
    """F(m x m, 3 x 3) forward and backward-data, F(3 x 3, m x m) backward-filter, one block of TB tiles at a
    time (module docstring)."""

    deterministic = True
    #: filters ((k, c) pairs) per item of the filter transform (at most an equal share of them per thread).
    filter_block = 1024

    def __init__(self, m: int = 4):
        super().__init__()
        if m != 4:
            raise ValueError(f"the fused kernel is written for F(4x4, 3x3) (alpha = 6), got m={m}")
        self.m, self.alpha = m, m + 2
        self.name = f"winograd_fused_{m}x{m}"
        self.tolerances, self.tolerance = TOLERANCES[m], TOLERANCES[m]["forward"]
        self.filter_matrices = cook_toom(3, m)      # F(3, m): backward-filter's A' (f43.py writes out the rest)
        self._filter_float = {np.dtype(dt): self.filter_matrices.as_float(dt) for dt in (np.float32, np.float64)}

    # ---- sizes ---------------------------------------------------------------------------------------------
    def _tiles(self, p: ConvParams, op: str) -> tuple[int, int]:
        return tile_grid(p, op, self.m)

    def block_tiles(self, p: ConvParams, op: str = "forward") -> int:
        """TB: tiles per block, two vector registers of lanes (fewer when the layer has fewer tiles: backward-
        filter's lanes are the tiles, forward's and backward-data's block is a multiple of the tile's 8 rows)."""
        if op == "backward_filter":
            return block_tiles(p.compute_dtype)
        tiles_h, tiles_w = self._tiles(p, op)
        return min(block_tiles(p.compute_dtype), max(1, -(-p.N * tiles_h * tiles_w // ROWS)) * ROWS)

    def computed_tiles(self, p: ConvParams, op: str) -> int:
        """Tiles computed: N * tiles_h * tiles_w rounded up to whole blocks."""
        tiles_h, tiles_w = self._tiles(p, op)
        TB = self.block_tiles(p, op)
        return -(-p.N * tiles_h * tiles_w // TB) * TB

    def _channels(self, p: ConvParams, op: str) -> tuple[int, int, int, int]:
        """(input channels, output channels, and each per group) of the correlation the pass runs."""
        return (p.C, p.K, p.Cg, p.Kg) if op == "forward" else (p.K, p.C, p.Kg, p.Cg)

    # ---- the questions -------------------------------------------------------------------------------------
    def constraints(self, p: ConvParams, op: str = "forward"):
        return f3x3_constraints(self.name, p)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return self._filter_workspace_bytes(p)
        _, _, in_g, out_g = self._channels(p, op)
        L, V, n_threads = self._lanes(p), tile_lanes(out_g, p.itemsize)[1], get_num_threads()
        filters = self.prepare_bytes(p, op) // p.itemsize + n_threads * (9 * V + 18 * L)   # Upk, its stage and T
        per_thread = sum(int(np.prod(shape)) for shape in self._scratch(p, op).values())
        return (filters + n_threads * per_thread) * p.itemsize + in_g * 8

    def _filter_scratch_elements(self, p: ConvParams, n_threads: int) -> int:
        return scratch_elements(3, self.alpha, filter_block_size(p.K * p.Cg, self.filter_block, n_threads))

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if op == "backward_filter":
            return self._filter_flops(p)
        tiles_h, tiles_w = self._tiles(p, op)
        P, (_, n_out, in_g, out_g) = self.computed_tiles(p, op), self._channels(p, op)
        V, L = tile_lanes(out_g, p.itemsize)[1], self._lanes(p)
        products = 2 * self.alpha ** 2 * p.groups * -(-out_g // V) * V * in_g * P
        transforms = INPUT_FLOPS * p.groups * -(-in_g // L) * L * P + OUTPUT_FLOPS * n_out * p.N * tiles_h * tiles_w
        return products + transforms + FILTER_FLOPS * p.K * p.Cg

    # ---- prepared weights ----------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """U packed for the products (``fused_kernels.pack_filters``): (alpha^2, groups, chunks, Cin_g, V) of the
        filters, or of backward-data's flipped ones."""
        return self._packed_filters(w, p, op, fresh=True)

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if not self.prepares(op):
            return 0
        _, _, in_g, out_g = self._channels(p, op)
        wide, V = tile_lanes(out_g, p.itemsize)
        return self.alpha ** 2 * p.groups * -(-out_g // V) * V * in_g * p.itemsize

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        Upk = self._packed_filters(w, p, "forward") if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(x, top, left, Upk, p, "forward", out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        Upk = self._packed_filters(w, p, "backward_data") if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(dy, 2 - top, 2 - left, Upk, p, "backward_data", out)

    # ---- the steps they share ------------------------------------------------------------------------------
    def _packed_filters(self, w, p: ConvParams, op: str, fresh: bool = False):
        """U = G f G^T per filter f (backward-data's turned by 180 degrees, K and C swapped), with V output
        channels of the correlation side by side (``fused_kernels.transform_filters``): into a fresh array with
        ``fresh``, else a kept workspace buffer."""
        _, _, in_g, out_g = self._channels(p, op)
        L, V, n_threads = self._lanes(p), tile_lanes(out_g, p.itemsize)[1], get_num_threads()
        shape = (self.alpha ** 2, p.groups, -(-out_g // V), in_g, V)
        Upk = np.empty(shape, w.dtype) if fresh else self.workspace.get("Upk", shape, w.dtype)
        stage = self.workspace.get("filter_stage", (n_threads, 9 * V), w.dtype)
        scratch = self.workspace.get("filter_T", (n_threads, 18 * L), w.dtype)
        transform_filters(w, op == "backward_data", Upk, stage, scratch)
        return Upk

    def _scratch(self, p: ConvParams, op: str) -> dict:
        """name -> shape of each thread's scratch for ``fused_kernels.fused_correlate``."""
        _, _, in_g, out_g = self._channels(p, op)
        L = self._lanes(p)
        wide, V = tile_lanes(out_g, p.itemsize)
        TB, Cgp = self.block_tiles(p, op), -(-in_g // L) * L
        tiles_w = self._tiles(p, op)[1]
        return {"band": (6, tiles_w * self.m + 2, Cgp), "V": (self.alpha ** 2, TB * Cgp + L),
                "M": (self.alpha ** 2, -(-out_g // V) * TB * V + L), "T": (36 * L,), "Y": (16 * L,)}

    @staticmethod
    def _lanes(p: ConvParams) -> int:
        return REGISTER_BYTES // p.itemsize

    def _correlate(self, src, top, left, Upk, p: ConvParams, op: str, out) -> None:
        """out = the 3x3 correlation (stride 1) of src placed at (top, left) inside zeros with the packed filter
        transforms Upk, fused per block, channels in the lanes (``fused_kernels``)."""
        tiles_h, tiles_w = self._tiles(p, op)
        _, _, in_g, out_g = self._channels(p, op)
        L, n_threads = self._lanes(p), get_num_threads()
        taps = self.workspace.get("taps", (in_g,), np.int64)
        taps[:] = np.arange(in_g)
        scratch = [self.workspace.get(name, (n_threads,) + shape, src.dtype)
                   for name, shape in self._scratch(p, op).items()]
        fused_correlate(np.ascontiguousarray(src), top, left, Upk, tiles_h, tiles_w, self.block_tiles(p, op),
                        tile_lanes(out_g, p.itemsize)[0], taps, *scratch, out)

    # ---- backward-filter (module docstring) -----------------------------------------------------------------
    def _filter_padded(self, p: ConvParams) -> tuple[int, int]:
        """(Kp, Cgp): a group's output channels rounded up to the tile's 8 rows, its input channels to V."""
        V = tile_lanes(p.Cg, p.itemsize)[1]
        return -(-p.Kg // ROWS) * ROWS, -(-p.Cg // V) * V

    def _filter_workers(self, p: ConvParams) -> int:
        """Threads the sums run on: one per (group, block of tiles) at most, so that a layer of few tiles keeps
        no S it would leave at zero (each is alpha^2 K Cg elements: 38 MB at C = K = 512)."""
        blocks = -(-self.computed_tiles(p, "backward_filter") // self.block_tiles(p, "backward_filter"))
        return min(get_num_threads(), p.groups * blocks)

    def _filter_scratch(self, p: ConvParams) -> dict:
        """name -> shape of each worker's scratch for ``fused_filter_kernels.fused_filter_sums``: a tile row's
        rows of x and dy, pixel-major, the block's X and D (rows a vector longer than they need, as the forward
        pass's), the transforms' T, the tile's stage and the worker's sums S."""
        a2, TB, L = self.alpha ** 2, self.block_tiles(p, "backward_filter"), self._lanes(p)
        V = tile_lanes(p.Cg, p.itemsize)[1]
        Kp, Cgp = self._filter_padded(p)
        tiles_w, Kgp = self._tiles(p, "backward_filter")[1], self._gradient_channels(p)
        return {"x_band": (6, 4 * tiles_w + 2, Cgp), "dy_band": (4, 4 * tiles_w, Kgp), "X": (a2, TB * Cgp + L),
                "D": (a2, TB * Kgp + L), "T": (36 * L,), "stage": (ROWS * V,), "S_thread": (a2, p.groups, Kp, Cgp)}

    def _gradient_channels(self, p: ConvParams) -> int:
        """Kgp: a group's output channels rounded up to a vector and to the tile's 8 rows (dy's pixel-major copy)."""
        step = max(self._lanes(p), ROWS)
        return -(-p.Kg // step) * step

    def _filter_workspace_bytes(self, p: ConvParams) -> int:
        a2, TB, n_threads = self.alpha ** 2, self.block_tiles(p, "backward_filter"), get_num_threads()
        per_worker = sum(int(np.prod(shape)) for shape in self._filter_scratch(p).values())
        elements = (self._filter_workers(p) * per_worker + a2 * p.K * p.Cg
                    + n_threads * self._filter_scratch_elements(p, n_threads))
        return elements * p.itemsize + TB * 8

    def _filter_flops(self, p: ConvParams) -> int:
        """alpha^2 products per tile and (k, c) pair, the channels rounded up to the tile (8 rows x V lanes),
        plus the transforms: B'^T per tile and input channel, G' per tile and output channel (both rounded up
        to a vector), A'^T per (k, c). Not counted: adding the workers' sums, (workers - 1) alpha^2 K Cg, which
        depends on the machine, not the layer."""
        tiles_h, tiles_w = self._tiles(p, "backward_filter")
        P, (Kp, Cgp) = p.N * tiles_h * tiles_w, self._filter_padded(p)
        return p.groups * P * (2 * self.alpha ** 2 * Kp * Cgp + INPUT_FLOPS * Cgp
                               + GRADIENT_FLOPS * self._gradient_channels(p)) + sandwich_flops(
            self.filter_matrices.AT) * p.K * p.Cg

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        AT = self._filter_float[x.dtype][0]
        a, a2, TB, n_threads = self.alpha, self.alpha ** 2, self.block_tiles(p, "backward_filter"), get_num_threads()
        workers, wide = self._filter_workers(p), tile_lanes(p.Cg, p.itemsize)[0]
        tiles_h, tiles_w = self._tiles(p, "backward_filter")
        (top, _), (left, _) = p.padding
        get = self.workspace.get
        taps = get("filter_taps", (TB,), np.int64)
        taps[:] = np.arange(TB) * self._gradient_channels(p)
        scratch = [get(name, (workers,) + shape, x.dtype) for name, shape in self._filter_scratch(p).items()]
        fused_filter_sums(np.ascontiguousarray(x), np.ascontiguousarray(dy), top, left, tiles_h, tiles_w, TB, wide,
                          taps, *scratch)
        S = get("S", (a2, p.groups, p.Kg, p.Cg), x.dtype)
        add_thread_sums(scratch[-1], S)
        filter_scratch = get("filter_scratch", (n_threads, self._filter_scratch_elements(p, n_threads)), x.dtype)
        block = filter_block_size(p.K * p.Cg, self.filter_block, n_threads)
        filter_transform(S.reshape(a, a, p.K * p.Cg).transpose(2, 0, 1), AT, block, filter_scratch,
                         out.reshape(p.K * p.Cg, 3, 3))
