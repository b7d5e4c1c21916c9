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


def _simulated() -> bool:
    return os.environ.get("NUMBA_ENABLE_CUDASIM", "0") not in ("", "0")


def _gpu_side_runs() -> bool:
    if _simulated():
        return True
    from convalgos.arrays import gpu_available
    return gpu_available()


if not _gpu_side_runs():
    collect_ignore_glob = ["test_*.py"]


@pytest.fixture(autouse=True, scope="session")
def quick_barriers():
    """The simulator's barriers made quick for the whole run (SIM_SWITCH_INTERVAL); nothing on a GPU."""
    if not _simulated():
        yield
        return
    saved = sys.getswitchinterval()
    sys.setswitchinterval(SIM_SWITCH_INTERVAL)
    yield
    sys.setswitchinterval(saved)


@pytest.fixture
def gpu_tuner(monkeypatch):
    """The Tuner a conv on "cuda" dispatches through (the simulated GPU's, or the default one on hardware), with
    one rule, im2col first (the simulator's cheapest: its GEMMs are NumPy's matmul there, cuBLAS's on hardware);
    its table cleared and its graph mode restored after."""
    import autotune
    from autotune.heuristics import Heuristics
    tuner = autotune.simulated_gpu_tuner() if _simulated() else autotune.default_tuner()
    tuner.clear()
    monkeypatch.setattr(tuner, "heuristics", Heuristics({"rules": [
        {"name": "im2col first (the simulator's cheapest)", "when": {}, "order": ["im2col"]}]}))
    graph_mode = tuner.graph_mode
    yield tuner
    tuner.graph_mode = graph_mode
    tuner.clear()
