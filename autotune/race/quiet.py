"""Noticing that the machine is quiet again, so provisional choices (``provisional.py``) can be raced again.

The watch runs on the hit path of a provisional entry only, and most of the time costs one clock read: every
``interval`` seconds at most it takes a contention reading of the process (~4 us, ``contention.py``) and
judges the window since the previous one:

- quiet: the process's threads waited for a CPU less than ``quiet_share`` of the CPU time they ran
  (the schedstat CPU counters move in 4 ms ticks, fine over windows of 50 ms and more);
- not judged: the process ran less than ``busy`` of a core on average in the window (an idle process waits
  for nothing, which says nothing about the neighbours);
- contended otherwise.

``windows`` quiet windows in a row make the machine quiet: ``quiet()`` answers True, and each provisional key
is raced again at its next hit. A re-race that still finds waiting keeps the entry provisional and the watch
waits longer before the next try (``interval`` doubled per failed re-race of the process, up to
``longest``), so a neighbour that stays costs a bounded number of re-races. With the defaults a training loop
whose neighbour has left re-races within ~0.15 s of calls.

What it cannot see: a neighbour on a core this process does not use at the moment (a single-threaded phase
reads quiet; the re-race, which runs every worker, then sees the wait and backs off), and contention from
outside the machine (another VM on the same host shows as steal time, not as run-queue wait).
"""
from __future__ import annotations

import time


class QuietWatch:
    def __init__(self, reader, *, interval=0.05, quiet_share=0.02, busy=0.5, windows=2, longest=10.0,
                 clock=time.perf_counter):
        self.reader, self.clock = reader, clock
        self.interval, self.base, self.quiet_share, self.busy = interval, interval, quiet_share, busy
        self.windows, self.longest = windows, longest
        self._last, self._next, self._quiet_windows = None, 0.0, 0

    def quiet(self) -> bool:
        """Whether the last ``windows`` judged windows were quiet (cheap between readings)."""
        now = self.clock()
        if now < self._next:
            return self._quiet_windows >= self.windows
        self._next = now + self.interval
        self.reader.refresh()
        reading = self.reader.read()
        if self._last is not None:
            self._judge(reading, self._last)
        self._last = reading
        return self._quiet_windows >= self.windows

    def _judge(self, now, before) -> None:
        wall = now.wall - before.wall
        cpu, waited = (now.cpu_ns - before.cpu_ns) * 1e-9, (now.wait_ns - before.wait_ns) * 1e-9
        if wall <= 0 or cpu < self.busy * wall:
            return                                       # too idle to say
        self._quiet_windows = self._quiet_windows + 1 if waited < self.quiet_share * cpu else 0

    def raced(self, still_waiting: bool) -> None:
        """A provisional key was raced again: on waiting, back off (the neighbour stayed); else reset."""
        if still_waiting:
            self.interval = min(2 * self.interval, self.longest)
            self._quiet_windows, self._next = 0, self.clock() + self.interval
        else:
            self.interval = self.base
