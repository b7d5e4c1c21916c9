"""GPU fused Winograd F(m x m, 3 x 3), forward and backward-data, with the transformed tiles kept on the
multiprocessor (cuDNN's WINOGRAD, against ``winograd_mxm``'s WINOGRAD_NONFUSED, ``gpu.py``):
"winograd_fused_4x4", the GPU twin of the CPU's fused pass (``fused.py``), and "winograd_fused_6x6", GPU only
(the CPU's fused kernel is written for alpha = 6), with ``winograd_6x6``'s matrices and tolerances.

The non-fused GPU pass writes every tile's transform V (alpha^2 x C x P) to device memory, cuBLAS reads it and
writes M (alpha^2 x K x P), and the output transform reads M back: on a large plane with few channels those are
tens of MB each way (VGG's C = 64 224x224 layer at batch 16: 462 MB each), and the steps run at memory speed.
Here one kernel (``gpu_fused_kernels.py``) does, per block of TILES tiles and CHANNELS_OUT output channels:

    V[xi][c, t] = (B^T d[c, t] B)[xi]             the input chunk's tiles, into shared memory, one per thread
    M[xi][k, t] += sum_c U[xi][k, c] V[xi][c, t]  alpha^2 accumulators per thread (k, t), in registers
    y[k, tile t] = A^T M[:, k, t] A                each thread its own tile, cropped to the output

with U = G w G^T made by two cuBLAS products per call (``gpu.filter_transform``; once with ``prepare``, for
inference) and the matrices shared with the CPU side (``shared.pass_matrices``), on the device once per device
and dtype (``shared.DeviceConstants``). Backward-data is the forward pass over dx's tiles, dy placed at
(2 - top, 2 - left), with the flipped filters and K, C swapped (as ``gpu.py``). Backward-filter has no fused
form here, as in cuDNN (the CPU's fused F(3x3, 4x4) backward-filter has no GPU twin yet): ``winograd_4x4``
computes it.

The trade-off, for the tuner's race: every block of CHANNELS_OUT output channels transforms its input tiles
again (out channels / CHANNELS_OUT times in all), where the non-fused pass transforms each once; and every
product reads U and V from shared memory (one multiply-add per two loads). It saves the device-memory round
trips of V and M, so it should win on wide planes with few channels and lose on deep layers with small planes.

Compiled for sm_90 (numba-cuda 0.30.4, NVVM 13.5, ptxas -v; not yet run on a GPU), float32: 168 registers per
thread for F(4x4), 164 for F(6x6), 36 and 32 KB of shared memory per block: one block of 256 threads per
multiprocessor (the registers allow no second); float64 248 and 254 registers. No local memory, no spill
(``tests/test_gpu_ptx.py`` compiles them in CI and fails on a spill).

FLOPs (``flops``): alpha^2 products per tile and (k, c) pair over the tiles rounded up to whole blocks, the
input transforms as computed (dense, once per block of output channels), the output transforms, and the filter
transform (dense, ``gpu.dense_sandwich_flops``). Workspace: U and the filter transform's G w and G w G^T
((3 alpha + 2 alpha^2) K Cg elements). Constraints: a 3x3 kernel, stride 1, dilation 1 (the CPU's), and CUDA's
grid (groups x output-channel blocks <= 65535). Deterministic: fixed-order sums, no atomics. Accuracy: as
winograd_4x4's (``shared.TOLERANCES``).
"""
from __future__ import annotations

import math

import numpy as np

from ..arrays import simulator_enabled
from ..gpu_base import GPUAlgorithm, grid_fits, launch
from ..gpu_compiler import cuda
from ..params import ConvParams
from ..registry import check_pass
from .cooktoom import cook_toom
from .gpu import dense_sandwich_flops, filter_transform
from .gpu_fused_kernels import fused_kernel
from .shared import TOLERANCES, DeviceConstants, f3x3_constraints, pass_matrices, tile_grid

#: (TILES, CHANNELS_OUT, CHANNELS_IN) per block, by m and compute dtype: 256 threads, shared V and U
#: (alpha^2 x CHANNELS_IN x (TILES + CHANNELS_OUT) elements) within 48 KiB; and the simulator's (8 simulated
#: threads).
BLOCK = {4: {"float32": (16, 16, 8), "float64": (16, 16, 4)}, 6: {"float32": (16, 16, 4), "float64": (16, 16, 2)}}
SIM_BLOCK = (4, 2, 2)


class GPUFusedWinograd(GPUAlgorithm):
    """F(m x m, 3 x 3), forward and backward-data, V and M kept on the multiprocessor (module docstring)."""

    deterministic = True

    def __init__(self, m: int = 4):
        super().__init__()
        if m not in BLOCK:
            raise ValueError(f"winograd_fused is written for F(4x4, 3x3) and F(6x6, 3x3), got m={m}")
        self.m, self.alpha = m, m + 2
        self.name = f"winograd_fused_{m}x{m}"
        self.tolerances, self.tolerance = TOLERANCES[m], TOLERANCES[m]["forward"]
        self.constants = DeviceConstants(pass_matrices(cook_toom(m, 3), cook_toom(3, m), dt)
                                         for dt in (np.float32, np.float64))

    def block(self, p: ConvParams) -> tuple[int, int, int]:
        """(TILES, CHANNELS_OUT, CHANNELS_IN) of this process's blocks."""
        return SIM_BLOCK if simulator_enabled() else BLOCK[self.m][p.compute_dtype]

    def _grid(self, p: ConvParams, op: str, block) -> tuple[int, int, int]:
        """(tile blocks, groups x output-channel blocks, output-channel blocks per group)."""
        tiles_h, tiles_w = tile_grid(p, op, self.m)
        out_g = p.Kg if op == "forward" else p.Cg
        k_blocks = math.ceil(out_g / block[1])
        return math.ceil(p.N * tiles_h * tiles_w / block[0]), p.groups * k_blocks, k_blocks

    def constraints(self, p: ConvParams, op: str = "forward"):
        support = f3x3_constraints(self.name, p)
        if not support:
            return support
        return grid_fits(self.name, *self._grid(p, op, BLOCK[self.m][p.compute_dtype])[:2])

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        check_pass(op)
        return (3 * self.alpha + 2 * self.alpha ** 2) * p.K * p.Cg * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        a, block = self.alpha, self.block(p)
        tile_blocks, _, k_blocks = self._grid(p, op, block)
        P = tile_blocks * block[0]
        n_in, n_out = (p.C, p.K) if op == "forward" else (p.K, p.C)
        return (2 * a * a * p.K * p.Cg * P + dense_sandwich_flops(a, a) * n_in * P * k_blocks
                + dense_sandwich_flops(self.m, a) * n_out * P + dense_sandwich_flops(a, 3) * p.K * p.Cg)

    # ---- prepared weights (inference: the filter transform made once) --------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """U of the filters (forward) or of the flipped filters with K and C swapped (backward_data)."""
        return filter_transform(w, self.constants.get(w, op)[1], p, swap=op == "backward_data")

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return self.alpha ** 2 * p.K * p.Cg * p.itemsize if self.prepares(op) else 0

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out, prepared=None) -> None:
        AT, G, BT = self.constants.get(x, "forward")
        U = filter_transform(w, G, p, swap=False) if prepared is None else prepared
        (top, _), (left, _) = p.padding
        self._correlate(x, top, left, U, AT, BT, p, "forward", out)

    def backward_data(self, dy, w, p: ConvParams, out, prepared=None) -> None:
        AT, GJ, BT = self.constants.get(dy, "backward_data")               # G J: the flipped filter
        U = filter_transform(w, GJ, p, swap=True) if prepared is None else prepared   # K and C swapped
        (top, _), (left, _) = p.padding
        self._correlate(dy, 2 - top, 2 - left, U, AT, BT, p, "backward_data", out)

    def _correlate(self, src, top: int, left: int, U, AT, BT, p: ConvParams, op: str, out) -> None:
        block = self.block(p)
        tile_blocks, blocks_y, k_blocks = self._grid(p, op, block)
        tiles_h, tiles_w = tile_grid(p, op, self.m)
        if isinstance(U, np.ndarray):        # the simulator: Numba copies NumPy arguments back after a launch,
            U = cuda.In(U)                   # which a read-only prepared form refuses; U is only read
        launch(fused_kernel(p.compute_dtype, self.m, *block), (tile_blocks, blocks_y), block[0] * block[1])(
            src, U, AT, BT, top, left, tiles_h, tiles_w, out, k_blocks)
