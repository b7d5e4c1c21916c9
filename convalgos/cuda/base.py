"""What a GPU algorithm is: a ``convalgos.Algorithm`` over device arrays, its workspace and its launch sizes.

A GPU algorithm has the CPU twin's name and answers ``supports``, ``flops`` and ``workspace_bytes`` by asking
that twin (looked up in ``convalgos.ALGORITHMS`` by name at call time) unless it overrides them because the
GPU does the work differently. ``forward(x, w, p, out)`` takes device arrays: CuPy arrays on a GPU, NumPy
arrays under the Numba CUDA simulator. Library work goes through ``xp = array_module(x)`` so NumPy answers
the same calls (``xp.matmul``, ``xp.fft.rfft2``) under the simulator.

Launch sizes: elementwise kernels use grid-stride loops, so a launch may have fewer threads than items. Under
the simulator (about 1 ms per simulated thread) launches are capped at ``SIM_THREADS`` threads.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from ..backend import array_module, simulator_enabled
from ..params import ConvParams
from ..registry import Algorithm

#: threads per block of the 1-D grid-stride kernels, and the most blocks one launch uses.
THREADS_1D = 256
MAX_BLOCKS_1D = 4096
#: threads per launch of a 1-D kernel under the simulator.
SIM_THREADS = 32


def launch_1d(items: int) -> tuple[int, int]:
    """(blocks, threads) for a grid-stride kernel over ``items`` work items."""
    if simulator_enabled():
        return 1, max(1, min(SIM_THREADS, items))
    threads = THREADS_1D
    return max(1, min(MAX_BLOCKS_1D, -(-items // threads))), threads


def cpu_twin(name: str) -> Algorithm:
    """The CPU algorithm of this name (looked up at call time)."""
    from ..registry import ALGORITHMS
    return ALGORITHMS[name]


class DeviceWorkspace:
    """Device buffers kept between calls, keyed by (tag, shape, dtype), least recently used dropped past
    ``max_bytes``. ``get`` allocates with the array module of the operand it is given (CuPy's memory pool on a
    GPU, NumPy under the simulator)."""

    def __init__(self, max_bytes: int = 4 << 30):
        self.max_bytes = max_bytes
        self._buffers: OrderedDict = OrderedDict()

    def get(self, tag: str, shape, dtype, zero: bool = False, xp=np):
        """A buffer of this shape and dtype from module xp, reused when one is kept (the CPU Workspace's call)."""
        key = (xp.__name__, tag, tuple(int(s) for s in shape), np.dtype(dtype).str)
        buf = self._buffers.pop(key, None)
        if buf is None:
            total = sum(b.nbytes for b in self._buffers.values())
            need = int(np.prod(key[2], dtype=np.int64)) * np.dtype(dtype).itemsize
            while self._buffers and total + need > self.max_bytes:
                total -= self._buffers.popitem(last=False)[1].nbytes
            buf = xp.empty(key[2], dtype)
        self._buffers[key] = buf
        if zero:
            buf.fill(0)
        return buf

    def release(self) -> None:
        self._buffers.clear()

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers.values())


class GPUAlgorithm(Algorithm):
    """A GPU algorithm: the CPU twin's answers unless overridden; device workspace; ``forward`` on device."""

    #: the CPU algorithm answering for this one (same name unless set).
    twin_name: str | None = None

    def __init__(self):
        super().__init__()
        self.workspace = DeviceWorkspace()

    @property
    def twin(self) -> Algorithm:
        return cpu_twin(self.twin_name or self.name)

    @property
    def tolerance(self) -> dict[str, float]:  # type: ignore[override]
        return self.twin.tolerance

    def supports(self, p: ConvParams):
        return self.twin.supports(p)

    def flops(self, p: ConvParams) -> int:
        return self.twin.flops(p)

    def buffer(self, like, tag: str, shape, dtype=None, zero: bool = False):
        """A reused device buffer allocated by the array module of ``like``."""
        return self.workspace.get(tag, shape, like.dtype if dtype is None else dtype, zero, xp=array_module(like))

    def __repr__(self) -> str:
        return f"<gpu algorithm {self.name}>"
