"""Seeing contention: how long this process's threads waited for a CPU, read from the kernel's own counters.

A timed run says how long a call took, not why. On a shared machine (a browser, a second notebook kernel, a
CI neighbour) a run can be slow because the algorithm is slow or because its threads stood in a run queue
while another process had their core. The first cannot be told from the second by the times alone: a steady
neighbour slows every run evenly, so no run looks like a spike. Linux counts the second directly, per thread:

- ``/proc/self/task/<tid>/schedstat``: ``<ns on a CPU> <ns runnable but waiting on a run queue> <timeslices>``
  (Documentation/scheduler/sched-stats.rst). The wait is added when the thread gets its CPU back, so once a
  parallel call has returned (every worker has reached the region's end), each wait inside it is counted.
  The CPU time moves only at scheduler events and ticks (4 ms on these VMs): it is not used to judge a run.
- ``getrusage(RUSAGE_SELF).ru_nivcsw``: involuntary context switches of all the process's threads, counted
  when a thread is preempted; ``ru_minflt + ru_majflt``: the page faults they took, which is how a first call
  shows it paid for touching fresh memory (a workspace's pages, mapped at their first write): measured here
  (2026-12-05, the regret bench's 12 layers) 3-2678 faults in the first call of most candidates in a process,
  0 in every call of a second tuning.
- ``/proc/loadavg``'s fourth field: the tasks runnable on the whole machine at this instant, less this
  process's tasks in state R (``/proc/self/task/<tid>/stat``): whether a neighbour is there at all, which a
  sub-millisecond run can miss (it may fall between the neighbour's time slices: no wait to read).

What is read: every task of the process (the Python thread, Numba's OpenMP workers, the BLAS threads, torch's
threads), through files kept open and re-read with ``pread`` (about 1 us a thread, against ~9 us to open and
read them all afresh), the list of tasks refreshed by ``refresh()`` (a race calls it once). A reading is the
sum over the tasks; the difference of two readings (``Usage``) is what happened between them. The files close
with the reader (``close()``, or when it is collected): each Tuner has one, and until 2026-12-06 they stayed
open, nine descriptors per Tuner, 1807 after 200 Tuners; past the usual limit of 1024 a user's own files fail to
open, and every time the process's descriptor table doubled the kernel stalled the tuning that opened the next
(the regret bench's warm 1x1 tuning took 67 ms, 477x its call, where the median took 10 ms; 15 ms of one
``refresh`` in a trace).

Where ``/proc`` is missing (macOS, Windows) ``RusageReader`` counts involuntary switches and page faults alone
(macOS, BSD), and on Windows ``NullReader`` counts nothing: there the race falls back to judging runs by their
times (spikes, ``measure.without_spikes``), which a steady neighbour hides, and no first call is evidence
(``sees_faults``: the checked call stays a warm-up, ``tuning.py``). ``reader()`` picks the best available;
``Reader.kind`` names what it sees.

Measured here (2026-12-05, 2-core AMD EPYC VM): two threads spinning 1 s wait ~0.007 s in all quietly and
~0.2 s beside one process spinning on one core (shared/TOOLCHAIN.md); one ``ProcReader.read()`` of 3 tasks
costs ~4 us.
"""
from __future__ import annotations

import os
import time
import weakref
from typing import NamedTuple

try:
    import resource
except ImportError:            # Windows
    resource = None

TASKS = "/proc/self/task"


class Reading(NamedTuple):
    """Counters summed over the process's threads at one moment: ns waited on a run queue, involuntary
    context switches, the wall clock (``time.perf_counter``) when read, ns on a CPU (which moves in
    scheduler ticks: for windows of tens of milliseconds, ``quiet.py``), and page faults."""

    wait_ns: int
    switches: int
    wall: float
    cpu_ns: int = 0
    faults: int = 0

    def __sub__(self, before: "Reading") -> "Usage":
        return Usage(max(0, self.wait_ns - before.wait_ns) * 1e-9, max(0, self.switches - before.switches),
                     self.wall - before.wall, max(0, self.faults - before.faults))


class Usage(NamedTuple):
    """What happened between two readings: seconds the threads waited for a CPU (summed over threads),
    involuntary switches, the wall seconds between the readings, and the page faults taken."""

    waited: float
    switches: int
    wall: float
    faults: int = 0


NO_USAGE = Usage(0.0, 0, 0.0)


_TICKS = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _rusage() -> tuple[int, int]:
    """(involuntary switches, page faults) of the whole process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_nivcsw, usage.ru_minflt + usage.ru_majflt


def _close_all(*groups) -> None:
    """Close every descriptor in ``groups`` (dicts of them, or lists), once."""
    for group in groups:
        for fd in list(group.values() if isinstance(group, dict) else group):
            try:
                os.close(fd)
            except OSError:
                pass
        group.clear()


class ProcReader:
    """Run-queue wait and involuntary switches of every task of this process (Linux)."""

    kind = ("run-queue wait per thread (/proc/self/task/*/schedstat), involuntary switches and page faults "
            "(getrusage)")
    sees_wait = sees_faults = True

    def __init__(self):
        self._files, self._states = {}, {}
        self._loadavg = os.open("/proc/loadavg", os.O_RDONLY) if os.path.exists("/proc/loadavg") else None
        loadavg = [] if self._loadavg is None else [self._loadavg]
        self._finalize = weakref.finalize(self, _close_all, self._files, self._states, loadavg)

    def close(self) -> None:
        """Close the files (also done when the reader is collected); the reader then reads nothing."""
        self._loadavg = None
        self._finalize()

    def refresh(self) -> None:
        """Open the schedstat and stat of tasks started since the last refresh (threads come and go: a pool's
        workers start at its first use)."""
        for tid in os.listdir(TASKS):
            if tid not in self._files:
                try:
                    self._files[tid] = os.open(f"{TASKS}/{tid}/schedstat", os.O_RDONLY)
                    self._states[tid] = os.open(f"{TASKS}/{tid}/stat", os.O_RDONLY)
                except OSError:
                    continue

    def runnable_others(self) -> int | None:
        """How many tasks of other processes are runnable now (running or queued for a CPU): the machine's
        count (``/proc/loadavg``'s fourth field, before the slash) less this process's tasks in state R. One
        reading is an instant; a race takes one per sample (~20 us; ~3 us when only this thread runs). None where
        unknown."""
        if self._loadavg is None:
            return None
        try:
            running = int(os.pread(self._loadavg, 128, 0).split()[3].split(b"/")[0])
            if running <= 1:             # the one running is this thread, reading: no need to count its own
                return 0
            own = 0
            for tid, fd in list(self._states.items()):
                try:
                    own += os.pread(fd, 512, 0).rsplit(b")", 1)[1].split()[0] == b"R"
                except OSError:                  # the thread ended
                    os.close(fd)
                    del self._states[tid]
        except (OSError, ValueError, IndexError):
            return None
        return max(0, running - own)

    def read(self) -> Reading:
        wait = cpu = 0
        for tid, fd in list(self._files.items()):
            try:
                on, waited = os.pread(fd, 96, 0).split()[:2]
                wait, cpu = wait + int(waited), cpu + int(on)
            except (OSError, ValueError):       # the thread ended: its file reads ESRCH
                os.close(fd)
                del self._files[tid]
        switches, faults = _rusage()
        return Reading(wait, switches, time.perf_counter(), cpu, faults)

    def others(self) -> float | None:
        """Seconds of CPU that other processes have used since boot: the machine's busy time (``/proc/stat``:
        user, nice, system, irq, softirq, steal) less this process's (``getrusage``). Kept in the kernel's ticks
        (10 ms here): for windows of a tenth of a second and more (``quiet.py``)."""
        try:
            with open("/proc/stat") as f:
                fields = [int(v) for v in f.readline().split()[1:]]
        except (OSError, ValueError):
            return None
        busy = sum(fields[:3]) + sum(fields[5:8])
        own = resource.getrusage(resource.RUSAGE_SELF)
        return busy / _TICKS - (own.ru_utime + own.ru_stime)


class RusageReader:
    """Involuntary switches only (macOS, BSD: no per-thread run-queue wait): a preempted run is seen, how long
    it waited is not."""

    kind = "involuntary switches and page faults only (getrusage; no run-queue wait on this platform)"
    sees_wait, sees_faults = False, True

    def refresh(self) -> None:
        """Nothing to open."""

    def read(self) -> Reading:
        switches, faults = _rusage()
        return Reading(0, switches, time.perf_counter(), time.process_time_ns(), faults)

    def others(self) -> None:
        """Unknown here (``quiet.py`` then judges by this process's own involuntary switches: none)."""

    def runnable_others(self) -> None:
        """Unknown here."""


class NullReader:
    """No counters (Windows): every run reads as unwaited; the race judges runs by their times alone."""

    kind = "none on this platform (runs judged by their times alone: spikes)"
    sees_wait = sees_faults = False

    def refresh(self) -> None:
        """Nothing to open."""

    def read(self) -> Reading:
        return Reading(0, 0, time.perf_counter(), time.process_time_ns())

    def others(self) -> None:
        """Unknown here."""

    def runnable_others(self) -> None:
        """Unknown here."""


def reader():
    """The best reader this platform offers."""
    if os.path.exists(f"{TASKS}/{os.getpid()}/schedstat") and resource is not None:
        return ProcReader()
    return RusageReader() if resource is not None else NullReader()


def process_usage(pid: int) -> tuple[int, int]:
    """(ns on a CPU, ns waited on a run queue) summed over every thread of process ``pid`` now, from outside it
    (a notebook's kernel, a benchmark's child). Raises OSError where ``/proc`` is missing."""
    cpu = wait = 0
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/schedstat") as f:
                on, waited = f.read().split()[:2]
        except (OSError, ValueError):
            continue
        cpu, wait = cpu + int(on), wait + int(waited)
    return cpu, wait


#: what each probe process runs: spin, then print its (ns waited, ns on a CPU) meanwhile.
_SPIN = """import os, sys, time
path = f"/proc/self/task/{os.getpid()}/schedstat"
def counters():
    with open(path) as f:
        return [int(v) for v in f.read().split()[:2]]
on0, wait0 = counters()
end = time.perf_counter() + float(sys.argv[1])
while time.perf_counter() < end:
    pass
on1, wait1 = counters()
print(wait1 - wait0, on1 - on0)
"""


def machine_wait_share(seconds: float = 0.3, processes: int | None = None) -> float:
    """How contended the machine is now, seen from outside any workload: ``processes`` (default: one per core)
    small Python processes spin for ``seconds`` each, at once, and the share of their time spent waiting for a
    CPU is returned: ~0 on a quiet machine, ~1/3 beside one process spinning on one of two cores (three
    runnable threads on two cores). Costs ``seconds`` plus ~30 ms to start the processes. Raises OSError where
    ``/proc`` is missing."""
    import subprocess
    import sys
    processes = processes or os.cpu_count() or 1
    probes = [subprocess.Popen([sys.executable, "-S", "-c", _SPIN, str(seconds)], stdout=subprocess.PIPE, text=True)
              for _ in range(processes)]
    waited = ran = 0
    for probe in probes:
        out, _ = probe.communicate(timeout=seconds + 30)
        if probe.returncode != 0:
            raise OSError(f"the contention probe failed (exit {probe.returncode}): no /proc schedstat here?")
        w, r = (int(v) for v in out.split())
        waited, ran = waited + w, ran + r
    return waited / (waited + ran) if waited + ran > 0 else 0.0
