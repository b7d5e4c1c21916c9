"""The header every notebook prints first: the machine, the date, and how quiet it was.

A notebook's timings describe the machine they ran on, and only while nothing else ran there: a neighbour on
one of two cores slows a two-threaded kernel by about a third, evenly, so no single run looks wrong.
``describe()`` prints what the reader needs to judge them:

- the CPU (``/proc/cpuinfo``: vendor, family/model, model name) and the cores this process may use;
- the date and time (UTC);
- the quiet: the share of time that probe processes, one per core, spent waiting for a CPU, measured just
  before the notebook ran (``autotune.race.contention.machine_wait_share``: ~0 on a quiet machine, ~1/3
  beside one busy core of two). The notebook build (``notebooks/_build/build.py``) measures it before
  starting the kernel and hands it over in ``AUTOTUNE_NOTEBOOK_QUIET`` (JSON); run by hand or by the tests,
  the header measures it itself (0.2 s). After the run, the build adds what it measured during it.
"""
from __future__ import annotations

import datetime
import json
import os
import platform

#: the build's measurement before the run, as JSON (see notebooks/_build/guard.py)
ENV = "AUTOTUNE_NOTEBOOK_QUIET"
#: a probe wait share above this is contention: the value the build's guard refuses above
QUIET_SHARE = 0.05


def cpu() -> dict:
    """vendor, family, model and model name of the first CPU in /proc/cpuinfo (platform's name elsewhere)."""
    fields = {"vendor_id": "vendor", "cpu family": "family", "model": "model", "model name": "name"}
    found = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                key, _, value = line.partition(":")
                key = key.strip()
                if key in fields and fields[key] not in found:
                    found[fields[key]] = value.strip()
                if not line.strip() and found:
                    break
    except OSError:
        found = {"name": platform.processor() or platform.machine()}
    return found


def quiet() -> dict:
    """The build's measurement before this run, or one taken now (0.2 s) when there is none."""
    if os.environ.get(ENV):
        return {**json.loads(os.environ[ENV]), "by": "the build, just before starting this notebook"}
    from autotune.race.contention import machine_wait_share
    try:
        share = machine_wait_share(0.2)
    except OSError:
        share = None
    return {"wait_share": share, "probe_seconds": 0.2, "load": os.getloadavg()[0], "by": "this cell"}


def describe() -> dict:
    """Print the header (machine, date, quiet) and return the quiet measurement."""
    c, q = cpu(), quiet()
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"machine: {c.get('name', '?')} ({c.get('vendor', '?')}, family {c.get('family', '?')} model "
          f"{c.get('model', '?')}), {cores} cores")
    print(f"date:    {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC")
    if q["wait_share"] is None:
        print("quiet:   not measured (no /proc schedstat here); load average "
              f"{q['load']:.2f}")
        return q
    limit = q.get("max_share", QUIET_SHARE)
    verdict = ("quiet" if q["wait_share"] <= limit else
               "CONTENDED: other processes share the cores, the timings below are disturbed")
    print(f"quiet:   probes (one per core, {q['probe_seconds']} s) waited {q['wait_share']:.1%} of their time for "
          f"a CPU (measured by {q['by']}; ~0% quiet, ~33% beside one busy core of two; at most "
          f"{limit:.0%} counts as quiet): {verdict}; load average {q['load']:.2f}")
    return q
