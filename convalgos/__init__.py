"""convalgos: 2-D convolution computed by several algorithms that all compute the same function.

    >>> import numpy as np, convalgos
    >>> x = np.random.rand(1, 3, 32, 32).astype(np.float32)
    >>> w = np.random.rand(8, 3, 3, 3).astype(np.float32)
    >>> y = convalgos.conv2d(x, w, padding=1, algo="winograd_4x4")

Where each concern lives (one rule for splitting: a file holds one job; a family folder holds one idea):

- the contract, below every family (imports none of them): ``params.py`` (the layer, validated once),
  ``registry.py`` (what an algorithm is; ``Registry``), ``passes.py`` (a call's arguments validated, shared by
  both front doors), ``run.py`` (one pass through one algorithm), ``memory.py`` (workspace caps and kept
  buffers), ``arrays.py`` (NumPy or CuPy; is there a GPU), ``interop.py`` (torch tensors in and out),
  ``reference.py`` (the float64 oracle), ``gpu_base.py`` (what a GPU algorithm is);
- ``kernels/``: Numba helpers several families share (SIMD registers, register blocks, loops, phases);
- one folder per algorithm family: ``direct/``, ``depthwise/``, ``implicit_gemm/``, ``im2col/``, ``fft/``,
  ``winograd/``, each with its CPU algorithm(s), its kernels, its GPU twin (``gpu.py``) and what the twins
  share (``shared.py``);
- above the families: the registries, listed explicitly (``algorithms.py`` for the CPU, ``cuda.py`` for the
  GPU), the table of backends (``backends.py``) and the front door (``conv.py``).
"""
import os
import sys
import warnings

# Numba's OpenMP threads spin after each parallel region by default, and on a small machine they then fight
# the BLAS threads of the next GEMM for the same cores (measured here: small parallel calls 10-20x slower
# beside other work). Passive waiting gives the cores back at once. Set before Numba starts its threads; a
# value the user set wins. Torch starts its own OpenMP when imported, and each runtime reads the variable
# once: imported first, torch's threads keep spinning after each op whatever is set here.
TORCH_FIRST = ("torch was imported before convalgos with OMP_WAIT_POLICY unset: torch's OpenMP threads now spin "
               "after every torch op and slow the convalgos call that follows (measured here: a MobileNet-v1 "
               "forward pass interleaved with torch's took 170 ms instead of 19 ms). Import convalgos (or "
               "autotune) before torch, or set OMP_WAIT_POLICY=PASSIVE in the environment.")
if "torch" in sys.modules and "OMP_WAIT_POLICY" not in os.environ:
    warnings.warn(TORCH_FIRST, RuntimeWarning, stacklevel=2)
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
# Passive alone went too far: every parallel region then wakes its threads from sleep, which cost Numba ~10%
# on back-to-back kernels and torch ~40% (ResNet-20 b32 forward, torch alone: 34-40 ms passive, 24-28 ms with
# libgomp's default 3 ms spin). GNU OpenMP (Numba's omp layer and torch's) lets a spin count override the
# policy: 10000 spins (~0.1 ms) keeps threads awake across back-to-back regions (torch 25-29 ms, Numba's 10%
# back) and still frees the cores soon after. Other OpenMP runtimes keep the passive policy.
os.environ.setdefault("GOMP_SPINCOUNT", "10000")

# OpenBLAS (numpy's BLAS) has its worker threads spin for 2**28 cycles (~0.1 s) after every GEMM. A Numba
# kernel run in that window shares its cores with them, and its static shares make it wait for the slowest
# thread: measured here, direct on a CIFAR layer took 2.9 ms instead of 1.5 ms beside im2col and Winograd,
# and Winograd's own transforms slowed as much. 2**16 cycles (~20 us) still covers back-to-back GEMMs. OpenBLAS
# reads the variable once, when numpy loads it: imported after numpy, convalgos can only say so.
NUMPY_FIRST = ("numpy was imported before convalgos with OPENBLAS_THREAD_TIMEOUT unset: OpenBLAS's threads now "
               "spin ~0.1 s after every matrix product and slow the Numba kernels that follow (measured here: "
               "a CIFAR layer's direct pass took 2.9 ms instead of 1.5 ms beside im2col). Import convalgos (or "
               "autotune) before numpy, or set OPENBLAS_THREAD_TIMEOUT=16 in the environment.")
if "numpy" in sys.modules and "OPENBLAS_THREAD_TIMEOUT" not in os.environ:
    blas = sys.modules["numpy"].__config__.CONFIG["Build Dependencies"]["blas"].get("name", "")
    if "openblas" in blas:
        warnings.warn(NUMPY_FIRST, RuntimeWarning, stacklevel=2)
os.environ.setdefault("OPENBLAS_THREAD_TIMEOUT", "16")

from . import passes, reference  # noqa: E402
from .algorithms import ALGORITHMS  # noqa: E402
from .backends import BACKENDS, backend_named  # noqa: E402
from .conv import conv2d, conv2d_input, conv2d_weight  # noqa: E402
from .memory import set_workspace_cap, workspace_cap  # noqa: E402
from .params import ConvParams  # noqa: E402
from .registry import OP_OF, PASSES, Algorithm, Registry, Support, UnsupportedError  # noqa: E402
from .run import run  # noqa: E402  (a validated layer's pass through one algorithm: what autotune calls)


def register(algorithm: Algorithm, backend: str = "cpu") -> Algorithm:
    """Add a user's ``algorithm`` to the registry of ``backend`` ("cpu": ``convalgos.ALGORITHMS``; "cuda":
    ``convalgos.cuda.ALGORITHMS``), where ``conv2d(..., algo=name)`` and the autotuner find it. A name already
    registered is refused with a ValueError; ``unregister`` removes one."""
    return backend_named(backend).registry.register(algorithm)


def unregister(name: str, backend: str = "cpu") -> Algorithm:
    """Remove the algorithm called ``name`` from the registry of ``backend``, and return it."""
    return backend_named(backend).registry.unregister(name)


def get_algorithm(name: str) -> Algorithm:
    """The CPU algorithm called ``name`` (a ValueError lists the names when there is none)."""
    return ALGORITHMS.get_algorithm(name)


def release_workspaces() -> None:
    """Free every CPU algorithm's kept workspace (``convalgos.cuda.release_workspaces`` frees the GPU's)."""
    ALGORITHMS.release_workspaces()


__version__ = "0.1.0"

__all__ = ["conv2d", "conv2d_input", "conv2d_weight", "run", "PASSES", "OP_OF", "set_workspace_cap",
           "workspace_cap", "ConvParams", "ALGORITHMS", "BACKENDS", "Algorithm", "Registry", "Support",
           "UnsupportedError", "get_algorithm", "register", "unregister", "release_workspaces", "passes",
           "reference", "__version__"]
