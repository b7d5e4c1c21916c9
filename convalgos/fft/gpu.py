"""GPU FFT convolution, all three passes: the CPU twin's plans and maths (``whole.py``), with cuFFT and cuBLAS
through CuPy and the tile gathers and scatters as Numba-CUDA kernels (``gpu_kernels.py``).

Every pass runs on the polyphase ``TilePlan`` of ``plan.py``, shared with the CPU: a stride (sh, sw) splits the
input into sh*sw phase images (Cs = C*sh*sw phase channels) convolved at stride 1 with Rq x Sq phase kernels, so
only the outputs that are kept get computed; ``fft`` takes one tile per image (fast length >= Ho + Rq - 1),
``fft_tiled`` (``gpu_tiled.py``) the overlap-save tiles of least FLOPs. Per batch chunk, with the tiles laid
out (Th, Tw, channels, P), P = N * tiles, so that ``xp.fft.rfftn`` over the two leading axes (one cuFFT plan
with the batch along the trailing axes) gives the GEMM layout (F, G, channels per group, P) directly:

    forward          gather x's tiles; Y = W X per bin (F, G, Kg, Csg) @ (F, G, Csg, P); irfftn; scatter into y
    backward_data    gather dy's tiles shifted down by Rq - 1, Sq - 1; DX = conj(W) DY per bin
                     (F, G, Csg, Kg) @ (F, G, Kg, P); irfftn; scatter the phase images into dx (zeros where no
                     output reads)
    backward_filter  gather x's tiles and dy's tiles reversed; S += DY X^T per bin (F, G, Kg, P) @ (F, G, P, Csg),
                     summed over chunks; the inverse DFT at the Rq x Sq lags only (two complex GEMMs); pick taps

The kernel spectrum (forward, backward_data) is the CPU's pruned 2-D DFT by real GEMMs and the lags the CPU's
pruned inverse (``spectra.py``, ``backward.py``, which take either array module).

cuFFT plans are the algorithm's own (``transform``: one per kind, shape and dtype, made by
``cupyx.scipy.fft.get_fft_plan`` at the first call and kept until ``release``), not CuPy's plan cache's: that
cache holds 16 plans, and a layer's plan dropped from it would free the work area a captured CUDA graph still
uses. Constants (DFT matrices, backward_data's index maps) go to the device once (``spectra.on_device``).
Every cuFFT and cuBLAS call is counted (``gpu_ops.record``).

FLOPs, workspace and chunks: ``plan.plan_flops``; ``plan.plan_workspace_bytes(..., device="cuda")``, the CPU's
arrays plus the two copies CuPy makes (the input of each complex-to-real FFT, which cuFFT overwrites; the
transposed operand of backward_filter's GEMM), not counting cuFFT's plan work area (CuPy's plan cache keeps it);
chunks of the batch fit min(CHUNK_WORKSPACE, the GPU's workspace cap). Constraints: ``shared.plan_constraints``,
the CPU's. Deterministic: no atomics; each element is written by one thread, and the same cuFFT plans and cuBLAS
GEMMs run in the same order on every call.

Why polyphase rather than the dense stride-1 result subsampled (this module's former plan): at stride 1 the two
are the same transforms; at stride s the dense plan transforms s^2 times more output pixels, with a kernel of the
full dilated extent. Forward at batch 32, GFLOP / MiB of workspace (whole batch; each plan's own formulas):
ResNet's 7x7 s2 conv1 2.8 / 471 against 6.8 / 1548 (``fft``), AlexNet's 11x11 s4 conv1 2.0 / 219 against
6.8 / 1548, 64->128 3x3 s2 56x56 4.6 / 351 against 5.4 / 604; the loss is a 1x1 s2 layer (three of its four
phase kernels are zero): 4.4 / 346 against 4.7 / 527 whole, 5.0 / 392 against 4.4 / 264 tiled, where direct
needs 0.4 GFLOP. And the twins' constraints, FLOPs and tile choices become one definition.
"""
from __future__ import annotations

import numpy as np

from .. import gpu_ops
from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..memory import workspace_cap
from ..params import ConvParams
from .backward import lags_of, phase_map, pick_lags
from .gpu_kernels import gather_flipped_tiles_kernel, gather_tiles_kernel, scatter_phases_kernel, scatter_tiles_kernel
from .plan import CHUNK_WORKSPACE, TilePlan, batch_chunk, plan_flops, plan_workspace_bytes, whole_image_plan
from .shared import TOLERANCE, plan_constraints
from .spectra import kernel_spectrum, on_device

#: the most cuFFT plans one algorithm keeps (a model's layers and passes; the oldest dropped past it)
PLANS = 64


class GPUFFT(GPUAlgorithm):
    """Whole-image FFT convolution on the GPU, all three passes (see the module docstring)."""

    name = "fft"
    deterministic = True
    tolerance = TOLERANCE

    def __init__(self):
        super().__init__()
        self._plans = {}

    def release(self) -> None:
        super().release()
        self._plans.clear()

    def plan(self, p: ConvParams, op: str = "forward") -> TilePlan | None:
        return whole_image_plan(p, op)

    def batch_chunk(self, p: ConvParams, op: str = "forward") -> int:
        """Images per chunk: the largest divisor of N whose workspace fits CHUNK_WORKSPACE and the GPU's cap."""
        return batch_chunk(p, self.plan(p, op), op, min(CHUNK_WORKSPACE, workspace_cap(self.backend)), "cuda")

    def constraints(self, p: ConvParams, op: str = "forward"):
        return plan_constraints(self.name, p, self.plan(p, op), op, workspace_cap(self.backend), "cuda")

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        t = self.plan(p, op)
        if t is None:
            return 0
        chunk = self.batch_chunk(p, op)
        return plan_workspace_bytes(p.with_batch(chunk), t, op, max(p.N // chunk, 1), "cuda")

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        t = self.plan(p, op)
        return plan_flops(p, t, op, max(p.N // self.batch_chunk(p, op), 1)) if t else 0

    # ---- the passes ----------------------------------------------------------------------------------------
    def forward(self, x, w, p: ConvParams, out) -> None:
        t, chunk = self.plan(p), self.batch_chunk(p)
        kernel = kernel_spectrum(w, p, t, self.workspace)                                   # (F, G, Kg, Csg)
        for n in range(0, p.N, chunk):
            xs, q = x[n:n + chunk], p.with_batch(chunk)
            spectrum = self.input_spectrum(xs, q, t)
            product = self.buffer(xs, "fft.product", (t.freqs, q.groups, q.Kg, spectrum.shape[-1]),
                                  spectrum.dtype)
            gpu_ops.record("cublas.gemm")
            array_module(x).matmul(kernel, spectrum, out=product)
            ys = out[n:n + chunk]
            launch(scatter_tiles_kernel(), *launch_1d(ys.size))(self.inverse(product, t), t.Rq - 1, t.Sq - 1,
                                                                t.mh, t.mw, t.nth, t.ntw, ys)

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        op, xp = "backward_data", array_module(dy)
        t, chunk = self.plan(p, op), self.batch_chunk(p, op)
        kernel = kernel_spectrum(w, p, t, self.workspace, op)                   # conj(Wf), (F, G, Csg, Kg)
        (Hp, Wp), (Ho, Wo), (sh, sw), (dh, dw) = p.padded_hw, p.out_hw, p.stride, p.dilation
        (top, _), (left, _) = p.padding
        rows = on_device(phase_map(p.H, top, Hp, Ho, sh, p.R, dh, t.mh), xp)
        cols = on_device(phase_map(p.W, left, Wp, Wo, sw, p.S, dw, t.mw), xp)
        scatter = scatter_phases_kernel(p.compute_dtype)
        for n in range(0, p.N, chunk):
            dys, q, dxs = dy[n:n + chunk], p.with_batch(chunk), out[n:n + chunk]
            spectrum = self.output_spectrum(dys, q, t, flipped=False)
            product = self.buffer(dys, "fft.dx_product", kernel.shape[:3] + spectrum.shape[-1:], spectrum.dtype)
            gpu_ops.record("cublas.gemm")
            xp.matmul(kernel, spectrum, out=product)
            launch(scatter, *launch_1d(dxs.size))(self.inverse(product, t), sh, sw, t.nth, t.ntw, rows, cols, dxs)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        op, xp = "backward_filter", array_module(x)
        t, chunk = self.plan(p, op), self.batch_chunk(p, op)
        cplx = np.result_type(p.compute_dtype, np.complex64)
        summed = self.buffer(x, "fft.dw_spectrum", (t.freqs, p.groups, p.Kg, p.Cg * t.sh * t.sw), cplx)
        for n in range(0, p.N, chunk):
            q = p.with_batch(chunk)
            xs = self.input_spectrum(x[n:n + chunk], q, t)
            dys = self.output_spectrum(dy[n:n + chunk], q, t, flipped=True)
            gpu_ops.record("cublas.gemm")
            if n == 0:
                xp.matmul(dys, xs.swapaxes(-1, -2), out=summed)
            else:
                gpu_ops.record("cupy.add")
                summed += xp.matmul(dys, xs.swapaxes(-1, -2),
                                    out=self.buffer(x, "fft.dw_product", summed.shape, summed.dtype))
        pick_lags(lags_of(summed, p, t, self.workspace), p, t, out)

    # ---- the transforms every pass shares ------------------------------------------------------------------
    def input_spectrum(self, x, p: ConvParams, t: TilePlan):
        """(F, G, Csg, P): the spectra of x's padded polyphase tiles (Cs phase channels)."""
        (top, _), (left, _) = p.padding
        tiles = self.buffer(x, "fft.tiles", (t.Th, t.Tw, p.C * t.sh * t.sw, p.N * t.nth * t.ntw))
        launch(gather_tiles_kernel(p.compute_dtype), *launch_1d(tiles.size))(
            x, top, left, t.sh, t.sw, t.mh, t.mw, t.nth, t.ntw, tiles)
        return self.transform(tiles).reshape(t.freqs, p.groups, -1, tiles.shape[-1])

    def output_spectrum(self, dy, p: ConvParams, t: TilePlan, flipped: bool):
        """(F, G, Kg, P): the spectra of dy's tiles, reversed (backward_filter) or shifted down by the kernel
        extent (backward_data)."""
        tiles = self.buffer(dy, "fft.dy_tiles", (t.Th, t.Tw, p.K, p.N * t.nth * t.ntw))
        if flipped:
            launch(gather_flipped_tiles_kernel(p.compute_dtype), *launch_1d(tiles.size))(
                dy, t.mh, t.mw, t.nth, t.ntw, tiles)
        else:
            launch(gather_tiles_kernel(p.compute_dtype), *launch_1d(tiles.size))(
                dy, t.Rq - 1, t.Sq - 1, 1, 1, t.mh, t.mw, t.nth, t.ntw, tiles)
        return self.transform(tiles).reshape(t.freqs, p.groups, p.Kg, tiles.shape[-1])

    def inverse(self, spectrum, t: TilePlan):
        """(Th, Tw, channels, columns) real tiles of a (F, G, channels per group, columns) spectrum."""
        F, G, per_group, columns = spectrum.shape
        return self.transform(spectrum.reshape(t.Th, -1, G * per_group, columns), (t.Th, t.Tw))

    def transform(self, a, inverse_shape=None):
        """The real 2-D FFT over the two leading axes of ``a`` (its inverse to ``inverse_shape`` when given),
        on a cuFFT plan this algorithm keeps (module docstring; NumPy's FFT under the simulator)."""
        kind = "cufft.rfft2" if inverse_shape is None else "cufft.irfft2"
        gpu_ops.record(kind)
        if array_module(a) is np:
            return (np.fft.rfftn(a, axes=(0, 1)) if inverse_shape is None
                    else np.fft.irfftn(a, s=inverse_shape, axes=(0, 1)))
        import cupyx.scipy.fft as cufft
        key = (kind, a.shape, a.strides, a.dtype.char, inverse_shape)
        plan = self._plans.get(key)
        if plan is None:
            if len(self._plans) >= PLANS:
                self._plans.pop(next(iter(self._plans)))
            plan = self._plans[key] = cufft.get_fft_plan(a, shape=inverse_shape, axes=(0, 1),
                                                         value_type="R2C" if inverse_shape is None else "C2R")
        if inverse_shape is None:
            return cufft.rfftn(a, axes=(0, 1), plan=plan)
        return cufft.irfftn(a, s=inverse_shape, axes=(0, 1), plan=plan)
