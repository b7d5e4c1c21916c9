"""Every GPU kernel and argument signature the library launches, found without a GPU.

The GPU algorithms' passes (every algorithm of ``convalgos.cuda.ALGORITHMS``, float16 / float32 / float64, on
``check.py``'s grid of layers) and autotune's GPU layers (BatchNorm, ReLU, the three poolings, cross-entropy
and SGD's flat step, on a small model in each dtype, trained one step and run once in eval mode) run here with
``gpu_base.launch`` replaced: each launch records its kernel and its arguments' Numba types, and runs nothing.
NumPy arrays stand in for CuPy's (so every result is garbage, and nothing reads it), and the simulator is off,
so every size a kernel factory is given is the GPU's (``SIM_BLOCK`` and the like are not used).

``record()`` replaces the launch route, leaves NumPy arrays in the algorithms' kept buffers and device
constants, and moves models to "cuda" without a GPU: run it in a process of its own, never beside GPU work
(``ptx.py`` does). ``factories()`` lists every kernel factory of the library (the ``lru_cache``'d functions of
its ``gpu*kernels.py`` modules, and ``gpu_base``'s), so that a kernel nobody launches here is seen.
"""
from __future__ import annotations

import importlib
import pkgutil
import warnings

import numba
import numpy as np

DTYPES = ("float16", "float32", "float64")


class _Stream:
    ptr = 0


class _NoCupy:
    """What ``gpu_base.launch`` asks of CuPy: the current stream, and the array type (none matches)."""

    class cuda:
        @staticmethod
        def get_current_stream():
            return _Stream

    ndarray = type(None)


def numba_type(a):
    """An argument's type as a launch on CuPy arrays gives it: an array's writable, scalars as Numba types them."""
    from numba.cuda.args import ArgHint
    t = numba.typeof(a.value if isinstance(a, ArgHint) else a)
    return numba.types.Array(t.dtype, t.ndim, t.layout) if isinstance(t, numba.types.Array) else t


def record() -> dict:
    """{kernel: set of argument-type tuples} of every launch the cases below make (module docstring)."""
    from convalgos import gpu_base
    launches: dict = {}

    def configure(kernel, blocks, threads, stream):
        return lambda *args: launches.setdefault(kernel, set()).add(tuple(map(numba_type, args)))

    gpu_base._device_side = lambda: (_NoCupy, None, lambda pointer: None, configure)
    with warnings.catch_warnings(), np.errstate(all="ignore"):
        warnings.simplefilter("ignore")
        _conv_passes()
        _layers()
        gpu_base.hold_stream(1e-6)
    return launches


def _conv_passes() -> None:
    from convalgos import PASSES, ConvParams
    from convalgos import cuda as gpu
    from convalgos.run import run

    from .check import GRID
    for algorithm in gpu.ALGORITHMS.values():
        for dtype in DTYPES:
            for s in GRID.values():
                p = ConvParams.from_shapes(s["x"], s["w"], **s["kw"], dtype=dtype)
                for op in PASSES:
                    if algorithm.supports(p, op):
                        a = np.zeros(p.out_shape if op == "backward_data" else p.in_shape, dtype)
                        b = np.zeros(p.out_shape if op == "backward_filter" else p.weight_shape, dtype)
                        run(algorithm, op, a, b, p)


def _layers() -> None:
    from autotune import nn, optim
    from autotune.nn import device
    device.simulator_enabled, device.require_gpu = (lambda: True), (lambda: None)    # NumPy arrays on "cuda"
    for dtype in DTYPES:
        model = nn.Sequential(nn.ReLU(), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2), nn.ReLU(), nn.AvgPool2d(2),
                              nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 3)).astype(dtype)
        model.to("cuda")
        model.train()
        sgd, loss_fn = optim.SGD(model, lr=0.1, momentum=0.9), nn.CrossEntropyLoss().to("cuda")
        x = np.zeros((2, 4, 8, 8), dtype)
        loss_fn(model(x), np.array([0, 1]))
        model.zero_grad()
        model.backward(loss_fn.backward())
        sgd.step()
        model.eval()
        model(x)


def factories() -> list:
    """Every kernel factory of convalgos and autotune (module docstring)."""
    import autotune
    import convalgos
    from convalgos import gpu_base
    found = [gpu_base._hold_kernel]
    for package in (convalgos, autotune):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            leaf = info.name.rsplit(".", 1)[-1]
            if leaf.startswith("gpu") and leaf.endswith("kernels"):
                module = importlib.import_module(info.name)
                found += [f for f in vars(module).values()
                          if hasattr(f, "cache_info") and getattr(f, "__module__", None) == module.__name__]
    return found
