"""GPU overlap-save FFT convolution over small fixed tiles (the maths and steps: ``gpu.py``).

Each image is cut into Th x Tw tiles (Th, Tw from TILE_SIZES), overlapping by the kernel extent minus one, so
each tile gives (Th - Re + 1) x (Tw - Se + 1) dense outputs. Per axis the tile size minimises
tiles * T * log2(2T), a proxy for the FFT work. Small tiles keep the spectra small and batch many short FFTs.

FLOPs and workspace: the formulas of ``gpu.py`` for this plan.
Constraints: the dilated kernel must fit one tile (Re, Se <= TILE_SIZES[-1]) whatever the stride (unlike the
CPU's polyphase tiles, which shrink the kernel by the stride); the workspace must fit the GPU's cap.
"""
from __future__ import annotations

import math

from ..params import ConvParams
from ..registry import unsupported
from .gpu import GPUFFT, dense_plan
from .plan import TilePlan

TILE_SIZES = (8, 16, 32, 64)


def axis_tile(dense: int, extent: int) -> tuple[int, int, int] | None:
    """(T, m, tiles) along one axis: the tile size with the least FFT work, or None if none fits."""
    options = []
    for T in TILE_SIZES:
        m = T - extent + 1
        if m >= 1:
            tiles = math.ceil(dense / m)
            options.append((tiles * T * math.log2(2 * T), T, m, tiles))
    return min(options)[1:] if options else None


def tiled_plan(p: ConvParams) -> TilePlan | None:
    (Hp, Wp), (Re, Se) = p.padded_hw, p.kernel_extent
    rows, cols = axis_tile(Hp - Re + 1, Re), axis_tile(Wp - Se + 1, Se)
    if rows is None or cols is None:
        return None
    return dense_plan(Re, Se, rows[0], cols[0], rows[1], cols[1], rows[2], cols[2])


class GPUFFTTiled(GPUFFT):
    """Overlap-save FFT convolution over small tiles (see the module docstring)."""

    name = "fft_tiled"

    def plan(self, p: ConvParams) -> TilePlan | None:
        return tiled_plan(p)

    def constraints(self, p: ConvParams, op: str = "forward"):
        if self.plan(p) is None:
            (Re, Se) = p.kernel_extent
            return unsupported(f"{self.name} tiles are at most {TILE_SIZES[-1]} pixels, but the dilated kernel "
                               f"spans {Re}x{Se} (the GPU computes the dense stride-1 result, so the stride "
                               f"does not shrink it)")
        return super().constraints(p, op)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return super().workspace_bytes(p, op) if self.plan(p) else 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return super().flops(p, op) if self.plan(p) else 0
