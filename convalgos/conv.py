"""The front door: ``conv2d``, ``conv2d_input`` and ``conv2d_weight`` (``torch.nn.functional.conv2d`` and
``torch.nn.grad``'s names and arguments), each validated once (``passes.py``), then run by the named algorithm
of the backend that owns the operands (``backends.py``) through ``run``.

Every pass takes one unbatched sample as torch does (x (C, H, W) gives y (K, Ho, Wo)), torch tensors in and out
(``interop.py``), and ``backend="cuda"`` to run the GPU registry on NumPy arrays under the Numba CUDA simulator.
"""
from __future__ import annotations

from .arrays import require_device_array
from .backends import Backend, backend_named, backend_of
from .interop import from_arrays, to_arrays
from .passes import (backward_data_params, backward_filter_params, batched, check_out, checked_algorithm,
                     forward_params)
from .run import run


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="direct", out=None,
           backend=None):
    """2-D convolution with ``torch.nn.functional.conv2d`` semantics, computed by the algorithm ``algo``.

    x: (N, C, H, W) or one sample (C, H, W); weight: (K, C/groups, R, S); bias: (K,) or None. ``stride``,
    ``dilation``: int or pair. ``padding``: int, (ph, pw), ((top, bottom), (left, right)), "valid" or "same"
    (stride 1). float32 and float64 are computed in that dtype; float16 in float32, returned as float16.
    ``out``: an optional array of the result's shape and x's dtype to write into. NumPy arrays run on the CPU,
    CuPy arrays on the GPU; ``backend`` ("cpu" or "cuda") names one instead. Torch tensors are read in place
    (DLPack) and the result is a tensor, channels_last when x is.
    """
    (x, weight, bias, out), back = to_arrays(x, weight, bias, out, names=("x", "weight", "bias", "out"))
    chosen = _backend(backend, x=x, weight=weight, bias=bias, out=out)
    unbatch = batched("x", x, out=out)
    x, out = unbatch.add(x), unbatch.add(out)
    p = forward_params(x, weight, bias, stride, padding, dilation, groups)
    algorithm = checked_algorithm(chosen.registry, algo, p, "forward")
    check_out(out, p.out_shape, x.dtype)
    return from_arrays(unbatch.drop(run(algorithm, "forward", x, weight, p, out, bias)), back)


def conv2d_input(input_shape, weight, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                 algo="direct", out=None, backend=None):
    """The gradient of ``conv2d`` with respect to its input (``torch.nn.grad.conv2d_input``): an array of
    ``input_shape`` ((N, C, H, W), or (C, H, W) with an unbatched grad_output), given the weight and the
    output's gradient. Input rows and columns that no output reads get zero."""
    (grad_output, weight, out), back = to_arrays(grad_output, weight, out, names=("grad_output", "weight", "out"))
    chosen = _backend(backend, weight=weight, grad_output=grad_output, out=out)
    unbatch = batched("grad_output", grad_output, input_shape=input_shape, out=out)
    grad_output, out, input_shape = unbatch.add(grad_output), unbatch.add(out), unbatch.add_shape(input_shape)
    p = backward_data_params(input_shape, weight, grad_output, stride, padding, dilation, groups)
    algorithm = checked_algorithm(chosen.registry, algo, p, "backward_data")
    check_out(out, p.in_shape, weight.dtype)
    return from_arrays(unbatch.drop(run(algorithm, "backward_data", grad_output, weight, p, out)), back)


def conv2d_weight(input, weight_shape, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                  algo="direct", out=None, backend=None):
    """The gradient of ``conv2d`` with respect to its weight (``torch.nn.grad.conv2d_weight``): an array of
    ``weight_shape``, given the input and the output's gradient (both batched, or both one sample)."""
    (input, grad_output, out), back = to_arrays(input, grad_output, out, names=("input", "grad_output", "out"),
                                                activation=False)
    chosen = _backend(backend, input=input, grad_output=grad_output, out=out)
    unbatch = batched("input", input, grad_output=grad_output)
    input, grad_output = unbatch.add(input), unbatch.add(grad_output)
    p = backward_filter_params(input, weight_shape, grad_output, stride, padding, dilation, groups)
    algorithm = checked_algorithm(chosen.registry, algo, p, "backward_filter")
    check_out(out, p.weight_shape, input.dtype)
    return from_arrays(run(algorithm, "backward_filter", input, grad_output, p, out), back)


def _backend(name, **operands) -> Backend:
    """The backend named ``name``, or else the one owning the first operand; every operand must be its array
    (under the simulator a NumPy array stands in for a CuPy one)."""
    first, value = next(iter(operands.items()))
    chosen = backend_of(value, first) if name is None else backend_named(name)
    chosen.require()
    for operand, array in operands.items():
        if array is None or chosen.owns(array):
            continue
        if chosen.name == "cuda":
            require_device_array(operand, array)
        else:
            raise TypeError(f"{operand} must be a NumPy array like the call's other operands, got "
                            f"{type(array).__module__}.{type(array).__name__}")
    return chosen
