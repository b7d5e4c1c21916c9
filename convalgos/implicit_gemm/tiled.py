"""GPU implicit GEMM tiled as CUTLASS tiles it: ``implicit_gemm_128x64``, ``implicit_gemm_64x64`` and
``implicit_gemm_32x32``, one registry entry per tile shape (``tiling.py``), all from one kernel factory
(``tiled_kernels.py``), as cuDNN lists its implicit-GEMM variants; the tuner's race picks the shape per layer and
pass. ``implicit_gemm`` (``gpu.py``) stays the textbook one: one result per thread, zero workspace everywhere.

The three passes are the textbook's three GEMMs (``gpu.py``), per group g:

    forward          Y[g]  (Kg x N*Ho*Wo)  = W[g] @ X_patch[g]            reduction over the Cg*R*S taps
    backward_data    dX[g] (Cg x N*H*W)    = W[g]^T @ dY_patch[g]         reduction over the Kg*R*S taps
    backward_filter  dW[g] (Kg x Cg*R*S)   = dY[g] @ X_patch[g]^T         reduction over the N*Ho*Wo pixels

with the patch matrices gathered from x (or dy) chunk by chunk into shared memory, never stored. What the
tiling changes is the arithmetic per byte: a BLOCK_M x BLOCK_N block tile reads (BLOCK_M + BLOCK_N) K_CHUNK
elements per chunk for BLOCK_M BLOCK_N K_CHUNK multiply-adds (the textbook 16 x 16 tile: 8 per element, 128x64:
43), and each thread's THREAD_M x THREAD_N register tile does THREAD_M THREAD_N multiply-adds per THREAD_M +
THREAD_N shared-memory loads (the textbook: 1 per 2; 8x8: 4 per 1).

backward_filter's result is small (Kg x Cg*R*S) and its reduction long, so its blocks also split the reduction
(split-K, the grid's z): ``splits`` ranges of whole chunks, enough blocks to give each multiprocessor two
(TARGET_BLOCKS), each range at least MIN_CHUNKS_PER_SPLIT chunks. Each range's sums go to a workspace slice; one
more kernel adds the slices in order (deterministic, no atomics). One range writes dw directly.

Compiled for sm_90 (numba-cuda 0.30.4, NVVM 13.5, ptxas -v; not yet run on a GPU): 210-237 registers per
thread for 128x64, 116-126 for 64x64, 204-248 for 32x32, no local memory (the register tiles stay in registers:
no ld.local in the PTX, no spills), 8.3-12.4 KB of shared memory per block.

Grid: x walks the result's column tiles, y the (group, row tile) pairs, z backward_filter's ranges.
FLOPs (``flops``, tiles' padding aside): forward ``p.flops``; backward_data 2*N*C*H*W*Kg*R*S (every
(dx pixel, k, r, s), those the stride makes zero included, as the textbook's); backward_filter ``p.flops`` plus
(splits - 1)*K*Cg*R*S additions of the ranges.
Workspace: none, but backward_filter's ranges (splits*K*Cg*R*S elements when splits > 1).
Constraints: CUDA's grid (y: groups * row tiles <= 65535). Deterministic: fixed-order sums, no atomics.
Accuracy: the textbook's (``shared.TOLERANCE``): sums in the compute dtype, fp16 computed in fp32.
"""
from __future__ import annotations

import math

from ..arrays import simulator_enabled
from ..gpu_base import GPUAlgorithm, grid_fits, launch, launch_1d
from ..params import ConvParams
from ..registry import check_pass
from .shared import TOLERANCE
from .tiled_kernels import sum_splits_kernel, tiled_kernel
from .tiling import CONFIGURATIONS, Tiling

#: backward_filter's split-K: blocks wanted (two per multiprocessor of a 132-SM H200), chunks per range at
#: least; and the simulator's (few simulated threads, yet more than one range on the tests' tiny layers).
TARGET_BLOCKS, MIN_CHUNKS_PER_SPLIT = 264, 8
SIM_TARGET_BLOCKS, SIM_MIN_CHUNKS_PER_SPLIT = 2, 1


def gemm_shape(p: ConvParams, op: str) -> tuple[int, int, int]:
    """(M, N, Q): the rows and columns of pass ``op``'s result per group, and its reduction length."""
    Ho, Wo = p.out_hw
    taps = p.R * p.S
    return {"forward": (p.Kg, p.N * Ho * Wo, p.Cg * taps), "backward_data": (p.Cg, p.N * p.H * p.W, p.Kg * taps),
            "backward_filter": (p.Kg, p.Cg * taps, p.N * Ho * Wo)}[check_pass(op)]


class GPUTiledImplicitGemm(GPUAlgorithm):
    """Block tiles in shared memory, register tiles per thread, one tile shape per instance (module docstring)."""

    deterministic = True
    tolerance = TOLERANCE

    def __init__(self, shape: str):
        super().__init__()
        if shape not in CONFIGURATIONS:
            raise ValueError(f"shape must be one of {list(CONFIGURATIONS)}, got {shape!r}")
        self.name = f"implicit_gemm_{shape}"
        self.gpu_tiling, self.sim_tiling = CONFIGURATIONS[shape]

    def tiling(self) -> Tiling:
        """The tile shape this process runs: the GPU's, or its small twin under the simulator."""
        return self.sim_tiling if simulator_enabled() else self.gpu_tiling

    def splits(self, p: ConvParams, tiling: Tiling | None = None) -> tuple[int, int]:
        """backward_filter's (ranges, pixels per range) of the reduction (module docstring)."""
        tiling = tiling or self.tiling()
        target, least = ((SIM_TARGET_BLOCKS, SIM_MIN_CHUNKS_PER_SPLIT) if tiling is self.sim_tiling
                         else (TARGET_BLOCKS, MIN_CHUNKS_PER_SPLIT))
        M, N, Q = gemm_shape(p, "backward_filter")
        tiles = p.groups * math.ceil(M / tiling.BLOCK_M) * math.ceil(N / tiling.BLOCK_N)
        chunks = max(1, math.ceil(Q / tiling.K_CHUNK))
        wanted = max(1, min(math.ceil(target / tiles), chunks // least))
        span = math.ceil(chunks / wanted) * tiling.K_CHUNK
        return math.ceil(Q / span), span

    def grid(self, p: ConvParams, op: str, tiling: Tiling) -> tuple[int, int, int]:
        M, N, _ = gemm_shape(p, op)
        splits = self.splits(p, tiling)[0] if op == "backward_filter" else 1
        return math.ceil(N / tiling.BLOCK_N), p.groups * math.ceil(M / tiling.BLOCK_M), splits

    def constraints(self, p: ConvParams, op: str = "forward"):
        blocks_x, blocks_y, _ = self.grid(p, op, self.gpu_tiling)
        return grid_fits(self.name, blocks_x, blocks_y)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if check_pass(op) != "backward_filter":
            return 0
        splits = self.splits(p)[0]
        return splits * p.K * p.Cg * p.R * p.S * p.itemsize if splits > 1 else 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        if check_pass(op) == "backward_data":
            return 2 * p.N * p.C * p.H * p.W * p.Kg * p.R * p.S
        if op == "backward_filter":
            return p.flops + (self.splits(p)[0] - 1) * p.K * p.Cg * p.R * p.S
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        self._launch("forward", p, x, w.reshape(p.K, p.Cg * p.R * p.S), out)

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        self._launch("backward_data", p, dy, w.reshape(p.K, p.Cg, p.R * p.S), out)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        splits, span = self.splits(p)
        taps = p.Cg * p.R * p.S
        dest = out.reshape(1, p.K, taps)
        if splits > 1:
            dest = self.buffer(out, "implicit_gemm.ranges", (splits, p.K, taps))
        self._launch("backward_filter", p, x, dy, dest, span)
        if splits > 1:
            launch(sum_splits_kernel(p.compute_dtype), *launch_1d(p.K * taps))(dest, out.reshape(p.K, taps))

    def _launch(self, op: str, p: ConvParams, a, b, out, *extra) -> None:
        tiling = self.tiling()
        blocks = self.grid(p, op, tiling)
        (top, _), (left, _) = p.padding
        launch(tiled_kernel(op, p.compute_dtype, tiling), blocks, tiling.threads)(
            a, b, out, p.R, p.S, top, left, *p.stride, *p.dilation, p.groups, blocks[1] // p.groups, *extra)
