"""GPU Winograd F(m x m, 3 x 3): Numba-CUDA tile transforms around one batched GEMM over the alpha^2 positions.

With A^T (m x alpha), G (alpha x 3), B^T (alpha x alpha) from the Cook-Toom generator (``cooktoom.py``,
exact rationals, rounded once to the compute dtype), alpha = m + 2, each m x m output tile is

    Y = A^T [ sum_c (G w[k, c] G^T) . (B^T d[c] B) ] A,

d[c] the alpha x alpha input tile (tiles step by m; zero outside the image, so padding is never stored).
1. filter transform U[a, b, g, k, c] = (G w G^T)[a, b] (small: ``xp.matmul``);
2. input transform kernel: one work item per (image, channel, tile) computes V = B^T d B in registers and
   writes V[a, b, c, tile];
3. per position (a, b) and group, the batched GEMM M = U (Kg x Cg) @ V (Cg x tiles) (cuBLAS);
4. output transform kernel: one work item per (output channel, tile) computes A^T M A and writes the tile's
   pixels that lie inside the output.

FLOPs: the GEMMs, 2*alpha^2*K*Cg*P, plus the transforms as done here, densely (the CPU's skip the zeros of
B^T, A^T and G): 4*alpha^3 per (channel, tile), 2*m*alpha*(alpha + m) per (output channel, tile) and
6*alpha*(3 + alpha) per (k, c) filter. Workspace: U, V, M of alpha^2 * (K*Cg, C*P, K*P) elements,
P = N * ceil(Ho/m) * ceil(Wo/m) tiles, and the three matrices (the whole batch at once: no chunks).
Constraints: 3x3 kernel, stride 1, dilation 1; any padding and groups.
Accuracy: as on the CPU, rounding in G and the transforms' cancellation, growing with m.
"""
from __future__ import annotations

import functools

import numba
import numpy as np
from numba import cuda

from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..params import ConvParams
from .cooktoom import cook_toom
from .shared import TOLERANCES, f3x3_constraints, tile_grid


@functools.lru_cache(maxsize=None)
def input_transform_kernel(dtype: str, m: int):
    """V[a, b, c, tile] = (B^T d B)[a, b] for the alpha x alpha tile d at (tile row * m, tile col * m)."""
    alpha, nb_dtype = m + 2, numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(x, BT, V, top, left, tiles_h, tiles_w):
        N, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        per_image = tiles_h * tiles_w
        d = cuda.local.array((alpha, alpha), nb_dtype)
        t = cuda.local.array((alpha, alpha), nb_dtype)
        for e in range(cuda.grid(1), N * C * per_image, cuda.gridsize(1)):
            tile = e % per_image
            c = (e // per_image) % C
            n = e // (per_image * C)
            y0, x0 = (tile // tiles_w) * m - top, (tile % tiles_w) * m - left
            for u in range(alpha):
                for v in range(alpha):
                    yy, xx = y0 + u, x0 + v
                    d[u, v] = x[n, c, yy, xx] if 0 <= yy < H and 0 <= xx < W else 0
            for a in range(alpha):                      # t = B^T d
                for v in range(alpha):
                    s = nb_dtype(0)
                    for u in range(alpha):
                        s += BT[a, u] * d[u, v]
                    t[a, v] = s
            for a in range(alpha):                      # V = t B
                for b in range(alpha):
                    s = nb_dtype(0)
                    for v in range(alpha):
                        s += t[a, v] * BT[b, v]
                    V[a, b, c, n * per_image + tile] = s

    return kernel


@functools.lru_cache(maxsize=None)
def output_transform_kernel(dtype: str, m: int):
    """out tile = A^T M[:, :, k, tile] A, pixels inside the output only."""
    alpha, nb_dtype = m + 2, numba.from_dtype(np.dtype(dtype))

    @cuda.jit
    def kernel(M, AT, out, tiles_h, tiles_w):
        N, K, Ho, Wo = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        per_image = tiles_h * tiles_w
        t = cuda.local.array((m, alpha), nb_dtype)
        for e in range(cuda.grid(1), K * N * per_image, cuda.gridsize(1)):
            p = e % (N * per_image)
            k = e // (N * per_image)
            n, tile = p // per_image, p % per_image
            i0, j0 = (tile // tiles_w) * m, (tile % tiles_w) * m
            for u in range(m):                          # t = A^T M
                for b in range(alpha):
                    s = nb_dtype(0)
                    for a in range(alpha):
                        s += AT[u, a] * M[a, b, k, p]
                    t[u, b] = s
            for u in range(m):                          # Y = t A
                for v in range(m):
                    if i0 + u < Ho and j0 + v < Wo:
                        s = nb_dtype(0)
                        for b in range(alpha):
                            s += t[u, b] * AT[v, b]
                        out[n, k, i0 + u, j0 + v] = s

    return kernel


class GPUWinograd(GPUAlgorithm):
    """F(m x m, 3 x 3) on the GPU; one instance per output tile size m (see the module docstring)."""

    def __init__(self, m: int):
        super().__init__()
        self.m, self.alpha = m, m + 2
        self.name = f"winograd_{m}x{m}"
        self.tolerances, self.tolerance = TOLERANCES[m], TOLERANCES[m]["forward"]
        self.matrices = cook_toom(m, 3)

    def constraints(self, p: ConvParams, op: str = "forward"):
        return f3x3_constraints(self.name, p)      # the same maths as the CPU's: F(m, 3) on a 3x3 stride-1 kernel

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        P = p.N * self._tiles(p)[0] * self._tiles(p)[1]
        matrices = self.alpha * (self.m + 3 + self.alpha)                     # A^T, G, B^T on the device
        return (self.alpha ** 2 * (p.K * p.Cg + p.C * P + p.K * P) + matrices) * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        """The GEMMs, plus the transforms as this module computes them: dense, zeros of B^T, A^T, G included."""
        tiles_h, tiles_w = self._tiles(p)
        P, a, m = p.N * tiles_h * tiles_w, self.alpha, self.m
        gemm = 2 * a * a * p.K * p.Cg * P
        input_transform = 4 * a ** 3 * p.C * P                                # B^T d, then (B^T d) B
        output_transform = (2 * m * a * a + 2 * m * m * a) * p.K * P          # A^T M, then (A^T M) A
        filter_transform = (2 * a * 3 * 3 + 2 * a * a * 3) * p.K * p.Cg      # G w, then (G w) G^T
        return gemm + input_transform + output_transform + filter_transform

    def _tiles(self, p: ConvParams) -> tuple[int, int]:
        return tile_grid(p, "forward", self.m)

    def device_matrices(self, like):
        """(A^T, G, B^T) as device arrays of like's dtype (kept between calls)."""
        xp = array_module(like)
        mats = []
        for tag, mat in zip(("AT", "G", "BT"), self.matrices.as_float(like.dtype)):
            buf = self.buffer(like, f"winograd.{tag}", mat.shape)
            buf[...] = xp.asarray(mat)
            mats.append(buf)
        return mats

    def filter_transform(self, w, G, p: ConvParams):
        """U[a, b, g, k, c] = (G w[g*Kg + k, c] G^T)[a, b], as (alpha^2, groups, Kg, Cg)."""
        xp, a = array_module(w), self.alpha
        U = xp.matmul(xp.matmul(G, w), G.T)                                     # (K, Cg, alpha, alpha)
        return xp.ascontiguousarray(U.reshape(p.groups, p.Kg, p.Cg, a * a).transpose(3, 0, 1, 2))

    def forward(self, x, w, p: ConvParams, out) -> None:
        xp, a, dt = array_module(x), self.alpha, p.compute_dtype
        AT, G, BT = self.device_matrices(x)
        tiles_h, tiles_w = self._tiles(p)
        P = p.N * tiles_h * tiles_w
        (top, _), (left, _) = p.padding
        V = self.buffer(x, "winograd.V", (a, a, p.C, P))
        blocks, threads = launch_1d(p.N * p.C * tiles_h * tiles_w)
        launch(input_transform_kernel(dt, self.m), blocks, threads)(x, BT, V, top, left, tiles_h, tiles_w)
        M = self.buffer(x, "winograd.M", (a, a, p.K, P))
        xp.matmul(self.filter_transform(w, G, p), V.reshape(a * a, p.groups, p.Cg, P),
                  out=M.reshape(a * a, p.groups, p.Kg, P))
        blocks, threads = launch_1d(p.K * P)
        launch(output_transform_kernel(dt, self.m), blocks, threads)(M, AT, out, tiles_h, tiles_w)
