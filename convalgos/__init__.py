"""convalgos: 2-D convolution computed by several algorithms that all compute the same function.

    >>> import numpy as np, convalgos
    >>> x = np.random.rand(1, 3, 32, 32).astype(np.float32)
    >>> w = np.random.rand(8, 3, 3, 3).astype(np.float32)
    >>> y = convalgos.conv2d(x, w, padding=1, algo="winograd_4x4")
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

from . import reference  # noqa: E402
# Importing an algorithm's module registers it: this is the order ALGORITHMS lists them in.
from . import direct  # noqa: F401,E402  (registration, one line per algorithm)
from . import depthwise  # noqa: F401,E402
from . import implicit_gemm  # noqa: F401,E402
from . import im2col, fft, fft_tiled, winograd, winograd_fused  # noqa: F401,E402
from .conv import conv2d, conv2d_input, conv2d_weight
from .run import run  # run: a validated layer's pass through an algorithm (used by autotune)
from .params import ConvParams
from .memory import set_workspace_cap, workspace_cap
from .registry import ALGORITHMS, PASSES, Algorithm, Support, UnsupportedError, get_algorithm, release_workspaces

__version__ = "0.1.0"

__all__ = ["conv2d", "conv2d_input", "conv2d_weight", "run", "PASSES", "set_workspace_cap", "workspace_cap",
           "ConvParams", "ALGORITHMS", "Algorithm", "Support", "UnsupportedError", "get_algorithm",
           "release_workspaces", "reference", "__version__"]
