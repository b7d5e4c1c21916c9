"""GPU overlap-save FFT convolution over small tiles, all three passes: ``gpu.py``'s passes on the CPU twin's
tile plans (``plan.cheapest_tile_plan``: the T x T tiles of TILE_SIZES of least FLOPs per pass, cut after the
polyphase split, so the stride shrinks the kernel a tile must hold).

FLOPs, workspace and deterministic: as ``fft`` on the GPU, for these plans. Constraints: the CPU's
(``shared.plan_constraints``): the phase kernel extent (ceil(dilated extent / stride)) fits the largest tile,
and one image's workspace fits the GPU's cap.
"""
from __future__ import annotations

from ..params import ConvParams
from .gpu import GPUFFT
from .plan import TilePlan, cheapest_tile_plan


class GPUFFTTiled(GPUFFT):
    """Overlap-save FFT convolution over small tiles on the GPU (see the module docstring)."""

    name = "fft_tiled"

    def plan(self, p: ConvParams, op: str = "forward") -> TilePlan | None:
        return cheapest_tile_plan(p, op)
