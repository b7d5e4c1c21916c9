"""Elementwise layers: ``ReLU``, ``Identity`` and ``Dropout``.

ReLU's gradient passes dy where the output is positive (torch's ``threshold_backward`` on the output).
Dropout in train mode zeroes each element with probability p and scales the rest by 1/(1 - p), so the
expected output is the input; its mask comes from the layer's own seeded generator, and its backward pass
applies the same mask and scale to dy. In eval mode it is the identity.

On the CPU ReLU runs Numba kernels (``kernels.relu``, ``kernels.relu_grad``); on the GPU (``device.py``) their
Numba-CUDA twins (``gpu_kernels.py``), one launch each way; where a BatchNorm comes first the containers fuse the
ReLU into it (``container.py``). Dropout's mask is drawn on the host by the same generator (so a seeded run
draws the same masks on either device) and copied over at every step: a host-to-device copy, which a captured
CUDA graph cannot hold (a device-side generator would be needed).
"""
from __future__ import annotations

import numpy as np

from . import gpu_layers, kernels
from .device import like
from .module import Module


class ReLU(Module):
    def forward(self, x):
        if self.gpu_path(x):
            y = gpu_layers.relu(x)
        elif x.dtype in (np.float32, np.float64):
            x = np.ascontiguousarray(x)
            y = np.empty_like(x)
            kernels.relu(x.reshape(-1), y.reshape(-1))
        else:
            y = np.maximum(x, 0)
        self.save_for_backward(y)
        return y

    def backward_from(self, saved, dy, input_grad):
        return relu_backward(saved[0], dy, self.gpu_path(dy)) if input_grad else None


def relu_backward(y, dy, gpu_path: bool = False):
    """The gradient through a ReLU whose output was ``y``: dy where y > 0, else 0 (one Numba pass; with
    ``gpu_path``, one launch)."""
    if gpu_path:
        return gpu_layers.relu_backward(y, dy)
    ct = np.promote_types(dy.dtype, np.float32)              # float16 in float32 (exact)
    y, dyc = (np.ascontiguousarray(a, dtype=ct) for a in (y, dy))
    dx = np.empty_like(dyc)
    kernels.relu_grad(y.reshape(-1), dyc.reshape(-1), dx.reshape(-1))
    return dx.astype(dy.dtype, copy=False)


class Identity(Module):
    def forward(self, x):
        self.save_for_backward()
        return x


class Dropout(Module):
    """``torch.nn.Dropout(p)``: in train mode a seeded Bernoulli mask (``seed`` starts the layer's own
    generator, so a run is reproducible; torch's masks differ); in eval mode the identity. The last mask is
    kept as ``mask`` (scale included), which is what a test needs to replay it elsewhere."""

    def __init__(self, p=0.5, *, seed=0):
        if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
            raise ValueError(f"dropout probability p must be in [0, 1], got {p!r}")
        self.p, self.rng, self.mask = p, np.random.default_rng(seed), None

    def forward(self, x):
        if not self.training:
            self.save_for_backward()
            return x
        keep = self.rng.random(x.shape) >= self.p
        scale = 0.0 if self.p == 1 else 1.0 / (1.0 - self.p)
        self.mask = like((keep * scale).astype(x.dtype), x)
        if self.gpu_path(x):                                  # the mask's upload and the product, counted
            gpu_layers.record("cupy.copy")
            gpu_layers.record("cupy.multiply")
        self.save_for_backward(self.mask)
        return x * self.mask

    def backward_from(self, saved, dy, input_grad):
        if not input_grad:
            return None
        if self.gpu_path(dy):
            gpu_layers.record("cupy.multiply")
        return dy * saved[0]

    def extra_repr(self) -> str:
        return f"p={self.p}"
