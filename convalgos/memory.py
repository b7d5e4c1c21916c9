"""Memory: the workspace cap every algorithm is held to, and the buffers an algorithm keeps between calls.

The cap is per backend: a CPU algorithm's workspace comes out of host memory, a GPU algorithm's out of the
device's (a quarter of what is free on the current device when asked). A cap the user sets applies to both.

``holding()`` collects every kept buffer handed out inside its block, so that a CUDA graph captured there can
pin the memory its kernels write: a buffer dropped later from its workspace (least recently used) would
otherwise go back to the pool while a replay still writes it.
"""
from __future__ import annotations

import contextlib
import os
import threading
from collections import OrderedDict

import numpy as np

GiB = float(1 << 30)


def _memory_bytes() -> int:
    """What this process may use: physical memory, or the address-space limit when one is set."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    try:
        import resource
        soft, _ = resource.getrlimit(resource.RLIMIT_AS)
        if soft != resource.RLIM_INFINITY:
            total = min(total, soft)
    except (ImportError, ValueError, OSError):
        pass
    return total


_cap = {"bytes": None}


def _device_free_bytes() -> int:
    """Free memory on the current CUDA device, counting what CuPy's pool holds free for reuse as free (under
    the simulator, or without CuPy: host memory)."""
    from .arrays import cupy_available
    if not cupy_available():
        return _memory_bytes()
    import cupy
    free, _ = cupy.cuda.runtime.memGetInfo()
    pool = cupy.get_default_memory_pool()
    return int(free + pool.free_bytes())


def workspace_cap(backend: str = "cpu") -> int:
    """The most workspace any one algorithm of ``backend`` ("cpu" or "cuda") may need for a layer:
    ``set_workspace_cap(bytes)``, else the environment variable CONVALGOS_WORKSPACE_CAP (bytes), else a quarter
    of the memory it draws on: for the CPU what this process may use (physical memory, or the RLIMIT_AS
    address-space limit when lower), for the GPU what is free on the current device."""
    if _cap["bytes"] is not None:
        return _cap["bytes"]
    env = os.environ.get("CONVALGOS_WORKSPACE_CAP")
    if env:
        try:
            return int(env)
        except ValueError:
            raise ValueError(f"CONVALGOS_WORKSPACE_CAP must be a number of bytes, got {env!r}") from None
    if backend not in ("cpu", "cuda"):
        raise ValueError(f"backend must be 'cpu' or 'cuda', got {backend!r}")
    return (_memory_bytes() if backend == "cpu" else _device_free_bytes()) // 4


def set_workspace_cap(nbytes) -> None:
    """Cap every algorithm's workspace, CPU and GPU, at ``nbytes`` (None: back to the defaults of
    ``workspace_cap``)."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer))
                               or nbytes < 0):
        raise ValueError(f"nbytes must be None or an int >= 0, got {nbytes!r}")
    _cap["bytes"] = None if nbytes is None else int(nbytes)


_holders = threading.local()


@contextlib.contextmanager
def holding():
    """Within the block, every buffer a ``Workspace`` hands out in this thread is appended to the list it yields."""
    held = []
    outer = getattr(_holders, "lists", ())
    _holders.lists = outer + (held,)
    try:
        yield held
    finally:
        _holders.lists = outer


class Workspace:
    """Buffers an algorithm keeps between calls so repeated calls allocate nothing large.

    A first write to fresh memory costs about 4 us per 4 KiB page here, so a patch matrix allocated afresh each
    call can cost more than the GEMM that reads it. Buffers are keyed by (tag, shape, dtype), kept per thread
    (two threads never share a buffer), and the least recently used are dropped past ``max_bytes``.
    ``release()`` frees them all.
    """

    def __init__(self, max_bytes: int = 1 << 30):
        self.max_bytes = max_bytes
        self._local = threading.local()

    def _buffers(self) -> OrderedDict:
        if not hasattr(self._local, "buffers"):
            self._local.buffers = OrderedDict()
        return self._local.buffers

    def get(self, tag: str, shape, dtype, zero: bool = False, xp=np):
        """A buffer of this shape and dtype, reused when one is kept (contents undefined unless ``zero``),
        allocated by the array module ``xp`` (NumPy here; CuPy for a GPU algorithm's device buffers)."""
        buffers = self._buffers()
        key = (tag, tuple(shape), np.dtype(dtype).str, xp.__name__)
        buf = buffers.pop(key, None)
        if buf is None:
            buf = xp.empty(shape, dtype)
            total = buf.nbytes + sum(b.nbytes for b in buffers.values())
            while buffers and total > self.max_bytes:
                total -= buffers.popitem(last=False)[1].nbytes
        buffers[key] = buf
        for held in getattr(_holders, "lists", ()):
            held.append(buf)
        if zero:
            buf.fill(0)
        return buf

    def release(self) -> None:
        self._buffers().clear()

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers().values())
