"""tests/gpu runs only under the Numba CUDA simulator or on a machine with a GPU.

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/gpu -q

The main run imports numba without the simulator, so there this directory is skipped (the variable must be
set before numba is first imported: it cannot be switched on from here).
"""
import os


def _gpu_side_runs() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return True
    from convalgos.arrays import gpu_available
    return gpu_available()


if not _gpu_side_runs():
    collect_ignore_glob = ["test_*.py"]
