"""GPU Winograd, all three passes: the CPU twin's maths (``cpu.py``) with Numba-CUDA tile transforms
(``gpu_kernels.py``) around one batched cuBLAS GEMM over the alpha^2 positions (alpha = m + 2).

With the matrices of each pass (``shared.pass_matrices``, from the exact Cook-Toom generator):

    forward          U = G w G^T (xp.matmul);  V = B^T d B per tile of x (kernel);  M = U V, (Kg x Cg) @ (Cg x P)
                     per position and group (cuBLAS);  y tile = A^T M A (kernel)
    backward_data    the forward F(m x m, 3 x 3) over dy, placed at (2 - top, 2 - left), tiles over dx, with the
                     flipped filter (G J) w (G J)^T laid out K and C swapped: M = U (Cg x Kg) @ V (Kg x P)
    backward_filter  F(3 x 3, m x m) with dy as the filter: X = B'^T x B' per alpha x alpha tile of x, D = G' dy G'^T
                     per m x m tile of dy (the same kernel, X of m columns), S = D X^T (Kg x P) @ (P x Cg) summed
                     over all tiles by the GEMM, dw = A'^T S A' (xp.matmul, once per (k, c))

The transform matrices go to the device once per device and dtype (``shared.DeviceConstants``). The filter
transform U is made on every call, as training needs; ``prepare`` makes it once for inference (eval mode).

Tiles: ``shared.tile_grid`` (over dx in backward_data, over y and dy otherwise); the whole batch at once (no
chunks). Constraints: the CPU's (``shared.f3x3_constraints``): 3x3, stride 1, dilation 1; any padding and groups.

FLOPs (``flops``): the GEMMs, 2 alpha^2 Kg Cg G P, plus the transforms as these kernels compute them, densely
(the CPU skips the zeros of B^T, A^T, G): X (r x c) applied to a c x c array costs 2 r c^2 + 2 r^2 c
(``dense_sandwich_flops``), per (input channel, tile) and (output channel, tile) and once per filter.
Workspace (``workspace_bytes``), elements: V and M of alpha^2 (channels in + out) P; the
filter transform's G w (3 alpha K Cg), G w G^T and U (alpha^2 K Cg each); backward_filter: X, the copy of X^T
that cuBLAS reads through CuPy (alpha^2 C P each), D (alpha^2 K P), S, its transposed copy (alpha^2 K Cg each)
and A'^T S (3 alpha K Cg). Deterministic: no atomics (each output element is one work item's, the sums over
channels and tiles are GEMMs).
"""
from __future__ import annotations

import numpy as np

from .. import gpu_ops
from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..params import ConvParams
from .cooktoom import cook_toom
from .gpu_kernels import output_transform_kernel, tile_transform_kernel
from .shared import TOLERANCES, DeviceConstants, f3x3_constraints, pass_matrices, tile_grid


def dense_sandwich_flops(rows: int, cols: int) -> int:
    """FLOPs of X d X^T for X (rows x cols) and d (cols x cols), computed densely: X d, then (X d) X^T."""
    return 2 * rows * cols * cols + 2 * rows * rows * cols


def filter_transform(w, G, p: ConvParams, swap: bool):
    """U (alpha^2, groups, Kg, Cg) of G w[k, c] G^T (two cuBLAS products), or (alpha^2, groups, Cg, Kg) when
    ``swap`` (backward_data's K and C swapped); the fused twin's too."""
    xp, a2 = array_module(w), G.shape[0] ** 2
    gpu_ops.record("cublas.gemm", 2)
    U = xp.matmul(xp.matmul(G, w), G.T).reshape(p.groups, p.Kg, p.Cg, a2)      # (K, Cg, alpha, alpha)
    gpu_ops.record("cupy.copy")
    return xp.ascontiguousarray(U.transpose(3, 0, 2, 1) if swap else U.transpose(3, 0, 1, 2))


class GPUWinograd(GPUAlgorithm):
    """F(m x m, 3 x 3) on the GPU, and F(3 x 3, m x m) for backward_filter; one instance per m."""

    deterministic = True

    def __init__(self, m: int):
        super().__init__()
        self.m, self.alpha = m, m + 2
        self.name = f"winograd_{m}x{m}"
        self.tolerances, self.tolerance = TOLERANCES[m], TOLERANCES[m]["forward"]
        self.matrices, self.filter_matrices = cook_toom(m, 3), cook_toom(3, m)
        self.constants = DeviceConstants(pass_matrices(self.matrices, self.filter_matrices, dt)
                                         for dt in (np.float32, np.float64))

    def constraints(self, p: ConvParams, op: str = "forward"):
        return f3x3_constraints(self.name, p)      # the same maths as the CPU's: F(m, 3) on a 3x3 stride-1 kernel

    def _tiles(self, p: ConvParams, op: str) -> int:
        tiles_h, tiles_w = tile_grid(p, op, self.m)
        return p.N * tiles_h * tiles_w

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        a, a2, P, KC = self.alpha, self.alpha ** 2, self._tiles(p, op), p.K * p.Cg
        if op == "backward_filter":
            elements = a2 * (2 * p.C + p.K) * P + (2 * a2 + 3 * a) * KC
        else:
            elements = a2 * (p.C + p.K) * P + (3 * a + 2 * a2) * KC
        return elements * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        """The GEMMs, plus the transforms as the kernels compute them: dense, zeros of the matrices included."""
        a, m, P = self.alpha, self.m, self._tiles(p, op)
        gemm = 2 * a * a * p.K * p.Cg * P
        if op == "backward_filter":                 # B'^T per (c, tile), G' per (k, tile), A'^T per (k, c)
            return (gemm + dense_sandwich_flops(a, a) * p.C * P + dense_sandwich_flops(a, m) * p.K * P
                    + dense_sandwich_flops(3, a) * p.K * p.Cg)
        n_in, n_out = (p.C, p.K) if op == "forward" else (p.K, p.C)
        return (gemm + dense_sandwich_flops(a, a) * n_in * P + dense_sandwich_flops(m, a) * n_out * P
                + dense_sandwich_flops(a, 3) * p.K * p.Cg)

    def device_matrices(self, like, op: str):
        """(A^T, G, B^T) of pass ``op`` as device arrays of like's dtype: copied to the device once per device,
        dtype and pass (``shared.DeviceConstants``), never again per call."""
        return self.constants.get(like, op)

    # ---- prepared weights (inference: the filter transform made once) --------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """U of the filters (forward) or of the flipped filters with K and C swapped (backward_data)."""
        G = self.device_matrices(w, op)[1]
        return filter_transform(w, G, p, swap=op == "backward_data")

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return self.alpha ** 2 * p.K * p.Cg * p.itemsize if self.prepares(op) else 0

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        AT, G, BT = self.device_matrices(x, "forward")
        (top, _), (left, _) = p.padding
        U = filter_transform(w, G, p, swap=False) if prepared is None else prepared
        self.correlate(x, top, left, U, AT, BT, p, "forward", out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        AT, GJ, BT = self.device_matrices(dy, "backward_data")            # G J: the flipped filter
        (top, _), (left, _) = p.padding
        U = filter_transform(w, GJ, p, swap=True) if prepared is None else prepared   # K and C swapped
        self.correlate(dy, 2 - top, 2 - left, U, AT, BT, p, "backward_data", out)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        xp, a, m, dt = array_module(x), self.alpha, self.m, p.compute_dtype
        AT, G, BT = self.device_matrices(x, "backward_filter")             # F(3, m)
        tiles_h, tiles_w = tile_grid(p, "backward_filter", m)
        P = p.N * tiles_h * tiles_w
        (top, _), (left, _) = p.padding
        X = self.buffer(x, "winograd.X", (a, a, p.C, P))
        launch(tile_transform_kernel(dt, a, a), *launch_1d(p.C * P))(x, BT, m, top, left, tiles_h, tiles_w, X)
        D = self.buffer(x, "winograd.D", (a, a, p.K, P))
        launch(tile_transform_kernel(dt, a, m), *launch_1d(p.K * P))(dy, G, m, 0, 0, tiles_h, tiles_w, D)
        S = self.buffer(x, "winograd.S", (a * a, p.groups, p.Kg, p.Cg))
        gpu_ops.record("cublas.gemm")
        xp.matmul(D.reshape(a * a, p.groups, p.Kg, P), X.reshape(a * a, p.groups, p.Cg, P).swapaxes(-1, -2),
                  out=S)
        per_filter = S.reshape(a, a, p.K * p.Cg).transpose(2, 0, 1)        # (K Cg, alpha, alpha)
        gpu_ops.record("cublas.gemm", 2)
        xp.matmul(xp.matmul(AT, per_filter), AT.T, out=out.reshape(p.K * p.Cg, 3, 3))

    def correlate(self, src, top: int, left: int, U, AT, BT, p: ConvParams, op: str, out) -> None:
        """out = the 3x3 stride-1 correlation of src placed at (top, left) in zeros with the filters whose
        transforms are U (alpha^2, groups, out channels per group, in channels per group), tiled over out."""
        xp, a, dt = array_module(src), self.alpha, p.compute_dtype
        tiles_h, tiles_w = tile_grid(p, op, self.m)
        P, n_in, n_out = p.N * tiles_h * tiles_w, src.shape[1], out.shape[1]
        V = self.buffer(src, "winograd.V", (a, a, n_in, P))
        launch(tile_transform_kernel(dt, a, a), *launch_1d(n_in * P))(src, BT, self.m, top, left, tiles_h,
                                                                     tiles_w, V)
        M = self.buffer(src, "winograd.M", (a, a, n_out, P))
        gpu_ops.record("cublas.gemm")
        xp.matmul(U, V.reshape(a * a, p.groups, -1, P), out=M.reshape(a * a, p.groups, -1, P))
        launch(output_transform_kernel(dt, self.m), *launch_1d(n_out * P))(M, AT, out, tiles_h, tiles_w)
