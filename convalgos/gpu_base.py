"""What a GPU algorithm is: a ``convalgos.Algorithm`` over device arrays, and its launch sizes.

A GPU algorithm is its family's GPU twin (``convalgos/<family>/gpu.py``): it shares the CPU algorithm's name
and the family's shared definitions (tolerances, the idea's constraints, tile grids: ``<family>/shared.py``),
and answers for itself what its kernels decide: launch limits, ``workspace_bytes`` (held to the GPU's cap, a
quarter of the device's free memory: ``convalgos.workspace_cap("cuda")``) and ``flops``. A pass it does not
define is refused by the base's ``supports`` ("<name> has no backward_data pass").

``forward(x, w, p, out)`` takes device arrays: CuPy arrays on a GPU, NumPy arrays under the Numba CUDA
simulator. Library work goes through ``xp = array_module(x)`` so NumPy answers the same calls (``xp.matmul``,
``xp.fft.rfft2``) under the simulator. Kept device buffers live in the registry's ``Workspace``, allocated by
the operand's array module (``buffer``).

Launch sizes: elementwise kernels use grid-stride loops, so a launch may have fewer threads than items. Under
the simulator (about 1 ms per simulated thread) launches are capped at ``SIM_THREADS`` threads. CUDA caps a
grid at 2^31 - 1 blocks along x and 65535 along y and z (``MAX_GRID_YZ``).

Streams: every Numba kernel is launched through ``launch``, on CuPy's current stream (torch's, where the
caller is torch and has made it CuPy's), so a kernel and the CuPy work around it (cuBLAS, cuFFT, copies) run
in order on one stream; a plain ``kernel[blocks, threads]`` would go to Numba's default stream and race CuPy
work on any other. The simulator has no streams.

What a launch costs on the host (H200, 2026-12-04): 43-80 us with CuPy arrays, which Numba exports through
DLPack and the CUDA array interface at every launch; 17 us with Numba views of them made beforehand. So
``launch`` hands the kernel a Numba view of each CuPy argument, made once per (pointer, shape, strides, dtype)
and kept (``VIEWS`` of them, least recently used dropped): a view of the same region read the same way is the
same argument, and it holds no reference to the memory (``owner=None``), so keeping it keeps nothing alive.
Whether CuPy is there and the simulator is on are read once.

``hold_stream(seconds)`` keeps the current stream busy for about that long (a one-thread sleeping kernel), so
that CUDA events recorded after it time the kernels issued meanwhile and not the host that issued them.
"""
from __future__ import annotations

import functools
from collections import OrderedDict

from . import gpu_ops
from .arrays import array_module, simulator_enabled
from .memory import Workspace
from .registry import SUPPORTED, Algorithm, Support, unsupported

#: threads per block of the 1-D grid-stride kernels, and the most blocks one launch uses.
THREADS_1D = 256
MAX_BLOCKS_1D = 4096
#: threads per launch of a 1-D kernel under the simulator.
SIM_THREADS = 32
#: the most blocks a CUDA grid may have along x, and along y and z.
MAX_GRID_X, MAX_GRID_YZ = 2**31 - 1, 65535


def grid_fits(name: str, blocks_x: int, blocks_yz: int) -> Support:
    """Whether a launch of blocks_x x blocks_yz blocks fits CUDA's grid limits (a reason when not)."""
    if blocks_yz > MAX_GRID_YZ or blocks_x > MAX_GRID_X:
        return unsupported(f"{name} launches a grid of {blocks_x} x {blocks_yz} blocks, over CUDA's "
                           f"{MAX_GRID_X} x {MAX_GRID_YZ}")
    return SUPPORTED


#: device buffers one GPU algorithm keeps between calls (least recently used dropped past this).
KEPT_BYTES = 4 << 30


def op_name(kernel) -> str:
    """The counter's name of a kernel: its family and factory, say ``im2col.im2col_kernel``."""
    function = getattr(kernel, "py_func", kernel)
    return f"{function.__module__.split('.')[-2]}.{function.__qualname__.split('.')[0]}"


@functools.lru_cache(maxsize=1)
def _simulated() -> bool:
    """The simulator is on (read once: it must be set before numba is first imported anyway)."""
    return simulator_enabled()


@functools.lru_cache(maxsize=1)
def _device_side():
    """(cupy, numba-cuda's ``from_cuda_array_interface``, ``stream_at``, ``configure``) on a GPU; None under the
    simulator."""
    if _simulated():
        return None
    import cupy
    from .gpu_compiler import configure, cuda, stream_at
    return cupy, cuda.from_cuda_array_interface, stream_at, configure


#: Numba views of CuPy arrays kept for ``launch`` (module docstring).
VIEWS = 1024
_views: OrderedDict = OrderedDict()


def numba_view(a):
    """A Numba device-array view of CuPy array ``a``, made once per region and layout (module docstring)."""
    key = (a.data.ptr, a.shape, a.strides, a.dtype.char)
    view = _views.get(key)
    if view is None:
        view = _device_side()[1](a.__cuda_array_interface__, owner=None, sync=False)
        _views[key] = view
        if len(_views) > VIEWS:
            _views.popitem(last=False)
    return view


def launch(kernel, blocks, threads):
    """``kernel[blocks, threads]`` on CuPy's current stream (module docstring), ready to be called with CuPy
    arrays (passed as kept Numba views) and scalars; counted by ``gpu_ops``."""
    gpu_ops.record(op_name(kernel))
    side = _device_side()
    if side is None:
        return kernel[blocks, threads]
    cupy, _, stream_at, configure = side
    configured = configure(kernel, blocks, threads, stream_at(cupy.cuda.get_current_stream().ptr))
    ndarray = cupy.ndarray
    return lambda *args: configured(*[numba_view(a) if type(a) is ndarray else a for a in args])


@functools.lru_cache(maxsize=1)
def _hold_kernel():
    from .gpu_compiler import cuda

    @cuda.jit
    def hold(microseconds):
        for _ in range(microseconds):
            cuda.nanosleep(1000)
    return hold


def hold_stream(seconds: float) -> None:
    """Keep CuPy's current stream busy for about ``seconds`` (each ``nanosleep`` of 1 us sleeps between 0 and
    2 us): work issued next starts after it (module docstring)."""
    launch(_hold_kernel(), 1, 1)(max(1, int(seconds * 1e6)))


def launch_1d(items: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``items`` work items."""
    if _simulated():
        return 1, max(1, min(SIM_THREADS, items))
    threads = THREADS_1D
    return max(1, min(MAX_BLOCKS_1D, -(-items // threads))), threads


class GPUAlgorithm(Algorithm):
    """A GPU algorithm: passes on device arrays, device buffers kept in the workspace."""

    backend = "cuda"

    def __init__(self):
        super().__init__()
        self.workspace = Workspace(max_bytes=KEPT_BYTES)

    def buffer(self, like, tag: str, shape, dtype=None, zero: bool = False):
        """A kept device buffer, allocated by the array module of ``like`` (of ``like``'s dtype by default)."""
        return self.workspace.get(tag, shape, like.dtype if dtype is None else dtype, zero, xp=array_module(like))

    def __repr__(self) -> str:
        return f"<gpu algorithm {self.name}>"
