"""When torch's own convolution serves instead of the dispatcher, and how; it never raises on its own.

The whole layer goes to ``torch.nn.functional.conv2d`` (all three passes by torch's autograd) when:

- ``torch.autocast`` is on for the tensors' device (autocast picks the dtype per op; the dispatcher computes
  in the tensors' own dtype);
- the dtype is one the dispatcher does not compute (bfloat16, integers, complex: it computes float16,
  float32 and float64);
- the tensors are on a device other than the CPU or a CUDA GPU, or x, weight and bias differ in dtype or
  device, or the input is not 4-D (unbatched inputs are made 4-D before this check): torch then computes the
  call or says what is wrong, as it would without the bridge.

One pass goes to torch (``F.conv2d`` forward; ``torch.nn.grad.conv2d_input / conv2d_weight`` backward) when:

- the tensors are CUDA tensors and no GPU algorithm has that pass for the layer (the GPU registry has forward
  passes only so far), or CuPy with a driver is missing;
- the dispatcher raised (its error is the reason): a fault of ours never fails a call torch can serve.

Each fallback is logged once per layer and reason (logger ``autotune.torch``, WARNING) and counted in the
layer's record (``record.py``), which ``report`` shows.
"""
from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from convalgos import ConvParams

log = logging.getLogger("autotune.torch")

#: torch dtype -> its name, for the dtypes the dispatcher computes
DTYPES = {torch.float16: "float16", torch.float32: "float32", torch.float64: "float64"}
#: the (label, reason) pairs logged for calls without a layer record (the functional form)
_LOGGED = set()


def layer_reason(x, weight, bias) -> str | None:
    """Why torch's conv2d must compute every pass of this call, or None when the dispatcher can."""
    device = "cpu" if x.is_cpu else "cuda" if x.is_cuda else x.device.type
    if device not in ("cpu", "cuda"):
        return f"tensors on device {device!r} (the dispatcher runs on the CPU and CUDA GPUs)"
    if torch.is_autocast_enabled(device):
        return f"torch.autocast is on for {device} (the dispatcher computes in the tensors' own dtype)"
    if x.dtype not in DTYPES:
        return f"dtype {x.dtype} (the dispatcher computes float16, float32 and float64)"
    operands = [weight] + ([] if bias is None else [bias])
    if any(t.dtype != x.dtype or t.device != x.device for t in operands):
        return "x, weight and bias differ in dtype or device"
    if x.dim() != 4:
        return f"a {x.dim()}-D input (conv2d takes 3-D or 4-D)"
    return None


def gpu_ready() -> bool:
    """True when convalgos' GPU side can run here (CuPy with a CUDA device and driver)."""
    from convalgos.backends import BACKENDS
    return BACKENDS["cuda"].available()


def gpu_serves(op: str, p: ConvParams) -> bool:
    """True when some GPU algorithm has pass ``op`` for layer ``p``."""
    from convalgos.backends import BACKENDS
    return any(algorithm.supports(p, op) for algorithm in BACKENDS["cuda"].registry.values())


def pass_reason(device: str, op: str, call) -> str | None:
    """Why torch must compute pass ``op`` of a call on ``device`` ("cpu" or "cuda"; ``call``: a
    ``record.Call``), or None when the dispatcher can."""
    if device != "cuda":
        return None
    if not gpu_ready():
        return "a CUDA tensor, and CuPy with a CUDA driver is not available to run the GPU algorithms"
    p = ConvParams.from_shapes(call.x_shape, call.w_shape, stride=call.stride, padding=call.padding,
                               dilation=call.dilation, groups=call.groups, dtype=call.dtype)
    if not gpu_serves(op, p):
        return f"a CUDA tensor, and no GPU algorithm has the {op} pass of this layer yet"
    return None


def note(record, label: str, ops: tuple, reason: str, every_pass: bool = False) -> None:
    """Count a call of passes ``ops`` that torch computed in ``record`` (a ``LayerRecord``, or None for the
    functional form), and log it the first time the layer falls back for ``reason``."""
    if record is not None:
        first = record.fell_back(ops, reason)
        label = record.name or label
    else:
        first = (label, reason) not in _LOGGED
        _LOGGED.add((label, reason))
    if first:
        which = "every pass" if every_pass else f"the {', '.join(ops)} pass"
        log.warning("%s: %s computed by torch's own convolution, not the dispatcher: %s (logged once per layer "
                    "and reason; autotune.torch.report counts the calls)", label, which, reason)


def padding_pairs(padding, w_shape, dilation) -> tuple:
    """``padding`` (int, pair, pair of pairs, "valid" or "same") as ((top, bottom), (left, right))."""
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0), (0, 0)
        dilation = (dilation, dilation) if isinstance(dilation, int) else tuple(dilation)
        totals = [d * (k - 1) for d, k in zip(dilation, w_shape[2:])]
        return tuple((t // 2, t - t // 2) for t in totals)     # torch puts the odd one at the end
    if isinstance(padding, int):
        return (padding, padding), (padding, padding)
    if all(isinstance(v, int) for v in padding):
        return tuple((v, v) for v in padding)
    return tuple(tuple(v) for v in padding)


def _padded(x, pads):
    """(x padded where ``pads`` is asymmetric, the symmetric padding left for the conv)."""
    (t, b), (l, r) = pads
    if t == b and l == r:
        return x, (t, l)
    return F.pad(x, (l, r, t, b)), (0, 0)


def torch_forward(x, weight, bias, stride, padding, dilation, groups):
    """torch's conv2d of the call (asymmetric padding applied with ``F.pad`` first); differentiable."""
    if isinstance(padding, (str, int)) or all(isinstance(v, int) for v in padding):
        return F.conv2d(x, weight, bias, stride, padding, dilation, groups)
    x, symmetric = _padded(x, padding_pairs(padding, weight.shape, dilation))
    return F.conv2d(x, weight, bias, stride, symmetric, dilation, groups)


def torch_input_grad(x, weight, dy, stride, padding, dilation, groups):
    """torch's gradient of the input (``torch.nn.grad.conv2d_input``), asymmetric padding included."""
    (t, b), (l, r) = padding_pairs(padding, weight.shape, dilation)
    if t == b and l == r:
        return torch.nn.grad.conv2d_input(x.shape, weight, dy, stride, (t, l), dilation, groups)
    padded = (*x.shape[:2], x.shape[2] + t + b, x.shape[3] + l + r)
    grad = torch.nn.grad.conv2d_input(padded, weight, dy, stride, 0, dilation, groups)
    return grad[:, :, t:t + x.shape[2], l:l + x.shape[3]]


def torch_weight_grad(x, weight, dy, stride, padding, dilation, groups):
    """torch's gradient of the weight (``torch.nn.grad.conv2d_weight``), asymmetric padding included."""
    x, symmetric = _padded(x, padding_pairs(padding, weight.shape, dilation))
    return torch.nn.grad.conv2d_weight(x, weight.shape, dy, stride, symmetric, dilation, groups)
