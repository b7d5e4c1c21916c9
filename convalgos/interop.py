"""Torch tensors in, torch tensors out: operands read in place through DLPack, results handed back the same way.

``to_arrays`` turns each torch tensor among a call's operands into the array it holds (NumPy for a CPU tensor,
CuPy for a CUDA one), without a copy where the tensor's layout allows it, and says how the caller wants its
result back; ``from_arrays`` hands the result back in that form. Nothing here imports torch unless a torch
tensor came in.

- dtypes: a dtype NumPy has crosses (the passes then take float16, float32 and float64); one it has not
  (bfloat16) is refused with the error ``ConvParams`` gives a NumPy array of a wrong dtype, naming the operand
  (DLPack's own message, "Unsupported dtype in DLTensor", names neither).
- memory format: a result comes back ``channels_last`` when the call's activation operand was (x for the
  forward pass, grad_output for the input gradient), as torch's own conv does.
"""
from __future__ import annotations

import numpy as np

from .arrays import GPU_MISSING, GPUUnavailableError
from .params import COMPUTE_DTYPE


def is_torch_tensor(x) -> bool:
    """True for a torch tensor, decided without importing torch."""
    return type(x).__module__.split(".")[0] == "torch" and hasattr(x, "__dlpack__")


class TorchResult:
    """How a result goes back to a torch caller: as a tensor, in channels_last when ``channels_last``."""

    __slots__ = ("channels_last",)

    def __init__(self, channels_last: bool):
        self.channels_last = channels_last


def _is_channels_last(t) -> bool:
    import torch
    return t.dim() == 4 and not t.is_contiguous() and t.is_contiguous(memory_format=torch.channels_last)


def _from_torch(name: str, t):
    """The array a torch tensor holds, read in place through DLPack: NumPy for a CPU tensor, CuPy for a CUDA
    one (a clear error when CuPy is missing, or when the dtype has no NumPy twin, as bfloat16 has none)."""
    t = t.detach()
    if t.device.type == "cpu":
        try:
            return np.from_dlpack(t if t.is_contiguous() or t.dim() == 0 or _is_channels_last(t) else t.contiguous())
        except (BufferError, TypeError, RuntimeError):
            raise TypeError(f"{name} dtype must be one of {sorted(COMPUTE_DTYPE)}, got {t.dtype}") from None
    if t.device.type == "cuda":
        try:
            import cupy
        except ImportError:
            raise GPUUnavailableError(f"a CUDA tensor needs CuPy to run here: {GPU_MISSING}") from None
        return cupy.from_dlpack(t)
    raise TypeError(f"{name}: torch tensors on device {t.device.type!r} are not supported (cpu or cuda)")


def to_arrays(*values, names=None, activation: bool = True):
    """(the operands as arrays, how to hand the result back): torch tensors are read in place through DLPack,
    anything else passes as it is. ``names`` name the operands in errors; with ``activation`` the first is the
    activation whose memory format the result keeps. The second item is None when no torch tensor came in."""
    names = names or [f"operand {i}" for i in range(len(values))]
    if not any(is_torch_tensor(v) for v in values):
        return values, None
    first = values[0]
    back = TorchResult(activation and is_torch_tensor(first) and _is_channels_last(first))
    return tuple(_from_torch(n, v) if is_torch_tensor(v) else v for n, v in zip(names, values)), back


def from_arrays(result, back: TorchResult | None):
    """``result`` in the caller's form: a torch tensor sharing its memory (DLPack) when a torch tensor came in
    (``back`` from ``to_arrays``), in channels_last when the activation was; else the array itself."""
    if back is None:
        return result
    import torch
    tensor = torch.from_dlpack(result)
    if back.channels_last and tensor.dim() == 4:
        tensor = tensor.contiguous(memory_format=torch.channels_last)
    return tensor
