"""The index maps and pruned inverse DFT of the FFT algorithms' backward passes (the maths is in ``whole.py``;
their Numba kernels in ``kernels.py``).

- ``phase_map``: where each dx pixel sits among backward_data's phase-image tiles (for ``scatter_phases``);
- ``lags_of``: backward_filter's inverse DFT, evaluated only at the Rq x Sq lags (a pruned inverse by two
  complex GEMMs); ``pick_lags``: the R x S taps of each phase channel out of them.

Both twins run ``lags_of`` and ``pick_lags``: NumPy arrays on the CPU, CuPy arrays on the GPU (the array module
of the summed spectrum; the DFT matrices and index maps are made once on the host, and copied to the device
once: ``spectra.on_device``).
"""
from __future__ import annotations

from functools import lru_cache

import numpy as np

from ..arrays import array_module
from ..gemm import matmul
from ..params import ConvParams
from .plan import TilePlan
from .spectra import on_device


@lru_cache(maxsize=64)
def phase_map(size: int, pad: int, padded: int, outputs: int, stride: int, taps: int, dilation: int,
              per_tile: int) -> np.ndarray:
    """(3, size) ints: for each input row h (or column), the tile, position in the tile and phase of its phase
    pixel m = (h + pad) // stride, phase (h + pad) % stride; tile -1 where no output reads padded row h + pad
    (reads are i*stride + r*dilation for i < outputs, r < taps)."""
    read = np.zeros(padded, np.bool_)
    read[(np.arange(outputs)[:, None] * stride + np.arange(taps)[None, :] * dilation).ravel()] = True
    q = np.arange(size) + pad
    m = q // stride
    return np.stack([np.where(read[q], m // per_tile, -1), m % per_tile, q % stride])


@lru_cache(maxsize=64)
def lag_dft_matrices(t: TilePlan, dtype: str) -> tuple[np.ndarray, np.ndarray]:
    """The inverse 2-D real DFT at the lags only: rows (Rq x Th) and columns (Sq x Fw), complex, from float64.

    rows[a, fh] = exp(2 pi i fh (mh-1+a) / Th) / Th takes the full inverse along the Th rows of bins at the Rq
    lag rows; cols[b, fw] = c exp(2 pi i fw (mw-1+b) / Tw) / Tw with c = 1 at the bins that are their own
    mirror (0 and Tw/2) and 2 elsewhere folds in the half spectrum rfft dropped; the lag is the real part.
    The lags sit at offset (mh - 1, mw - 1), where the flipped dy tiles put lag 0.
    """
    fh, fw = np.arange(t.Th), np.arange(t.Tw // 2 + 1)
    rows = np.exp(2j * np.pi * np.outer(t.mh - 1 + np.arange(t.Rq), fh) / t.Th) / t.Th
    mirror = np.where((fw == 0) | (2 * fw == t.Tw), 1.0, 2.0)
    cols = mirror * np.exp(2j * np.pi * np.outer(t.mw - 1 + np.arange(t.Sq), fw) / t.Tw) / t.Tw
    cplx = np.result_type(dtype, np.complex64)
    return rows.astype(cplx), cols.astype(cplx)


def lags_of(summed: np.ndarray, p: ConvParams, t: TilePlan, workspace) -> np.ndarray:
    """(Rq, Sq, K, Csg) real lags of the (F, G, Kg, Csg) summed spectrum: two complex GEMMs, Rq x Th over the
    row bins, then Sq x Fw over the column bins of each lag row, instead of inverse FFTs of K*Csg whole planes
    for Rq*Sq values each."""
    xp = array_module(summed)
    rows, cols = (on_device(m, xp) for m in lag_dft_matrices(t, p.compute_dtype))
    Fw, KC = t.Tw // 2 + 1, p.K * p.Cg * t.sh * t.sw
    lag_rows = workspace.get("fft.lag_rows", (t.Rq, Fw, KC), summed.dtype, xp=xp)
    matmul(rows, summed.reshape(t.Th, Fw * KC), out=lag_rows.reshape(t.Rq, Fw * KC))
    lags = workspace.get("fft.lags", (t.Rq, t.Sq, KC), summed.dtype, xp=xp)
    matmul(cols, lag_rows, out=lags)
    return lags.real.reshape(t.Rq, t.Sq, p.K, -1)


def pick_lags(lags: np.ndarray, p: ConvParams, t: TilePlan, out: np.ndarray) -> None:
    """out[k, c, r, s] = lags[r*dh // sh, s*dw // sw, k, (c, r*dh % sh, s*dw % sw)]: tap (r, s) is the lag of
    its phase channel. One strided copy per tap: for a tap, the phase channels of every c are every (sh*sw)-th
    column of a lag, a view, so no index array (a fancy index over all K*Cg*R*S taps made numpy buffer each
    of its four broadcast index arrays, five times the gradient's size) is made; the same views serve CuPy
    arrays."""
    (dh, dw), (sh, sw) = p.dilation, (t.sh, t.sw)
    for r in range(p.R):
        for s in range(p.S):
            phase = (r * dh % sh) * sw + s * dw % sw
            out[:, :, r, s] = lags[r * dh // sh, s * dw // sw, :, phase::sh * sw]
