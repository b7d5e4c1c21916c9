"""The build's guard: a notebook's outputs are stored only when the machine was measured quiet, before and
during its run, and the run is retried (a bounded number of times) when it was not.

A notebook's timings are what readers learn from, and a neighbour on one of two cores slows a two-threaded
kernel by about a third, evenly, so no single run looks wrong (autotune/race/contention.py). So the build
measures, from outside the kernel:

- **before** each run: ``machine_wait_share(PROBE_SECONDS)``, probe processes (one per core) spinning at once,
  the share of their time spent waiting for a CPU. The run starts only at or under ``MAX_SHARE``; else the
  build probes again every ``PROBE_EVERY_S`` seconds, for at most ``patience`` seconds. The reading is handed
  to the kernel (``machine.ENV``) and printed by the notebook's header cell (``notebooks/machine.py``).
- **during** the run: ``process_usage(pid)`` of the kernel's process (its pid from jupyter_client's
  provisioner), ns on a CPU and ns waited on a run queue summed over its threads, read when the kernel is
  ready and after every code cell; the CPU seconds of the whole machine (``/proc/stat``: every process, and
  the hypervisor's steal) less the kernel's and the build's own: what *other* processes used; and the load
  average (1 min). The kernel's share is waited / (on a CPU + waited). A run is refused when other processes
  used more than ``OTHERS_CORES`` cores on average, or when the kernel waited more than ``MAX_SHARE`` of its
  runnable time (one cell runnable for ``CELL_MIN_S`` or more: ``MAX_CELL_SHARE``) while others used more
  than ``OTHERS_WAITING``. A wait with nothing else running is the kernel's own threads competing (a thread
  pool still spinning beside another): the notebook's own behaviour, on any machine; it is reported, not
  refused. The load average is reported, not judged: it counts the kernel's own threads.

Why these limits. Quiet, two threads spinning 1 s wait ~0.007 s (0.35%, autotune/race/contention.py's
docstring); beside one busy core of two they wait ~33%. 5% (``MAX_SHARE``) is more than ten times the quiet
floor and a seventh of one busy neighbour: a neighbour using ~15% of a core. A run that waited 5% of its time
is at most ~5% slower in any one timing, and the notebooks' lessons are ratios of interleaved timings (the
drift falls on every candidate alike), judged against noise bands of at least 1% and margins of 10% or more.
A cell may reach 10% (``MAX_CELL_SHARE``): over a short cell a few scheduler ticks weigh more. 0.10 cores
(``OTHERS_CORES``): a tenth of one of the two cores, a neighbour waking every few ms; a steady neighbour
reads 1.0, and a process spinning on one core during a 10 s notebook and idle after reads far above it.

After a stored run, the header cell gets one more output line, written by the build and saying so: what was
measured during the run. ``notebook.metadata["quiet"]`` keeps every number.
"""
from __future__ import annotations

import json
import os
import resource
import sys
import time
from typing import NamedTuple

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))          # notebooks/: machine.py, the header's module
import machine  # noqa: E402

MAX_SHARE = machine.QUIET_SHARE      # probes' and the whole run's wait share
MAX_CELL_SHARE = 0.10                # one cell's, when it was runnable for CELL_MIN_S or more
CELL_MIN_S = 0.5
OTHERS_CORES = 0.10                  # the cores other processes may use on average during a run
OTHERS_WAITING = 0.02                # ... and while the kernel waits beyond its limit
PROBE_SECONDS = 0.5
PROBE_EVERY_S = 15


def probe() -> dict:
    """The machine's contention now, seen by probe processes (``machine_wait_share``)."""
    from autotune.race.contention import machine_wait_share
    return {"wait_share": round(machine_wait_share(PROBE_SECONDS), 4), "probe_seconds": PROBE_SECONDS,
            "load": round(os.getloadavg()[0], 2), "at": time.strftime("%H:%M:%S", time.gmtime()),
            "max_share": MAX_SHARE}


def wait_for_quiet(patience: float, log=print) -> dict:
    """Probe until quiet (``wait_share <= MAX_SHARE``) or ``patience`` seconds have passed; the last probe,
    with ``quiet`` set."""
    deadline = time.monotonic() + patience
    while True:
        before = probe()
        before["quiet"] = before["wait_share"] <= MAX_SHARE
        if before["quiet"] or time.monotonic() + PROBE_EVERY_S > deadline:
            return before
        log(f"   not quiet: probes waited {before['wait_share']:.1%} (at most {MAX_SHARE:.0%}), load "
            f"{before['load']:.2f}; probing again in {PROBE_EVERY_S} s")
        time.sleep(PROBE_EVERY_S)


class Reading(NamedTuple):
    """One reading during a run: the kernel's threads' ns on a CPU and ns waiting on a run queue, the wall clock,
    and the CPU seconds of the whole machine (every process, and the hypervisor's steal) less the build's own."""

    cell: int | None          # the cell just executed (None: the kernel ready, before the first)
    cpu_ns: int
    wait_ns: int
    wall: float
    machine_s: float
    process_s: float = 0.0    # the kernel's CPU seconds, its ended threads and reaped children included


def machine_seconds() -> float:
    """CPU seconds spent since boot by every process and stolen by the hypervisor (/proc/stat's first line),
    less this process's own (the build's: nbclient's polling)."""
    with open("/proc/stat") as f:
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in f.readline().split()[1:9])
    own = resource.getrusage(resource.RUSAGE_SELF)
    return (user + nice + system + irq + softirq + steal) / os.sysconf("SC_CLK_TCK") - own.ru_utime - own.ru_stime


def process_seconds(pid: int) -> float:
    """CPU seconds of process ``pid`` so far, every thread it ever ran and its reaped children included
    (/proc/<pid>/stat: utime, stime, cutime, cstime)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(v) for v in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def span(a: Reading, b: Reading) -> dict:
    """What happened between two readings: the kernel's CPU and wait seconds, its wait share (waited / (on a
    CPU + waited)), and the cores other processes used on average."""
    cpu, wait, wall = (b.cpu_ns - a.cpu_ns) * 1e-9, (b.wait_ns - a.wait_ns) * 1e-9, b.wall - a.wall
    # the kernel's own CPU from /proc/<pid>/stat: threads that ended in the cell (the CUDA simulator runs a
    # Python thread per GPU thread) leave the live threads' schedstat sum, and must not count as others'
    own = max(cpu, b.process_s - a.process_s)
    others = max(0.0, b.machine_s - a.machine_s - own) / wall if wall > 0 else 0.0
    return {"cpu_s": round(cpu, 2), "waited_s": round(wait, 3), "seconds": round(wall, 1),
            "wait_share": round(wait / (cpu + wait), 4) if cpu + wait > 0 else 0.0, "others_cores": round(others, 3)}


class Watch:
    """The kernel process's CPU and run-queue time, read from outside it (``process_usage``), and the rest of
    the machine's CPU time, at the start and after each code cell. ``attach(client)`` sets an nbclient
    client's hooks."""

    def __init__(self):
        self.client, self.pid, self.readings, self.loads = None, None, [], []

    def attach(self, client) -> None:
        self.client = client
        client.on_notebook_start = self._start
        client.on_cell_executed = self._cell

    def _read(self, cell):
        from autotune.race.contention import process_usage
        cpu, wait = process_usage(self.pid)
        self.readings.append(Reading(cell, cpu, wait, time.monotonic(), machine_seconds(), process_seconds(self.pid)))
        self.loads.append(os.getloadavg()[0])

    def _start(self, **_):
        self.pid = self.client.km.provisioner.pid
        self._read(None)

    def _cell(self, cell, cell_index, **_):
        if cell.cell_type == "code":
            self._read(cell_index)

    def result(self) -> dict:
        """The whole run's span, the worst judged cell's (the highest wait share among cells runnable for at
        least CELL_MIN_S), and the load averages seen."""
        run = span(self.readings[0], self.readings[-1])
        cells = [dict(span(a, b), cell=b.cell) for a, b in zip(self.readings, self.readings[1:])
                 if (b.cpu_ns - a.cpu_ns + b.wait_ns - a.wait_ns) * 1e-9 >= CELL_MIN_S]
        worst = max(cells, key=lambda c: c["wait_share"], default={"wait_share": 0.0, "cell": None, "others_cores": 0.0})
        return dict(run, worst_cell={"share": worst["wait_share"], "cell": worst["cell"],
                                     "others_cores": worst["others_cores"]},
                    load_min=round(min(self.loads), 2), load_max=round(max(self.loads), 2))


def verdict(during: dict) -> str:
    """Why the run counts as contended ("" when it is quiet): other processes used more than OTHERS_CORES on
    average, or the kernel (or its worst cell) waited for a CPU beyond its limit while other processes ran.
    A wait with nothing else running is the kernel's own threads competing (a thread pool still spinning
    beside another): the notebook's own behaviour, reported but not refused."""
    why = []
    if during["others_cores"] > OTHERS_CORES:
        why.append(f"other processes used {during['others_cores']:.2f} cores on average (at most {OTHERS_CORES})")
    elif during["wait_share"] > MAX_SHARE and during["others_cores"] > OTHERS_WAITING:
        why.append(f"the kernel waited {during['wait_share']:.1%} of its runnable time (at most {MAX_SHARE:.0%}) "
                   f"while other processes used {during['others_cores']:.2f} cores")
    worst = during["worst_cell"]
    if worst["share"] > MAX_CELL_SHARE and worst["others_cores"] > OTHERS_WAITING:
        why.append(f"cell {worst['cell']} waited {worst['share']:.1%} (at most {MAX_CELL_SHARE:.0%}) while other "
                   f"processes used {worst['others_cores']:.2f} cores")
    return "; ".join(why)


def annotate(nb, before: dict, during: dict, attempt: int, tries: int) -> None:
    """Add what was measured during the run to the header cell's outputs, and every number to the metadata."""
    import nbformat
    nb.metadata["quiet"] = {"before": before, "during": during, "try": attempt, "tries": tries,
                            "max_share": MAX_SHARE, "max_cell_share": MAX_CELL_SHARE, "others_cores": OTHERS_CORES}
    worst = during["worst_cell"]
    text = (f"during:  measured by the build (notebooks/_build/guard.py) from outside this kernel, after it ran: "
            f"other processes used {during['others_cores']:.3f} cores on average (at most {OTHERS_CORES}); the "
            f"kernel's threads ran {during['cpu_s']:.1f} s on a CPU and waited {during['waited_s']:.2f} s for one "
            f"({during['wait_share']:.1%})"
            + (f", the most in one cell {worst['share']:.1%} (cell {worst['cell']})" if worst["cell"] is not None else "")
            + f"; load average {during['load_min']:.2f}-{during['load_max']:.2f}; {during['seconds']:.0f} s of "
            f"cells; stored on try {attempt} of at most {tries}\n")
    for cell in nb.cells:
        if cell.cell_type == "code" and "machine.describe()" in cell.source:
            cell.outputs.append(nbformat.v4.new_output("stream", name="stdout", text=text))
            return
    raise ValueError("no header cell (a code cell calling machine.describe()) to annotate")


def guarded_run(make, execute, tries: int, patience: float, log=print):
    """Build (``make()``) and execute a notebook until a run is quiet before and during, at most ``tries``
    runs. Returns (notebook, measurements) of the quiet run, or (None, measurements of the last try)."""
    last = {}
    for attempt in range(1, tries + 1):
        before = wait_for_quiet(patience, log)
        if not before.pop("quiet"):
            log(f"   refused: still not quiet after {patience:.0f} s (probes waited {before['wait_share']:.1%})")
            return None, {"before": before}
        nb, watch = make(), Watch()
        os.environ[machine.ENV] = json.dumps(before)
        try:
            execute(nb, watch)
        finally:
            del os.environ[machine.ENV]
        during = watch.result()
        last = {"before": before, "during": during}
        why = verdict(during)
        if not why:
            annotate(nb, before, during, attempt, tries)
            return nb, last
        log(f"   try {attempt}: contended during the run ({why}); outputs not stored")
    return None, last
