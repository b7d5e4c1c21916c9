"""How the FFT algorithms (``fft``, ``fft_tiled``) cut a layer into transforms, per pass: the tile plan, and
the workspace and FLOPs that plan costs. Pure arithmetic on shapes; the maths of the passes is in ``fft``.

A plan describes the polyphase layer (stride (sh, sw) split into sh*sw phases of the input, Cs = C*sh*sw phase
channels, Csg = Cs/groups per group, a phase kernel of Rq x Sq taps) and its tiles: Th x Tw transforms, each
yielding mh x mw results, nth x ntw tiles per image, P = N*nth*ntw tiles in all, F = Th*(Tw//2 + 1) frequency
bins per real 2-D spectrum. What a tile yields depends on the pass:

- forward: mh x mw outputs of y (Ho x Wo in all);
- backward_data: mh x mw pixels of the phase images of dx (Ho + Rq - 1 x Wo + Sq - 1 in all: every row an
  output reads);
- backward_filter: mh x mw pixels of dy, correlated with the x region they read; the Rq x Sq lags of all tiles
  are summed in the frequency domain.

The transform size is the same in every pass: a tile holds the mh + Rq - 1 input rows its mh outputs read.

FLOPs (``plan_flops``), convention: a real FFT of n = Th*Tw points costs 2.5 n log2 n real flops, a complex
multiply-add 8, a complex add 2.

- forward and backward_data: the transforms of Cs*P input (or dx) tiles and K*P output (or dy) tiles; the
  kernel's pruned DFT by GEMMs, 4*Fw*Sq*Rq + 8*Th*Rq*Fw per (k, phase channel) (Fw = Tw//2 + 1); the channel
  GEMM 8*F*K*Csg*P. The two passes do the same work; only the number of tiles P differs.
- backward_filter: the transforms of Cs*P x tiles and K*P dy tiles, the GEMM over tiles 8*F*K*Csg*P, 2*F*K*Csg
  per batch chunk after the first (the accumulation), and the inverse DFT pruned to the Rq x Sq lags,
  8*Rq*Fw*(Th + Sq) per (k, phase channel) (two complex GEMMs: Rq x Th over row bins, Sq x Fw over columns).

Workspace (``plan_workspace_bytes``): the sum of every array a pass makes for one batch chunk (the live peak is
a little lower), named in ``plan_sizes``. forward and backward_data both make the kernel's taps (backward_data
one more copy, transposed), its row DFT, its planar and interleaved spectra, and the real tiles, spectra,
product and inverse of Cs*P and K*P tiles (in swapped roles); backward_filter makes the tiles and spectra of x
and dy, the accumulated spectrum (and a product buffer when the batch has several chunks), the lag rows (Rq x
Fw) and lags (Rq x Sq) of the pruned inverse (the taps are then copied from the lags into the result: nothing
more). The GPU twins (``device="cuda"``) make two arrays more: CuPy copies the input of every complex-to-real
FFT (cuFFT overwrites it: the product of forward and backward_data), and the operand cuBLAS reads transposed
(x's spectrum in backward_filter's GEMM over tiles).

Batch chunks (``batch_chunk``): the largest divisor of N whose chunk's workspace fits a limit (both twins:
min(CHUNK_WORKSPACE, the backend's workspace cap)), else one image at a time. Tile sizes (``cheapest_tile_plan``,
``fft_tiled``): the one of TILE_SIZES (2^a 3^b: fast lengths for pocketfft and cuFFT) of least ``plan_flops``.
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from math import log2

from ..params import ConvParams

#: the batch is processed in chunks of images whose workspace fits this (and the workspace cap).
CHUNK_WORKSPACE = 256 << 20
#: FFT sizes a tile of ``fft_tiled`` may have (2^a 3^b: fast in pocketfft and cuFFT).
TILE_SIZES = (8, 12, 16, 24, 32, 48, 64)


def next_fast_len(n: int, odd_factors: tuple[int, ...] = (3, 5)) -> int:
    """The smallest 2^a * 3^b * 5^c (times the other ``odd_factors``' powers) >= n: the lengths pocketfft
    transforms fastest with the default (3, 5); cuFFT's, with (3, 5, 7)."""
    best = 1 << max(0, (n - 1).bit_length())
    bases = [1]
    for f in odd_factors:
        grown = []
        for b in bases:
            while b < best:
                grown.append(b)
                b *= f
        bases = grown
    for m in bases:
        while m < n:
            m *= 2
        best = min(best, m)
    return best


@dataclass(frozen=True)
class TilePlan:
    """How a pass of a layer is cut into FFT tiles, after polyphase decomposition of stride (sh, sw).

    Rq x Sq: kernel extent per phase; Th x Tw: FFT size of a tile; mh x mw: results a tile yields;
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
    def tiles(self) -> int:
        """Tiles per image."""
        return self.nth * self.ntw

    @property
    def freqs(self) -> int:
        """Frequency bins of one tile's real 2-D spectrum."""
        return self.Th * (self.Tw // 2 + 1)


def phase_extent(p: ConvParams) -> tuple[int, int]:
    """Kernel extent in each polyphase component: ceil(dilated extent / stride)."""
    (eh, ew), (sh, sw) = p.kernel_extent, p.stride
    return -(-eh // sh), -(-ew // sw)


def result_extent(p: ConvParams, op: str) -> tuple[int, int]:
    """Rows and columns the tiles of pass ``op`` must yield: y's (and dy's) Ho x Wo, or for backward_data the
    Ho + Rq - 1 x Wo + Sq - 1 phase-image pixels that some output reads."""
    (Rq, Sq), (Ho, Wo) = phase_extent(p), p.out_hw
    return (Ho + Rq - 1, Wo + Sq - 1) if op == "backward_data" else (Ho, Wo)


@lru_cache(maxsize=1024)
def whole_image_plan(p: ConvParams, op: str = "forward") -> TilePlan:
    """One tile per image, of fast FFT length >= Ho + Rq - 1 (the phase input rows the outputs read); memoised."""
    (Rq, Sq), (Ho, Wo) = phase_extent(p), p.out_hw
    Th, Tw = next_fast_len(Ho + Rq - 1), next_fast_len(Wo + Sq - 1)
    return TilePlan(*p.stride, Rq, Sq, Th, Tw, *result_extent(p, op), 1, 1)


def tile_plan(p: ConvParams, T: int, op: str = "forward") -> TilePlan:
    """The overlap-save plan with T x T tiles: each yields T - Rq + 1 x T - Sq + 1 results. Along an axis where
    one backward_data tile holds all of dy (T >= Ho + Rq - 1), it yields all Ho + Rq - 1 pixels, as the whole
    image does: dy sits between zeros, so nothing wraps around."""
    (Rq, Sq), (eh, ew) = phase_extent(p), result_extent(p, op)
    mh, mw = (e if op == "backward_data" and T >= e else T - taps + 1 for e, taps in ((eh, Rq), (ew, Sq)))
    return TilePlan(*p.stride, Rq, Sq, T, T, mh, mw, -(-eh // mh), -(-ew // mw))


def plan_sizes(p: ConvParams, t: TilePlan, op: str = "forward", chunks: int = 1,
               device: str = "cpu") -> dict[str, int]:
    """Element counts of every array pass ``op`` makes for the batch ``p.N`` of one chunk (reals or complexes,
    as named); ``chunks`` is the number of chunks the whole batch is cut into; ``device="cuda"`` adds the GPU
    twin's copies (module docstring)."""
    Cs, Csg, P, F, Fw = p.C * t.sh * t.sw, p.Cg * t.sh * t.sw, p.N * t.nth * t.ntw, t.freqs, t.Tw // 2 + 1
    tiles = dict(x_tiles_real=t.Th * t.Tw * Cs * P, x_spectrum_complex=F * Cs * P,
                 y_tiles_real=t.Th * t.Tw * p.K * P, y_spectrum_complex=F * p.K * P)
    if op == "backward_filter":
        sizes = dict(tiles, dw_spectrum_complex=F * p.K * Csg, dw_product_complex=F * p.K * Csg * (chunks > 1),
                     lag_rows_complex=t.Rq * Fw * p.K * Csg, lags_complex=t.Rq * t.Sq * p.K * Csg)
        gpu_copies = dict(x_spectrum_transposed_complex=F * Cs * P)
    else:
        transposed = op == "backward_data"           # backward_data copies the taps once more, K and C swapped
        sizes = dict(tiles, kernel_taps_real=(2 + transposed) * t.Rq * t.Sq * p.K * Csg,
                     kernel_rows_complex=t.Rq * Fw * p.K * Csg,
                     kernel_planar_complex=F * p.K * Csg, kernel_complex=F * p.K * Csg)
        gpu_copies = dict(inverse_input_copy_complex=F * (Cs if transposed else p.K) * P)
    return dict(sizes, **gpu_copies) if device == "cuda" else sizes


def plan_workspace_bytes(p: ConvParams, t: TilePlan, op: str = "forward", chunks: int = 1,
                         device: str = "cpu") -> int:
    sizes = plan_sizes(p, t, op, chunks, device)
    elements = sum(2 * v if name.endswith("complex") else v for name, v in sizes.items())
    return elements * p.itemsize


def batch_chunk(p: ConvParams, t: TilePlan, op: str, limit: int, device: str = "cpu") -> int:
    """Images per chunk: the largest divisor of N whose chunk's workspace fits ``limit`` (else 1)."""
    fits = [n for n in range(1, p.N + 1)
            if p.N % n == 0 and plan_workspace_bytes(p.with_batch(n), t, op, p.N // n, device) <= limit]
    return max(fits, default=1)


def plan_flops(p: ConvParams, t: TilePlan, op: str = "forward", chunks: int = 1) -> int:
    """The FLOPs of pass ``op`` over the whole batch ``p.N`` cut into ``chunks`` chunks (module docstring)."""
    n = t.Th * t.Tw
    fft = 2.5 * n * log2(n) if n > 1 else 0.0
    Cs, Csg, P, F, Fw = p.C * t.sh * t.sw, p.Cg * t.sh * t.sw, p.N * t.nth * t.ntw, t.freqs, t.Tw // 2 + 1
    tiles_and_gemm = (Cs * P + p.K * P) * fft + 8 * F * p.K * Csg * P
    if op == "backward_filter":
        lags_dft = 8 * t.Rq * Fw * p.K * Csg * (t.Th + t.Sq)
        return int(tiles_and_gemm + lags_dft + 2 * F * p.K * Csg * (chunks - 1))
    return int(tiles_and_gemm + p.K * Csg * (4 * Fw * t.Sq * t.Rq + 8 * t.Th * t.Rq * Fw))


@lru_cache(maxsize=1024)
def cheapest_tile_plan(p: ConvParams, op: str = "forward") -> TilePlan | None:
    """The plan of pass ``op`` of least FLOPs over TILE_SIZES, or None if the kernel is larger than every tile
    (memoised: every call of a pass asks several times, and a prepared form's check once more)."""
    plans = [tile_plan(p, T, op) for T in TILE_SIZES if T >= max(phase_extent(p))]
    return min(plans, key=lambda t: plan_flops(p, t, op), default=None)
