"""Fused Winograd F(4x4, 3x3), "winograd_fused_4x4": the same maths as "winograd_4x4" (convalgos.winograd),
one block of tiles at a time, so the transformed tiles never leave the cache.

The non-fused passes (cuDNN's WINOGRAD_NONFUSED) run each step over the whole image: every tile's transform
V (alpha^2 x C x P) is written to memory, alpha^2 GEMMs read it and write M (alpha^2 x K x P), and the output
transform reads M back. On a large plane with few channels V and M are tens of MB (VGG's C = 64 224x224
layer: 29 MB each), so the steps run at memory speed, not at the FMA units'. The fused pass (cuDNN's
WINOGRAD, NNPACK's per-block transform strategy) takes TB tiles at a time (two vector registers' worth: 32
float32 tiles with AVX-512, 16 with AVX2), and for each block, in one thread's scratch:

    V[xi][c, t] = (B^T d[c, t] B)[xi]                  every input channel c of the group, tile t < TB
    M[k, xi, t] = sum_c U[xi][k, c] V[xi][c, t]        alpha^2 products (Kg x Cg) @ (Cg x TB)
    y[k, tile t] = A^T M[k, :, t] A                     every output channel, cropped to the output

The products are ``direct``'s register blocks (``kernels.blocks.eight_channels``): 8 (or 4) output channels x
TB tiles of accumulators held in registers over the Cg "taps" c, one broadcast of U and two vector loads of V
per tap. A tile is a vector lane, so the input and output transforms are vector arithmetic over the block
(``kernels._sandwich``), after a gather of each tile's alpha x alpha patch.

The trade-off, which the tuner weighs per layer: every block reads all of U (alpha^2 K Cg elements) once,
where the non-fused GEMMs read it once per call. With C = K = 512, U is 37 MB, read again for every 32 tiles:
on deep layers with small planes the non-fused pass wins; on wide planes with C, K <= 128 the fused one.
Measured here (2-core Zen 4, AVX-512, prepared weights, minimum of 15 interleaved calls), ms, fused /
non-fused / torch: VGG C64 224x224 13.8 / 21.9 / 19.3; C128 112x112 9.7 / 15.0 / 17.8; C256 56x56 11.1 /
11.3 / 17.5; C512 28x28 10.7 / 11.5 / 18.6; C512 14x14 6.4 / 6.2 / 5.6; C512 7x7 6.1 / 4.6 / 2.4 (direct 1.7);
ResNet-20 N32 C64 8x8 0.87 / 1.51 / 1.01 and C32 16x16 1.05 / 2.24 / 1.06.

Where its time went (VGG C64 224x224, one call of about 18 ms, measured before the six-vector transforms):
gathering each tile's 6 x 6 patch 3.6 ms, the input transform 3.0, the products 6.3 (146 GFLOP/s), the output
transform and its scatter 3.3. The transforms now apply a row of the 6-column matrix to six vectors at once
(``kernels._mix6``), which made the whole pass 1.1-1.2x faster than one loop over the matrix's
entries (VGG C64 224x224 16.9 -> 15.1 ms, ResNet-20 C64 8x8 1.10 -> 0.91 ms); F(4x4, 3x3) is what this
kernel is written for.

Backward-data is the forward pass over dx's tiles with the flipped filters and K, C swapped (see
convalgos.winograd); it reads U of the flipped filters transposed, a view: the products broadcast U one
element at a time, so on small layers the layout costs nothing (ResNet-20 C64 8x8: 0.78 ms, forward 0.90),
while on C = K = 512 the strided reads made it 24 ms against forward's 16 (the non-fused pass, 18, wins there).
Backward-filter has no fused form here, as in cuDNN (its fused BWD_FILTER_ALGO_WINOGRAD is not implemented):
"winograd_4x4" computes it.

FLOPs (``flops``): alpha^2 products per tile and (k, c) pair, 36 against direct's 144 (4x fewer), over P
rounded up to whole blocks, plus the transforms as in convalgos.winograd (X d X^T costs 2 nnz(X) (a + b)).
Workspace (``workspace_bytes``): the padded input, U, and per thread V (alpha^2 Cg TB), M (Kg alpha^2 TB),
D and T (alpha^2 TB), Y (m^2 TB), the filter transform's scratch (``kernels.scratch_elements`` of its block of
filters: ``filter_block``, at most an equal share per thread) and the kernel's four TB-long index arrays; the
products' tap table (2 Cg integers).
Constraints: a 3x3 kernel, stride 1, dilation 1 (any padding, any groups). Accuracy: as winograd_4x4's.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads

from ..params import ConvParams
from ..registry import Algorithm
from .cooktoom import cook_toom
from .fused_kernels import fused_correlate
from .kernels import block_tiles, filter_block_size, filter_transform, scratch_elements, shift_into
from .shared import TOLERANCES, f3x3_constraints, sandwich_flops, tile_grid


class FusedWinograd(Algorithm):
    """F(m x m, 3 x 3), forward and backward-data, one block of TB tiles at a time (module docstring)."""

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
        self.matrices = cook_toom(m, 3)
        self._float = {np.dtype(dt): self.matrices.as_float(dt) for dt in (np.float32, np.float64)}

    # ---- sizes ---------------------------------------------------------------------------------------------
    def _tiles(self, p: ConvParams, op: str) -> tuple[int, int]:
        return tile_grid(p, op, self.m)

    def block_tiles(self, p: ConvParams) -> int:
        """TB: tiles per block, two vector registers of lanes."""
        return block_tiles(p.compute_dtype)

    def computed_tiles(self, p: ConvParams, op: str) -> int:
        """Tiles computed: N * tiles_h * tiles_w rounded up to whole blocks."""
        tiles_h, tiles_w = self._tiles(p, op)
        TB = self.block_tiles(p)
        return -(-p.N * tiles_h * tiles_w // TB) * TB

    def _channels(self, p: ConvParams, op: str) -> tuple[int, int, int, int]:
        """(input channels, output channels, and each per group) of the correlation the pass runs."""
        return (p.C, p.K, p.Cg, p.Kg) if op == "forward" else (p.K, p.C, p.Kg, p.Cg)

    # ---- the questions -------------------------------------------------------------------------------------
    def constraints(self, p: ConvParams, op: str = "forward"):
        return f3x3_constraints(self.name, p)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        tiles_h, tiles_w = self._tiles(p, op)
        n_in, _, in_g, out_g = self._channels(p, op)
        a2, TB = self.alpha ** 2, self.block_tiles(p)
        padded = p.N * n_in * (tiles_h * self.m + 2) * (tiles_w * self.m + 2)
        filters, n_threads = a2 * p.K * p.Cg, get_num_threads()
        blocks = a2 * TB * (in_g + out_g + 2) + self.m ** 2 * TB                   # V, M, D, T and Y
        scratch = n_threads * (blocks + self._filter_scratch_elements(p, n_threads))
        return (padded + filters + scratch) * p.itemsize + (2 * in_g + n_threads * 4 * TB) * 8

    def _filter_scratch_elements(self, p: ConvParams, n_threads: int) -> int:
        return scratch_elements(3, self.alpha, filter_block_size(p.K * p.Cg, self.filter_block, n_threads))

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        P, (n_in, n_out, _, _) = self.computed_tiles(p, op), self._channels(p, op)
        AT, G, BT = self.matrices.AT, self.matrices.G, self.matrices.BT
        return (2 * self.alpha ** 2 * p.K * p.Cg * P + sandwich_flops(BT) * n_in * P
                + sandwich_flops(AT) * n_out * P + sandwich_flops(G) * p.K * p.Cg)

    # ---- prepared weights ----------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """U (alpha^2, groups, Kg, Cg) of the filters, or of backward-data's flipped ones."""
        return self._transformed_filters(w, p, op, fresh=True)

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return self.alpha ** 2 * p.K * p.Cg * p.itemsize if self.prepares(op) else 0

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        U = self._transformed_filters(w, p, "forward") if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(x, top, left, U, p, "forward", out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        U = self._transformed_filters(w, p, "backward_data") if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(dy, 2 - top, 2 - left, U.transpose(0, 1, 3, 2), p, "backward_data", out)

    # ---- the steps they share ------------------------------------------------------------------------------
    def _transformed_filters(self, w, p: ConvParams, op: str, fresh: bool = False):
        """U (alpha^2, groups, Kg, Cg): G w G^T per filter (G J, columns reversed, for backward-data's flipped
        filters); into a fresh array with ``fresh``, else a kept workspace buffer. Backward-data reads it
        transposed, (alpha^2, groups, Cg, Kg), as a view: its products broadcast U one element at a time, and
        a transposed copy (U is 4x the weight) cost 5x the transform itself on C = K = 512."""
        a, dtype = self.alpha, w.dtype
        G = self._float[dtype][1] if op == "forward" else np.ascontiguousarray(self._float[dtype][1][:, ::-1])
        shape = (a, a, p.K * p.Cg)
        U = np.empty(shape, dtype) if fresh else self.workspace.get("U", shape, dtype)
        n_threads = get_num_threads()
        scratch = self.workspace.get("filter_scratch", (n_threads, self._filter_scratch_elements(p, n_threads)), dtype)
        block = filter_block_size(p.K * p.Cg, self.filter_block, n_threads)
        filter_transform(w.reshape(p.K * p.Cg, 3, 3), G, block, scratch, U.transpose(2, 0, 1))
        return U.reshape(a * a, p.groups, p.Kg, p.Cg)

    def _correlate(self, src, top, left, U, p: ConvParams, op: str, out) -> None:
        """out = the 3x3 correlation (stride 1) of src placed at (top, left) inside zeros with the filters whose
        transforms are U (alpha^2, groups, out channels per group, in channels per group), fused per block."""
        AT, _, BT = self._float[src.dtype]
        tiles_h, tiles_w = self._tiles(p, op)
        _, _, in_g, out_g = self._channels(p, op)
        a, a2, TB, n_threads = self.alpha, self.alpha ** 2, self.block_tiles(p), get_num_threads()
        pad = self.workspace.get("pad", (p.N, src.shape[1], tiles_h * self.m + 2, tiles_w * self.m + 2),
                                 src.dtype)
        shift_into(src, top, left, pad)
        taps = self.workspace.get("taps", (2, in_g), np.int64)
        taps[0], taps[1] = np.arange(in_g), 0
        scratch = {name: self.workspace.get(name, (n_threads,) + shape, src.dtype)
                   for name, shape in (("V", (a2, in_g, TB)), ("M", (out_g, a2, TB)), ("D", (a, a, TB)),
                                       ("T", (a, a, TB)), ("Y", (self.m ** 2, 1, TB)))}
        fused_correlate(pad, U, BT, AT, self.m, tiles_h, tiles_w, taps,
                        scratch["V"], scratch["M"], scratch["D"], scratch["T"], scratch["Y"], out)

