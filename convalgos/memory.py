"""Memory: the workspace cap every algorithm is held to, and the buffers an algorithm keeps between calls."""
from __future__ import annotations

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


def workspace_cap() -> int:
    """The most workspace any one algorithm may need for a layer: ``set_workspace_cap(bytes)``, else the
    environment variable CONVALGOS_WORKSPACE_CAP (bytes), else a quarter of the memory this process may use
    (physical memory, or the RLIMIT_AS address-space limit when lower)."""
    if _cap["bytes"] is not None:
        return _cap["bytes"]
    env = os.environ.get("CONVALGOS_WORKSPACE_CAP")
    if env:
        try:
            return int(env)
        except ValueError:
            raise ValueError(f"CONVALGOS_WORKSPACE_CAP must be a number of bytes, got {env!r}") from None
    return _memory_bytes() // 4


def set_workspace_cap(nbytes) -> None:
    """Cap every algorithm's workspace at ``nbytes`` (None: back to the default of ``workspace_cap``)."""
    if nbytes is not None and (isinstance(nbytes, bool) or not isinstance(nbytes, (int, np.integer))
                               or nbytes < 0):
        raise ValueError(f"nbytes must be None or an int >= 0, got {nbytes!r}")
    _cap["bytes"] = None if nbytes is None else int(nbytes)


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
        if zero:
            buf.fill(0)
        return buf

    def release(self) -> None:
        self._buffers().clear()

    @property
    def nbytes(self) -> int:
        return sum(b.nbytes for b in self._buffers().values())
