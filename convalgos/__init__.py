"""convalgos: 2-D convolution computed by several algorithms that all compute the same function.

    >>> import numpy as np, convalgos
    >>> x = np.random.rand(1, 3, 32, 32).astype(np.float32)
    >>> w = np.random.rand(8, 3, 3, 3).astype(np.float32)
    >>> y = convalgos.conv2d(x, w, padding=1, algo="winograd_4x4")
"""
# How the thread pools that run convalgos' work wait, set up here whatever the user imported first: see
# convalgos/threads.py (PROTOTYPE wiring, issue 20).
from . import threads
threads.configure()

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
