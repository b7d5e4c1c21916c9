"""What an algorithm is, and the ordered registry of them.

An algorithm answers four questions about a layer (``ConvParams``):

- ``supports(p)``: can it run this layer? A falsy answer carries a ``.reason`` a person can read.
- ``workspace_bytes(p)``: extra memory it allocates beyond input, weight and output.
- ``flops(p)``: the arithmetic it really does (direct-equivalent FLOPs are ``p.flops``).
- ``forward(x, w, p, out)``: compute the convolution into ``out``.

``forward`` is the first of three passes; backward-data and backward-filter would be two more methods of the
same shape (``backward_data(dy, w, p, dx)``, ``backward_filter(x, dy, p, dw)``), and a GPU implementation
sits beside the CPU one under the same name. Only the forward pass on the CPU is built here.
"""
from __future__ import annotations

import abc
import threading
from collections import OrderedDict

import numpy as np

from .params import ConvParams


class Support:
    """The answer to ``supports``: truthy when the layer can run, else falsy with a ``reason``."""

    __slots__ = ("ok", "reason")

    def __init__(self, ok: bool, reason: str = ""):
        self.ok, self.reason = bool(ok), reason

    def __bool__(self) -> bool:
        return self.ok

    def __repr__(self) -> str:
        return "Support(True)" if self.ok else f"Support(False, {self.reason!r})"


SUPPORTED = Support(True)


def unsupported(reason: str) -> Support:
    return Support(False, reason)


class UnsupportedError(ValueError):
    """Raised by ``conv2d(..., algo=name)`` for a layer that algorithm does not support."""


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

    def get(self, tag: str, shape, dtype, zero: bool = False) -> np.ndarray:
        """A buffer of this shape and dtype, reused when one is kept (contents undefined unless ``zero``)."""
        buffers = self._buffers()
        key = (tag, tuple(shape), np.dtype(dtype).str)
        buf = buffers.pop(key, None)
        if buf is None:
            buf = np.empty(shape, dtype)
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


class Algorithm(abc.ABC):
    """Base of every convolution algorithm. Subclasses set ``name`` and override the four questions.

    ``deterministic``: the output is bitwise repeatable run to run (same input, same thread count).
    ``tolerance``: normwise error max|y - ref| / max|ref| allowed against the float64 reference, per dtype.
    """

    name: str = ""
    deterministic: bool = True
    tolerance: dict[str, float] = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def __init__(self):
        self.workspace = Workspace()

    def supports(self, p: ConvParams) -> Support:
        return SUPPORTED

    def workspace_bytes(self, p: ConvParams) -> int:
        return 0

    def flops(self, p: ConvParams) -> int:
        return p.flops

    @abc.abstractmethod
    def forward(self, x: np.ndarray, w: np.ndarray, p: ConvParams, out: np.ndarray) -> None:
        """Write the convolution of contiguous ``x`` (N, C, H, W) and ``w`` (K, C/g, R, S), both in
        ``p.compute_dtype``, into the contiguous ``out`` (N, K, Ho, Wo) of that dtype. No bias; N >= 1."""

    def release(self) -> None:
        """Free the workspace kept between calls."""
        self.workspace.release()

    def __repr__(self) -> str:
        return f"<algorithm {self.name}>"


#: name -> algorithm, in registration order (the order the tests and the autotuner see them).
ALGORITHMS: "OrderedDict[str, Algorithm]" = OrderedDict()


def register(algorithm: Algorithm) -> Algorithm:
    if not algorithm.name or algorithm.name in ALGORITHMS:
        raise ValueError(f"algorithm name must be new and non-empty, got {algorithm.name!r}")
    ALGORITHMS[algorithm.name] = algorithm
    return algorithm


def get_algorithm(name: str) -> Algorithm:
    try:
        return ALGORITHMS[name]
    except (KeyError, TypeError):
        raise ValueError(f"algo must be one of {list(ALGORITHMS)}, got {name!r}") from None


def release_workspaces() -> None:
    """Free every algorithm's kept workspace."""
    for algorithm in ALGORITHMS.values():
        algorithm.release()
