"""Tiled FFT convolution by overlap-save: many small FFTs instead of one per image.

Maths. The whole-image FFT (``fft``) computes a circular convolution of length L >= the input extent. Overlap-save
cuts the (padded, polyphase) input into tiles of T x T pixels that overlap by Rq - 1 rows and Sq - 1 columns:
tile (i, j) starts at input pixel (i*mh, j*mw) and, by the same argument as the whole-image case, its circular
convolution with the flipped kernel is exact at outputs Rq-1 .. T-1, which are the mh = T - Rq + 1 (likewise
mw = T - Sq + 1) outputs starting at output pixel (i*mh, j*mw). The tiles together cover the output; the last row
and column of tiles is cropped. Every tile goes through the same rfft2 of size T x T, so all tiles of all images
and channels are one batched transform, and channel mixing is one complex GEMM per frequency bin over all tiles:

    Y[f, k, tile] = sum_c Wf[f, k, c] X[f, c, tile]          (F = T*(T//2+1) bins)

Why: the kernel spectrum has F*K*Cg entries, so a whole-image FFT of a 64x64 image with K = C = 64 keeps
2112 bins x 4096 channel pairs (69 MB) for one image: computing it costs more than the convolution it serves
at batch 1, and the GEMM is a matrix-vector product per bin (memory bound). A 16x16 tile has 144 bins (4.7 MB),
and each bin's GEMM multiplies by all tiles at once (64x64 by 64x36 on that layer). The workspace
no longer grows with the image's FFT length but with the number of tiles, and it is far smaller on large
images (the tests check it).

Tile size: T is the one of ``plan.TILE_SIZES`` (fast FFT lengths) that minimises ``plan.plan_flops``, among
those with T >= the phase kernel extent (so mh, mw >= 1): ``plan.cheapest_tile_plan``, which the GPU twin
shares. Measured (one thread, CPU ms, every T timed): the FLOP choice was the fastest or within 5% of it on
64->64 7x7 56x56 (T=16: 17 ms; T=12 22, T=24 23), 64->64 11x11 56x56 (T=24: 25 ms; T=16 41, T=32 31), AlexNet
conv1 (T=16: 7.5 ms; T=8 8.0, T=24 11.7), 128->128 3x3 56x56 (T=16: 23 ms; T=12 22, T=24 44) and CIFAR
16->16 3x3 at batch 32 (T=8: 22 ms; T=16 21.6).

FLOPs, workspace, stride (polyphase), dilation (dilated kernel), groups and the scipy.fft choice: as in ``fft``
(the same formulas and code, with the tile plans of this module). Deterministic: the same tiles, transforms
and GEMMs in the same order on every call.

Backward passes: the same overlap-save tiles in the same T x T transforms (see ``fft`` for the maths).
backward_data's tiles yield mh x mw = T - Rq + 1 x T - Sq + 1 pixels of the phase images of dx, each tile
reading dy from Rq - 1 rows (Sq - 1 columns) above its first pixel (a single tile that holds all of dy yields
all Ho + Rq - 1 rows, as the whole image does); backward_filter's tiles are mh x mw pixels of dy, each
correlated with the (mh + Rq - 1) x (mw + Sq - 1) region of x its outputs read, and the products of all tiles
of all images are summed in the frequency domain (the contraction of the per-bin GEMM) before one inverse DFT
at the Rq x Sq lags. T is chosen per pass by that pass's FLOP count. Measured on 64->64 7x7 56x56 at batch 1
(one thread, loaded machine, ms): backward_data T=16 32, T=24 43 (the FLOP choice: its kernel DFT GEMMs run
below the FFTs' rate), T=12 54; backward_filter T=16 29 (the choice), T=12 29, T=24 32.

Constraints: refused when the phase kernel extent (ceil(dilation*(R-1)+1) / stride)) exceeds the largest tile,
or when one image's workspace passes ``workspace_cap()`` (as ``fft``).
"""
from __future__ import annotations

from ..params import ConvParams
from .plan import TilePlan, cheapest_tile_plan
from .whole import FFT


class FFTTiled(FFT):
    """Overlap-save FFT convolution over small fixed tiles, all three passes (see the module docstring)."""

    name = "fft_tiled"

    def plan(self, p: ConvParams, op: str = "forward") -> TilePlan:
        return cheapest_tile_plan(p, op)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return super().workspace_bytes(p, op) if self.plan(p, op) else 0

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return super().flops(p, op) if self.plan(p, op) else 0

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return super().prepare_bytes(p, op) if self.plan(p, op) else 0

