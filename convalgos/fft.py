"""FFT convolution over the whole image: the convolution theorem, one transform per channel image.

Maths. A layer is a cross-correlation, y[i] = sum_a x[i + a] w[a] (2-D, summed over input channels). Flipping
the kernel, wf[a] = w[R-1-a], turns it into a convolution, y[i] = (x * wf)[i + R - 1], and the convolution
theorem computes a *circular* convolution of length L as irfft(rfft(x) . rfft(wf)). Circular wrap-around only
touches the first R - 1 outputs, so with L >= Hin (the input rows needed) the outputs R-1 .. Hin-1 are exact:
no padding to Hin + R - 1 is needed, since the valid part is all a layer keeps. Channel mixing happens in the
frequency domain, where it is a complex matrix product for each frequency bin f:

    Y[f, k, n] = sum_c Wf[f, k, c] X[f, c, n]          batched over (f, group): np.matmul on (F, G, Kg, Cg)

Dilation: the kernel is dilated (zeros inserted between taps). Stride (sh, sw) > 1: polyphase decomposition.
With u = a*sh + ph, x[i*sh + u] = x_ph[i + a] where x_ph[m] = x[m*sh + ph] and w_ph[a] = w[a*sh + ph], so a
strided correlation is the sum over the sh*sw phases of stride-1 correlations of R/sh x S/sw kernels. The phases
are simply more input channels (space-to-depth, Cs = C*sh*sw), summed by the same channel GEMM, so only the
outputs that are kept get computed (not the stride-1 result then subsampled).

The data path: gather (Numba) padding, phases and tiles into a reused real buffer laid out (Th, Tw, Cs, P) with
P = N * tiles; scipy rfftn over the two leading axes gives (F, Cs, P) with F = Th*(Tw//2+1), the GEMM layout,
with no transposition. The kernel spectrum is computed each call (weights may change between calls) as a
pruned 2-D DFT by real GEMMs: the kernel has only Rq x Sq taps in a Th x Tw tile, and batched FFTs of many
short, mostly zero signals cost more in per-transform overhead than two small GEMMs (measured 2-4x on the 16x16
tiles of a 64-channel 7x7 layer). The inverse rfftn gives (Th, Tw, K, P); a Numba scatter crops each tile into y.
This module's algorithm is the one-tile case (the tile is the whole image, Th = next_fast_len(Ho + Rq - 1));
``fft_tiled`` uses the same machinery with many small tiles (overlap-save).

FLOPs (``flops``), convention: a real FFT of n points (2-D: n = Th*Tw) costs 2.5 n log2 n real flops; a complex
multiply-add 8. Counted: the forward FFTs of Cs*P input tiles and the inverse FFTs of K*P output tiles; the
kernel's DFT GEMMs, 4*Fw*Sq*Rq + 8*Th*Rq*Fw real flops per (k, phase channel) (Fw = Tw//2+1); the channel GEMM
8*F*K*Csg*P (Csg = Cs/groups). The kernel's share is why whole-image FFT at batch 1 loses to the tiled one.

Workspace (``workspace_bytes``): the sum of every array made (the live peak is a little lower): the dilated
polyphase kernel and its flipped copy, 2*Rq*Sq*K*Csg reals; the kernel's row DFT 2*Rq*Fw*K*Csg reals, its
planar spectrum 2*F*K*Csg reals and interleaved spectrum F*K*Csg complex; the gathered tiles Th*Tw*Cs*P reals;
their spectrum F*Cs*P complex; the product spectrum F*K*P complex; the inverse Th*Tw*K*P reals. scipy allocates
the tile spectrum and the inverse (it has no ``out=``); the rest are buffers reused between calls.

Batch: processed in equal chunks (a divisor of N) whose workspace fits CHUNK_WORKSPACE, against one kernel
spectrum; ``workspace_bytes`` is that of one chunk.

Constraints: any stride, dilation, padding and groups; refused when one image's workspace exceeds MAX_WORKSPACE.

numpy.fft or scipy.fft: scipy.fft, measured. Both transform float32 as complex64, but on the (T, T, Cs, P)
layout with leading-axis transforms scipy was 1.7-7x faster than numpy 2.4 even with numpy's ``out=`` (numpy's
gufunc transforms one vector at a time; scipy's pocketfft batches vectors along the other axes). ``workers=-1``
lets pocketfft split the independent vectors over the cores; the result is bitwise the same either way.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import log2

import numpy as np
import scipy.fft
from numba import njit, prange

from .params import ConvParams
from .registry import SUPPORTED, Algorithm, register, unsupported

#: the largest workspace (bytes) a layer may need for one image; larger layers are refused.
MAX_WORKSPACE = 1 << 30
#: the batch is processed in chunks of images whose workspace fits this (the kernel spectrum is made once).
CHUNK_WORKSPACE = 256 << 20


def next_fast_len(n: int) -> int:
    """The smallest 2^a 3^b 5^c >= n: a length pocketfft transforms fastest."""
    best = 1 << max(0, (n - 1).bit_length())
    p5 = 1
    while p5 < best:
        p35 = p5
        while p35 < best:
            m = p35
            while m < n:
                m *= 2
            best = min(best, m)
            p35 *= 3
        p5 *= 5
    return best


@dataclass(frozen=True)
class TilePlan:
    """How a layer is cut into FFT tiles, after polyphase decomposition of stride (sh, sw).

    Rq x Sq: kernel extent per phase; Th x Tw: FFT size of a tile; mh x mw: outputs a tile yields;
    nth x ntw: tiles per image. Phase channels Cs = C*sh*sw; P = N*nth*ntw tiles in all.
    """

    sh: int
    sw: int
    Rq: int
    Sq: int
    Th: int
    Tw: int
    mh: int
    mw: int
    nth: int
    ntw: int

    @property
    def freqs(self) -> int:
        """Frequency bins of one tile's real 2-D spectrum."""
        return self.Th * (self.Tw // 2 + 1)


def phase_extent(p: ConvParams) -> tuple[int, int]:
    """Kernel extent in each polyphase component: ceil(dilated extent / stride)."""
    (eh, ew), (sh, sw) = p.kernel_extent, p.stride
    return -(-eh // sh), -(-ew // sw)


def whole_image_plan(p: ConvParams) -> TilePlan:
    """One tile per image, of fast FFT length >= the phase input extent Ho + Rq - 1."""
    (Rq, Sq), (Ho, Wo) = phase_extent(p), p.out_hw
    return TilePlan(*p.stride, Rq, Sq, next_fast_len(Ho + Rq - 1), next_fast_len(Wo + Sq - 1), Ho, Wo, 1, 1)


def plan_sizes(p: ConvParams, t: TilePlan) -> dict[str, int]:
    """Element counts of every array the algorithm makes (reals or complexes, as named)."""
    Cs, Csg, P, F = p.C * t.sh * t.sw, p.Cg * t.sh * t.sw, p.N * t.nth * t.ntw, t.freqs
    return dict(kernel_taps_real=2 * t.Rq * t.Sq * p.K * Csg, tiles_real=t.Th * t.Tw * Cs * P, tiles_complex=F * Cs * P,
                kernel_rows_complex=t.Rq * (t.Tw // 2 + 1) * p.K * Csg, kernel_planar_complex=F * p.K * Csg,
                kernel_complex=F * p.K * Csg,
                product_complex=F * p.K * P, out_tiles_real=t.Th * t.Tw * p.K * P)


def plan_workspace_bytes(p: ConvParams, t: TilePlan) -> int:
    sizes = plan_sizes(p, t)
    elements = sum(2 * v if name.endswith("complex") else v for name, v in sizes.items())
    return elements * p.itemsize


def plan_flops(p: ConvParams, t: TilePlan) -> int:
    n = t.Th * t.Tw
    fft = 2.5 * n * log2(n) if n > 1 else 0.0
    Cs, Csg, P = p.C * t.sh * t.sw, p.Cg * t.sh * t.sw, p.N * t.nth * t.ntw
    Fw = t.Tw // 2 + 1
    kernel_dft = p.K * Csg * (4 * Fw * t.Sq * t.Rq + 8 * t.Th * t.Rq * Fw)
    return int((Cs * P + p.K * P) * fft + kernel_dft + 8 * t.freqs * p.K * Csg * P)


@njit(parallel=True, cache=True)
def gather_tiles(x, top, left, sh, sw, mh, mw, nth, ntw, tiles):
    """tiles[a, b, (c, ph, pw), (n, i, j)] = padded x[n, c, (i*mh + a)*sh + ph, (j*mw + b)*sw + pw], else 0."""
    Th, Tw = tiles.shape[0], tiles.shape[1]
    N, C, H, W = x.shape
    for a in prange(Th):
        for b in range(Tw):
            for c in range(C):
                for ph in range(sh):
                    for pw in range(sw):
                        cs = (c * sh + ph) * sw + pw
                        for n in range(N):
                            for i in range(nth):
                                row = (i * mh + a) * sh + ph - top
                                for j in range(ntw):
                                    col = (j * mw + b) * sw + pw - left
                                    inside = 0 <= row < H and 0 <= col < W
                                    tiles[a, b, cs, (n * nth + i) * ntw + j] = x[n, c, row, col] if inside else 0
    return tiles


@njit(parallel=True, cache=True)
def scatter_tiles(out_tiles, off_h, off_w, mh, mw, nth, ntw, y):
    """y[n, k, i*mh + a, j*mw + b] = out_tiles[off_h + a, off_w + b, k, (n, i, j)], cropped to y."""
    N, K, Ho, Wo = y.shape
    for k in prange(K):
        for n in range(N):
            for i in range(nth):
                for a in range(min(mh, Ho - i * mh)):
                    for j in range(ntw):
                        for b in range(min(mw, Wo - j * mw)):
                            y[n, k, i * mh + a, j * mw + b] = out_tiles[off_h + a, off_w + b, k, (n * nth + i) * ntw + j]
    return y


def phase_kernel(w: np.ndarray, p: ConvParams, t: TilePlan) -> np.ndarray:
    """The flipped, dilated, polyphase kernel as (Rq, Sq, K, Cg*sh*sw), phase channel (c, ph, pw)."""
    (dh, dw), (sh, sw) = p.dilation, (t.sh, t.sw)
    dilated = np.zeros((p.K, p.Cg, t.Rq * sh, t.Sq * sw), w.dtype)
    dilated[:, :, :p.R * dh:dh, :p.S * dw:dw] = w
    phases = dilated.reshape(p.K, p.Cg, t.Rq, sh, t.Sq, sw).transpose(2, 4, 0, 1, 3, 5)
    return np.ascontiguousarray(phases.reshape(t.Rq, t.Sq, p.K, p.Cg * sh * sw)[::-1, ::-1])


@lru_cache(maxsize=64)
def dft_matrices(T: int, taps: int, bins: int, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of 2 pi f t / T for the first ``bins`` frequencies f and ``taps`` taps t (computed in float64)."""
    angle = 2 * np.pi * np.outer(np.arange(bins), np.arange(taps)) / T
    return np.cos(angle).astype(dtype), np.sin(angle).astype(dtype)


@lru_cache(maxsize=64)
def real_dft_along_rows(T: int, taps: int, dtype: str) -> np.ndarray:
    """[[cos, sin], [-sin, cos]]: maps stacked (re; im) of length-``taps`` signals to (re; im) of their T-point DFT."""
    cos, sin = dft_matrices(T, taps, T, dtype)
    return np.block([[cos, sin], [-sin, cos]])


def kernel_spectrum(w: np.ndarray, p: ConvParams, t: TilePlan, workspace) -> np.ndarray:
    """(F, G, Kg, Csg) spectrum of the flipped phase kernel, as a pruned 2-D DFT by two real GEMMs.

    The kernel is tiny (Rq x Sq taps) in a Th x Tw tile, so instead of batched FFTs of many short mostly-zero
    signals: (re; im) of the rfft along S is cos/sin (Fw x Sq) @ kernel, then the DFT along R is one real GEMM
    of the (2Th x 2Rq) matrix ``real_dft_along_rows`` with the stacked (re; im) rows.
    """
    Fw, KCs, dt = t.Tw // 2 + 1, p.K * p.Cg * t.sh * t.sw, p.compute_dtype
    kernel = phase_kernel(w, p, t).reshape(t.Rq, t.Sq, KCs)
    cos, sin = dft_matrices(t.Tw, t.Sq, Fw, dt)
    rows = workspace.get("fft.kernel_rows", (2, t.Rq, Fw, KCs), dt)
    np.matmul(cos, kernel, out=rows[0])
    np.negative(np.matmul(sin, kernel, out=rows[1]), out=rows[1])
    planar = workspace.get("fft.kernel_planar", (2 * t.Th, Fw * KCs), dt)
    np.matmul(real_dft_along_rows(t.Th, t.Rq, dt), rows.reshape(2 * t.Rq, Fw * KCs), out=planar)
    spectrum = workspace.get("fft.kernel", (t.freqs, KCs), np.result_type(dt, np.complex64))
    spectrum.real = planar[:t.Th].reshape(t.freqs, KCs)
    spectrum.imag = planar[t.Th:].reshape(t.freqs, KCs)
    return spectrum.reshape(t.freqs, p.groups, p.Kg, -1)


class FFT(Algorithm):
    """Whole-image real FFT convolution (see the module docstring)."""

    name = "fft"
    deterministic = True
    tolerance = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}

    def plan(self, p: ConvParams) -> TilePlan:
        return whole_image_plan(p)

    def batch_chunk(self, p: ConvParams) -> int:
        """Images per chunk: the largest divisor of N whose workspace fits CHUNK_WORKSPACE (else 1)."""
        t = self.plan(p)
        fits = [n for n in range(1, p.N + 1)
                if p.N % n == 0 and plan_workspace_bytes(p.with_batch(n), t) <= CHUNK_WORKSPACE]
        return max(fits, default=1)

    def constraints(self, p: ConvParams, op: str = "forward"):
        need = self.workspace_bytes(p)
        if need > MAX_WORKSPACE:
            t = self.plan(p)
            return unsupported(f"{self.name} needs {need / 2**20:.0f} MiB of workspace for one image (FFT tiles "
                               f"{t.Th}x{t.Tw}, {t.nth * t.ntw} per image), over the {MAX_WORKSPACE / 2**20:.0f} "
                               f"MiB limit")
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        return plan_workspace_bytes(p.with_batch(self.batch_chunk(p)), self.plan(p))

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return plan_flops(p, self.plan(p))

    def forward(self, x, w, p, out):
        t, chunk = self.plan(p), self.batch_chunk(p)
        kernel = kernel_spectrum(w, p, t, self.workspace)
        for n in range(0, p.N, chunk):
            self.forward_chunk(x[n:n + chunk], kernel, p.with_batch(chunk), t, out[n:n + chunk])

    def forward_chunk(self, x, kernel, p, t, out):
        """Convolve the images of x (a chunk of the batch) with the kernel spectrum into out."""
        real, cplx = np.dtype(p.compute_dtype), np.result_type(p.compute_dtype, np.complex64)
        Cs, P = p.C * t.sh * t.sw, p.N * t.nth * t.ntw
        (top, _), (left, _) = p.padding
        tiles = self.workspace.get("fft.tiles", (t.Th, t.Tw, Cs, P), real)
        gather_tiles(x, top, left, t.sh, t.sw, t.mh, t.mw, t.nth, t.ntw, tiles)
        spectrum = scipy.fft.rfftn(tiles, axes=(0, 1), workers=-1).reshape(t.freqs, p.groups, -1, P)
        product = self.workspace.get("fft.product", (t.freqs, p.groups, p.Kg, P), cplx)
        np.matmul(kernel, spectrum, out=product)
        out_tiles = scipy.fft.irfftn(product.reshape(t.Th, -1, p.K, P), s=(t.Th, t.Tw), axes=(0, 1), workers=-1)
        scatter_tiles(out_tiles, t.Rq - 1, t.Sq - 1, t.mh, t.mw, t.nth, t.ntw, out)


register(FFT())
