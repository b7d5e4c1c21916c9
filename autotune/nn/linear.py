"""``Linear`` and ``Flatten``.

Linear: y = x W^T + b, so dx = dy W, dW = dy^T x, db = dy summed over the batch (three GEMM-shaped
products). Flatten's backward pass is the reshape back to the input's shape.
"""
from __future__ import annotations

import numpy as np

from convalgos.gemm import matmul

from . import gpu_layers
from .module import Module, he_normal


class Flatten(Module):
    """``torch.nn.Flatten()``: (N, ...) -> (N, prod(...))."""

    def forward(self, x):
        self.save_for_backward(x.shape)
        return x.reshape(x.shape[0], -1)

    def backward_from(self, saved, dy, input_grad):
        return dy.reshape(saved[0]) if input_grad else None


class Linear(Module):
    """``torch.nn.Linear``: y = x @ weight.T + bias; weight (out, in)."""

    param_names = ("weight", "bias")

    def __init__(self, in_features, out_features, bias=True, *, dtype="float32", rng=None):
        rng = np.random.default_rng(0) if rng is None else rng
        self.weight = he_normal(rng, (out_features, in_features), in_features, dtype)
        self.bias = np.zeros(out_features, dtype) if bias else None

    def forward(self, x):
        self.save_for_backward(x)
        self._count("cublas.gemm", *(("cupy.add",) if self.bias is not None else ()))
        y = matmul(x, self.weight.T.astype(x.dtype, copy=False))
        return y if self.bias is None else y + self.bias.astype(x.dtype, copy=False)

    def backward_from(self, saved, dy, input_grad):
        (x,) = saved
        self._count("cublas.gemm", *(("cupy.sum",) if self.bias is not None else ()),
                    *(("cublas.gemm",) if input_grad else ()))
        self.accumulate_grad("weight", matmul(dy.T, x.astype(dy.dtype, copy=False)))
        if self.bias is not None:
            self.accumulate_grad("bias", dy.sum(axis=0))
        return matmul(dy, self.weight.astype(dy.dtype, copy=False)) if input_grad else None

    def _count(self, *names) -> None:
        """On "cuda", count the array-module and cuBLAS calls a pass issues (``convalgos.cuda.count_ops``)."""
        if self.device == "cuda":
            for name in names:
                gpu_layers.record(name)

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}"
