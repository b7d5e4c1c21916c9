"""Winograd F(m x m, 3 x 3) convolution for m = 2, 4, 6: "winograd_2x2", "winograd_4x4", "winograd_6x6".

Maths (Lavin & Gray 2016). Cut the output into m x m tiles; tile (ty, tx) needs the alpha x alpha input patch
(alpha = m + 2) at (ty*m, tx*m) of the zero-padded input. With the Cook-Toom matrices A^T (m x alpha),
G (alpha x 3), B^T (alpha x alpha) of F(m, 3) from ``convalgos.cooktoom``, for every group:

    U[xi][k, c] = (G w[k, c] G^T)[xi]                     filter transform, once per call
    V[xi][c, p] = (B^T d[c, p] B)[xi]                     input transform, every tile p and channel c
    M[xi]       = U[xi] @ V[xi]      (Kg x Cg) @ (Cg x P)  alpha^2 independent GEMMs, one batched matmul
    y[k, p]     = A^T M[:, k, p] A   (cropped)             output transform

where xi runs over the alpha^2 positions of a transformed tile. The convolution over the channels becomes a
GEMM per xi because the transforms are linear and act on each (k, c) pair separately. All three transforms
are one Numba helper, ``_sandwich``, that applies X d X^T to a batch of tiles laid along its last axis (so
every inner loop is a contiguous pass over tiles), with X = G, B^T or A^T as float arrays from the generator.

Multiplies per output tile of m x m, per (k, c) pair: alpha^2 = (m + 2)^2 elementwise products against
m^2 * 9 directly: 16 vs 36 (2.25x fewer) for m = 2, 36 vs 144 (4x) for m = 4, 64 vs 324 (5.06x) for m = 6.

FLOPs (``flops``): the GEMMs, 2 * alpha^2 * Kg * Cg * groups * P with P = N * ceil(Ho/m) * ceil(Wo/m) tiles,
plus the transforms as done: applying X (b x a) on both sides of a tile, X d X^T, costs 2 * nnz(X) * (a + b)
(one multiply-add per nonzero of X per row or column; zeros are skipped): per tile and channel for B^T,
per tile and output channel for A^T, per (k, c) for G.

Workspace (``workspace_bytes``): U (alpha^2 K Cg), the padded input (N C Hpad Wpad, Hpad = m*ceil(Ho/m) + 2,
likewise Wpad), and V (alpha^2 C Pc) and M (alpha^2 K Pc) for a chunk of Pc tiles: whole rows of tiles, as
many as keep V and M within ``chunk_bytes``. Each transform kernel also allocates, per thread and call, three
scratch arrays of at most alpha^2 * ``tiles_per_block`` (or ``filter_block``) elements (tens of KiB, not
counted).

Constraints: a 3x3 kernel, stride 1, dilation 1; any padding (asymmetric too), any groups. Depthwise layers
(Cg = 1) run but are slow: each GEMM degenerates to (Kg x 1) @ (1 x P), an outer product (done by
broadcasting), so there is no channel sum to amortise the transforms over, and they cost as much as the
direct convolution's 9 multiply-adds per output; ``direct`` is the algorithm for them.

Accuracy: B^T is integer and A^T holds powers of two, so the float32 error comes from rounding in G (entries
like 1/90) and from the transforms' cancellation, which grows with the tile size. Measured normwise float32
errors on C = 512 layers (12x12 to 28x28): about 8e-7 for m = 2, 1e-5 to 3e-5 for m = 4 and 0.6e-5 to 3e-5
for m = 6 (F(6,3)'s points are chosen well, see ``convalgos.cooktoom``). Doing the filter transform in float64
instead changed nothing measurable, so every transform runs in the compute dtype.
"""
from __future__ import annotations

import numpy as np
from numba import get_num_threads, njit, prange

from .cooktoom import cook_toom
from ._kernels import share
from .params import ConvParams
from .registry import SUPPORTED, Algorithm, register, unsupported


@njit(cache=True)
def _sandwich(X, D, T, out, P):
    """out[i, j, :P] = sum_{k, l} X[i, k] D[k, l, :P] X[j, l]: X D X^T for P tiles on the last axis.

    X: (b, a); D: (a, a, >= P) tiles; T: (b, a, >= P) scratch; out: (b, b, >= P), all C-contiguous. Zeros
    of X are skipped; every loop over the tiles is a contiguous pass the compiler vectorises."""
    b, a = X.shape
    for i in range(b):                                   # T = X D
        for l in range(a):
            first = True
            for k in range(a):
                v = X[i, k]
                if v != 0.0:
                    if first:
                        for p in range(P):
                            T[i, l, p] = v * D[k, l, p]
                        first = False
                    else:
                        for p in range(P):
                            T[i, l, p] += v * D[k, l, p]
    for i in range(b):                                   # out = T X^T
        for j in range(b):
            first = True
            for l in range(a):
                v = X[j, l]
                if v != 0.0:
                    if first:
                        for p in range(P):
                            out[i, j, p] = v * T[i, l, p]
                        first = False
                    else:
                        for p in range(P):
                            out[i, j, p] += v * T[i, l, p]


# The transform kernels split their items statically over the threads and allocate their scratch once per
# thread (a fresh allocation per item would pay the page faults of fresh memory again and again).
@njit(parallel=True, cache=True)
def _filter_transform(w, G, block, n_threads, U):
    """U[:, :, f] = G w[f] G^T for every filter f = k*Cg + c. w: (K*Cg, r, r); U: (alpha, alpha, K*Cg).

    One item is a block of ``block`` consecutive (k, c) filters, so each store is a contiguous run."""
    n_filters, r = w.shape[0], w.shape[1]
    alpha = G.shape[0]
    n_blocks = (n_filters + block - 1) // block
    for thread in prange(n_threads):
        D = np.empty((r, r, block), G.dtype)
        T = np.empty((alpha, r, block), G.dtype)
        Y = np.empty((alpha, alpha, block), G.dtype)
        start, stop = share(n_blocks, thread, n_threads)
        for item in range(start, stop):
            f0 = item * block
            nf = min(block, n_filters - f0)
            for i in range(r):
                for j in range(r):
                    dst, tap = D[i, j], w[f0:f0 + nf, i, j]           # tap (i, j) of every filter
                    for f in range(nf):
                        dst[f] = tap[f]
            _sandwich(G, D, T, Y, nf)
            for i in range(alpha):
                for j in range(alpha):
                    dst, src = U[i, j, f0:f0 + nf], Y[i, j]
                    for f in range(nf):
                        dst[f] = src[f]


@njit(parallel=True, cache=True)
def _pad_input(x, top, left, xpad):
    """xpad = x shifted by (top, left) inside zeros; xpad is at least as large as the shifted x."""
    N, C, H, W = x.shape
    Hpad, Wpad = xpad.shape[2], xpad.shape[3]
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        for i in range(Hpad):
            row = xpad[n, c, i]
            if top <= i < top + H:
                src, dst = x[n, c, i - top], row[left:left + W]
                for j in range(left):
                    row[j] = 0.0
                for j in range(W):
                    dst[j] = src[j]
                for j in range(left + W, Wpad):
                    row[j] = 0.0
            else:
                for j in range(Wpad):
                    row[j] = 0.0


@njit(parallel=True, cache=True)
def _input_transform(xpad, BT, m, q0, tiles_w, rows_per_block, n_threads, V):
    """V[:, :, c, q*tiles_w + tx] = B^T d B for the tile (ty, tx) of tile row q0 + q (flattened over the batch).

    xpad: (N, C, Hpad, Wpad); V: (alpha, alpha, C, P) with P = (tile rows in this chunk) * tiles_w. One item
    is one channel and a block of rows_per_block tile rows."""
    C, Hpad = xpad.shape[1], xpad.shape[2]
    alpha = BT.shape[0]
    tiles_h = (Hpad - alpha) // m + 1
    n_rows = V.shape[3] // tiles_w
    n_blocks = (n_rows + rows_per_block - 1) // rows_per_block
    for thread in prange(n_threads):
        D = np.empty((alpha, alpha, rows_per_block * tiles_w), xpad.dtype)
        T = np.empty_like(D)
        Y = np.empty_like(D)
        start, stop = share(C * n_blocks, thread, n_threads)
        for item in range(start, stop):
            c, first_row = item // n_blocks, (item % n_blocks) * rows_per_block
            rows = min(rows_per_block, n_rows - first_row)
            P = rows * tiles_w
            for q in range(rows):
                n, ty = (q0 + first_row + q) // tiles_h, (q0 + first_row + q) % tiles_h
                for k in range(alpha):
                    for l in range(alpha):
                        src = xpad[n, c, ty * m + k, l::m]             # column l of every tile
                        dst = D[k, l, q * tiles_w:(q + 1) * tiles_w]
                        for tx in range(tiles_w):
                            dst[tx] = src[tx]
            _sandwich(BT, D, T, Y, P)
            p0 = first_row * tiles_w
            for i in range(alpha):
                for j in range(alpha):
                    dst, src = V[i, j, c, p0:p0 + P], Y[i, j]
                    for p in range(P):
                        dst[p] = src[p]


@njit(parallel=True, cache=True)
def _output_transform(M, AT, q0, tiles_w, rows_per_block, n_threads, out):
    """out[n, k, ty*m + i, tx*m + j] = (A^T M[:, :, k, p] A)[i, j], cropped to out's Ho x Wo.

    M: (alpha, alpha, K, P) for the tile rows q0 .. q0 + P / tiles_w - 1; out: (N, K, Ho, Wo). One item is
    one output channel and a block of rows_per_block tile rows."""
    K, Ho, Wo = out.shape[1], out.shape[2], out.shape[3]
    m, alpha = AT.shape
    tiles_h = (Ho + m - 1) // m
    n_rows = M.shape[3] // tiles_w
    n_blocks = (n_rows + rows_per_block - 1) // rows_per_block
    for thread in prange(n_threads):
        D = np.empty((alpha, alpha, rows_per_block * tiles_w), M.dtype)
        T = np.empty((m, alpha, rows_per_block * tiles_w), M.dtype)
        Y = np.empty((m, m, rows_per_block * tiles_w), M.dtype)
        start, stop = share(K * n_blocks, thread, n_threads)
        for item in range(start, stop):
            k, first_row = item // n_blocks, (item % n_blocks) * rows_per_block
            rows = min(rows_per_block, n_rows - first_row)
            P, p0 = rows * tiles_w, first_row * tiles_w
            for i in range(alpha):
                for j in range(alpha):
                    dst, src = D[i, j], M[i, j, k, p0:p0 + P]
                    for p in range(P):
                        dst[p] = src[p]
            _sandwich(AT, D, T, Y, P)
            for q in range(rows):
                n, ty = (q0 + first_row + q) // tiles_h, (q0 + first_row + q) % tiles_h
                for i in range(min(m, Ho - ty * m)):
                    for j in range(m):
                        dst = out[n, k, ty * m + i, j::m]            # column j of every tile, cropped
                        src = Y[i, j, q * tiles_w:(q + 1) * tiles_w]
                        for tx in range(dst.shape[0]):
                            dst[tx] = src[tx]


def _nnz(matrix) -> int:
    return sum(1 for row in matrix for v in row if v != 0)


class Winograd(Algorithm):
    """F(m x m, 3 x 3) Winograd convolution; one instance per output tile size m."""

    deterministic = True
    #: V and M of one chunk of tiles stay within this many bytes (whole tile rows; at least one row).
    chunk_bytes = 32 << 20
    #: tiles a transform kernel takes per loop iteration (whole tile rows; at least one row).
    tiles_per_block = 256
    #: filters ((k, c) pairs) per item of the filter transform.
    filter_block = 1024

    def __init__(self, m: int, tolerance: dict[str, float]):
        super().__init__()
        self.m, self.r = m, 3
        self.alpha = m + self.r - 1
        self.name = f"winograd_{m}x{m}"
        self.tolerance = tolerance
        self.matrices = cook_toom(m, self.r)
        self._float_matrices = {np.dtype(dt): self.matrices.as_float(dt) for dt in (np.float32, np.float64)}

    # ---- sizes ---------------------------------------------------------------------------------------------
    @property
    def elementwise_multiplies_per_tile(self) -> int:
        """Multiplies per m x m output tile and (k, c) pair: alpha^2 (direct: m^2 * 9)."""
        return self.alpha ** 2

    def _tiles(self, p: ConvParams) -> tuple[int, int]:
        Ho, Wo = p.out_hw
        return -(-Ho // self.m), -(-Wo // self.m)

    def _padded_hw(self, p: ConvParams) -> tuple[int, int]:
        tiles_h, tiles_w = self._tiles(p)
        return tiles_h * self.m + self.r - 1, tiles_w * self.m + self.r - 1

    def _rows_per_chunk(self, p: ConvParams) -> int:
        """Tile rows per chunk: as many as fit V and M in chunk_bytes, balanced over the chunks."""
        tiles_h, tiles_w = self._tiles(p)
        row_bytes = self.alpha ** 2 * (p.C + p.K) * tiles_w * p.itemsize
        rows = max(1, self.chunk_bytes // row_bytes)
        n_rows = max(1, p.N * tiles_h)
        n_chunks = -(-n_rows // rows)
        return -(-n_rows // n_chunks)

    # ---- the four questions --------------------------------------------------------------------------------
    def constraints(self, p: ConvParams, op: str = "forward"):
        if (p.R, p.S) != (3, 3):
            return unsupported(f"{self.name} needs a 3x3 kernel, got {p.R}x{p.S}")
        if p.stride != (1, 1):
            return unsupported(f"{self.name} needs stride 1, got {p.stride}")
        if p.dilation != (1, 1):
            return unsupported(f"{self.name} needs dilation 1, got {p.dilation}")
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        tiles_w = self._tiles(p)[1]
        Hpad, Wpad = self._padded_hw(p)
        tiles_per_chunk = self._rows_per_chunk(p) * tiles_w
        elements = (self.alpha ** 2 * p.K * p.Cg + p.N * p.C * Hpad * Wpad
                    + self.alpha ** 2 * (p.C + p.K) * tiles_per_chunk)
        return elements * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        tiles_h, tiles_w = self._tiles(p)
        P = p.N * tiles_h * tiles_w
        a, m, r = self.alpha, self.m, self.r
        mats = self.matrices
        gemm = 2 * a * a * p.Kg * p.Cg * p.groups * P
        input_transform = 2 * _nnz(mats.BT) * (a + a) * p.C * P
        output_transform = 2 * _nnz(mats.AT) * (a + m) * p.K * P
        filter_transform = 2 * _nnz(mats.G) * (r + a) * p.K * p.Cg
        return gemm + input_transform + output_transform + filter_transform

    def forward(self, x, w, p: ConvParams, out) -> None:
        a2, cdt = self.alpha ** 2, x.dtype
        AT, G, BT = self._float_matrices[cdt]
        tiles_h, tiles_w = self._tiles(p)
        n_threads = get_num_threads()
        U = self.workspace.get("U", (self.alpha, self.alpha, p.K * p.Cg), cdt)
        _filter_transform(w.reshape(p.K * p.Cg, 3, 3), G, self.filter_block, n_threads, U)
        xpad = self.workspace.get("xpad", (p.N, p.C) + self._padded_hw(p), cdt)
        (top, _), (left, _) = p.padding
        _pad_input(x, top, left, xpad)

        rows = self._rows_per_chunk(p)
        block_rows = max(1, self.tiles_per_block // tiles_w)
        V_all = self.workspace.get("V", (a2 * p.C * rows * tiles_w,), cdt)
        M_all = self.workspace.get("M", (a2 * p.K * rows * tiles_w,), cdt)
        U_gemm = U.reshape(a2, p.groups, p.Kg, p.Cg)
        # with one input channel per group (depthwise) each product is (Kg x 1) @ (1 x P): an outer product,
        # which broadcasting does in one pass where matmul would make alpha^2 * groups tiny calls
        gemm = np.multiply if p.Cg == 1 else np.matmul
        n_rows = p.N * tiles_h
        for q0 in range(0, n_rows, rows):
            P = min(rows, n_rows - q0) * tiles_w
            V = V_all[:a2 * p.C * P].reshape(self.alpha, self.alpha, p.C, P)
            M = M_all[:a2 * p.K * P].reshape(self.alpha, self.alpha, p.K, P)
            _input_transform(xpad, BT, self.m, q0, tiles_w, block_rows, n_threads, V)
            gemm(U_gemm, V.reshape(a2, p.groups, p.Cg, P), out=M.reshape(a2, p.groups, p.Kg, P))
            _output_transform(M, AT, q0, tiles_w, block_rows, n_threads, out)


# float32: measured errors (module docstring) with a margin of 3x or more, far below what a wrong tile or a wrong
# matrix gives (order 1). float16 is computed in float32 and rounded (2^-11 relative). float64: measured up to
# 1.4e-14 (m = 6) on small layers.
WINOGRAD_2X2 = register(Winograd(2, {"float16": 2e-3, "float32": 1e-5, "float64": 1e-13}))
WINOGRAD_4X4 = register(Winograd(4, {"float16": 2e-3, "float32": 1e-4, "float64": 1e-12}))
WINOGRAD_6X6 = register(Winograd(6, {"float16": 3e-3, "float32": 2e-4, "float64": 1e-12}))
