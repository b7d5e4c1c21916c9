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
# The thread pools convalgos' work runs on are set up first, whatever the user imported before
# (convalgos/threads.py says what it does to the process, and why, measured).
from . import threads
threads.configure()

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
