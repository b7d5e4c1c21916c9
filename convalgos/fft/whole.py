"""FFT convolution over the whole image: the convolution theorem, one transform per channel image, all passes.

Maths. A layer is a cross-correlation, y[i] = sum_a x[i + a] w[a] (2-D, summed over input channels). Flipping
the kernel, wf[a] = w[R-1-a], turns it into a convolution, y[i] = (x * wf)[i + R - 1], and the convolution
theorem computes a *circular* convolution of length T as irfft(rfft(x) . rfft(wf)). Circular wrap-around only
touches the first R - 1 outputs, so with T >= Ho + R - 1 (the input rows the outputs read) the outputs
R-1 .. T-1 are exact. Channel mixing happens in the frequency domain, a complex matrix product per bin f:

    forward          Y[f, k, n]  = sum_c Wf[f, k, c] X[f, c, n]          matmul on (F, G, Kg, Csg) @ (F, G, Csg, P)

Dilation: the kernel is dilated (zeros inserted between taps). Stride (sh, sw) > 1: polyphase decomposition.
With u = a*sh + ph, x[i*sh + u] = x_ph[i + a] where x_ph[m] = x[m*sh + ph] and w_ph[a] = w[a*sh + ph], so a
strided correlation is the sum over the sh*sw phases of stride-1 correlations of Rq x Sq = R/sh x S/sw kernels.
The phases are more input channels (space-to-depth, Cs = C*sh*sw), summed by the same channel GEMM, so only
the outputs that are kept get computed.

The backward passes are the same sum read the other way round, on the phase images (chain rule):

    backward_data    dx_ph[c, m] = sum_{k, a} dy[k, m - a] w_ph[k, c, a]        a full convolution, m < Ho + Rq - 1
    backward_filter  dw_ph[k, c, a] = sum_{n, i} x_ph[n, c, i + a] dy[n, k, i]  a correlation, a < Rq

- backward_data. For a real kernel, conj(Wf) is the spectrum of wf reversed, i.e. of w_ph shifted back by
  Rq - 1: multiplying dy's spectrum by the conjugate kernel spectrum turns the forward's correlation into
  the convolution above, and the channel GEMM runs transposed, K -> C per group:
      DX[f, c, n] = sum_k conj(Wf[f, k, c]) DY[f, k, n]     (F, G, Csg, Kg) @ (F, G, Kg, P)
  (the kernel's DFT is taken with K and C already swapped, so the GEMM reads it contiguously). dy enters the
  tile shifted down by Rq - 1 rows (Sq - 1 columns), so the tile's pixel m is dx_ph[m], exact for
  T >= Ho + Rq - 1 (one tile: dy sits between zeros) or for m < T - Rq + 1 (overlapping tiles). Identity: at
  stride 1 this is a forward convolution of dy (padded by R - 1) with the kernel flipped and its K and C
  swapped. The phase images are scattered back into dx (phase channel
  (c, ph, pw), pixel m is padded row m*sh + ph), the padding cropped, and every pixel no output reads (cut by
  the stride, between dilated taps, past the last output) written as an exact zero, as torch does.
- backward_filter. dy plays the kernel: the identity is dw = a forward convolution of x with dy as the
  kernel, summed over images (x's channels the batch, dy's the filters; the layer's stride becomes the
  dilation of dy's taps, which polyphase turns back into stride 1). In the frequency domain the correlation
  is X_c(f) conj(DY_k(f)); reversing the dy tile in place (as the forward reverses its kernel) gives that
  conjugate spectrum, shifted, with no separate conjugation pass. The sum over images (and tiles) is the
  contraction of one complex GEMM per bin, (Kg x P) @ (P x Csg), accumulated over batch chunks in the
  frequency domain. One inverse DFT at the end, evaluated only at the Rq x Sq lags (offset mh - 1, the flipped
  tile's length) by two complex GEMMs, the transpose of the kernel's pruned DFT: inverse FFTs of the K*Csg
  whole planes, for 49 values per plane, were nearly all of the pass on a 64->64 7x7 56x56 layer at batch 1
  (about 0.7 s, one thread, loaded machine; the pruned inverse about 0.085 s). Tap (r, s) is then read from
  the lags of its phase channel. This is where FFT is at home: the "kernel" is the whole dy plane, so the
  transform replaces Ho*Wo multiply-adds per tap, not R*S.

The data path (every pass): gather (Numba) padding, phases and tiles into a reused real buffer laid out
(Th, Tw, channels, P) with P = N * tiles; scipy rfftn over the two leading axes gives (F, channels, P) with
F = Th*(Tw//2+1), the GEMM layout, with no transposition. The kernel spectrum (forward, backward_data) is
computed each call (or once, by ``prepare``: below) as a pruned 2-D DFT by real GEMMs: the kernel has only
Rq x Sq taps in a Th x Tw tile, and batched FFTs of many short, mostly zero signals cost more in per-transform
overhead than two small GEMMs (measured 2-4x on the 16x16 tiles of a 64-channel 7x7 layer). The inverse rfftn
gives (Th, Tw, channels, P); a Numba scatter crops each tile into the result. This module's algorithm is the
one-tile case (the tile is the whole image, Th = next_fast_len(Ho + Rq - 1) in every pass); ``fft_tiled``
uses the same machinery with many small tiles (overlap-save). Plans, FLOPs and workspace per pass: ``plan.py``.

Batch: processed in equal chunks (a divisor of N) whose workspace fits min(CHUNK_WORKSPACE, the workspace cap),
against one kernel spectrum (backward_filter: into one accumulated spectrum); ``workspace_bytes`` is that of
one chunk.

Prepared weights (``prepare``): the kernel spectrum of forward, or backward_data's conjugate, made once by
``kernel_spectrum``; the pass reads it instead of the kernel's DFT (F K Csg complex numbers, for one transform
size: a whole-image spectrum serves one image size, a tiled one the tile its FLOP count picks, which can change
with the batch; the tile choice still counts the kernel DFT the prepared form saves). Inference amortises
the DFT; training changes w every step and pays it every step. Measured with fft_tiled on 64->64 7x7 56x56,
N = 1, one thread, medians of 21 interleaved rounds on a loaded machine, ms, plain / prepared / prepare alone:
forward 17.9 / 13.6 / 3.3, backward_data 34.0 / 18.7 / 10.8 (im2col 32.8, 50.0); prepared / plain in three
runs 0.75-0.82 (forward, T = 16) and 0.55-0.65 (backward_data, T = 24: a larger kernel DFT).

Constraints: any stride, dilation, padding and groups, in every pass; refused when one image's workspace
passes ``workspace_cap(self.backend)``, with a reason that says so. There is no separate fixed limit (the former 1 GiB
MAX_WORKSPACE per image): the registry's cap is the one memory budget of every algorithm, tied to the machine
and settable by the user, and a second fixed limit would refuse layers the user's cap allows with no knob to
change it. The chunking is what keeps FFT under the cap; only a layer whose single image does not fit is
refused, and the reason names the tile size and says the batch is already one image per chunk.

numpy.fft or scipy.fft: scipy.fft, measured. Both transform float32 as complex64, but on the (T, T, Cs, P)
layout with leading-axis transforms scipy was 1.7-7x faster than numpy 2.4 even with numpy's ``out=`` (numpy's
gufunc transforms one vector at a time; scipy's pocketfft batches vectors along the other axes). ``workers=-1``
lets pocketfft split the independent vectors over the cores; the result is bitwise the same either way.
"""
from __future__ import annotations

import numpy as np
import scipy.fft

from ..memory import Workspace, workspace_cap
from ..gemm import matmul
from ..params import ConvParams
from ..registry import Algorithm
from .backward import lags_of, phase_map, pick_lags
from .kernels import gather_flipped_tiles, gather_tiles, scatter_phases, scatter_tiles
from .plan import CHUNK_WORKSPACE, TilePlan, batch_chunk, plan_flops, plan_workspace_bytes, whole_image_plan
from .shared import TOLERANCE, plan_constraints
from .spectra import kernel_spectrum


class FFT(Algorithm):
    """Whole-image real FFT convolution, all three passes (see the module docstring)."""

    name = "fft"
    deterministic = True
    tolerance = TOLERANCE

    def plan(self, p: ConvParams, op: str = "forward") -> TilePlan:
        return whole_image_plan(p, op)

    def batch_chunk(self, p: ConvParams, op: str = "forward") -> int:
        """Images per chunk: the largest divisor of N whose workspace fits CHUNK_WORKSPACE and the workspace cap
        (else 1)."""
        return batch_chunk(p, self.plan(p, op), op, min(CHUNK_WORKSPACE, workspace_cap(self.backend)))

    def constraints(self, p: ConvParams, op: str = "forward"):
        return plan_constraints(self.name, p, self.plan(p, op), op, workspace_cap(self.backend))

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        chunk = self.batch_chunk(p, op)
        return plan_workspace_bytes(p.with_batch(chunk), self.plan(p, op), op, max(p.N // chunk, 1))

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        return plan_flops(p, self.plan(p, op), op, max(p.N // self.batch_chunk(p, op), 1))

    # ---- prepared weights ----------------------------------------------------------------------------------
    def prepare_weight(self, w, p: ConvParams, op: str):
        """The kernel spectrum the pass would compute first, made in a workspace of its own (a fresh array that
        later calls do not overwrite, and no per-layer buffers left in this algorithm's workspace)."""
        return kernel_spectrum(w, p, self.plan(p, op), Workspace(), op)

    def prepared_for(self, p: ConvParams, op: str) -> dict:
        t = self.plan(p, op)
        return {**super().prepared_for(p, op), "stride": p.stride, "dilation": p.dilation,
                "fft_size": (t.Th, t.Tw) if t else None}

    def prepare_bytes(self, p: ConvParams, op: str = "forward") -> int:
        if not self.prepares(op):
            return 0
        t = self.plan(p, op)
        return t.freqs * p.K * p.Cg * t.sh * t.sw * 2 * p.itemsize

    # ---- forward -------------------------------------------------------------------------------------------
    def forward(self, x, w, p, out, prepared=None):
        t, chunk = self.plan(p), self.batch_chunk(p)
        kernel = kernel_spectrum(w, p, t, self.workspace) if prepared is None else prepared
        for n in range(0, p.N, chunk):
            self.forward_chunk(x[n:n + chunk], kernel, p.with_batch(chunk), t, out[n:n + chunk])

    def forward_chunk(self, x, kernel, p, t, out):
        """Convolve the images of x (a chunk of the batch) with the kernel spectrum into out."""
        spectrum = self.input_spectrum(x, p, t)
        product = self.workspace.get("fft.product", (t.freqs, p.groups, p.Kg, spectrum.shape[-1]), spectrum.dtype)
        matmul(kernel, spectrum, out=product)
        scatter_tiles(self.inverse(product, t), t.Rq - 1, t.Sq - 1, t.mh, t.mw, t.nth, t.ntw, out)

    # ---- backward_data -------------------------------------------------------------------------------------
    def backward_data(self, dy, w, p, out, prepared=None):
        op = "backward_data"
        t, chunk = self.plan(p, op), self.batch_chunk(p, op)
        kernel = kernel_spectrum(w, p, t, self.workspace, op) if prepared is None else prepared  # conj(Wf)
        (Hp, Wp), (Ho, Wo), (sh, sw), (dh, dw) = p.padded_hw, p.out_hw, p.stride, p.dilation
        (top, _), (left, _) = p.padding
        rows = phase_map(p.H, top, Hp, Ho, sh, p.R, dh, t.mh)
        cols = phase_map(p.W, left, Wp, Wo, sw, p.S, dw, t.mw)
        for n in range(0, p.N, chunk):
            self.backward_data_chunk(dy[n:n + chunk], kernel, p.with_batch(chunk), t, rows, cols, out[n:n + chunk])

    def backward_data_chunk(self, dy, kernel, p, t, rows, cols, out):
        """dx of the images of dy (a chunk): dy's tiles shifted by the kernel extent, times conj(Wf), scattered."""
        spectrum = self.output_spectrum(dy, p, t, flipped=False)
        product = self.workspace.get("fft.dx_product", kernel.shape[:3] + spectrum.shape[-1:], spectrum.dtype)
        matmul(kernel, spectrum, out=product)
        scatter_phases(self.inverse(product, t), t.sh, t.sw, t.nth, t.ntw, rows, cols, out)

    # ---- backward_filter -----------------------------------------------------------------------------------
    def backward_filter(self, x, dy, p, out):
        op = "backward_filter"
        t, chunk = self.plan(p, op), self.batch_chunk(p, op)
        cplx = np.result_type(p.compute_dtype, np.complex64)
        summed = self.workspace.get("fft.dw_spectrum", (t.freqs, p.groups, p.Kg, p.Cg * t.sh * t.sw), cplx)
        for n in range(0, p.N, chunk):
            self.backward_filter_chunk(x[n:n + chunk], dy[n:n + chunk], p.with_batch(chunk), t, summed, n == 0)
        pick_lags(lags_of(summed, p, t, self.workspace), p, t, out)

    def backward_filter_chunk(self, x, dy, p, t, summed, first):
        """Add the chunk's sum over tiles of X(f) conj(DY(f)) (flipped dy tiles) to ``summed`` (F, G, Kg, Csg)."""
        xs = self.input_spectrum(x, p, t)
        dys = self.output_spectrum(dy, p, t, flipped=True)
        if first:
            matmul(dys, xs.swapaxes(-1, -2), out=summed)
        else:
            product = self.workspace.get("fft.dw_product", summed.shape, summed.dtype)
            summed += matmul(dys, xs.swapaxes(-1, -2), out=product)

    # ---- the transforms every pass shares ------------------------------------------------------------------
    def input_spectrum(self, x, p, t):
        """(F, G, Csg, P): the spectra of x's padded polyphase tiles (Cs phase channels)."""
        (top, _), (left, _) = p.padding
        tiles = self.workspace.get("fft.tiles", (t.Th, t.Tw, p.C * t.sh * t.sw, p.N * t.nth * t.ntw),
                                   p.compute_dtype)
        gather_tiles(x, top, left, t.sh, t.sw, t.mh, t.mw, t.nth, t.ntw, tiles)
        return scipy.fft.rfftn(tiles, axes=(0, 1), workers=-1).reshape(t.freqs, p.groups, -1, tiles.shape[-1])

    def output_spectrum(self, dy, p, t, flipped):
        """(F, G, Kg, P): the spectra of dy's tiles, reversed (backward_filter) or shifted down by the kernel
        extent (backward_data)."""
        tiles = self.workspace.get("fft.dy_tiles", (t.Th, t.Tw, p.K, p.N * t.nth * t.ntw), p.compute_dtype)
        if flipped:
            gather_flipped_tiles(dy, t.mh, t.mw, t.nth, t.ntw, tiles)
        else:
            gather_tiles(dy, t.Rq - 1, t.Sq - 1, 1, 1, t.mh, t.mw, t.nth, t.ntw, tiles)
        return scipy.fft.rfftn(tiles, axes=(0, 1), workers=-1).reshape(t.freqs, p.groups, p.Kg, tiles.shape[-1])

    @staticmethod
    def inverse(spectrum, t):
        """(Th, Tw, channels, columns) real tiles of a (F, G, channels per group, columns) spectrum."""
        F, G, per_group, columns = spectrum.shape
        return scipy.fft.irfftn(spectrum.reshape(t.Th, -1, G * per_group, columns), s=(t.Th, t.Tw), axes=(0, 1),
                                workers=-1)

