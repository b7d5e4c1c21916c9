"""Neighbour processes that a benchmark starts and stops itself, on this machine only, bounded in time.

    with neighbour("steady"):          # one process spinning (one core of the machine taken)
        ...
    with neighbour("bursty"):          # one process per core, each spinning in bursts of 20-60 ms, idle 20-60 ms
        ...

Each neighbour is a small Python process that spins on the clock (no imports beyond the standard library) and
ends by itself after ``limit`` seconds even if the benchmark dies; leaving the block terminates it. The
"steady" one is the laptop's busy browser tab or a second notebook kernel; the "bursty" ones are a CI runner's
neighbours that come and go.
"""
from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time

_STEADY = """import sys, time
end = time.monotonic() + float(sys.argv[1])
while time.monotonic() < end:
    pass
"""

_BURSTY = """import random, sys, time
end, rng = time.monotonic() + float(sys.argv[1]), random.Random(int(sys.argv[2]))
while time.monotonic() < end:
    stop = time.monotonic() + rng.uniform(0.02, 0.06)
    while time.monotonic() < stop:
        pass
    time.sleep(rng.uniform(0.02, 0.06))
"""

KINDS = {"steady": "one process spinning without pause (one core of the machine taken)",
         "bursty": "one process per core, each spinning 20-60 ms then idle 20-60 ms (random, seeded)"}


@contextlib.contextmanager
def neighbour(kind: str, limit: float = 600.0):
    """Run the neighbour ``kind`` ("steady" or "bursty") while the block runs (``limit`` seconds at most)."""
    if kind == "steady":
        commands = [[sys.executable, "-S", "-c", _STEADY, str(limit)]]
    elif kind == "bursty":
        commands = [[sys.executable, "-S", "-c", _BURSTY, str(limit), str(seed)] for seed in range(os.cpu_count() or 1)]
    else:
        raise ValueError(f"kind must be one of {list(KINDS)}, got {kind!r}")
    processes = [subprocess.Popen(c, stdin=subprocess.DEVNULL) for c in commands]
    time.sleep(0.1)                       # started and spinning before the block measures anything
    try:
        yield processes
    finally:
        for p in processes:
            p.terminate()
        for p in processes:
            p.wait(timeout=10)
        time.sleep(0.1)                   # gone before the block after it measures anything
