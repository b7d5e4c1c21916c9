"""The kernel's spectrum for the FFT algorithms' forward and backward-data passes (the maths is in
``whole.py``): the flipped, dilated polyphase kernel, and its 2-D DFT pruned to its few nonzero taps, computed
as two real GEMMs instead of batched FFTs of mostly-zero tiles. Both twins run it: NumPy arrays on the CPU,
CuPy arrays on the GPU (the array module of ``w``; the small DFT matrices are made once on the host and copied
to the device once, ``on_device``: a copy per call would be a host-to-device transfer in every call, and one
a CUDA graph cannot replay, its host array being gone)."""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..arrays import array_module
from ..gemm import matmul
from ..params import ConvParams
from .plan import TilePlan


#: device copies of host constants, by the host array's id (the host array kept beside, so the id stays its own)
_DEVICE_COPIES: dict = {}


def on_device(host: np.ndarray, xp):
    """``host``, a constant made once (an ``lru_cache``'s result), as an array of ``xp``: itself for NumPy, a
    device copy made once for CuPy."""
    if xp is np:
        return host
    kept = _DEVICE_COPIES.get(id(host))
    if kept is None or kept[0] is not host:
        if len(_DEVICE_COPIES) >= 256:
            _DEVICE_COPIES.clear()
        kept = _DEVICE_COPIES[id(host)] = (host, xp.asarray(host))
    return kept[1]


def phase_kernel(w: np.ndarray, p: ConvParams, t: TilePlan) -> np.ndarray:
    """The flipped, dilated, polyphase kernel as (Rq, Sq, K, Cg*sh*sw), phase channel (c, ph, pw)."""
    xp, (dh, dw), (sh, sw) = array_module(w), p.dilation, (t.sh, t.sw)
    dilated = xp.zeros((p.K, p.Cg, t.Rq * sh, t.Sq * sw), w.dtype)
    dilated[:, :, :p.R * dh:dh, :p.S * dw:dw] = w
    phases = dilated.reshape(p.K, p.Cg, t.Rq, sh, t.Sq, sw).transpose(2, 4, 0, 1, 3, 5)
    return xp.ascontiguousarray(phases.reshape(t.Rq, t.Sq, p.K, p.Cg * sh * sw)[::-1, ::-1])


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


def kernel_spectrum(w: np.ndarray, p: ConvParams, t: TilePlan, workspace, op: str = "forward") -> np.ndarray:
    """(F, G, Kg, Csg) spectrum of the flipped phase kernel, as a pruned 2-D DFT by two real GEMMs; for
    backward_data its conjugate, laid out (F, G, Csg, Kg) (K and C swapped) for the transposed channel GEMM.

    The kernel is tiny (Rq x Sq taps) in a Th x Tw tile, so instead of batched FFTs of many short mostly-zero
    signals: (re; im) of the rfft along S is cos/sin (Fw x Sq) @ kernel, then the DFT along R is one real GEMM
    of the (2Th x 2Rq) matrix ``real_dft_along_rows`` with the stacked (re; im) rows.
    """
    xp, Fw, KCs, dt = array_module(w), t.Tw // 2 + 1, p.K * p.Cg * t.sh * t.sw, p.compute_dtype
    kernel = phase_kernel(w, p, t)
    if op == "backward_data":
        kernel = kernel.reshape(t.Rq, t.Sq, p.groups, p.Kg, -1).swapaxes(3, 4)
    kernel = kernel.reshape(t.Rq, t.Sq, KCs)          # a copy when transposed
    cos, sin = (on_device(m, xp) for m in dft_matrices(t.Tw, t.Sq, Fw, dt))
    rows = workspace.get("fft.kernel_rows", (2, t.Rq, Fw, KCs), dt, xp=xp)
    matmul(cos, kernel, out=rows[0])
    xp.negative(matmul(sin, kernel, out=rows[1]), out=rows[1])
    planar = workspace.get("fft.kernel_planar", (2 * t.Th, Fw * KCs), dt, xp=xp)
    matmul(on_device(real_dft_along_rows(t.Th, t.Rq, dt), xp), rows.reshape(2 * t.Rq, Fw * KCs), out=planar)
    spectrum = workspace.get("fft.kernel", (t.freqs, KCs), np.result_type(dt, np.complex64), xp=xp)
    spectrum.real = planar[:t.Th].reshape(t.freqs, KCs)
    spectrum.imag = planar[t.Th:].reshape(t.freqs, KCs)
    if op == "backward_data":
        xp.negative(spectrum.imag, out=spectrum.imag)
        return spectrum.reshape(t.freqs, p.groups, -1, p.Kg)
    return spectrum.reshape(t.freqs, p.groups, p.Kg, -1)
