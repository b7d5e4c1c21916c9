"""``conv2d``: validate once, pick the named algorithm, run it into a reused or given output."""
from __future__ import annotations

import numpy as np

from .backend import is_cupy_array
from .params import ConvParams
from .registry import UnsupportedError, get_algorithm


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="direct", out=None):
    """2-D convolution with ``torch.nn.functional.conv2d`` semantics, computed by the algorithm ``algo``.

    x: (N, C, H, W); weight: (K, C/groups, R, S); bias: (K,) or None. ``stride``, ``dilation``: int or pair.
    ``padding``: int, (ph, pw), ((top, bottom), (left, right)), "valid" or "same" (stride 1).
    float32 and float64 are computed in that dtype; float16 in float32, returned as float16.
    ``out``: an optional (N, K, Ho, Wo) array of x's dtype to write into.
    A CuPy ``x`` runs the GPU implementation of ``algo`` (``convalgos.cuda.conv2d``).
    """
    if is_cupy_array(x):
        from .cuda import conv2d as gpu_conv2d
        return gpu_conv2d(x, weight, bias, stride, padding, dilation, groups, algo=algo, out=out)
    algorithm = get_algorithm(algo)
    p = validate(x, weight, bias, stride, padding, dilation, groups, algorithm, out)
    return run(algorithm, x, weight, bias, p, out)


def validate(x, weight, bias, stride, padding, dilation, groups, algorithm, out) -> ConvParams:
    """The layer as ConvParams, after checking that ``algorithm`` supports it and ``out`` fits it."""
    p = ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation, groups=groups)
    support = algorithm.supports(p)
    if not support:
        raise UnsupportedError(f"{algorithm.name} does not support {p}: {support.reason}")
    if out is not None and (tuple(out.shape) != p.out_shape or out.dtype != x.dtype):
        raise ValueError(f"out must be a {x.dtype} array of shape {p.out_shape}, "
                         f"got {out.dtype} of shape {tuple(out.shape)}")
    return p


def run(algorithm, x, weight, bias, p: ConvParams, out=None):
    """Run a validated layer ``p`` through ``algorithm`` (no checks: callers validated ``p``)."""
    cdt = np.dtype(p.compute_dtype)
    if out is None:
        out = np.empty(p.out_shape, dtype=x.dtype)
    if p.N == 0:
        return out
    direct_out = out.dtype == cdt and out.flags.c_contiguous
    y = out if direct_out else algorithm.workspace.get("conv2d.out", p.out_shape, cdt)
    algorithm.forward(np.ascontiguousarray(x, dtype=cdt), np.ascontiguousarray(weight, dtype=cdt), p, y)
    if bias is not None:
        y += np.asarray(bias, dtype=cdt)[None, :, None, None]
    if not direct_out:
        out[...] = y
    return out
