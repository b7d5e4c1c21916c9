"""The public passes: ``conv2d``, ``conv2d_input`` and ``conv2d_weight`` (``torch.nn.grad``'s names and
arguments), each validated once, then run by the named algorithm of the operands' backend."""
from __future__ import annotations

import numpy as np

from .backend import from_arrays, registry_of, to_arrays
from .params import ConvParams
from .registry import UnsupportedError
from .run import run


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="direct", out=None):
    """2-D convolution with ``torch.nn.functional.conv2d`` semantics, computed by the algorithm ``algo``.

    x: (N, C, H, W); weight: (K, C/groups, R, S); bias: (K,) or None. ``stride``, ``dilation``: int or pair.
    ``padding``: int, (ph, pw), ((top, bottom), (left, right)), "valid" or "same" (stride 1).
    float32 and float64 are computed in that dtype; float16 in float32, returned as float16.
    ``out``: an optional (N, K, Ho, Wo) array of x's dtype to write into. NumPy arrays run on the CPU, CuPy
    arrays on the GPU (``convalgos.cuda``); torch tensors are read in place (DLPack) and the result is a
    tensor.
    """
    (x, weight, bias, out), back = to_arrays(x, weight, bias, out)
    return from_arrays(forward_in(registry_of(x), x, weight, bias, stride, padding, dilation, groups, algo, out),
                       back)


def conv2d_input(input_shape, weight, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                 algo="direct", out=None):
    """The gradient of ``conv2d`` with respect to its input (``torch.nn.grad.conv2d_input``): an array of
    ``input_shape``, given the weight and the output's gradient. Input rows and columns that no output reads
    get zero."""
    (weight, grad_output, out), back = to_arrays(weight, grad_output, out)
    return from_arrays(backward_data_in(registry_of(weight), input_shape, weight, grad_output, stride, padding,
                                        dilation, groups, algo, out), back)


def conv2d_weight(input, weight_shape, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                  algo="direct", out=None):
    """The gradient of ``conv2d`` with respect to its weight (``torch.nn.grad.conv2d_weight``): an array of
    ``weight_shape``, given the input and the output's gradient."""
    (input, grad_output, out), back = to_arrays(input, grad_output, out)
    return from_arrays(backward_filter_in(registry_of(input), input, weight_shape, grad_output, stride, padding,
                                          dilation, groups, algo, out), back)


# ---- the same passes in a given registry (the CPU one, or convalgos.cuda's) --------------------------------
def forward_in(registry, x, weight, bias, stride, padding, dilation, groups, algo, out):
    p = ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    algorithm = checked_algorithm(registry, algo, p, "forward", out, x.dtype)
    return run(algorithm, "forward", x, weight, p, out, bias)


def backward_data_in(registry, input_shape, weight, grad_output, stride, padding, dilation, groups, algo, out):
    p = grad_params(input_shape, weight.shape, grad_output, stride, padding, dilation, groups, "weight", weight)
    algorithm = checked_algorithm(registry, algo, p, "backward_data", out, weight.dtype)
    return run(algorithm, "backward_data", grad_output, weight, p, out)


def backward_filter_in(registry, input, weight_shape, grad_output, stride, padding, dilation, groups, algo, out):
    p = grad_params(input.shape, weight_shape, grad_output, stride, padding, dilation, groups, "input", input)
    algorithm = checked_algorithm(registry, algo, p, "backward_filter", out, input.dtype)
    return run(algorithm, "backward_filter", input, grad_output, p, out)


def grad_params(x_shape, w_shape, grad_output, stride, padding, dilation, groups, operand_name,
                operand) -> ConvParams:
    """The layer of a backward pass, checked against ``grad_output`` (errors name the parameter)."""
    for name, a in ((operand_name, operand), ("grad_output", grad_output)):
        if not hasattr(a, "shape") or not hasattr(a, "dtype"):
            raise TypeError(f"{name} must be an array, got {type(a).__name__}")
    for name, shape in (("input_shape", x_shape), ("weight_shape", w_shape)):
        if not isinstance(shape, (tuple, list)) or len(shape) != 4 or not all(
                isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in shape):
            raise ValueError(f"{name} must be 4 ints, got {shape!r}")
    p = ConvParams.from_shapes(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype=operand.dtype)
    if grad_output.dtype != operand.dtype:
        raise TypeError(f"grad_output dtype must match {operand_name} ({operand.dtype}), got {grad_output.dtype}")
    if tuple(grad_output.shape) != p.out_shape:
        raise ValueError(f"grad_output must have shape {p.out_shape} for this layer ({p}), "
                         f"got {tuple(grad_output.shape)}")
    return p


def checked_algorithm(registry, algo, p: ConvParams, op: str, out, dtype):
    """The algorithm named ``algo`` in ``registry``, after checking that it supports pass ``op`` of ``p`` and
    that ``out`` fits the result."""
    try:
        algorithm = registry[algo]
    except (KeyError, TypeError):
        raise ValueError(f"algo must be one of {list(registry)}, got {algo!r}") from None
    support = algorithm.supports(p, op)
    if not support:
        raise UnsupportedError(f"{algorithm.name} does not support the {op} pass of {p}: {support.reason}")
    shape = p.result_shape(op)
    if out is not None and (tuple(out.shape) != shape or out.dtype != dtype):
        raise ValueError(f"out must be a {dtype} array of shape {shape}, got {out.dtype} of shape {tuple(out.shape)}")
    return algorithm
