"""Winograd minimal filtering for 3x3 layers, all three passes: "winograd_2x2", "winograd_4x4", "winograd_6x6".

Forward, F(m x m, 3 x 3) (Lavin & Gray 2016). Cut the output into m x m tiles; tile (ty, tx) needs the alpha x
alpha patch (alpha = m + 2) at (ty*m, tx*m) of the zero-padded input. With the Cook-Toom matrices A^T (m x
alpha), G (alpha x 3), B^T (alpha x alpha) of F(m, 3) from ``cooktoom.py``, for every group:

    U[xi][k, c] = (G w[k, c] G^T)[xi]                     filter transform, once per call
    V[xi][c, p] = (B^T d[c, p] B)[xi]                     input transform, every tile p and channel c
    M[xi]       = U[xi] @ V[xi]      (Kg x Cg) @ (Cg x P)  alpha^2 independent GEMMs, one batched matmul
    y[k, p]     = A^T M[:, k, p] A   (cropped)             output transform

xi runs over the alpha^2 points of a transformed tile. The channel sum becomes a GEMM per xi because the
transforms are linear and act on each (k, c) pair separately.

Backward-data is a forward convolution. At stride 1, dx[c, i, j] = sum_{k, r, s} dy[k, i + t - r, j + l - s]
w[k, c, r, s] (t, l: top and left padding): the 3x3 correlation of dy, padded by 2 - t rows above and 2 - b
below (2 - l, 2 - r columns; a padding above 2 crops dy instead), with the filter flipped in both axes and its
K and C swapped in each group, w'[c, k] = J w[k, c] J (J reverses 3 entries). So it is the forward F(m x m,
3 x 3) with tiles over dx, and U of the flipped filter needs no flipped copy: G J w J G^T = (G J) w (G J)^T,
G with its columns reversed; the GEMM per xi is U[xi]^T (Cg x Kg) @ V[xi] (Kg x P) on the same U layout.

Backward-filter is a correlation with dy as the filter, dw[k, c, r, s] = sum_{n, i, j} x_pad[c, i + r, j + s]
dy[k, i, j]: output 3 x 3, "filter" Ho x Wo. Cut dy into the same m x m tiles as the forward output (zero
beyond Ho, Wo); each contributes to dw the 3x3 correlation of its alpha x alpha x tile with the m x m dy
tile, F(3 x 3, m x m), with the matrices A'^T (3 x alpha), G' (alpha x m), B'^T (alpha x alpha) of F(3, m)
(the same generator, output size 3, filter size m; B'^T = B^T: same points). Summing over tiles before the
output transform (it is linear):

    X[xi][c, p]  = (B'^T x[c, p] B')[xi]                  every alpha x alpha tile of the padded x
    D[xi][k, p]  = (G' dy[k, p] G'^T)[xi]                 every m x m tile of dy
    S[xi]        = D[xi] @ X[xi]^T   (Kg x P) @ (P x Cg)  a GEMM per xi, summed over images and tiles
    dw[k, c]     = A'^T S[:, k, c] A'                     3 x 3, once per (k, c)

cuDNN ships only a non-fused Winograd for this pass (CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED: the
transforms and the GEMMs as separate steps over a workspace, as here); its enum's fused BWD_FILTER_ALGO_WINOGRAD
is documented as not implemented, while forward and backward-data have a fused Winograd too (here
``winograd_fused_4x4`` has one, ``fused.py``: faster than this pass, still slower than ``direct`` on most
layers). The transforms here are one Numba helper applying X d X^T to a batch of tiles (``kernels.py``).

Multiplies per m x m tile (forward and backward-data: of the output; backward-filter: of dy) per (k, c) pair:
alpha^2 against 9 m^2 directly, in every pass: 16 vs 36 (2.25x fewer) for m = 2, 36 vs 144 (4x) for m = 4,
64 vs 324 (5.06x) for m = 6 (``gemm_multiplies``). FLOPs (``flops``): twice that, plus the transforms as done:
X (b x a) applied on both sides, X d X^T, costs 2 * nnz(X) * (a + b) (zeros skipped). Forward: B^T per tile
and input channel, A^T per tile and output channel, G per (k, c). Backward-data: the same with K and C
swapped and P counted over dx. Backward-filter: B'^T per tile and C, G' per tile and K, A'^T per (k, c), and an
add of S per chunk of tiles after the first. P = N * ceil(Ho'/m) * ceil(Wo'/m), (Ho', Wo') = dx's (H, W) in
backward-data and (Ho, Wo) otherwise.

Workspace (``workspace_bytes``), elements: forward: U (alpha^2 K Cg), the padded x (N C Hpad Wpad, Hpad =
m*ceil(Ho'/m) + 2, likewise Wpad) and the transformed tiles of a chunk (alpha^2 (C + K) Pc). Backward-data:
the same with dy padded (N K Hpad Wpad). Backward-filter: the padded x, dy padded to whole tiles (N K (Hpad
- 2)(Wpad - 2), none when m divides Ho and Wo), the chunk's tiles, S (alpha^2 K Cg) and, when there are
several chunks, a second S. A chunk is whole rows of tiles, as many as keep its tiles within ``chunk_bytes``.
Plus, every pass, one scratch row per thread that the transform kernels take turns to use (``_scratch``),
the largest of their needs: a kernel applying a b x a matrix to n arrays at once needs (a^2 + ab + b^2) n
elements (and ``kernels.SKEW`` twice, between its D, T and Y), n being the tiles of one item
(``tiles_per_block``, at most a chunk's rows) or its filters (``filter_block``, at most an equal share per
thread): ~80 KiB per thread for winograd_4x4's output transform on 256 tiles in float32, a few KiB on a small
layer.

Constraints (every pass): a 3x3 kernel, stride 1, dilation 1; any padding (asymmetric too), any groups.
Depthwise layers run but are slow: with one channel per group the GEMMs degenerate (forward: an outer product,
done by a kernel of its own; backward-filter: a dot product over the tiles), there is no channel sum to amortise
the transforms over, and they cost as much as direct's 9 multiply-adds per output.

Prepared weights (``prepare``): U of the forward filters, or of backward-data's flipped ones, made once by the
same filter transform and read by the pass instead of transforming w (alpha^2 K Cg elements; it serves the
layer at any batch, image size and padding). Inference amortises the transform; training changes w and pays
it every step (there the plain pass pays less: ``prepare`` writes a fresh array, the pass a kept buffer).
Measured, N = 1, C = K = 512, pad 1, one thread, medians of 21 interleaved rounds (loaded machine), ms,
plain / prepared / prepare alone:

    layer, pass             winograd_4x4          winograd_2x2        im2col
    28x28 forward           31.4 / 21.7 / 16.3    31.2 / 26.4 / 5.0   47.6
    28x28 backward_data     34.1 / 23.3 / 13.4    30.1 / 25.3 / 4.9   45.6
    14x14 forward           27.7 / 15.4 / 19.9    20.1 / 13.0 / 5.0   16.8
    14x14 backward_data     28.9 / 15.3 / 21.8    20.7 / 13.3 / 5.2   17.3

prepared / plain in three runs: m = 4 0.68-0.72 at 28x28, 0.49-0.62 at 14x14; m = 2 0.79-0.85, 0.43-0.65. The
transform costs the same at any image size, so its share grows as the image shrinks: at 14x14 prepared weights
turn winograd_4x4 from 0.6x im2col's speed into 1.1-1.4x.

Accuracy: B^T is integer and A^T holds powers of two, so the float32 error comes from rounding in G (entries
like 1/90) and from the transforms' cancellation, which grows with the tile size. Measured normwise float32
forward errors on C = 512 layers (12x12 to 28x28): about 8e-7 for m = 2, 1e-5 to 3e-5 for m = 4 and 0.6e-5 to
3e-5 for m = 6 (F(6,3)'s points are chosen well, see ``cooktoom.py``). Backward passes: see the table in
``shared.py``. Every transform runs in the compute dtype (a float64 filter transform changed nothing measurable).
"""
from __future__ import annotations

import numpy as np

from ..gemm import matmul
from ..params import ConvParams
from ..registry import Algorithm
from .blocking import Blocking, blocking_of, n_chunks, rows_per_chunk
from .cooktoom import cook_toom
from .block_kernels import block_transform
from .kernels import filter_transform, outer_products, output_transform, shift_into, tile_transform
from .shared import TOLERANCES, f3x3_constraints, pass_matrices, sandwich_flops, tile_grid


class Winograd(Algorithm):
    """F(m x m, 3 x 3) Winograd convolution (and F(3 x 3, m x m) for backward-filter); one instance per m."""

    deterministic = True
    #: the transformed tiles of one chunk stay within this many bytes (whole tile rows; at least one row).
    chunk_bytes = 32 << 20
    #: tiles a transform kernel takes per loop iteration (whole tile rows; at least one row).
    tiles_per_block = 256
    #: filters ((k, c) pairs) per item of the filter transform (at most an equal share of them per thread).
    filter_block = 1024

    def __init__(self, m: int, tolerances: dict[str, dict[str, float]] | None = None, points=None):
        """``tolerances``: pass -> dtype -> normwise error allowed (default ``shared.TOLERANCES[m]``);
        ``points``: the finite points of F(m, 3) and of F(3, m) (default: ``cooktoom.default_points``)."""
        super().__init__()
        self.m, self.r = m, 3
        self.alpha = m + self.r - 1
        self.name = f"winograd_{m}x{m}"
        self.tolerances = TOLERANCES[m] if tolerances is None else tolerances
        self.tolerance = self.tolerances["forward"]
        self.matrices = cook_toom(m, self.r, points)                 # F(m, 3): forward and backward-data
        self.filter_matrices = cook_toom(self.r, m, points)          # F(3, m): backward-filter
        self._float = {np.dtype(dt): self._float_matrices(dt) for dt in (np.float32, np.float64)}
        self._blockings: dict = {}                                   # (layer, pass, settings) -> Blocking

    def _float_matrices(self, dtype) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """Pass -> (output, filter, input) transform matrices in ``dtype``; backward-data's G is G J."""
        return pass_matrices(self.matrices, self.filter_matrices, dtype)

    # ---- sizes ---------------------------------------------------------------------------------------------
    @property
    def elementwise_multiplies_per_tile(self) -> int:
        """Multiplies per m x m tile and (k, c) pair, in every pass: alpha^2 (direct: m^2 * 9)."""
        return self.alpha ** 2

    def _tiles(self, p: ConvParams, op: str) -> tuple[int, int]:
        return tile_grid(p, op, self.m)

    def _padded_hw(self, p: ConvParams, op: str) -> tuple[int, int]:
        tiles_h, tiles_w = self._tiles(p, op)
        return tiles_h * self.m + self.r - 1, tiles_w * self.m + self.r - 1

    def _scratch(self, blocking: Blocking, dtype):
        """One scratch row per thread, kept: the transform kernels carve their D, T, Y out of it in turn."""
        return self.workspace.get("scratch", (blocking.threads, blocking.scratch), dtype)

    # ---- the questions -------------------------------------------------------------------------------------
    def constraints(self, p: ConvParams, op: str = "forward"):
        return f3x3_constraints(self.name, p)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        tiles_h, tiles_w = self._tiles(p, op)
        Hpad, Wpad = self._padded_hw(p, op)
        a2 = self.alpha ** 2
        chunk = a2 * (p.C + p.K) * rows_per_chunk(self, p, op) * tiles_w
        if op == "forward":
            elements = a2 * p.K * p.Cg + p.N * p.C * Hpad * Wpad + chunk
        elif op == "backward_data":
            elements = a2 * p.K * p.Cg + p.N * p.K * Hpad * Wpad + chunk
        else:
            dy_tiles = 0 if self._dy_is_whole_tiles(p) else p.N * p.K * (Hpad - 2) * (Wpad - 2)
            sums = a2 * p.K * p.Cg * (1 if n_chunks(self, p, op) == 1 else 2)
            elements = p.N * p.C * Hpad * Wpad + dy_tiles + chunk + sums
        blocking = blocking_of(self, p, op)
        return (elements + blocking.threads * blocking.scratch) * p.itemsize

    def gemm_multiplies(self, p: ConvParams, op: str = "forward") -> int:
        """The elementwise products in the transformed domain: alpha^2 per tile per (k, c) pair."""
        tiles_h, tiles_w = self._tiles(p, op)
        return self.alpha ** 2 * p.Kg * p.Cg * p.groups * p.N * tiles_h * tiles_w

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        tiles_h, tiles_w = self._tiles(p, op)
        P = p.N * tiles_h * tiles_w
        gemm = 2 * self.gemm_multiplies(p, op)
        if op == "backward_filter":
            AT, G, BT = self.filter_matrices.AT, self.filter_matrices.G, self.filter_matrices.BT
            chunk_sums = (n_chunks(self, p, op) - 1) * self.alpha ** 2 * p.K * p.Cg
            return (gemm + sandwich_flops(BT) * p.C * P + sandwich_flops(G) * p.K * P
                    + sandwich_flops(AT) * p.K * p.Cg + chunk_sums)
        n_in, n_out = (p.C, p.K) if op == "forward" else (p.K, p.C)
        mats = self.matrices
        return (gemm + sandwich_flops(mats.BT) * n_in * P + sandwich_flops(mats.AT) * n_out * P
                + sandwich_flops(mats.G) * p.K * p.Cg)

    # ---- prepared weights ----------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """U of the forward filters, or of backward-data's flipped ones: what the pass would compute first."""
        U = np.empty((self.alpha, self.alpha, p.K * p.Cg), w.dtype)
        return self._transformed_filters(w, p, op, blocking_of(self, p, op), U)

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return self.alpha ** 2 * p.K * p.Cg * p.itemsize if self.prepares(op) else 0

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        a2, blocking = self.alpha ** 2, blocking_of(self, p, "forward")
        U = self._transformed_filters(w, p, "forward", blocking) if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(x, top, left, U.reshape(a2, p.groups, p.Kg, p.Cg), p, "forward", blocking, out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        a2, blocking = self.alpha ** 2, blocking_of(self, p, "backward_data")
        U = self._transformed_filters(w, p, "backward_data", blocking) if prepared is None else prepared  # flipped
        (top, _), (left, _) = p.padding
        U_t = U.reshape(a2, p.groups, p.Kg, p.Cg).transpose(0, 1, 3, 2)  # K and C swapped
        self._correlate(dy, 2 - top, 2 - left, U_t, p, "backward_data", blocking, out)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        a, a2, m = self.alpha, self.alpha ** 2, self.m
        AT, G, BT = self._float[x.dtype]["backward_filter"]
        tiles_h, tiles_w = self._tiles(p, "backward_filter")
        blocking = blocking_of(self, p, "backward_filter")
        scratch = self._scratch(blocking, x.dtype)
        (top, _), (left, _) = p.padding
        xpad = self.workspace.get("pad", (p.N, p.C) + self._padded_hw(p, "backward_filter"), x.dtype)
        shift_into(x, top, left, xpad)
        dy_tiles = dy
        if not self._dy_is_whole_tiles(p):
            dy_tiles = self.workspace.get("dy_tiles", (p.N, p.K, tiles_h * m, tiles_w * m), x.dtype)
            shift_into(dy, 0, 0, dy_tiles)
        S = self.workspace.get("S", (a2, p.groups, p.Kg, p.Cg), x.dtype)
        for q0, P, X, D in self._chunks(p, "backward_filter", p.C, p.K, x.dtype):
            self._transform_tiles(xpad, BT, q0, blocking, scratch, X)
            self._transform_tiles(dy_tiles, G, q0, blocking, scratch, D)
            product = S if q0 == 0 else self.workspace.get("S_chunk", S.shape, x.dtype)
            matmul(D.reshape(a2, p.groups, p.Kg, P), X.reshape(a2, p.groups, p.Cg, P).transpose(0, 1, 3, 2),
                      out=product)
            if product is not S:
                S += product
        filter_transform(S.reshape(a, a, p.K * p.Cg).transpose(2, 0, 1), AT, blocking.filter_block, scratch,
                         out.reshape(p.K * p.Cg, 3, 3))

    # ---- the steps they share ------------------------------------------------------------------------------
    def _dy_is_whole_tiles(self, p: ConvParams) -> bool:
        return all(size % self.m == 0 for size in p.out_hw)

    def _transformed_filters(self, w, p: ConvParams, op: str, blocking: Blocking, U=None):
        """U (alpha, alpha, K*Cg): G w[k, c] G^T for every filter (G J for backward-data's flipped ones), into
        ``U`` when given, else into a kept workspace buffer."""
        G = self._float[w.dtype][op][1]
        if U is None:
            U = self.workspace.get("U", (self.alpha, self.alpha, p.K * p.Cg), w.dtype)
        filter_transform(w.reshape(p.K * p.Cg, 3, 3), G, blocking.filter_block, self._scratch(blocking, w.dtype),
                         U.transpose(2, 0, 1))
        return U

    def _chunks(self, p: ConvParams, op: str, first: int, second: int, dtype):
        """(q0, P, A, B) per chunk of P tiles from tile row q0: A (alpha, alpha, first, P) and B (alpha, alpha,
        second, P) views of one kept buffer (first + second = C + K channels of transformed tiles)."""
        a, rows, tiles_w = self.alpha, rows_per_chunk(self, p, op), self._tiles(p, op)[1]
        buffer = self.workspace.get("tiles", (a * a * (p.C + p.K) * rows * tiles_w,), dtype)
        n_rows = p.N * self._tiles(p, op)[0]
        for q0 in range(0, n_rows, rows):
            P = min(rows, n_rows - q0) * tiles_w
            yield (q0, P, buffer[:a * a * first * P].reshape(a, a, first, P),
                   buffer[a * a * first * P:a * a * (first + second) * P].reshape(a, a, second, P))

    def _transform_tiles(self, src, X, q0: int, blocking: Blocking, scratch, V) -> None:
        """V = X d X^T for every tile d of the chunk from tile row q0: a 6 x 6 X (m = 4, both F(4, 3) and F(3,
        4)) by blocks of tiles held in registers (``block_transform``), any other in loops along tile rows."""
        if X.shape == (6, 6):
            block_transform(src, X, self.m, q0, blocking.tiles_w, scratch, V)
        else:
            tile_transform(src, X, self.m, q0, blocking.tiles_w, blocking.rows_per_block, scratch, V)

    def _correlate(self, src, top, left, U, p: ConvParams, op: str, blocking: Blocking, out) -> None:
        """out = the 3x3 correlation (stride 1) of src placed at (top, left) inside zeros with the filters whose
        transforms are U (alpha^2, groups, out channels per group, in channels per group), tiled over out."""
        AT, _, BT = self._float[src.dtype][op]
        n_in, n_out = src.shape[1], out.shape[1]
        scratch = self._scratch(blocking, src.dtype)
        pad = self.workspace.get("pad", (p.N, n_in) + self._padded_hw(p, op), src.dtype)
        shift_into(src, top, left, pad)
        # with one input channel per group (depthwise) each product is (out x 1) @ (1 x P): an outer product,
        # one pass of a kernel where matmul would make alpha^2 * groups tiny calls
        gemm = outer_products if U.shape[-1] == 1 else matmul
        a2 = self.alpha ** 2
        for q0, P, V, M in self._chunks(p, op, n_in, n_out, src.dtype):
            self._transform_tiles(pad, BT, q0, blocking, scratch, V)
            gemm(U, V.reshape(a2, p.groups, -1, P), M.reshape(a2, p.groups, -1, P))
            output_transform(M, AT, q0, blocking.tiles_w, blocking.rows_per_block, scratch, out)
