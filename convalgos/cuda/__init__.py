"""The GPU side of convalgos: the same algorithms, under the same names, on CuPy arrays with Numba-CUDA kernels.

    >>> import cupy, convalgos
    >>> y = convalgos.conv2d(cupy.asarray(x), cupy.asarray(w), padding=1, algo="winograd_4x4")   # on the GPU

``convalgos.conv2d`` given a CuPy array comes here. ``ALGORITHMS`` lists the GPU algorithms in the CPU
registry's order, plus ``implicit_gemm`` (GPU only). fp32 is fp32: nothing here turns TF32 on (CuPy uses it
only when the user sets ``CUPY_TF32``). fp16 is computed in fp32 and returned as fp16, as on the CPU.

Importing this package needs neither CuPy nor a driver; running it needs CuPy and a CUDA driver, or the Numba
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba is first imported), where NumPy arrays stand in for
CuPy's.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..backend import array_module, require_device_array, require_gpu
from ..params import ConvParams
from ..conv import validate
from .base import GPUAlgorithm
from .direct import Direct
from .fft import FFT
from .fft_tiled import FFTTiled
from .im2col import Im2col
from .implicit_gemm import ImplicitGemm
from .winograd import Winograd

#: name -> GPU algorithm, in the CPU registry's order, then the GPU-only ones.
ALGORITHMS: "OrderedDict[str, GPUAlgorithm]" = OrderedDict(
    (a.name, a) for a in (Direct(), Im2col(), FFT(), FFTTiled(), Winograd(2), Winograd(4), Winograd(6),
                          ImplicitGemm()))


def get_algorithm(name: str) -> GPUAlgorithm:
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"algo must be one of {list(ALGORITHMS)}, got {name!r}") from None


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="direct", out=None):
    """``convalgos.conv2d`` on the GPU: the same arguments, validation and result, on device arrays."""
    require_gpu()
    for name, a in (("x", x), ("weight", weight), ("bias", bias), ("out", out)):
        if a is not None:
            require_device_array(name, a)
    algorithm = get_algorithm(algo)
    p = validate(x, weight, bias, stride, padding, dilation, groups, algorithm, out)
    return run(algorithm, x, weight, bias, p, out)


def run(algorithm: GPUAlgorithm, x, weight, bias, p: ConvParams, out=None):
    """Run a validated layer ``p`` through a GPU algorithm (no checks: callers validated ``p``)."""
    xp, cdt = array_module(x), np.dtype(p.compute_dtype)
    if out is None:
        out = xp.empty(p.out_shape, dtype=x.dtype)
    if p.N == 0:
        return out
    direct_out = out.dtype == cdt and out.flags.c_contiguous
    y = out if direct_out else algorithm.buffer(out, "conv2d.out", p.out_shape, cdt)
    algorithm.forward(xp.ascontiguousarray(x, dtype=cdt), xp.ascontiguousarray(weight, dtype=cdt), p, y)
    if bias is not None:
        y += bias.astype(cdt)[None, :, None, None]
    if not direct_out:
        out[...] = y
    return out


def release_workspaces() -> None:
    """Free every GPU algorithm's kept device buffers."""
    for algorithm in ALGORITHMS.values():
        algorithm.release()


__all__ = ["ALGORITHMS", "GPUAlgorithm", "conv2d", "get_algorithm", "release_workspaces", "run"]
