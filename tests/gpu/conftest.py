"""tests/gpu runs only under the Numba CUDA simulator or on a machine with a GPU.

    NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/gpu -q

The main run imports numba without the simulator, so there this directory is skipped (the variable must be
set before numba is first imported: it cannot be switched on from here).
"""
import os
import sys

import pytest

#: the interpreter's thread switch interval under the simulator (seconds). Its ``syncthreads`` is a barrier of
#: Python threads, and each wait costs up to one interval (5 ms by default): the fused layers' block reductions
#: took ~4 s per launch at 64 channels, and the whole directory 181 s against 59 s at this interval (2026-12-04,
#: 2-core AMD EPYC). Results are unchanged: the barrier's order is the same.
SIM_SWITCH_INTERVAL = 1e-4


def _gpu_side_runs() -> bool:
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0"):
        return True
    from convalgos.arrays import gpu_available
    return gpu_available()


if not _gpu_side_runs():
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True, scope="session")
def quick_barriers():
    """The simulator's barriers made quick for the whole run (SIM_SWITCH_INTERVAL); nothing on a GPU."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM", "0") in ("", "0"):
        yield
        return
    saved = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    yield
    sys.setswitchinterval(saved)
