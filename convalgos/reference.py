"""The float64 reference for all three passes: obviously right, used only to check the fast code.

Pad explicitly, then for every kernel tap (r, s) take the strided view of the padded input that tap sees and
contract it with that tap's weights over the input channels of each group:

    y[n, k, i, j] = sum_{c, r, s} xpad[n, g*Cg + c, i*sh + r*dh, j*sw + s*dw] * w[k, c, r, s],  g = k // Kg

The two backward passes are the same sum read the other way round (the chain rule of that one sum):

    dxpad[n, g*Cg + c, i*sh + r*dh, j*sw + s*dw] += sum_k dy[n, k, i, j] * w[k, c, r, s]   then crop the padding
    dw[k, c, r, s] = sum_{n, i, j} dy[n, k, i, j] * xpad[n, g*Cg + c, i*sh + r*dh, j*sw + s*dw]

The taps of one kernel row go into one product (``_row``: their S views stacked along the channel axis, the
row's weights as a Kg x (Cg*S) matrix), so a layer costs R products per group, not R*S: the tuner checks every
candidate against this, and an 11x11 kernel's 121 products of a few channels each cost 2.6 ms of Python and
BLAS calls, 11 of them ~0.3 ms (S times the memory of one tap's view). Input rows or columns that no output
reads (cut off by the stride) get a zero gradient, as in torch. The products go through ``gemm.matmul``
(convalgos' BLAS), so the tuner's check, which runs this, wakes none of numpy's BLAS threads in a user's
process.
"""
from __future__ import annotations

import numpy as np

from .gemm import matmul
from .params import ConvParams


def _pad(x, p: ConvParams) -> np.ndarray:
    (t, b), (l, r) = p.padding
    return np.pad(np.asarray(x, dtype=np.float64), ((0, 0), (0, 0), (t, b), (l, r)))


def _rows(p: ConvParams):
    """(group's output-channel slice, input-channel slice, r, the S (rows, cols) slices of the padded plane
    that the taps of kernel row r read for every output) for every group and kernel row."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    for g in range(p.groups):
        ks, cs = slice(g * p.Kg, (g + 1) * p.Kg), slice(g * p.Cg, (g + 1) * p.Cg)
        for r in range(p.R):
            rows = slice(r * dh, r * dh + sh * (Ho - 1) + 1, sh)
            yield ks, cs, r, [(rows, slice(s * dw, s * dw + sw * (Wo - 1) + 1, sw)) for s in range(p.S)]


def _row(xpad, cs, views, p: ConvParams) -> np.ndarray:
    """The S taps' views of kernel row r stacked as (N, Cg*S, Ho*Wo), s the fastest along the second axis."""
    Ho, Wo = p.out_hw
    return np.stack([xpad[:, cs, rows, cols] for rows, cols in views], axis=2).reshape(p.N, p.Cg * p.S, Ho * Wo)


def forward(x, w, p: ConvParams) -> np.ndarray:
    """The convolution of x and w (no bias) in float64, as an (N, K, Ho, Wo) array."""
    xpad, w = _pad(x, p), np.asarray(w, dtype=np.float64)
    y = np.zeros(p.out_shape, dtype=np.float64)
    for ks, cs, r, views in _rows(p):
        w_row = w[ks, :, r, :].reshape(p.Kg, p.Cg * p.S)
        y[:, ks] += matmul(w_row, _row(xpad, cs, views, p)).reshape(p.N, p.Kg, *p.out_hw)
    return y


def backward_data(dy, w, p: ConvParams) -> np.ndarray:
    """The gradient with respect to x of sum(y * dy), in float64, as an (N, C, H, W) array."""
    Ho, Wo = p.out_hw
    dy, w = np.asarray(dy, dtype=np.float64), np.asarray(w, dtype=np.float64)
    (t, _), (l, _) = p.padding
    dxpad = np.zeros((p.N, p.C) + p.padded_hw, dtype=np.float64)
    for ks, cs, r, views in _rows(p):
        w_row = w[ks, :, r, :].reshape(p.Kg, p.Cg * p.S)
        taps = matmul(w_row.T, dy[:, ks].reshape(p.N, p.Kg, Ho * Wo)).reshape(p.N, p.Cg, p.S, Ho, Wo)
        for s, (rows, cols) in enumerate(views):
            dxpad[:, cs, rows, cols] += taps[:, :, s]
    return dxpad[:, :, t:t + p.H, l:l + p.W].copy()


def backward_filter(x, dy, p: ConvParams) -> np.ndarray:
    """The gradient with respect to w of sum(y * dy), in float64, as a (K, C/groups, R, S) array."""
    Ho, Wo = p.out_hw
    xpad, dy = _pad(x, p), np.asarray(dy, dtype=np.float64)
    dw = np.zeros(p.weight_shape, dtype=np.float64)
    for ks, cs, r, views in _rows(p):
        dy_group = dy[:, ks].reshape(p.N, p.Kg, Ho * Wo)
        x_row = _row(xpad, cs, views, p)
        dw[ks, :, r, :] = matmul(dy_group, x_row.transpose(0, 2, 1)).sum(axis=0).reshape(p.Kg, p.Cg, p.S)
    return dw


#: pass name -> the reference of that pass, called with (a, b, p) as ``convalgos.run`` is.
PASS = {"forward": forward, "backward_data": backward_data, "backward_filter": backward_filter}


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> np.ndarray:
    """``torch.nn.functional.conv2d`` in float64 (always returns float64)."""
    p = ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    y = forward(x, weight, p)
    if bias is not None:
        y += np.asarray(bias, dtype=np.float64)[None, :, None, None]
    return y


def normwise_error(y, ref) -> float:
    """max|y - ref| / max|ref|: the error measure every tolerance in this project is written in.

    NaN and Inf entries are judged by where they are: when y holds NaN, +Inf and -Inf exactly where ref does,
    the error is that of the finite entries; any other difference at a non-finite entry is an infinite error
    (never NaN, which would compare False with every tolerance and say nothing)."""
    y = np.asarray(y, dtype=np.float64)
    ref = np.asarray(ref, dtype=np.float64)
    finite = np.isfinite(ref)
    if not (finite.all() and np.isfinite(y).all()):
        if not (np.isfinite(y[finite]).all() and np.array_equal(y[~finite], ref[~finite], equal_nan=True)):
            return float("inf")
        y, ref = y[finite], ref[finite]
    if ref.size == 0:
        return 0.0
    scale = np.max(np.abs(ref))
    diff = np.max(np.abs(y - ref))
    return float(diff / scale) if scale > 0 else float(diff)
