"""Which backend owns an array: one table, read by convalgos' front door, autotune's devices and the GPU check.

A backend is one kind of array and what runs on it:

    name    owns(x)                 array module   registry                    workspace cap
    "cpu"   a NumPy array           numpy          convalgos.ALGORITHMS        a quarter of host memory
    "cuda"  a CuPy array            cupy           convalgos.cuda.ALGORITHMS   a quarter of the device's free memory

``backend_of(x)`` answers for a call's first operand; nothing else in the project tells array types apart.
Torch tensors are read as the NumPy or CuPy arrays they hold before this question is asked (``interop.py``).
The GPU registry is imported when first asked for, so ``import convalgos`` imports no Numba-CUDA and no CuPy.
Under the Numba CUDA simulator NumPy arrays stand in for CuPy's: a call asks for ``backend="cuda"`` by name.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import numpy as np

from . import memory
from .algorithms import ALGORITHMS as CPU_ALGORITHMS
from .arrays import gpu_available, is_cupy_array, require_gpu
from .registry import Registry


def _cupy():
    import cupy
    return cupy


def _gpu_registry() -> Registry:
    from .cuda import ALGORITHMS
    return ALGORITHMS


@dataclass(frozen=True)
class Backend:
    """One backend: the arrays it owns, its array module and registry, its workspace cap, whether it runs here."""

    name: str
    owns: Callable[[object], bool]
    array_module_of: Callable[[], object]
    registry_of: Callable[[], Registry]
    available: Callable[[], bool]
    require: Callable[[], None]

    @property
    def xp(self):
        """The array module (numpy or cupy)."""
        return self.array_module_of()

    @property
    def registry(self) -> Registry:
        """Its algorithms, name -> Algorithm."""
        return self.registry_of()

    def workspace_cap(self) -> int:
        """The most workspace one of its algorithms may need for a layer (``convalgos.workspace_cap``)."""
        return memory.workspace_cap(self.name)


CPU = Backend("cpu", lambda x: isinstance(x, np.ndarray), lambda: np, lambda: CPU_ALGORITHMS, lambda: True,
              lambda: None)
CUDA = Backend("cuda", is_cupy_array, _cupy, _gpu_registry, gpu_available, require_gpu)
#: name -> backend, in the order ``backend_of`` asks them.
BACKENDS = {"cpu": CPU, "cuda": CUDA}


def backend_of(x, name: str = "x") -> Backend:
    """The backend whose arrays ``x`` is (``name`` names it in the error when none is)."""
    for backend in BACKENDS.values():
        if backend.owns(x):
            return backend
    raise TypeError(f"{name} must be an array (NumPy, CuPy, or a torch tensor), got "
                    f"{type(x).__module__}.{type(x).__name__}")


def backend_named(name: str) -> Backend:
    """The backend called ``name`` ("cpu" or "cuda")."""
    try:
        return BACKENDS[name]
    except (KeyError, TypeError):
        raise ValueError(f"backend must be one of {list(BACKENDS)}, got {name!r}") from None
