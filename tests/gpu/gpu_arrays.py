"""Arrays for the GPU tests: on the device (a NumPy array under the simulator, a CuPy array on a GPU) and back."""
import numpy as np

from convalgos.arrays import simulator_enabled


def device(a):
    """The array on the device: a NumPy array under the simulator, else a CuPy array."""
    if simulator_enabled():
        return a
    import cupy
    return cupy.asarray(a)


def host(a):
    """A device array's values as a NumPy array."""
    return a if isinstance(a, np.ndarray) else a.get()
