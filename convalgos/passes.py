"""The validated passes: a call's operands checked and put in canonical form once, below both front doors.

convalgos' front door (``conv.py``) and autotune's dispatcher both go through these, so a bad argument gets
the same error from either, naming the parameter and its value:

- ``forward_params(x, weight, bias, stride, padding, dilation, groups)``,
  ``backward_data_params(input_shape, weight, grad_output, ...)`` and
  ``backward_filter_params(input, weight_shape, grad_output, ...)``: the layer (``ConvParams``) of a call,
  with ``torch.nn.functional.conv2d`` / ``torch.nn.grad``'s arguments;
- ``check_out(out, shape, dtype)``: a caller's ``out=`` fits the result;
- ``result_array(a, p, op, out)``: the array a pass writes (``out``, or a new one of ``a``'s array module),
  zero-filled for an empty batch, which no algorithm runs;
- ``checked_algorithm(registry, algo, p, op)``: the named algorithm, refusing a layer it does not support.

Unbatched calls. Like torch, every pass also takes one unbatched sample: x (C, H, W), grad_output (K, Ho, Wo),
``input_shape`` (C, H, W), and gives (K, Ho, Wo), (C, H, W) or the (K, C/groups, R, S) weight gradient.
``batched`` makes such a call's arrays views with a leading batch axis of 1, so every layer below is 4-D;
the front doors drop that axis from the result (``Unbatch``).
"""
from __future__ import annotations

import numpy as np

from .params import ConvParams
from .registry import UnsupportedError


def _check_array(name: str, a) -> None:
    if not hasattr(a, "shape") or not hasattr(a, "dtype"):
        raise TypeError(f"{name} must be an array, got {type(a).__name__}")


def _check_shape(name: str, shape, ranks=(4,)) -> tuple:
    if not isinstance(shape, (tuple, list)) or len(shape) not in ranks or not all(
            isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shape):
        raise ValueError(f"{name} must be {' or '.join(map(str, ranks))} ints, got {shape!r}")
    return tuple(int(v) for v in shape)


class Unbatch:
    """Whether a call came unbatched, and its arrays with a batch axis of 1 added (views, no copies)."""

    __slots__ = ("unbatched",)

    def __init__(self, unbatched: bool):
        self.unbatched = unbatched

    def add(self, a):
        """``a`` with a leading batch axis when the call is unbatched (None stays None)."""
        return a[None] if self.unbatched and a is not None else a

    def add_shape(self, shape):
        """A shape with a leading batch size of 1 when the call is unbatched."""
        return (1,) + tuple(shape) if self.unbatched else shape

    def drop(self, result):
        """The result without its batch axis when the call came unbatched."""
        return result[0] if self.unbatched else result


def _rank(a):
    """The number of dimensions of an array or a shape (None for anything else: validation says what)."""
    if hasattr(a, "shape"):
        return len(a.shape)
    return len(a) if isinstance(a, (tuple, list)) else None


def batched(name: str, activation, **others) -> Unbatch:
    """How to batch a call whose activation ``name`` (x, or grad_output for the input gradient) is 3-D (one
    unbatched sample) or 4-D (a batch). ``others``: name -> the call's other activation arrays or shapes, which
    must have the same rank (None: absent)."""
    rank = _rank(activation)
    if rank not in (3, 4):
        raise ValueError(f"{name} must be 3-D (one sample) or 4-D (a batch), got shape "
                         f"{tuple(getattr(activation, 'shape', ())) if rank is not None else activation!r}")
    for other_name, other in others.items():
        other_rank = _rank(other)
        if other_rank is not None and other_rank != rank:
            raise ValueError(f"{other_name} must be {rank}-D like {name}, got {other_rank}-D")
    return Unbatch(rank == 3)


def forward_params(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1) -> ConvParams:
    """The layer of a forward call (x batched)."""
    return ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                                  groups=groups)


def backward_data_params(input_shape, weight, grad_output, stride=1, padding=0, dilation=1,
                         groups=1) -> ConvParams:
    """The layer of an input-gradient call (``input_shape`` and grad_output batched)."""
    return _grad_params(input_shape, getattr(weight, "shape", None), grad_output, stride, padding, dilation,
                        groups, "weight", weight)


def backward_filter_params(input, weight_shape, grad_output, stride=1, padding=0, dilation=1,
                           groups=1) -> ConvParams:
    """The layer of a weight-gradient call (input and grad_output batched)."""
    return _grad_params(getattr(input, "shape", None), weight_shape, grad_output, stride, padding, dilation,
                        groups, "input", input)


def _grad_params(x_shape, w_shape, grad_output, stride, padding, dilation, groups, operand_name,
                 operand) -> ConvParams:
    """The layer of a backward pass, checked against ``grad_output`` (errors name the parameter)."""
    _check_array(operand_name, operand)
    _check_array("grad_output", grad_output)
    x_shape = _check_shape("input_shape", x_shape)
    w_shape = _check_shape("weight_shape", w_shape)
    p = ConvParams.from_shapes(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype=operand.dtype)
    if grad_output.dtype != operand.dtype:
        raise TypeError(f"grad_output dtype must match {operand_name} ({operand.dtype}), got {grad_output.dtype}")
    if tuple(grad_output.shape) != p.out_shape:
        raise ValueError(f"grad_output must have shape {p.out_shape} for this layer ({p}), "
                         f"got {tuple(grad_output.shape)}")
    return p


def check_out(out, shape: tuple, dtype) -> None:
    """Raise ValueError unless ``out`` (when given) is an array of ``dtype`` and ``shape``."""
    if out is not None and (tuple(getattr(out, "shape", ())) != shape or getattr(out, "dtype", None) != dtype):
        raise ValueError(f"out must be a {dtype} array of shape {shape}, got {getattr(out, 'dtype', None)} of "
                         f"shape {tuple(getattr(out, 'shape', ()))}")


def result_array(xp, p: ConvParams, op: str, dtype, out=None):
    """The array pass ``op`` of ``p`` writes: ``out``, or a new one of the array module ``xp``; filled with
    zeros when the batch is empty (no algorithm runs an empty batch)."""
    if out is None:
        out = (xp.zeros if p.N == 0 else xp.empty)(p.result_shape(op), dtype=dtype)
    elif p.N == 0:
        out[...] = 0
    return out


def checked_algorithm(registry, algo, p: ConvParams, op: str):
    """The algorithm named ``algo`` in ``registry``, after checking that it supports pass ``op`` of ``p``."""
    try:
        algorithm = registry[algo]
    except (KeyError, TypeError):
        raise ValueError(f"algo must be one of {list(registry)}, got {algo!r}") from None
    support = algorithm.supports(p, op)
    if not support:
        raise UnsupportedError(f"{algorithm.name} does not support the {op} pass of {p}: {support.reason}")
    return algorithm
