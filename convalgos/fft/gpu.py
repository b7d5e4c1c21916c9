"""GPU FFT convolution: cuFFT through ``xp.fft``, channel mixing as one batched GEMM, Numba-CUDA tiling.

Correlation is a product of spectra. Pad the image (top/left/bottom/right) to Hp x Wp and place the dilated
kernel (extent Re x Se) at the origin of a T x T' array; then for every output pixel that does not wrap,

    ydense[n, k] = irfft2( sum_c  rfft2(xpad[n, g*Cg + c]) * conj(rfft2(wdil[k, c])) ),

and y[n, k, i, j] = ydense[n, k, i*sh, j*sw] (stride by subsampling the dense, stride-1 result).

This module does the work over a *tile plan*: the padded image is cut into nth x ntw overlapping tiles of
Th x Tw input pixels, each giving mh x mw = (Th - Re + 1) x (Tw - Se + 1) dense outputs (overlap-save).
``fft`` uses one tile per image, Th x Tw the smallest 2^a 3^b 5^c 7^d lengths covering the padded image
(``plan.next_fast_len``);
``fft_tiled`` (its own module) uses small fixed tiles. Steps:
1. a Numba-CUDA kernel gathers the tiles straight from x (zero outside: the padding is never stored);
2. rfft2 of the tiles and of the dilated kernel (cuFFT);
3. per frequency, a batched complex GEMM mixes channels: (G, Kg, Cg) @ (G, Cg, N*tiles);
4. irfft2, and a Numba-CUDA kernel scatters each tile's valid outputs, subsampled by the stride, into y.

FLOPs (counted as done): 2.5*Th*Tw*log2(Th*Tw) per real 2-D FFT, for N*C*tiles input tiles, K*Cg kernels
and N*K*tiles output tiles, plus 8 per complex multiply-add of the mixing GEMM: 8*F*N*tiles*K*Cg, with
F = Th*(Tw//2 + 1). Workspace: the tiles, their spectrum (and its transposed copy), the kernel spectrum (and
its copy), the product (and its copy) and the output tiles. Constraints: the workspace must fit the GPU's
workspace cap (``convalgos.workspace_cap("cuda")``, from the device's free memory). Strides are computed
densely then subsampled (unlike the CPU's polyphase split).
"""
from __future__ import annotations

import functools
import math

from numba import cuda

from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..params import ConvParams
from .plan import TilePlan, next_fast_len
from .shared import TOLERANCE

#: the odd factors of the lengths cuFFT transforms fastest (with powers of two).
CUFFT_ODD_FACTORS = (3, 5, 7)


def dense_geometry(p: ConvParams) -> tuple[tuple[int, int], tuple[int, int]]:
    """((Hp, Wp), (Re, Se)): the padded image and the dilated kernel extent."""
    return p.padded_hw, p.kernel_extent


def dense_plan(Re: int, Se: int, Th: int, Tw: int, mh: int, mw: int, nth: int, ntw: int) -> TilePlan:
    """A plan of the dense stride-1 result (the GPU subsamples it by the stride): the CPU's ``TilePlan`` with
    one phase, the whole dilated kernel (Re x Se) as its phase kernel."""
    return TilePlan(1, 1, Re, Se, Th, Tw, mh, mw, nth, ntw)


def whole_image_plan(p: ConvParams) -> TilePlan:
    (Hp, Wp), (Re, Se) = dense_geometry(p)
    Th, Tw = next_fast_len(Hp, CUFFT_ODD_FACTORS), next_fast_len(Wp, CUFFT_ODD_FACTORS)
    return dense_plan(Re, Se, Th, Tw, Th - Re + 1, Tw - Se + 1, 1, 1)


def plan_flops(p: ConvParams, t: TilePlan) -> int:
    fft = 2.5 * t.Th * t.Tw * math.log2(t.Th * t.Tw)
    transforms = fft * (p.N * p.C * t.tiles + p.K * p.Cg + p.N * p.K * t.tiles)
    mixing = 8 * t.freqs * p.N * t.tiles * p.K * p.Cg
    return int(transforms + mixing)


def plan_workspace_bytes(p: ConvParams, t: TilePlan) -> int:
    real, cplx = p.itemsize, 2 * p.itemsize
    P = p.N * t.tiles
    elements_real = (p.C * P + p.K * p.Cg + p.K * P) * t.Th * t.Tw
    elements_cplx = 2 * (p.C * P + p.K * p.Cg + p.K * P) * t.freqs
    return elements_real * real + elements_cplx * cplx


@functools.lru_cache(maxsize=None)
def gather_tiles_kernel():
    """tiles[n, c, ti, tj, u, v] = x[n, c, ti*mh + u - top, tj*mw + v - left] (0 outside)."""

    @cuda.jit
    def kernel(x, tiles, top, left, mh, mw):
        N, C, H, W = x.shape[0], x.shape[1], x.shape[2], x.shape[3]
        nth, ntw, Th, Tw = tiles.shape[2], tiles.shape[3], tiles.shape[4], tiles.shape[5]
        total = N * C * nth * ntw * Th * Tw
        for e in range(cuda.grid(1), total, cuda.gridsize(1)):
            v = e % Tw
            u = (e // Tw) % Th
            tj = (e // (Tw * Th)) % ntw
            ti = (e // (Tw * Th * ntw)) % nth
            nc = e // (Tw * Th * ntw * nth)
            n, c = nc // C, nc % C
            yy, xx = ti * mh + u - top, tj * mw + v - left
            inside = 0 <= yy < H and 0 <= xx < W
            tiles[n, c, ti, tj, u, v] = x[n, c, yy, xx] if inside else 0

    return kernel


@functools.lru_cache(maxsize=None)
def scatter_outputs_kernel():
    """out[n, k, i, j] = ytiles[n, k, ti, tj, u, v] for the dense pixel (i*sh, j*sw) = (ti*mh + u, tj*mw + v)."""

    @cuda.jit
    def kernel(ytiles, out, mh, mw, sh, sw):
        N, K, Ho, Wo = out.shape[0], out.shape[1], out.shape[2], out.shape[3]
        total = N * K * Ho * Wo
        for e in range(cuda.grid(1), total, cuda.gridsize(1)):
            j = e % Wo
            i = (e // Wo) % Ho
            nk = e // (Wo * Ho)
            n, k = nk // K, nk % K
            di, dj = i * sh, j * sw
            out[n, k, i, j] = ytiles[n, k, di // mh, dj // mw, di % mh, dj % mw]

    return kernel


class GPUFFT(GPUAlgorithm):
    """Whole-image FFT convolution on the GPU (see the module docstring)."""

    name = "fft"
    tolerance = TOLERANCE

    def plan(self, p: ConvParams) -> TilePlan:
        return whole_image_plan(p)

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return plan_workspace_bytes(p, self.plan(p))

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return plan_flops(p, self.plan(p))

    def kernel_spectrum(self, w, p: ConvParams, t: TilePlan):
        """conj(rfft2(dilated kernel)) as (F, G, Kg, Cg), ready for the mixing GEMM."""
        xp = array_module(w)
        (Re, Se), (dh, dw) = p.kernel_extent, p.dilation
        wdil = self.buffer(w, "fft.wdil", (p.K, p.Cg, t.Th, t.Tw), zero=True)
        wdil[:, :, :Re:dh, :Se:dw] = w
        spec = xp.fft.rfft2(wdil).reshape(p.groups, p.Kg, p.Cg, t.freqs)
        return xp.ascontiguousarray(xp.conj(spec).transpose(3, 0, 1, 2))

    def forward(self, x, w, p: ConvParams, out) -> None:
        xp, t = array_module(x), self.plan(p)
        (top, _), (left, _) = p.padding
        P = p.N * t.tiles
        tiles = self.buffer(x, "fft.tiles", (p.N, p.C, t.nth, t.ntw, t.Th, t.Tw))
        blocks, threads = launch_1d(tiles.size)
        launch(gather_tiles_kernel(), blocks, threads)(x, tiles, top, left, t.mh, t.mw)
        spec = xp.fft.rfft2(tiles).reshape(p.N, p.groups, p.Cg, t.tiles, t.freqs)
        spec = xp.ascontiguousarray(spec.transpose(4, 1, 2, 0, 3)).reshape(t.freqs, p.groups, p.Cg, P)
        product = xp.matmul(self.kernel_spectrum(w, p, t), spec)             # (F, G, Kg, N*tiles)
        product = product.reshape(t.freqs, p.groups, p.Kg, p.N, t.tiles).transpose(3, 1, 2, 4, 0)
        product = xp.ascontiguousarray(product).reshape(p.N, p.K, t.nth, t.ntw, t.Th, t.Tw // 2 + 1)
        ytiles = xp.fft.irfft2(product, s=(t.Th, t.Tw)).astype(out.dtype, copy=False)
        blocks, threads = launch_1d(out.size)
        launch(scatter_outputs_kernel(), blocks, threads)(ytiles, out, t.mh, t.mw, *p.stride)
