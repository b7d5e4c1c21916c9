"""On a GPU: the library's own small launches carry no ``NumbaPerformanceWarning: Grid size N will likely result
in GPU under-utilization``, and a user's own small launch still does. The simulator emits no such warning, so
this only means something on hardware (``tests/test_gpu_compiler.py`` checks the setting in the CPU suite)."""
import warnings

import numpy as np
import pytest

import convalgos
from convalgos.arrays import simulator_enabled
from convalgos.gpu_compiler import cuda

from gpu_arrays import device

pytestmark = pytest.mark.skipif(simulator_enabled(), reason="the simulator emits no low-occupancy warning")


def test_the_librarys_small_grids_do_not_warn_and_a_users_still_do():
    x, w = device(np.ones((1, 2, 4, 4), np.float32)), device(np.ones((2, 2, 3, 3), np.float32))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        convalgos.conv2d(x, w, padding=1, algo="direct")
    assert not [str(c.message) for c in caught if "under-utilization" in str(c.message)]

    @cuda.jit
    def users_own(a):
        a[0] = 1.0
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        users_own[1, 1](device(np.zeros(1, np.float32)))
    assert any("under-utilization" in str(c.message) for c in caught)
