"""Runs one job of the GPU check in its own process (``python -m bench.gpu.jobs ...``), handing each protocol
line to the caller as it arrives, within a time limit.

A job's process is its own session, so a job over its limit is killed with everything it started. What ends
it is told apart: a finished job printed "done"; a dead one (a sticky CUDA error, a segfault, an abort) has an
exit status (a signal's name when a signal killed it) and the tail of its stderr, which the report quotes.
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from .common import MARK

ROOT = Path(__file__).resolve().parents[2]


@dataclass
class Outcome:
    """How a job ended."""

    finished: bool
    returncode: int | None
    timed_out: bool
    seconds: float
    stderr_tail: str

    def why(self) -> str:
        """Why the job did not finish, in words (empty when it did)."""
        if self.finished:
            return ""
        if self.timed_out:
            return f"killed at its time limit after {self.seconds:.0f} s"
        code = self.returncode
        status = f"killed by {signal.Signals(-code).name}" if code is not None and code < 0 else f"exit status {code}"
        last = self.stderr_tail.strip().splitlines()[-1:] or [""]
        return f"its process died ({status})" + (f": {last[0][:200]}" if last[0] else "")


def job_env(simulate: bool) -> dict:
    """The jobs' environment: the repository first on the path (not bench/, whose autotune.py would shadow the
    package), and the simulator switched on before numba's first import when simulating."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT)] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    if simulate:
        env["NUMBA_ENABLE_CUDASIM"] = "1"
    return env


def run_job(args: list[str], on_event, timeout: float, simulate: bool) -> Outcome:
    """Run job ``args``; ``on_event(dict)`` for each protocol line as it comes; at most ``timeout`` seconds."""
    start = time.perf_counter()
    with tempfile.TemporaryFile(mode="w+") as stderr:
        process = subprocess.Popen([sys.executable, "-m", "bench.gpu.jobs", *args], cwd=ROOT, env=job_env(simulate),
                                   stdout=subprocess.PIPE, stderr=stderr, text=True, start_new_session=True)
        lines: queue.Queue = queue.Queue()
        reader = threading.Thread(target=_read, args=(process.stdout, lines), daemon=True)
        reader.start()
        finished = timed_out = False
        while True:
            left = timeout - (time.perf_counter() - start)
            try:
                line = lines.get(timeout=max(0.01, left))
            except queue.Empty:
                timed_out = left <= 0
                if timed_out:
                    _kill(process)
                    break
                continue
            if line is None:                       # stdout closed: the process ended
                break
            if line.startswith(MARK):
                event = json.loads(line[len(MARK):])
                finished = finished or event["kind"] == "done"
                on_event(event)
        process.wait()
        stderr.seek(0)
        tail = stderr.read()[-4000:]
    return Outcome(finished, process.returncode, timed_out, time.perf_counter() - start, tail)


def _read(stream, lines: queue.Queue) -> None:
    for line in stream:
        lines.put(line.rstrip("\n"))
    lines.put(None)


def _kill(process) -> None:
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
