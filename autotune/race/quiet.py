"""Noticing that the machine is quiet again, so provisional choices (``provisional.py``) can be raced again.

The watch runs on the hit path of a provisional entry only, and most of the time costs one clock read: every
``interval`` seconds at most it takes a reading (~20 us) and judges the window since the previous one. Quiet:
other processes used less than ``quiet_share`` of the machine's cores in the window (``/proc/stat``'s busy
time less this process's own, ``Reader.others``). That asks the question directly: this process's own threads
may wait for each other (a BLAS pool beside Numba's: three threads on two cores), and an idle process waits for
nothing, so neither its waits nor their absence say whether a neighbour is there. Where the platform cannot
tell (no ``/proc``), a window is quiet when the process was busy (``busy`` of a core) and its threads waited
under ``quiet_share`` of their CPU time.

``windows`` quiet windows in a row make the machine quiet: ``quiet()`` answers True, and each provisional key
is raced again at its next hit. A re-race that still finds the cores shared keeps the entry provisional and the
watch waits longer before the next try (``interval`` doubled per such re-race, up to ``longest``), so a
neighbour that comes back costs a bounded number of re-races. With the defaults a training loop whose
neighbour has left re-races within ~0.3 s of calls.

What it cannot see: contention from outside the machine (another VM on the same host shows as steal time,
counted as busy here only where the hypervisor reports it), and a neighbour too small to pass the share.
"""
from __future__ import annotations

import os
import time


class QuietWatch:
    def __init__(self, reader, *, interval=0.1, quiet_share=0.1, busy=0.5, windows=2, longest=10.0,
                 clock=time.perf_counter, cores=None):
        self.reader, self.clock, self.cores = reader, clock, cores or os.cpu_count() or 1
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
        reading = (self.reader.read(), self.reader.others(), now)
        if self._last is not None:
            self._judge(reading, self._last)
        self._last = reading
        return self._quiet_windows >= self.windows

    def _judge(self, now, before) -> None:
        (reading, others, wall), (reading0, others0, wall0) = now, before
        wall -= wall0
        if wall <= 0:
            return
        if others is not None and others0 is not None:
            quiet = others - others0 < self.quiet_share * self.cores * wall
        else:
            cpu, waited = (reading.cpu_ns - reading0.cpu_ns) * 1e-9, (reading.wait_ns - reading0.wait_ns) * 1e-9
            if cpu < self.busy * wall:
                return                                   # too idle to say
            quiet = waited < self.quiet_share * cpu
        self._quiet_windows = self._quiet_windows + 1 if quiet else 0

    def raced(self, still_waiting: bool) -> None:
        """A provisional key was raced again: on waiting, back off (the neighbour stayed); else reset."""
        if still_waiting:
            self.interval = min(2 * self.interval, self.longest)
            self._quiet_windows, self._next = 0, self.clock() + self.interval
        else:
            self.interval = self.base
