"""``BatchNorm2d``: per-channel normalisation, with torch's train and eval modes.

Train mode normalises with the batch's statistics over (N, H, W), n = N*H*W values per channel:

    mean = sum(x) / n,  var = sum((x - mean)^2) / n,  x_hat = (x - mean) / sqrt(var + eps),  y = x_hat*w + b

and updates the running statistics with torch's momentum m, the running variance from the UNBIASED batch
variance: running_mean = (1 - m)*running_mean + m*mean, running_var = (1 - m)*running_var + m*var*n/(n - 1).
Its backward pass (the mean and variance depend on x, so every x_hat depends on every x of its channel):

    db = sum(dy),  dw = sum(dy * x_hat),  dx = w / (n * sqrt(var + eps)) * (n*dy - db - x_hat*dw)

Eval mode is one fused per-channel scale and shift with the running statistics.
"""
from __future__ import annotations

import numpy as np

from .module import Module, channel_sum


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

    def forward(self, x):
        if self.training:
            return self._train_forward(x)
        self.save_for_backward()
        scale = self.weight / np.sqrt(self.running_var + self.eps)
        shift = self.bias - self.running_mean * scale
        dt = np.result_type(x, scale)
        return x * scale.astype(dt)[:, None, None] + shift.astype(dt)[:, None, None]

    def _train_forward(self, x):
        dt = np.result_type(x, self.weight)
        ct = np.promote_types(dt, np.float32)          # float16 is normalised in float32
        n = x.size // x.shape[1]
        if n < 2:
            raise ValueError(f"BatchNorm2d in train mode needs more than 1 value per channel, got input shape "
                             f"{x.shape}")
        x = x.astype(ct, copy=False)
        mean = channel_sum(x) / n
        centred = x - mean[:, None, None]
        var = channel_sum(centred * centred) / n
        inv_std = 1 / np.sqrt(var + self.eps)
        x_hat = centred
        x_hat *= inv_std[:, None, None]
        m = self.momentum
        self.running_mean[...] = (1 - m) * self.running_mean + m * mean
        self.running_var[...] = (1 - m) * self.running_var + m * var * (n / (n - 1))
        self.save_for_backward(x_hat, inv_std)
        y = x_hat * self.weight.astype(ct)[:, None, None]
        y += self.bias.astype(ct)[:, None, None]
        return y.astype(dt, copy=False)

    def backward_from(self, saved, dy, input_grad):
        x_hat, inv_std = saved
        n, dt = x_hat.size // x_hat.shape[1], dy.dtype
        dy = dy.astype(x_hat.dtype, copy=False)
        db = channel_sum(dy)
        dw = channel_sum(dy * x_hat)
        self.accumulate_grad("bias", db)
        self.accumulate_grad("weight", dw)
        if not input_grad:
            return None
        dx = x_hat * (-dw / n)[:, None, None]
        dx += dy
        dx -= (db / n)[:, None, None]
        dx *= (self.weight.astype(x_hat.dtype) * inv_std)[:, None, None]
        return dx.astype(dt, copy=False)

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}, momentum={self.momentum}"
