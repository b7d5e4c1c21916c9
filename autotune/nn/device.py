"""Where a module's arrays live, and which code computes its layers: ``"cpu"`` or ``"cuda"``.

    >>> model.to("cuda")            # parameters, buffers and gradients become CuPy arrays; convs run on the GPU
    >>> model.to("cpu")             # back to NumPy

On ``"cpu"`` (NumPy arrays) the layers run their Numba kernels (``kernels.py``). On ``"cuda"`` they run their
Numba-CUDA twins (``gpu_*kernels.py``, launched by ``gpu_layers.py``), and every conv pass goes through the
tuner's GPU device (``autotune.devices.GpuDevice``: the GPU registry, CUDA events).

Under the Numba CUDA simulator (``NUMBA_ENABLE_CUDASIM=1``) there are no CuPy arrays: a model moved to
``"cuda"`` keeps its NumPy arrays, but takes the GPU's code paths (the simulated kernels, not the CPU's)
and its convs go to a Tuner on the simulated GPU (``autotune.simulated_gpu_tuner()``: the GPU registry on
NumPy arrays). So "the GPU step equals the CPU step" can be tested without a GPU.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import is_cupy_array, require_gpu, simulator_enabled

from ..graph import refuse_in_capture

#: the devices a module can be on.
DEVICES = ("cpu", "cuda")


def check_device(device) -> str:
    """``device`` ("cpu", "cuda", or "cuda:0"), checked; "cuda" needs a GPU (or the simulator)."""
    name = str(device)
    if name == "cuda:0":
        name = "cuda"
    if name not in DEVICES:
        raise ValueError(f"device must be one of {list(DEVICES)}, got {device!r}")
    if name == "cuda":
        require_gpu()
    return name


def move(a, device: str):
    """``a`` as an array of ``device`` (a copy across devices; ``a`` itself when it is already there). Under
    the simulator "cuda" arrays are NumPy arrays."""
    if a is None:
        return None
    if device == "cpu":
        return a.get() if is_cupy_array(a) else a
    if is_cupy_array(a) or simulator_enabled():
        return a
    import cupy
    return cupy.asarray(a)


def like(a: np.ndarray, x):
    """Host array ``a`` on the device of array ``x`` (copied to the GPU when ``x`` is a CuPy array)."""
    if not is_cupy_array(x):
        return a
    import cupy
    return cupy.asarray(a)


def to_host(a) -> np.ndarray:
    """A NumPy array of ``a`` (NumPy, or CuPy: a copy to the host, which a CUDA graph's capture refuses)."""
    if is_cupy_array(a):
        refuse_in_capture("host", "a device array copied to the host")
        return a.get()
    return np.asarray(a)


def mismatch(module, x) -> str | None:
    """Why ``module`` (holding parameters) cannot take ``x``: a CuPy input to a CPU module, or a NumPy input
    to a module on a real GPU; None when they agree."""
    on_gpu = module.device == "cuda" and not simulator_enabled()
    if is_cupy_array(x) == on_gpu or not isinstance(x, np.ndarray) and not is_cupy_array(x):
        return None
    if on_gpu:
        return (f"{type(module).__name__} is on cuda but its input is a NumPy array: move the input "
                "(cupy.asarray(x)) or the model (model.to('cpu'))")
    return (f"{type(module).__name__} is on cpu but its input is a CuPy array: move the model "
            "(model.to('cuda')) or the input (x.get())")
