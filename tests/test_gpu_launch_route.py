"""``gpu_base.launch`` on a GPU, with stand-ins for CuPy and numba-cuda (no GPU here): a CuPy argument goes to
the kernel as a Numba view made once per memory region and layout, a scalar as it is, on CuPy's current
stream, and each launch is counted."""
import numpy as np

from convalgos import gpu_base
from convalgos.cuda import count_ops


class DeviceArray(np.ndarray):
    """Stands for a CuPy array: ``data.ptr`` and ``__cuda_array_interface__`` from NumPy's own."""

    @property
    def data(self):
        return type("Pointer", (), {"ptr": self.__array_interface__["data"][0]})()

    @property
    def __cuda_array_interface__(self):
        return self.__array_interface__


def test_a_launch_passes_kept_views_of_device_arrays_and_scalars_as_they_are(monkeypatch):
    made, launched = [], []
    cupy = type("cupy", (), {"ndarray": DeviceArray})()
    cupy.cuda = type("cuda", (), {"get_current_stream": staticmethod(lambda: type("S", (), {"ptr": 7})())})()

    def view_of(interface, owner, sync):
        made.append((owner, sync))
        return ("view", interface["data"][0])

    def scale_kernel():                      # what op_name reads: the factory's module and name
        pass
    scale_kernel.__module__, scale_kernel.__qualname__ = "convalgos.direct.gpu_kernels", "scale_kernel.<locals>.kernel"
    kernel = type("Kernel", (), {"py_func": scale_kernel, "__getitem__": lambda self, config: (
        lambda *args: launched.append((config, args)))})()
    def configure(kernel, blocks, threads, stream):         # gpu_compiler.configure without the warning setting
        return kernel[blocks, threads, stream]
    monkeypatch.setattr(gpu_base, "_device_side", lambda: (cupy, view_of, lambda ptr: f"stream {ptr}", configure))
    monkeypatch.setattr(gpu_base, "_views", type(gpu_base._views)())
    a = np.zeros(8, np.float32).view(DeviceArray)
    with count_ops() as ops:
        gpu_base.launch(kernel, 2, 32)(a, 3, a)
        gpu_base.launch(kernel, 2, 32)(a[:8], 1.5)           # another array object on the same region: same view
    view = ("view", a.data.ptr)
    assert launched == [((2, 32, "stream 7"), (view, 3, view)), ((2, 32, "stream 7"), (view, 1.5))]
    assert made == [(None, False)] and ops.by_name == {"direct.scale_kernel": 2}
    gpu_base.launch(kernel, 1, 1)(a[::2])                     # another layout of the region: its own view
    assert len(made) == 2
