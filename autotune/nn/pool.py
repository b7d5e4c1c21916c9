"""Pooling: ``MaxPool2d``, ``AvgPool2d`` and ``AdaptiveAvgPool2d``, forward and backward, never a Python loop
over pixels.

Max pooling is a Numba kernel (``kernels.py``) that keeps, for every output, the index of its window's max
(the first in scan order, as in torch); its backward pass adds each dy at that index.

Average pooling works tap by tap: for each kernel tap (i, j), the strided view of the padded input that tap
sees in every window is one array operation, so the Python loop runs over the kh*kw taps only. Its backward
pass adds dy / divisor back into that same view of a zero padded gradient, then crops the padding.

Adaptive average pooling is linear and separable: y = P_h x P_w^T, with P_h[i, h] = 1/len(bin i) for the
rows of bin i (likewise P_w), so its backward pass is dx = P_h^T dy P_w: two GEMMs each way.

On the GPU (``device.py``) each of the three is one Numba-CUDA launch each way (``gpu_pool_kernels.py``, the
same rules: max pooling's first-in-scan-order max and NaN, the two divisors, adaptive bins computed from
their indices on the device, so no bin matrix is built on the host or copied); every backward pass there is
a gather, one thread per input element.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import array_module
from convalgos.gemm import matmul

from . import gpu_layers, kernels
from .module import Module, pair


def _pool_out(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size; in ceil mode the last window must start inside the input or left pad."""
    span = size + 2 * p - k
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class _Pool2d(Module):
    """Shared window arithmetic: the output size and the padding (plus the ceil-mode overhang)."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        self.kernel_size = pair(kernel_size)
        self.stride = pair(self.kernel_size if stride is None else stride)
        self.padding = pair(padding)
        self.ceil_mode = ceil_mode
        for k, p in zip(self.kernel_size, self.padding):
            if p > k // 2:
                raise ValueError(f"padding should be at most half the kernel size, got padding={padding}, "
                                 f"kernel_size={kernel_size}")

    def _geometry(self, H, W):
        """Output size and the (before, after) padding per spatial axis, overhang included."""
        out, pads = [], []
        for size, k, s, p in zip((H, W), self.kernel_size, self.stride, self.padding):
            o = _pool_out(size, k, s, p, self.ceil_mode)
            if o < 1:
                raise ValueError(f"{type(self).__name__}: output size below 1 for input {H}x{W}")
            out.append(o)
            pads.append((p, max(p, (o - 1) * s + k - size - p)))
        return out, pads

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
                + (", ceil_mode=True" if self.ceil_mode else ""))


class MaxPool2d(_Pool2d):
    """``torch.nn.MaxPool2d`` (dilation 1): the max over each window, padding counting as -inf. A Numba
    kernel finds each window's max and where it is (``kernels.max_pool``); backward adds dy there."""

    def forward(self, x):
        N, C, H, W = x.shape
        (Ho, Wo), _ = self._geometry(H, W)
        if self.gpu_path(x):
            y, argmax = gpu_layers.max_pool(x, self.kernel_size, self.stride, self.padding, (Ho, Wo))
            self.save_for_backward(x.shape, argmax)
            return y
        ct = np.promote_types(x.dtype, np.float32)            # float16 is compared in float32 (exact)
        y = np.empty((N * C, Ho, Wo), ct)
        argmax = np.empty((N * C, Ho, Wo), np.int32)
        kernels.max_pool(np.ascontiguousarray(x, dtype=ct).reshape(N * C, H, W), *self.kernel_size,
                         *self.stride, *self.padding, y, argmax)
        self.save_for_backward(x.shape, argmax)
        return y.reshape(N, C, Ho, Wo).astype(x.dtype, copy=False)

    def backward_from(self, saved, dy, input_grad):
        if not input_grad:
            return None
        if self.gpu_path(dy):
            return gpu_layers.max_pool_backward(*saved, dy, self.kernel_size, self.stride, self.padding)
        (N, C, H, W), argmax = saved
        ct = np.promote_types(dy.dtype, np.float32)
        dx = np.empty((N * C, H * W), ct)
        kernels.max_pool_grad(np.ascontiguousarray(dy, dtype=ct).reshape(N * C, -1), argmax.reshape(N * C, -1),
                              dx)
        return dx.reshape(N, C, H, W).astype(dy.dtype, copy=False)


class AvgPool2d(_Pool2d):
    """``torch.nn.AvgPool2d``: the mean over each window.

    ``count_include_pad=True`` (PyTorch's default) divides by the part of the window inside the padded
    input; False divides by the part inside the unpadded input. Either divisor is the same window sum over a
    0/1 mask, so ceil mode's overhang (never counted) comes out right without special cases.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = count_include_pad

    def _taps(self, out):
        """(rows, cols) of the padded input that kernel tap (i, j) reads for every output, taps in scan order."""
        (sh, sw), (Ho, Wo), (kh, kw) = self.stride, out, self.kernel_size
        return [(slice(i, i + sh * (Ho - 1) + 1, sh), slice(j, j + sw * (Wo - 1) + 1, sw))
                for i in range(kh) for j in range(kw)]

    def _sum_windows(self, x, pads, out):
        """The sum over every pooling window of x zero-padded by ``pads``."""
        padded = array_module(x).pad(x, ((0, 0), (0, 0)) + tuple(pads))
        taps = self._taps(out)
        acc = padded[(...,) + taps[0]].copy()
        for tap in taps[1:]:
            acc += padded[(...,) + tap]
        return acc

    def _scatter_windows(self, share, x_shape, pads, out):
        """dx: ``share`` added into the padded view of every tap, then the padding cropped."""
        (t, b), (l, r) = pads
        N, C, H, W = x_shape
        grad = array_module(share).zeros((N, C, H + t + b, W + l + r), share.dtype)
        for tap in self._taps(out):
            grad[(...,) + tap] += share
        return grad[:, :, t:t + H, l:l + W].copy()

    def _divisor(self, H, W, pads, out):
        (ph, pw), counted = self.padding, np.ones((1, 1, H, W))
        if self.count_include_pad:
            counted = np.pad(counted, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=1)
            pads = [(0, a - p) for (_, a), p in zip(pads, (ph, pw))]
        return self._sum_windows(counted, pads, out)

    def forward(self, x):
        (H, W), dt = x.shape[2:], x.dtype
        out, pads = self._geometry(H, W)
        if self.gpu_path(x):
            self.save_for_backward(x.shape)
            return gpu_layers.avg_pool(x, self.kernel_size, self.stride, self.padding, self.count_include_pad, out)
        divisor = self._divisor(H, W, pads, out)
        self.save_for_backward(x.shape, pads, out, divisor)
        return (self._sum_windows(x.astype(np.float64), pads, out) / divisor).astype(dt)

    def backward_from(self, saved, dy, input_grad):
        if not input_grad:
            return None
        if self.gpu_path(dy):
            return gpu_layers.avg_pool_backward(saved[0], dy, self.kernel_size, self.stride, self.padding,
                                                self.count_include_pad)
        x_shape, pads, out, divisor = saved
        return self._scatter_windows((dy / divisor).astype(dy.dtype), x_shape, pads, out)


class AdaptiveAvgPool2d(Module):
    """``torch.nn.AdaptiveAvgPool2d``: output bin i averages rows floor(i*H/out) to ceil((i+1)*H/out) - 1
    (likewise columns), computed as P_h x P_w^T (see the module docstring)."""

    def __init__(self, output_size):
        self.output_size = pair(output_size)

    def forward(self, x):
        if self.gpu_path(x):
            self.save_for_backward(x.shape)
            return gpu_layers.adaptive_avg_pool(x, self.output_size)
        H, W = x.shape[2:]
        ph, pw = (_bin_matrix(size, out) for size, out in zip((H, W), self.output_size))
        self.save_for_backward(ph, pw)
        return _separable(x, ph, pw)

    def backward_from(self, saved, dy, input_grad):
        if not input_grad:
            return None
        if self.gpu_path(dy):
            return gpu_layers.adaptive_avg_pool_backward(saved[0], dy)
        ph, pw = saved
        return _separable(dy, ph.T, pw.T)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


def _bin_matrix(size: int, out: int) -> np.ndarray:
    """P (out, size): row i is 1/len over bin i = [floor(i*size/out), ceil((i+1)*size/out)), else 0."""
    i = np.arange(out)
    start, end = (i * size) // out, -((-(i + 1) * size) // out)
    cols = np.arange(size)
    inside = (cols >= start[:, None]) & (cols < end[:, None])
    return inside / (end - start)[:, None]


def _separable(a, ph, pw):
    """ph @ a @ pw.T over the last two axes of (N, C, h, w) ``a``, as two GEMMs; float16 computed in float32."""
    N, C, h, w = a.shape
    ct = np.promote_types(a.dtype, np.float32)
    cols = matmul(a.reshape(-1, w).astype(ct, copy=False), pw.T.astype(ct))                 # (N*C*h, ow)
    ow, oh = pw.shape[0], ph.shape[0]
    rows = matmul(ph.astype(ct), cols.reshape(N * C, h, ow).transpose(1, 0, 2).reshape(h, -1))  # (oh, N*C*ow)
    return array_module(a).ascontiguousarray(rows.reshape(oh, N, C, ow).transpose(1, 2, 0, 3), dtype=a.dtype)
