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
"""
from __future__ import annotations

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


def launch(kernel, blocks, threads):
    """``kernel[blocks, threads]`` on CuPy's current stream (module docstring), ready to be called; counted by
    ``gpu_ops``."""
    gpu_ops.record(op_name(kernel))
    if simulator_enabled():
        return kernel[blocks, threads]
    import cupy
    from .gpu_compiler import configure, stream_at
    return configure(kernel, blocks, threads, stream_at(cupy.cuda.get_current_stream().ptr))


def launch_1d(items: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``items`` work items."""
    if simulator_enabled():
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
