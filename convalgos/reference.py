"""The float64 reference: obviously right, used only to check the fast code.

Pad explicitly, then for every kernel tap (r, s) take the strided view of the padded input that tap sees and
contract it with that tap's weights over the input channels of each group:

    y[n, k, i, j] = sum_{c, r, s} xpad[n, g*Cg + c, i*sh + r*dh, j*sw + s*dw] * w[k, c, r, s],  g = k // Kg
"""
from __future__ import annotations

import numpy as np

from .params import ConvParams


def forward(x, w, p: ConvParams) -> np.ndarray:
    """The convolution of x and w (no bias) in float64, as an (N, K, Ho, Wo) array."""
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    (t, b), (l, r) = p.padding
    xpad = np.pad(x, ((0, 0), (0, 0), (t, b), (l, r)))
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    y = np.zeros(p.out_shape, dtype=np.float64)
    for g in range(p.groups):
        xg = xpad[:, g * p.Cg:(g + 1) * p.Cg]
        wg = w[g * p.Kg:(g + 1) * p.Kg]
        for i in range(p.R):
            for j in range(p.S):
                tap = xg[:, :, i * dh: i * dh + sh * (Ho - 1) + 1: sh, j * dw: j * dw + sw * (Wo - 1) + 1: sw]
                y[:, g * p.Kg:(g + 1) * p.Kg] += np.einsum("nchw,kc->nkhw", tap, wg[:, :, i, j], optimize=True)
    return y


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv2d`` in float64 (always returns float64)."""
    p = ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = forward(x, weight, p)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return y


def normwise_error(y, ref) -> float:
    """max|y - ref| / max|ref|: the error measure every tolerance in this project is written in."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    if ref.size == 0:
        return 0.0
    scale = np.max(np.abs(ref))
    diff = np.max(np.abs(y - ref))
    return float(diff / scale) if scale > 0 else float(diff)
