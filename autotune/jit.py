"""How long Numba held a call to compile kernels or to load compiled ones from its cache: the call's "JIT" time.

A candidate's first call in a process is not its speed: Numba compiles its kernels there (seconds each, the
first time after an install or an edit) or loads them from its on-disk cache (10-250 ms each here). Numba
announces both: its "numba:compiler_lock" event spans every compilation and every load from the cache, and a
call of a kernel already in memory takes no lock. Measured on N1 C64 28x28 -> K64 3x3 in a process whose
kernels were all cached: direct's first call took 261 ms, 247 of them in the lock; its next calls 0.4-0.6 ms,
none of them in it.

    >>> with jit_time(timer.now) as jit:
    ...     first = timer.time(call)
    >>> jit.seconds                                  # of ``first``, on the same clock

The listener is Numba's, so it sees every thread: a compilation in another thread during the block counts too.
GPU kernels that numba-cuda compiles take the same lock; CuPy's own compilations are not seen.
"""
from __future__ import annotations

import contextlib

from numba.core import event


class JitListener(event.Listener):
    """Adds up, on ``clock``, the time between the outermost start and end of Numba's compiler lock."""

    def __init__(self, clock):
        self.clock, self.seconds, self._depth, self._start = clock, 0.0, 0, 0.0

    def on_start(self, event_):
        if self._depth == 0:
            self._start = self.clock()
        self._depth += 1

    def on_end(self, event_):
        self._depth -= 1
        if self._depth == 0:
            self.seconds += self.clock() - self._start


@contextlib.contextmanager
def jit_time(clock):
    """A ``JitListener`` on ``clock`` while the block runs."""
    with event.install_listener("numba:compiler_lock", JitListener(clock)) as listener:
        yield listener
