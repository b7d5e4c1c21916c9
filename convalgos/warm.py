"""Compile the CPU kernels ahead of their first use, over every core.

    python -m convalgos.warm              # once after installing; later processes load the kernels in ~0.2 s each
    python -m convalgos.warm --processes 1

Every kernel is a Numba function with ``cache=True``: the first call of each signature compiles it (LLVM, one
core, ~0.4-4 s) and writes it under ``__pycache__``; every later process loads it. A first test run or a first
tuning on a fresh install therefore spends minutes compiling on one core while the others idle: measured on a
clean clone here (2-core AMD EPYC, 2026-12-05), the test suite took 847 s cold against 295 s with the kernels
compiled. Compiling is independent per kernel, so this module spreads it over processes:

- a job is one algorithm family (the CPU kernels it owns), in both compute dtypes (float32,
  float64; float16 is computed in float32), every pass it implements, its prepared-weight path, on a few small
  layers that take each family's code paths (3x3 stride 1 and 2, 1x1, dilated 5x5, grouped, depthwise, a
  layer wide enough for channel blocking);
- a kernel belongs to one family, so no two processes compile the same function (two processes adding
  signatures to one function's cache index at once could each drop the other's: it would then compile again,
  never run wrong); the shared helpers in ``convalgos/kernels`` are small;
- the families go to ``processes`` workers, the largest first, each to the least loaded.

What it cannot know is a signature only a caller's own arrays reach; that kernel compiles at its first call,
as before. ``warm`` is idempotent: on a warm cache each worker only loads what exists.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

#: (input shape, weight shape, conv arguments): each family's code paths, small enough to run in milliseconds.
LAYERS = (
    ((2, 4, 9, 9), (6, 4, 3, 3), dict(padding=1)),
    ((2, 4, 9, 9), (6, 4, 3, 3), dict(stride=2, padding=1)),
    ((2, 4, 8, 8), (6, 4, 1, 1), {}),
    ((1, 4, 8, 8), (6, 4, 1, 1), dict(stride=2)),
    ((1, 4, 12, 12), (4, 4, 5, 5), dict(dilation=2, padding=4)),
    ((2, 4, 9, 9), (6, 2, 3, 3), dict(padding=1, groups=2)),
    ((2, 4, 9, 9), (4, 1, 3, 3), dict(padding=1, groups=4)),
    ((2, 4, 9, 9), (8, 1, 3, 3), dict(stride=2, padding=1, groups=4)),
    ((1, 40, 14, 14), (40, 40, 3, 3), dict(padding=1)),
)

DTYPES = ("float32", "float64")

#: algorithm names per family (its folder).
FAMILIES = {
    "winograd_fused": ("winograd_fused_4x4",),
    "winograd": ("winograd_2x2", "winograd_4x4", "winograd_6x6"),
    "direct": ("direct",),
    "direct_channels": ("direct_channels",),
    "implicit_gemm": ("implicit_gemm",),
    "depthwise": ("depthwise",),
    "fft_im2col": ("fft", "fft_tiled", "im2col"),
}
#: seconds each job's warming took on a cold cache, one process (2-core AMD EPYC, 2026-12-05); the two
#: Winograds and the two directs share no kernel.
SECONDS = {"winograd_fused": 77, "winograd": 32, "direct": 39, "direct_channels": 30, "implicit_gemm": 18,
           "depthwise": 16, "fft_im2col": 11}


def warm_family(family: str) -> int:
    """Run every pass of each algorithm of ``family`` on every supported layer, in each dtype, plain and
    prepared: every kernel signature those reach is compiled (or loaded). Returns the runs made."""
    from . import ALGORITHMS, ConvParams, run
    runs = 0
    rng = np.random.default_rng(0)
    for name in FAMILIES[family]:
        algorithm = ALGORITHMS[name]
        for dtype in DTYPES:
            for x_shape, w_shape, kw in LAYERS:
                p = ConvParams.from_shapes(x_shape, w_shape, dtype=dtype, **kw)
                x = rng.standard_normal(x_shape).astype(dtype)
                w = rng.standard_normal(w_shape).astype(dtype)
                dy = rng.standard_normal(p.result_shape("forward")).astype(dtype)
                operands = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}
                for op, (a, b) in operands.items():
                    if not (algorithm.implements(op) and algorithm.supports(p, op)):
                        continue
                    run(algorithm, op, a, b, p)
                    runs += 1
                    if algorithm.prepares(op):
                        run(algorithm, op, a, None, p, prepared=algorithm.prepare(b, p, op))
                        runs += 1
    return runs


def assign(processes: int) -> list:
    """The families split over ``processes`` workers: largest first, each to the least loaded (by
    ``SECONDS``)."""
    load = [[] for _ in range(max(1, processes))]
    for family in sorted(FAMILIES, key=SECONDS.get, reverse=True):
        min(load, key=lambda jobs: sum(map(SECONDS.get, jobs))).append(family)
    return [jobs for jobs in load if jobs]


def cold() -> bool:
    """Whether no kernel of convalgos is compiled yet (a fresh clone or install): no cache index in Numba's
    cache directory (``NUMBA_CACHE_DIR``) or beside the sources."""
    import numba
    root = Path(numba.config.CACHE_DIR or Path(__file__).parent)
    return not any(root.rglob("*.nbi"))


def warm(processes: int | None = None, quiet: bool = False) -> float:
    """Compile (or load) every family's kernels in ``processes`` worker processes (default: one per core);
    returns the wall seconds. A worker that fails is reported on stderr and leaves its kernels to compile at
    their first use: warming never fails the caller."""
    start = time.perf_counter()
    jobs = assign(processes or os.cpu_count() or 1)
    workers = [subprocess.Popen([sys.executable, "-m", "convalgos.warm", "--families", ",".join(families)],
                                stdout=subprocess.DEVNULL if quiet else None) for families in jobs]
    for worker, families in zip(workers, jobs):
        if worker.wait() != 0:
            print(f"convalgos.warm: the worker for {families} exited with {worker.returncode}; those kernels "
                  f"compile at their first use", file=sys.stderr)
    return time.perf_counter() - start


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--processes", type=int, default=None, help="workers (default: one per core)")
    ap.add_argument("--families", default="", help="(a worker's job) comma-separated families to warm")
    args = ap.parse_args(argv)
    if args.families:
        for family in args.families.split(","):
            start = time.perf_counter()
            runs = warm_family(family)
            print(f"{family}: {runs} runs in {time.perf_counter() - start:.1f} s", flush=True)
        return
    print(f"compiled or loaded every family's kernels in {warm(args.processes):.1f} s")


if __name__ == "__main__":
    main()
