"""One sample of a candidate, taken as a training step pays for a call: the worker pool awake, the call timed,
and how long the process's threads waited for a CPU meanwhile.

What a call costs inside a step. Between two convolutions of a step run other layers (BatchNorm, ReLU,
pooling) on the same thread pool, so when a conv starts its workers are awake. Between two timed runs of a
race runs the tuner's own Python (bookkeeping, the readings), long enough for the pool's workers to go to
sleep (Numba's OpenMP after ~0.1 ms of spinning, as convalgos sets it): a run timed right after would pay
their wake-up, 28-250 us on these VMs, which is not the algorithm's time and which a 100 us kernel cannot
hide. Measured before this rule (2026-12-05, Intel Xeon): single calls timed after the tuner's work and the
same calls timed back to back disagreed by up to 35% on which algorithm of a sub-millisecond layer was
fastest, and a first tuning chose ``implicit_gemm`` over ``depthwise`` at 62% regret.

So a sample is:

1. ``wake()``: a parallel region that does nothing (``wake_pool``), so every worker is running when the call
   starts, as in a step (a few us with the pool awake; the wake-up cost, when it sleeps, lands here), and,
   just before it, how many tasks of other processes are runnable (the neighbours at that instant; read again
   right after the call, step 5: a neighbour's burst that began during the call is runnable then);
2. for a short call (``rounds.py``: under ``pair_below``; not in its checked call), the call once,
   untimed: in a step a call follows work on the same pools and caches, and a call right after the tuner's
   own Python, or after another candidate's, does not show what the call itself leaves behind (measured
   quiet here: im2col on the 1x1 stride-2 layer took 0.157 ms a call interleaved with other candidates,
   0.24 ms back to back, where its BLAS threads still spin as Numba's next region starts, and the race chose
   it at 1.8x direct's cost in a step; ``direct`` on the 11x11 stride-4 layer 0.32 ms alone, 0.43 back to
   back);
3. a reading of the threads' run-queue wait (``contention.py``);
4. the call, timed by the device's timer (wall clock; on the GPU host and GPU time apart);
5. a reading again: ``Sample.usage`` is what the threads waited for a CPU during the call, and, where they
   waited at all, ``Sample.neighbours_after``, the other processes' runnable tasks as it ended (this process's
   workers may still spin then, so the count takes its slow path, ~20 us: read only where it explains a wait).

``bench.regret`` judges the tuner's choices by the same rule (``bench/regret_layers.Judge``: the pool woken,
one call untimed, then the timed calls, a block of them), so the judge and the race agree on what "fastest"
means: a short sample is that block with one timed call.
"""
from __future__ import annotations

from typing import NamedTuple

import numba

from .contention import NO_USAGE, Usage


@numba.njit(parallel=True, cache=True)
def _spread(n):
    total = 0
    for i in numba.prange(n):
        total += i
    return total


def wake_pool() -> None:
    """Run one empty parallel region over Numba's threads: after it, every worker is awake (spinning)."""
    _spread(numba.get_num_threads())


class Sample(NamedTuple):
    """One timed call: ``seconds`` its cost (wall time; on the GPU the larger of host and GPU time, or the GPU
    time in graph mode, ``rounds.py``), ``usage`` what the threads waited meanwhile, ``host`` and ``gpu`` the
    two times where the timer measures them apart (else None), ``neighbours`` other processes' runnable tasks
    just before it (``contention.ProcReader.runnable_others``; None where unknown), ``neighbours_after`` right
    after it."""

    seconds: float
    usage: Usage = NO_USAGE
    host: float | None = None
    gpu: float | None = None
    neighbours: int | None = None
    neighbours_after: int | None = None

    def wait_share(self) -> float:
        """Seconds the threads waited for a CPU per second of the call: how much of it was contention."""
        return self.usage.waited / self.seconds if self.seconds > 0 else 0.0

    def alone(self) -> bool:
        """No other process had a task runnable as the call started nor as it ended: a wait in it was for this
        process's own threads (``rounds.py``)."""
        return self.neighbours == 0 and self.neighbours_after == 0


class Sampler:
    """Takes samples with ``timer`` (``time(fn)``, or ``time_both(fn)`` for host and GPU time), the contention
    ``reader`` (``contention.reader()`` or a fake) and ``wake`` (the device's: ``wake_pool`` on the CPU, nothing
    on the GPU). ``graph_mode``: a GPU sample's cost is its GPU time alone (the step replays as a CUDA graph)."""

    def __init__(self, timer, reader, wake=wake_pool, graph_mode=False):
        self.timer, self.reader, self.wake, self.graph_mode = timer, reader, wake, graph_mode
        self.split = hasattr(timer, "time_both")

    def take(self, fn, lead: int = 0) -> Sample:
        """One sample: ``lead`` untimed calls, then one timed call (the module docstring's steps)."""
        neighbours = self.reader.runnable_others()
        self.wake()
        for _ in range(lead):
            fn()
        before = self.reader.read()
        if self.split:
            host, gpu = self.timer.time_both(fn)
            seconds = gpu if self.graph_mode else max(host, gpu)
        else:
            host = gpu = None
            seconds = self.timer.time(fn)
        usage = self.reader.read() - before      # the count again only where a wait needs explaining (~20 us)
        return Sample(seconds, usage, host, gpu, neighbours, self.reader.runnable_others() if usage.waited else None)


    def take_block(self, fn, calls: int) -> Sample:
        """``calls`` back-to-back calls as one sample, its seconds per call: beside a neighbour that stays, a
        sub-millisecond call is clean or waits a whole time slice (milliseconds) by luck, and only a block
        long enough to hold several slices has the mean cost a step pays there (``judge.py``)."""
        self.wake()
        before = self.reader.read()
        seconds = self.timer.time(lambda: [fn() for _ in range(calls)]) / calls
        return Sample(seconds, self.reader.read() - before)
