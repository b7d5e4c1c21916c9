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
  ready and after every cell; and the load average (1 min) after every cell. The run's share is waited /
  (on a CPU + waited): the part of the time the kernel wanted a CPU and stood in a queue instead. Outputs
  are stored only when the whole run's share is at most ``MAX_SHARE`` and no cell that was runnable for at
  least ``CELL_MIN_S`` seconds exceeds ``MAX_CELL_SHARE`` (a timing lesson lives in one cell). The load
  average is reported, not judged: it counts the kernel's own threads (2 while a parallel kernel runs).

Why 5%: quiet, two threads spinning 1 s wait ~0.007 s (0.35%, autotune/race/contention.py's docstring);
beside one busy core of two they wait ~33%. 5% is more than ten times the quiet floor and a seventh of one
busy neighbour: a neighbour using ~15% of a core. A run that waited 5% of its time is at most ~5% slower in
any one timing, and the notebooks' lessons are ratios of interleaved timings (the drift falls on every
candidate alike), judged against noise bands of at least 1% and margins of 10% or more. A cell may reach 10%
(``MAX_CELL_SHARE``): over a short cell a few scheduler ticks of a system daemon weigh more.

After a stored run, the header cell gets one more output line, written by the build and saying so: what was
measured during the run. ``notebook.metadata["quiet"]`` keeps every number.
"""
from __future__ import annotations

import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))          # notebooks/: machine.py, the header's module
import machine  # noqa: E402

MAX_SHARE = machine.QUIET_SHARE      # probes' and the whole run's wait share
MAX_CELL_SHARE = 0.10                # one cell's, when it was runnable for CELL_MIN_S or more
CELL_MIN_S = 0.5
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


class Watch:
    """The kernel process's CPU and run-queue time, read from outside it, at the start and after each cell.
    ``attach(client)`` sets an nbclient client's hooks."""

    def __init__(self):
        self.client, self.pid, self.readings, self.loads = None, None, [], []

    def attach(self, client) -> None:
        self.client = client
        client.on_notebook_start = self._start
        client.on_cell_executed = self._cell

    def _read(self, index):
        from autotune.race.contention import process_usage
        cpu, wait = process_usage(self.pid)
        self.readings.append((index, cpu, wait, time.monotonic()))
        self.loads.append(os.getloadavg()[0])

    def _start(self, **_):
        self.pid = self.client.km.provisioner.pid
        self._read(None)

    def _cell(self, cell, cell_index, **_):
        if cell.cell_type == "code":
            self._read(cell_index)

    def result(self) -> dict:
        """The run's wait share, the worst judged cell, and the load averages seen."""
        (_, cpu0, wait0, t0), (_, cpu1, wait1, t1) = self.readings[0], self.readings[-1]
        cells = []
        for (_, c0, w0, _), (index, c1, w1, _) in zip(self.readings, self.readings[1:]):
            runnable = (c1 - c0 + w1 - w0) * 1e-9
            if runnable >= CELL_MIN_S:
                cells.append((round((w1 - w0) / (c1 - c0 + w1 - w0), 4), index, round(runnable, 2)))
        worst = max(cells, default=(0.0, None, 0.0))
        cpu, wait = (cpu1 - cpu0) * 1e-9, (wait1 - wait0) * 1e-9
        return {"cpu_s": round(cpu, 2), "waited_s": round(wait, 3),
                "wait_share": round(wait / (cpu + wait), 4) if cpu + wait > 0 else 0.0,
                "worst_cell": {"share": worst[0], "cell": worst[1], "runnable_s": worst[2]},
                "load_min": round(min(self.loads), 2), "load_max": round(max(self.loads), 2),
                "seconds": round(t1 - t0, 1)}


def verdict(during: dict) -> str:
    """Why the run counts as contended ("" when it is quiet)."""
    why = []
    if during["wait_share"] > MAX_SHARE:
        why.append(f"the kernel waited {during['wait_share']:.1%} of its runnable time (at most {MAX_SHARE:.0%})")
    worst = during["worst_cell"]
    if worst["share"] > MAX_CELL_SHARE:
        why.append(f"cell {worst['cell']} waited {worst['share']:.1%} (at most {MAX_CELL_SHARE:.0%})")
    return "; ".join(why)


def annotate(nb, before: dict, during: dict, attempt: int, tries: int) -> None:
    """Add what was measured during the run to the header cell's outputs, and every number to the metadata."""
    import nbformat
    nb.metadata["quiet"] = {"before": before, "during": during, "try": attempt, "tries": tries,
                            "max_share": MAX_SHARE, "max_cell_share": MAX_CELL_SHARE}
    worst = during["worst_cell"]
    text = (f"during:  measured by the build (notebooks/_build/guard.py) from outside this kernel, after it ran: "
            f"the kernel's threads ran {during['cpu_s']:.1f} s on a CPU and waited {during['waited_s']:.2f} s "
            f"for one ({during['wait_share']:.1%}; at most {MAX_SHARE:.0%} is stored)"
            + (f", the most in one cell {worst['share']:.1%} (cell {worst['cell']}, at most {MAX_CELL_SHARE:.0%})"
               if worst["cell"] is not None else "")
            + f"; load average {during['load_min']:.2f}-{during['load_max']:.2f}; {during['seconds']:.0f} s of "
            f"cells; try {attempt} of at most {tries}\n")
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
