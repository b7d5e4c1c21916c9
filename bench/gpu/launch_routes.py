"""The launch job: what one kernel launch costs on the host, by each route a launch can take, as wall time of
``LAUNCHES`` back-to-back launches of a one-thread kernel and one synchronise, per launch (each configured
as the library's own, ``gpu_compiler.configure``: no low-occupancy warning per launch).

- a Numba device array on Numba's default stream (numba-cuda's own route);
- a CuPy array through ``gpu_base.launch`` (the library's route: CuPy's current stream, the array taken through
  ``__dlpack__``, prepared again at every launch);
- a pre-made Numba view of the same CuPy array (``cuda.as_cuda_array``, made once) on CuPy's stream: what the
  argument preparation of the route above costs;
- an object with only ``__cuda_array_interface__``, which makes numba-cuda synchronise on the array's stream
  first unless ``NUMBA_CUDA_ARRAY_INTERFACE_SYNC=0`` (switched both ways here);
- a CuPy RawKernel (compiled by NVRTC: a launch from C++, no Python argument handling) and CuPy's ``a += 1``;
- a captured CUDA graph: ``GRAPH_KERNELS`` launches through ``gpu_base.launch`` on a CuPy stream under
  ``begin_capture``/``end_capture``, replayed with ``graph.launch``; per kernel, and the replay's effect is
  checked (every captured kernel ran).

Under the simulator the Numba routes run (a simulated launch, not a GPU's); CuPy's routes and graphs need
hardware and say so.
"""
from __future__ import annotations

import time

import numpy as np

from convalgos.gpu_base import launch
from convalgos.gpu_compiler import configure, cuda

from .common import Device, emit, short_error
from .preflight import add_one

LAUNCHES, SIM_LAUNCHES = 2000, 3
GRAPH_KERNELS, GRAPH_REPLAYS = 200, 20
HARDWARE = "needs hardware (CuPy on a GPU)"

RAW_SOURCE = r'''extern "C" __global__ void add_one(float* a, int n) {
    int i = blockIdx.x * blockDim.x + threadIdx.x; if (i < n) a[i] += 1.0f; }'''


def _config():
    try:
        from numba.cuda.core import config       # numba-cuda
    except ImportError:
        from numba.core import config            # numba's built-in CUDA target
    return config


class _InterfaceOnly:
    """A device array seen through ``__cuda_array_interface__`` only (no ``__dlpack__``)."""

    def __init__(self, a):
        self.__cuda_array_interface__ = a.__cuda_array_interface__


def ways(dev: Device, a) -> dict:
    """route -> (call, argument), or route -> why it does not run here."""
    kernel, config = add_one, _config()
    found = {"Numba device array, Numba's default stream": (lambda d: configure(kernel, 1, 1)(d),
                                                           cuda.to_device(np.zeros(1))),
             "Numba, CuPy array through gpu_base.launch (CuPy's stream): the library's route":
                 (lambda d: launch(kernel, 1, 1)(d), a)}
    if dev.simulated:
        for name in ("Numba, a pre-made Numba view of the CuPy array, on CuPy's stream", "CuPy RawKernel",
                     f"CUDA graph replay of {GRAPH_KERNELS} captured gpu_base.launch launches, per kernel"):
            found[name] = HARDWARE
        return found
    import cupy
    from convalgos.gpu_compiler import stream_at
    view = cuda.as_cuda_array(a)
    found["Numba, a pre-made Numba view of the CuPy array, on CuPy's stream"] = (
        lambda d: configure(kernel, 1, 1, stream_at(cupy.cuda.get_current_stream().ptr))(d), view)
    for sync in (1, 0):
        found[f"__cuda_array_interface__ only, NUMBA_CUDA_ARRAY_INTERFACE_SYNC={sync}"] = (
            lambda d, sync=sync: (setattr(config, "CUDA_ARRAY_INTERFACE_SYNC", sync), launch(kernel, 1, 1)(d)),
            _InterfaceOnly(a))
    raw = cupy.RawKernel(RAW_SOURCE, "add_one")
    found["CuPy RawKernel"] = (lambda d: raw((1,), (1,), (d, np.int32(1))), a)
    found["CuPy a += 1 (an elementwise kernel)"] = (lambda d: d.__iadd__(1), a)
    return found


def graph_replay_us(a) -> tuple[float, bool]:
    """(us per kernel of a replayed graph of ``GRAPH_KERNELS`` captured launches, whether each one ran)."""
    import cupy
    stream = cupy.cuda.Stream(non_blocking=True)
    with stream:
        launch(add_one, 1, 1)(a)                     # compiled before the capture
        stream.synchronize()
        stream.begin_capture()
        for _ in range(GRAPH_KERNELS):
            launch(add_one, 1, 1)(a)
        graph = stream.end_capture()
    before = float(a[0].get())
    graph.launch(stream)
    stream.synchronize()
    ran = float(a[0].get()) - before == GRAPH_KERNELS
    start = time.perf_counter()
    for _ in range(GRAPH_REPLAYS):
        graph.launch(stream)
    stream.synchronize()
    return (time.perf_counter() - start) / (GRAPH_REPLAYS * GRAPH_KERNELS) * 1e6, ran


def run_launch_cost() -> None:
    """Emit one row per route: microseconds per launch (or why the route does not run here)."""
    dev = Device()
    n = SIM_LAUNCHES if dev.simulated else LAUNCHES
    a = dev.xp.zeros(1, np.float32)
    emit("setting", sync=getattr(_config(), "CUDA_ARRAY_INTERFACE_SYNC", "?"))
    for name, way in ways(dev, a).items():
        if isinstance(way, str):
            emit("row", way=name, us=None, launches=0, error=way)
            continue
        call, arg = way
        try:
            call(arg)                                 # compile, first touch
            dev.synchronize()
            start = time.perf_counter()
            for _ in range(n):
                call(arg)
            dev.synchronize()
            emit("row", way=name, us=(time.perf_counter() - start) / n * 1e6, launches=n)
        except Exception as e:  # noqa: BLE001 - one route failing leaves the others
            emit("row", way=name, us=None, launches=0, error=short_error(e))
    if not dev.simulated:
        name = f"CUDA graph replay of {GRAPH_KERNELS} captured gpu_base.launch launches, per kernel"
        try:
            us, ran = graph_replay_us(a)
            emit("row", way=name + ("" if ran else " (**the replay did not run every kernel**)"), us=us,
                 launches=GRAPH_KERNELS * GRAPH_REPLAYS)
        except Exception as e:  # noqa: BLE001 - capture refused (a driver or library too old): said so
            emit("row", way=name, us=None, launches=0, error=short_error(e))
