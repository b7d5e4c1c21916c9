"""The tile shapes of the GPU's tiled implicit GEMM (``tiled.py``), as data: one ``Tiling`` per registered
configuration, with the smaller twin the simulator runs (same code, fewer simulated threads).

CUTLASS's hierarchy, named as it names it: a block of threads computes a BLOCK_M x BLOCK_N tile of the GEMM's
result, walking the reduction in chunks of K_CHUNK (staged through shared memory, two buffers); each thread
holds THREAD_M x THREAD_N results in registers, so one shared-memory load feeds THREAD_N (or THREAD_M)
multiply-adds. A block has (BLOCK_M / THREAD_M) x (BLOCK_N / THREAD_N) threads.

Each block loads a BLOCK_M x K_CHUNK tile of the left operand and a K_CHUNK x BLOCK_N tile of the right one
per chunk, every thread the same number of elements: the thread count must divide both tiles, and (for the
fixed per-thread gather columns of ``tiled_kernels.py``) be a multiple of BLOCK_N and of K_CHUNK.
"""
from __future__ import annotations

from typing import NamedTuple


class Tiling(NamedTuple):
    BLOCK_M: int
    BLOCK_N: int
    K_CHUNK: int
    THREAD_M: int
    THREAD_N: int

    @property
    def threads(self) -> int:
        return (self.BLOCK_M // self.THREAD_M) * (self.BLOCK_N // self.THREAD_N)

    def check(self) -> "Tiling":
        """The tiling itself, or ValueError naming the rule it breaks."""
        m, n, k, tm, tn = self
        if m % tm or n % tn:
            raise ValueError(f"tiling {self}: THREAD_M={tm} must divide BLOCK_M={m} and THREAD_N={tn} BLOCK_N={n}")
        t = self.threads
        if t % n or t % k or (m * k) % t or (k * n) % t:
            raise ValueError(f"tiling {self}: its {t} threads must be a multiple of BLOCK_N={n} and of K_CHUNK={k}, "
                             f"and divide the {m}x{k} and {k}x{n} operand tiles")
        return self


#: name -> (the GPU's tiling, the simulator's). 128x64: large layers, 128 threads of 8x8 results (64
#: multiply-adds per 16 shared-memory loads); 64x64: medium, 256 threads of 4x4 (16 per 8); 32x32: small planes
#: and deep channels, where larger tiles leave most multiprocessors idle, 64 threads of 4x4 with a reduction
#: chunk of 16. The simulator's twins have 16 threads each (its cost grows with the threads): 128x64's keeps the
#: 2:1 shape and 8-row register tiles, 32x32's the longer reduction chunk.
CONFIGURATIONS = {
    "128x64": (Tiling(128, 64, 8, 8, 8), Tiling(32, 16, 4, 8, 4)),
    "64x64": (Tiling(64, 64, 8, 4, 4), Tiling(16, 16, 4, 4, 4)),
    "32x32": (Tiling(32, 32, 16, 4, 4), Tiling(16, 16, 8, 4, 4)),
}
for _gpu, _sim in CONFIGURATIONS.values():
    _gpu.check(), _sim.check()
