"""The GPU backend of convalgos: its own registry of algorithms, on CuPy arrays with Numba-CUDA kernels.

    >>> import cupy, convalgos
    >>> y = convalgos.conv2d(cupy.asarray(x), cupy.asarray(w), padding=1, algo="winograd_4x4")   # on the GPU

``convalgos.conv2d`` given a CuPy array runs in this registry (``convalgos.backend.registry_of``), through the
one ``convalgos.run``. ``ALGORITHMS`` lists the GPU algorithms in the CPU registry's order; each sits under
the name of the CPU algorithm whose idea it computes, and answers ``supports``, ``workspace_bytes``, ``flops``
and ``tolerance_of`` for itself. Only the forward pass is on the GPU so far (the backward passes answer
"has no ... pass"). ``implicit_gemm`` needs no workspace, so a zero workspace limit still leaves one algorithm.
fp32 is fp32: nothing here turns TF32 on (CuPy uses it only when the user sets ``CUPY_TF32``). fp16 is
computed in fp32 and returned as fp16, as on the CPU.

Importing this package needs neither CuPy nor a driver; running it needs CuPy and a CUDA driver, or the Numba
CUDA simulator (``NUMBA_ENABLE_CUDASIM=1`` before numba is first imported), where NumPy arrays stand in for
CuPy's.
"""
from __future__ import annotations

from collections import OrderedDict

from ..backend import require_device_array, require_gpu
from ..conv import forward_in
from .base import GPUAlgorithm
from .direct import Direct
from .fft import FFT
from .fft_tiled import FFTTiled
from .im2col import Im2col
from .implicit_gemm import ImplicitGemm
from .winograd import Winograd

#: name -> GPU algorithm, in the CPU registry's order.
ALGORITHMS: "OrderedDict[str, GPUAlgorithm]" = OrderedDict(
    (a.name, a) for a in (
        Direct(), ImplicitGemm(), Im2col(), FFT(), FFTTiled(),
        # as on the CPU: G's rounding and the transforms' cancellation grow with the tile size m
        Winograd(2, {"float16": 2e-3, "float32": 1e-5, "float64": 1e-13}),
        Winograd(4, {"float16": 2e-3, "float32": 1e-4, "float64": 1e-12}),
        Winograd(6, {"float16": 3e-3, "float32": 2e-4, "float64": 1e-12})))


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, algo="direct", out=None):
    """``convalgos.conv2d`` on the GPU: the same arguments, validation and result, on device arrays."""
    require_gpu()
    for name, a in (("x", x), ("weight", weight), ("bias", bias), ("out", out)):
        if a is not None:
            require_device_array(name, a)
    return forward_in(ALGORITHMS, x, weight, bias, stride, padding, dilation, groups, algo, out)


def release_workspaces() -> None:
    """Free every GPU algorithm's kept device buffers."""
    for algorithm in ALGORITHMS.values():
        algorithm.release()


__all__ = ["ALGORITHMS", "GPUAlgorithm", "conv2d", "release_workspaces"]
