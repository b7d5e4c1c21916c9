"""``CrossEntropyLoss``: softmax cross-entropy over logits, mean over the batch (torch's default).

    loss = mean_n( logsumexp(z_n) - z_n[label_n] ),   dloss/dz_n = (softmax(z_n) - onehot(label_n)) / N

The log-sum-exp subtracts each row's maximum first, so large logits do not overflow. On the CPU it is NumPy
code, the labels checked on the host, and the loss a float. On the GPU (CuPy logits, or a loss moved with
``.to("cuda")``, which under the simulator takes the GPU's path on NumPy arrays) it is one launch of
``gpu_kernels.cross_entropy_kernel``, which also writes the gradient, so ``backward()`` issues nothing. There
nothing waits for the device: the labels are checked by the kernel (NumPy labels are copied over first; pass
device labels to avoid that copy), and the loss stays on the device as a ``DeviceLoss`` until it is read.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import is_cupy_array
from convalgos.interop import from_arrays, to_arrays

from . import gpu_layers
from ..graph import refuse_in_capture
from .device import check_device, like, to_host


class DeviceLoss:
    """A loss on the device, read when asked: ``float(loss)``, ``loss.item()``, ``f"{loss:.3f}"``, arithmetic
    and comparisons with numbers (each read is one copy to the host and a synchronisation). A label outside
    [0, classes) raises ``ValueError`` there. The value lives in the loss function's kept buffer: its next call
    overwrites it (as a CUDA graph's static output), so read it, or keep ``float(loss)``, before then."""

    __hash__ = None

    def __init__(self, value, bad, classes: int):
        self._value, self._bad, self._classes = value, bad, classes

    def item(self) -> float:
        refuse_in_capture("host", "the loss read on the host")   # a device value here, in the simulator too
        bad = to_host(self._bad)
        if bad[0]:
            raise ValueError(f"labels must be class indices in [0, {self._classes}), got {bad[1]}")
        return float(to_host(self._value)[0])

    __float__ = item

    def __array__(self, dtype=None, copy=None):
        return np.asarray(self.item(), dtype)

    def __format__(self, spec: str) -> str:
        return format(self.item(), spec)

    def __repr__(self) -> str:
        return f"DeviceLoss({self.item()!r})"


def _read_first(op: str):
    def method(self, other):
        return getattr(self.item(), op)(other)
    method.__name__ = op
    return method


for _op in ("add", "radd", "sub", "rsub", "mul", "rmul", "truediv", "rtruediv", "eq", "ne", "lt", "le", "gt",
            "ge"):
    setattr(DeviceLoss, f"__{_op}__", _read_first(f"__{_op}__"))


class CrossEntropyLoss:
    """``loss_fn(logits, labels)`` returns the loss: a float on the CPU, a ``DeviceLoss`` on the GPU;
    ``loss_fn.backward()`` returns dloss/dlogits (logits' dtype; a torch tensor when the logits were one).
    logits: (N, classes); labels: (N,) ints. ``to("cuda")`` sends NumPy logits down the GPU's path too (the
    simulator's stand-in for CuPy arrays)."""

    def __init__(self):
        self._saved, self.device = None, "cpu"

    def to(self, device) -> "CrossEntropyLoss":
        self.device = check_device(device)
        return self

    def __call__(self, logits, labels):
        (logits, labels), torch_in = to_arrays(logits, labels)
        on_gpu = is_cupy_array(logits) or (self.device == "cuda" and isinstance(logits, np.ndarray))
        if not on_gpu:
            labels = to_host(labels)
        logits = logits if is_cupy_array(logits) else np.asarray(logits)
        if logits.ndim != 2 or logits.shape[0] == 0:
            raise ValueError(f"logits must be (N, classes) with N >= 1, got shape {logits.shape}")
        if labels.shape != logits.shape[:1] or not np.issubdtype(labels.dtype, np.integer):
            raise ValueError(f"labels must be {logits.shape[0]} integers (one per row of logits), got "
                             f"{labels.dtype} of shape {labels.shape}")
        if on_gpu:
            return self._gpu_call(logits, labels, torch_in)
        bad = (labels < 0) | (labels >= logits.shape[1])
        if bad.any():
            raise ValueError(f"labels must be class indices in [0, {logits.shape[1]}), got {labels[bad][0]}")
        z = logits.astype(np.promote_types(logits.dtype, np.float32), copy=False)
        shifted = z - z.max(axis=1, keepdims=True)
        log_sum = np.log(np.exp(shifted).sum(axis=1))
        rows = np.arange(len(labels))
        self._saved = (shifted, log_sum, labels, logits.dtype, torch_in)
        return float(np.mean(log_sum - shifted[rows, labels]))

    def _gpu_call(self, logits, labels, torch_in) -> DeviceLoss:
        """One launch: the loss, the label check and the gradient (module docstring)."""
        if is_cupy_array(logits) and not is_cupy_array(labels):
            gpu_layers.record("cupy.copy")                 # the labels' upload
            labels = like(labels, logits)
        value, bad, grad = gpu_layers.cross_entropy(self, logits, labels)
        self._saved = (grad, torch_in)
        return DeviceLoss(value, bad, logits.shape[1])

    def backward(self):
        """dloss/dlogits of the last call: (softmax - onehot(labels)) / N."""
        if self._saved is None:
            raise RuntimeError("CrossEntropyLoss.backward needs a loss computed first: loss_fn(logits, labels)")
        if len(self._saved) == 2:
            grad, torch_in = self._saved
            return from_arrays(grad, torch_in)
        shifted, log_sum, labels, dtype, torch_in = self._saved
        grad = np.exp(shifted - log_sum[:, None])
        grad[np.arange(len(labels)), labels] -= 1
        grad /= len(labels)
        return from_arrays(grad.astype(dtype, copy=False), torch_in)

    def __repr__(self) -> str:
        return "CrossEntropyLoss()"
