"""``BatchNorm2d``: per-channel normalisation, with torch's train and eval modes.

Train mode normalises with the batch's statistics over (N, H, W), n = N*H*W values per channel:

    mean = sum(x) / n,  var = sum((x - mean)^2) / n,  x_hat = (x - mean) / sqrt(var + eps),  y = x_hat*w + b

and updates the running statistics with torch's momentum m, the running variance from the UNBIASED batch
variance: running_mean = (1 - m)*running_mean + m*mean, running_var = (1 - m)*running_var + m*var*n/(n - 1).
Its backward pass (the mean and variance depend on x, so every x_hat depends on every x of its channel):

    db = sum(dy),  dw = sum(dy * x_hat),  dx = w / (n * sqrt(var + eps)) * (n*dy - db - x_hat*dw)

Eval mode is one fused per-channel scale and shift with the running statistics. Train mode runs as two Numba
kernels (``kernels.batch_norm``, ``kernels.batch_norm_grad``): the backward pass recomputes x_hat from the
saved input, mean and 1/sqrt(var + eps) rather than keeping it. The containers fuse what follows a BatchNorm
into it on either device (``forward(x, residual, relu)``): ResNet's residual sum and the ReLU after it, or a
ReLU alone, whose mask the backward pass then applies to dy. Like torch, the layer keeps its input (not a
copy) for the backward pass, so the input must not be changed in place in between (torch raises there; this
library keeps no version counters, and its own layers never write into their inputs).

On the GPU (``device.py``) the same formulas run as Numba-CUDA kernels (``gpu_norm_kernels.py``, called by
``gpu_layers.py``): two launches forward (the statistics with the running update, then the normalisation) and
two backward (the two sums, then dx), with the ReLU that follows (and ResNet's residual before it) fused in
where the containers see them. The sums are trees over a block's threads in float32 instead of the CPU
kernels' float64 vector lanes, so the two devices agree to rounding, not bit for bit.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import array_module

from . import gpu_layers, kernels
from .module import Module


class BatchNorm2d(Module):
    """``torch.nn.BatchNorm2d`` (affine, tracking running statistics); momentum must be a number."""

    param_names = ("weight", "bias")
    buffer_names = ("running_mean", "running_var")
    ignored_keys = ("num_batches_tracked",)

    def __init__(self, num_features, eps=1e-5, momentum=0.1, *, dtype="float32"):
        if isinstance(momentum, bool) or not isinstance(momentum, (int, float)) or not 0 <= momentum <= 1:
            raise ValueError(f"momentum must be a number in [0, 1] (None, the cumulative average, is not "
                             f"supported), got {momentum!r}")
        if not eps > 0:
            raise ValueError(f"eps must be positive, got {eps!r}")
        self.weight = np.ones(num_features, dtype)
        self.bias = np.zeros(num_features, dtype)
        self.running_mean = np.zeros(num_features, dtype)
        self.running_var = np.ones(num_features, dtype)
        self.eps, self.momentum = eps, momentum

    def forward(self, x, residual=None, relu=False):
        """The normalised ``x``, then ``residual`` added and a ReLU applied when ``relu``: the containers fuse
        what follows a BatchNorm into it (``container.py``), and its backward pass then applies the ReLU's mask
        (a ReLU after a residual is the caller's to differentiate: its gradient goes to the shortcut too)."""
        if self.gpu_path(x):
            return self._forward_gpu(x, residual, relu)
        if self.training:
            return self._train_forward(x, residual, relu)
        self.save_for_backward()
        xp = array_module(self.weight)
        scale = self.weight / xp.sqrt(self.running_var + self.eps)
        shift = self.bias - self.running_mean * scale
        dt = np.result_type(x.dtype, scale.dtype)
        if dt not in (np.float32, np.float64):
            y = x * scale.astype(dt)[:, None, None] + shift.astype(dt)[:, None, None]
            y = y if residual is None else y + residual
            return np.maximum(y, 0) if relu else y
        x = np.ascontiguousarray(x, dtype=dt)
        y = np.empty_like(x)
        planes = (x.shape[0], x.shape[1], -1)
        kernels.scale_shift(x.reshape(planes), scale.astype(dt), shift.astype(dt), y.reshape(planes))
        if residual is not None or relu:
            kernels.epilogue(y.reshape(planes), np.zeros(x.shape[1], dt), _planes(residual, y), bool(relu))
        return y

    def _train_forward(self, x, residual, relu):
        dt = np.result_type(x.dtype, self.weight.dtype)
        ct = np.promote_types(dt, np.float32)          # float16 is normalised in float32
        n = _values_per_channel(x)
        x = np.ascontiguousarray(x, dtype=ct)
        C = x.shape[1]
        y = np.empty_like(x)
        mean, var = np.empty(C, ct), np.empty(C, ct)
        kernels.batch_norm(x.reshape(x.shape[0], C, -1), self.weight.astype(ct), self.bias.astype(ct),
                           self.eps, y.reshape(x.shape[0], C, -1), mean, var, _planes(residual, y), bool(relu))
        self._update_running(mean, var, n)
        self.save_for_backward(x, mean, 1 / np.sqrt(var + self.eps), y if relu and residual is None else None)
        return y.astype(dt, copy=False)

    def _update_running(self, mean, var, n: int) -> None:
        m = self.momentum
        self.running_mean[...] = (1 - m) * self.running_mean + m * mean
        self.running_var[...] = (1 - m) * self.running_var + m * var * (n / (n - 1))

    def backward_from(self, saved, dy, input_grad):
        if self.gpu_path(dy):
            return gpu_layers.batch_norm_backward(self, *saved, dy, input_grad)
        x, mean, inv_std, mask = saved
        dt, ct, C = dy.dtype, x.dtype, x.shape[1]
        dy = np.ascontiguousarray(dy, dtype=ct)
        db, dw = np.empty(C, ct), np.empty(C, ct)
        dx = np.empty_like(x) if input_grad else np.empty((0,) + x.shape[1:], ct)
        P = x.size // (x.shape[0] * C)
        kernels.batch_norm_grad(x.reshape(-1, C, P), dy.reshape(-1, C, P), _planes(mask, x), mean, inv_std,
                                self.weight.astype(ct), db, dw, dx.reshape(dx.shape[0], C, P))
        self.accumulate_grad("bias", db)
        self.accumulate_grad("weight", dw)
        return dx.astype(dt, copy=False) if input_grad else None

    def _forward_gpu(self, x, residual, relu):
        if self.training:
            _values_per_channel(x)
        return gpu_layers.batch_norm_forward(self, x, residual, relu)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, momentum={self.momentum}"


def _planes(a, like) -> np.ndarray:
    """``a`` as (N, C, P) planes in ``like``'s dtype, or an empty (0, C, P) array (the kernels' "none") for None."""
    N, C = like.shape[:2]
    if a is None:
        return np.empty((0, C, like.size // (N * C) if N else 0), like.dtype)
    return np.ascontiguousarray(a, dtype=like.dtype).reshape(N, C, -1)


def _values_per_channel(x) -> int:
    """n = N*H*W, checked: train mode's statistics need more than one value per channel."""
    n = x.size // x.shape[1]
    if n < 2:
        raise ValueError(f"BatchNorm2d in train mode needs more than 1 value per channel, got input shape "
                         f"{x.shape}")
    return n
