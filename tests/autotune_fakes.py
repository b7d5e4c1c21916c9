"""Fake algorithms and a fake clock for the autotune tests: selection is exact, whatever algorithms exist.

Each fake computes the real pass (the float64 reference, or a deliberately wrong variant) and advances the
shared fake clock by its declared cost, so the Tuner's timer measures exactly that cost.
"""
from __future__ import annotations

import threading
import time

import numpy as np
from numba.core import event

from convalgos import PASSES, Algorithm, reference
from convalgos.registry import SUPPORTED, unsupported

from autotune import Tuner
from autotune.heuristics import Heuristics
from autotune.measure import Timer
from autotune.race.contention import Reading

NO_RULES = Heuristics({"rules": []})


class FakeClock:
    """Fake seconds, and the fake seconds the process's threads waited for a CPU (``waited``), which the fake
    algorithms' ``waits`` advance and ``FakeReader`` reads."""

    def __init__(self):
        self.now, self.waited, self.cpu, self.others, self._lock = 0.0, 0.0, 0.0, 0.0, threading.Lock()
        self.faults = 0              # page faults the fakes' calls took (``Fake``'s ``faults``)
        self.busy_until = 0.0        # a neighbour process runs until then (fakes with ``busy`` slow down)
        self.last = None             # the fake that ran last (fakes with ``cold`` pay it after another's call)

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float, waited: float = 0.0, others: float = 0.0, faults: int = 0) -> None:
        """``seconds`` of fake time run by this process, ``waited`` of them waiting for a CPU, while other
        processes used ``others`` seconds of CPU; ``faults`` page faults taken."""
        with self._lock:
            self.now += seconds
            self.cpu += seconds
            self.waited += waited
            self.others += others
            self.faults += faults


class FakeReader:
    """A contention reader over the fake clock: the waits the fakes declare, nothing of the real machine's."""

    kind = "fake"
    sees_wait = sees_faults = True

    def __init__(self, clock):
        self.clock = clock

    def refresh(self) -> None:
        """Nothing to open."""

    def read(self) -> Reading:
        return Reading(int(round(self.clock.waited * 1e9)), 0, self.clock.now, int(round(self.clock.cpu * 1e9)),
                       self.clock.faults)

    def others(self) -> float:
        return self.clock.others

    def runnable_others(self) -> int:
        """One task of another process runnable while the fake neighbour runs (before ``busy_until``)."""
        return int(self.clock.now < self.clock.busy_until)


class OthersUnseenReader(FakeReader):
    """A reader that sees this process's waits but not whether another process is runnable (a ``/proc`` without
    ``loadavg``): a run that waited may have waited for a neighbour, so it is retaken, as the fakes' ``waits``
    of a neighbour's time slices want."""

    def runnable_others(self) -> None:
        return None


class Fake(Algorithm):
    """Costs ``cost`` seconds of fake time per call (a list: one cost per call, the last repeating).

    ``pass_cost``: pass -> cost, where a pass costs otherwise. ``raises``: an exception instance raised from
    call number ``raise_from`` on (0: the first). ``jit``: seconds the first call spends inside Numba's
    compiler lock (the event ``autotune.jit`` listens to), on top of its cost. ``waits``: seconds the threads
    wait for a CPU during each call (a list like ``cost``), read by ``FakeReader``; ``faults``: page faults each
    call takes (a list like ``cost``: a first call touching fresh memory); ``busy``: (cost, waits) of a
    call made while a neighbour runs (before the clock's ``busy_until``); ``cold``: seconds a call costs on top
    when the call before it was another fake's (its caches and pools taken over)."""

    def __init__(self, name, clock, cost, *, deterministic=True, workspace=0, wrong=None, only_3x3=False,
                 sleep=0.0, raises=None, raise_from=0, flops=None, pass_cost=None, jit=0.0, waits=0.0,
                 busy=None, faults=0, cold=0.0):
        super().__init__()
        self.name, self.clock, self.costs = name, clock, list(cost) if isinstance(cost, (list, tuple)) else [cost]
        self.deterministic, self.ws, self.wrong, self.only_3x3, self.sleep = (deterministic, workspace, wrong,
                                                                              only_3x3, sleep)
        self.raises, self.raise_from, self.flop_count = raises, raise_from, flops
        self.pass_costs = {op: list(c) if isinstance(c, (list, tuple)) else [c] for op, c in (pass_cost or {}).items()}
        self.calls, self.outputs, self.jit = 0, [], jit
        self.waits = list(waits) if isinstance(waits, (list, tuple)) else [waits]
        self.faults = list(faults) if isinstance(faults, (list, tuple)) else [faults]
        self.busy, self.cold = busy, cold

    def constraints(self, p, op):
        if self.only_3x3 and (p.R, p.S) != (3, 3):
            return unsupported(f"{self.name} needs a 3x3 kernel, got {p.R}x{p.S}")
        return SUPPORTED

    def workspace_bytes(self, p, op="forward"):
        return self.ws

    def flops(self, p, op="forward"):
        return p.flops if self.flop_count is None else self.flop_count

    def _compute(self, op, a, b, p, out):
        self.calls += 1
        self.outputs.append(out)
        if self.raises is not None and self.calls > self.raise_from:
            raise self.raises
        if self.jit and self.calls == 1:
            with event.trigger_event("numba:compiler_lock"):
                self.clock.advance(self.jit)
        if self.wrong == "skips_channel_1":       # a kernel skipping a tile: channel 1 keeps what it held
            result = reference.PASS[op](a, b, p)
            out[:, :1], out[:, 2:] = result[:, :1], result[:, 2:]
        else:
            out[...] = reference.PASS[op](a, b, p)
        if self.wrong == "everywhere":
            out *= 1.01
        elif self.wrong == "last_row":
            out[:, :, -1, :] += 1.0
        costs = self.pass_costs.get(op, self.costs)
        if self.busy and self.clock.now < self.clock.busy_until:
            self.clock.advance(*self.busy, others=self.busy[0])     # the neighbour: a core's worth meanwhile
        else:
            self.clock.advance(costs[min(self.calls - 1, len(costs) - 1)],
                               self.waits[min(self.calls - 1, len(self.waits) - 1)],
                               faults=self.faults[min(self.calls - 1, len(self.faults) - 1)])
        if self.cold and self.clock.last is not self:
            self.clock.advance(self.cold)
        self.clock.last = self
        if self.sleep:
            time.sleep(self.sleep)

    def forward(self, x, w, p, out):
        self._compute("forward", x, w, p, out)


#: the backward passes a fake defines (only those its ``passes`` option names: a pass not defined is not run).
BACKWARD = {"backward_data": lambda self, dy, w, p, out: self._compute("backward_data", dy, w, p, out),
            "backward_filter": lambda self, x, dy, p, out: self._compute("backward_filter", x, dy, p, out)}


def fakes(clock, **specs) -> dict:
    """name=cost or name=(cost, options) -> an ordered mapping name -> Fake. The option ``passes`` (a tuple of
    pass names) makes a fake that implements only those."""
    out = {}
    for name, spec in specs.items():
        cost, options = spec if isinstance(spec, tuple) and isinstance(spec[-1], dict) else (spec, {})
        options = dict(options)
        passes = options.pop("passes", PASSES)
        cls = type(f"Fake_{name}", (Fake,), {op: BACKWARD[op] for op in passes if op in BACKWARD})
        out[name] = cls(name, clock, cost, **options)
    return out


def fake_timer(clock) -> Timer:
    return Timer(clock)


def arrays(N=2, C=3, H=7, K=4, R=3, seed=0):
    """A seeded float32 input and weight."""
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((N, C, H, H)).astype(np.float32),
            rng.standard_normal((K, C, R, R)).astype(np.float32))


def tuner(clock, algos, **kw):
    """A benchmark-mode Tuner over ``algos``, timed by the fake clock, with no heuristic rules by default."""
    kw.setdefault("reader", FakeReader(clock))
    kw.setdefault("pair_below", 0.0)                 # one fake call per sample: each cost list maps call by call
    return Tuner(algos, benchmark=True, timer=fake_timer(clock), heuristics=kw.pop("heuristics", NO_RULES), **kw)


def tuned(clock, algos, **kw):
    """The entry a fresh benchmark-mode Tuner makes for ``arrays()``."""
    t = tuner(clock, algos, **kw)
    t.conv2d(*arrays())
    (entry,) = t.dispatch_table()
    return entry
