"""The one door to the CUDA compiler (convalgos.gpu_compiler): numba-cuda loads under numpy 2.5 once
``convalgos.cuda`` is imported, the library's launches carry no low-occupancy warning, and a GPU side that
cannot run says why and how to fix it in one message.

numpy 2.5 is simulated in a fresh process before anything imports numba: ``np.row_stack`` removed (and its name
from ``np.__all__``, which scipy's ``from numpy import *`` reads), and the version read as 2.5, since numba's
own overload of ``row_stack`` is guarded by numpy's version (numba-cuda's is not)."""
import os
import subprocess
import sys

import numpy as np
import pytest

from convalgos import arrays, gpu_compiler

NUMPY_25 = ("import numpy as np\n"
            "if hasattr(np, 'row_stack'):\n"                 # not already numpy 2.5
            "    del np.row_stack\n"
            "    np.__all__ = [n for n in np.__all__ if n != 'row_stack']\n"
            "    np.__version__ = '2.5.0'\n")


def run_fresh(code: str, simulator: bool) -> subprocess.CompletedProcess:
    env = dict(os.environ, NUMBA_ENABLE_CUDASIM="1" if simulator else "0")
    return subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)


def test_under_numpy_25_the_cuda_target_loads_with_convalgos_cuda_and_a_kernel_runs():
    code = NUMPY_25 + (
        "import convalgos, convalgos.cuda\n"
        "from numba.cuda.np import arrayobj\n"           # what numba-cuda's first compile imports
        "assert not hasattr(np, 'row_stack'), 'the shim was left in numpy'\n"
        "x = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)\n"
        "w = np.ones((1, 1, 2, 2), np.float32)\n"
        "with convalgos.cuda.count_ops() as ops:\n"
        "    y = convalgos.conv2d(x, w, backend='cuda', algo='direct')\n"
        "error = convalgos.reference.normwise_error(y, convalgos.reference.conv2d(x, w))\n"
        "assert error <= 1e-6, error\n"
        "print('ran', ops.total)\n")
    done = run_fresh(code, simulator=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("ran ") and int(done.stdout.split()[1]) >= 1


def test_under_numpy_25_without_the_step_the_cuda_target_fails_to_load():
    done = run_fresh(NUMPY_25 + "from numba.cuda.np import arrayobj\n", simulator=False)
    assert done.returncode != 0
    assert "AttributeError: module 'numpy' has no attribute 'row_stack'" in done.stderr


class RecordingKernel:
    """Stands in for a compiled kernel: records the low-occupancy setting when it is configured."""

    def __getitem__(self, config):
        self.config, self.warnings_setting = config, gpu_compiler._config.CUDA_LOW_OCCUPANCY_WARNINGS
        return self


def test_the_librarys_launches_are_configured_without_the_low_occupancy_warning(monkeypatch):
    monkeypatch.setattr(gpu_compiler._config, "CUDA_LOW_OCCUPANCY_WARNINGS", 1)
    kernel = RecordingKernel()
    assert gpu_compiler.configure(kernel, 2, 32, 0) is kernel and kernel.config == (2, 32, 0)
    assert kernel.warnings_setting == 0
    assert gpu_compiler._config.CUDA_LOW_OCCUPANCY_WARNINGS == 1       # a user's own kernels still warn


def test_a_broken_cuda_target_is_one_message_with_its_fix(monkeypatch):
    def row_stack_missing():
        raise AttributeError("module 'numpy' has no attribute 'row_stack'")
    monkeypatch.setattr(gpu_compiler, "_load_target_modules", row_stack_missing)
    gpu_compiler.target_problem.cache_clear()
    arrays.gpu_problem.cache_clear()
    try:
        problem = arrays.gpu_problem()
        with pytest.raises(arrays.GPUUnavailableError) as raised:
            arrays.require_gpu()
    finally:
        gpu_compiler.target_problem.cache_clear()
        arrays.gpu_problem.cache_clear()
    assert str(raised.value) == problem
    assert ("numba-cuda's CUDA target failed to load (AttributeError: module 'numpy' has no attribute "
            "'row_stack'); install the GPU extra") in problem
    if not arrays.cupy_available():
        assert "CuPy" in problem and "pip install -e '.[gpu]'" in problem


def test_the_cuda_target_loads_here():
    assert gpu_compiler.target_problem() is None
    assert gpu_compiler.numba_dtype(np.float32).name == "float32"
