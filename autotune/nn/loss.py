"""``CrossEntropyLoss``: softmax cross-entropy over logits, mean over the batch (torch's default).

    loss = mean_n( logsumexp(z_n) - z_n[label_n] ),   dloss/dz_n = (softmax(z_n) - onehot(label_n)) / N

The log-sum-exp subtracts each row's maximum first, so large logits do not overflow. Logits on the GPU (CuPy)
are computed there (array-module code); the labels are checked on the host and copied to the logits' device.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import array_module, is_cupy_array
from convalgos.interop import from_arrays, to_arrays

from .device import like, to_host


class CrossEntropyLoss:
    """``loss_fn(logits, labels)`` returns the loss as a float; ``loss_fn.backward()`` returns dloss/dlogits
    (logits' dtype; a torch tensor when the logits were one). logits: (N, classes); labels: (N,) ints."""

    def __init__(self):
        self._saved = None

    def __call__(self, logits, labels) -> float:
        (logits, labels), torch_in = to_arrays(logits, labels)
        logits, labels = (logits if is_cupy_array(logits) else np.asarray(logits)), to_host(labels)
        if logits.ndim != 2 or logits.shape[0] == 0:
            raise ValueError(f"logits must be (N, classes) with N >= 1, got shape {logits.shape}")
        if labels.shape != logits.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be {logits.shape[0]} integers (one per row of logits), got "
                             f"{labels.dtype} of shape {labels.shape}")
        bad = (labels < 0) | (labels >= logits.shape[1])
        if bad.any():
            raise ValueError(f"labels must be class indices in [0, {logits.shape[1]}), got {labels[bad][0]}")
        xp, labels = array_module(logits), like(labels, logits)
        z = logits.astype(np.promote_types(logits.dtype, np.float32), copy=False)
        shifted = z - z.max(axis=1, keepdims=True)
        log_sum = xp.log(xp.exp(shifted).sum(axis=1))
        rows = xp.arange(len(labels))
        self._saved = (shifted, log_sum, labels, logits.dtype, torch_in)
        return float(xp.mean(log_sum - shifted[rows, labels]))

    def backward(self):
        """dloss/dlogits of the last call: (softmax - onehot(labels)) / N."""
        if self._saved is None:
            raise RuntimeError("CrossEntropyLoss.backward needs a loss computed first: loss_fn(logits, labels)")
        shifted, log_sum, labels, dtype, torch_in = self._saved
        xp = array_module(shifted)
        grad = xp.exp(shifted - log_sum[:, None])
        grad[xp.arange(len(labels)), labels] -= 1
        grad /= len(labels)
        return from_arrays(grad.astype(dtype, copy=False), torch_in)

    def __repr__(self) -> str:
        return "CrossEntropyLoss()"
