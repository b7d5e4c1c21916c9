"""The Tuner: look a layer's key up in the table; on a miss, choose by heuristic or by measuring.

Benchmark mode, for a new key (what ``torch.backends.cudnn.benchmark = True`` does, in the open):

1. Candidates: every algorithm whose ``supports(p)`` holds, minus those over ``workspace_limit``, minus the
   non-deterministic ones when ``deterministic``; ranked by the heuristic; ``benchmark_limit`` keeps the best
   ranked N; ``prune_ratio`` drops those the heuristic's measurements (heuristics.json) found that many
   times slower than the best of the layer's class: one run of a 40x slower FFT costs 40 runs of the winner.
   Every exclusion is recorded with its reason.
2. Each candidate runs once on the real input as a warm-up (JIT compilation included, reported apart) and
   its output is checked against the float64 reference; one outside its tolerance is rejected.
3. Timed rounds, interleaved over the candidates (one run of each per round, so drift on a shared machine
   hits all alike), until each median is known well enough (MAD/median/sqrt(runs) <= ``precision``, at
   least ``min_runs``) or ``time_budget`` seconds of timed runs are spent (then only the fastest completes
   its ``min_runs``). A candidate whose fastest run is
   already ``abandon_ratio`` times the best median is abandoned; one whose fastest run is ``settle_ratio``
   times it stops after ``min_runs`` (it cannot tie the best, so its median needs no more precision).
4. Near-ties (medians within the measured noise, at least ``tie_tolerance``) go to the deterministic one,
   then the smaller workspace, then the smaller error, then the name: the choice is stable run to run.

The reference check is sampled: strips of output rows at the top, middle and bottom (full width, so all four
borders are in it) of the first and last image. The float64 reference of a whole VGG layer costs 0.2-0.8 s
here, 10-40 runs of the fast algorithms; the strips cost a fraction of that and hold every padding border.
"""
from __future__ import annotations

import contextlib
import os
import threading

import numba
import numpy as np

import convalgos
from convalgos import ConvParams
from convalgos import run

from . import cache
from .heuristics import Heuristics
from .measure import ReferenceCheck, Timer, noise
from .table import CacheInfo, DispatchTable, Entry, Key, MiB

#: ``cache_path=ENV``: the path in the AUTOTUNE_CACHE environment variable, read at first use.
ENV = "$AUTOTUNE_CACHE"


class CpuDevice:
    """NumPy arrays on the CPU. A GPU device adds the same four members (CuPy arrays, CUDA-event timer)."""

    name = "cpu"

    def __init__(self):
        self.timer = Timer()

    def owns(self, x) -> bool:
        return isinstance(x, np.ndarray)

    def layout(self, x) -> str:
        if x.flags.c_contiguous:
            return "contiguous"
        return "channels_last" if x.transpose(0, 2, 3, 1).flags.c_contiguous else "strided"

    def threads(self) -> int:
        return numba.get_num_threads()

    # what a GPU device (autotune.gpu) does differently: where arrays are made and run, what skips a candidate
    failures: tuple = ()          # exceptions that skip a candidate (a GPU adds out-of-memory)
    last_workspace = None         # bytes the last run newly allocated, where the device measures it

    def empty(self, shape, dtype):
        return np.empty(shape, dtype)

    def run(self, algorithm, x, weight, bias, p, out=None):
        return run(algorithm, "forward", x, weight, p, out, bias)

    def host(self, a):
        return a

    def release(self) -> None:
        """Free what a failed candidate left behind."""


DEVICES = [CpuDevice()]


def device_of(x):
    """The device whose arrays ``x`` is: the one place array types are told apart."""
    for device in DEVICES:
        if device.owns(x):
            return device
    raise TypeError(f"x must be an array of a known device ({[d.name for d in DEVICES]}), got {type(x).__name__}")


def _check_limit(name, value):
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 0):
        raise ValueError(f"{name} must be None or an int >= {1 if name == 'benchmark_limit' else 0}, got {value!r}")
    if name == "benchmark_limit" and value == 0:
        raise ValueError(f"benchmark_limit must be None or an int >= 1, got {value!r}")
    return value


def _check_bool(name, value):
    if not isinstance(value, (bool, np.bool_)):
        raise ValueError(f"{name} must be True or False, got {value!r}")
    return bool(value)


FLAG_CHECKS = {"benchmark": _check_bool, "deterministic": _check_bool,
               "benchmark_limit": _check_limit, "workspace_limit": _check_limit}


class Tuner:
    """A dispatch table with its flags. ``algorithms``: name -> Algorithm (default ``convalgos.ALGORITHMS``).

    ``timer``: overrides the device's timer (an object with ``time(fn) -> seconds`` and ``now()``).
    ``cache_path``: a JSON file loaded at first use and saved after each new tuning (``ENV``: the
    AUTOTUNE_CACHE environment variable; None: no file).
    """

    def __init__(self, algorithms=None, *, benchmark=False, deterministic=False, benchmark_limit=None,
                 workspace_limit=None, timer=None, heuristics=None, cache_path=None, time_budget=1.0,
                 min_runs=3, max_runs=50, precision=0.01, abandon_ratio=3.0, settle_ratio=1.1,
                 tie_tolerance=0.01, prune_ratio=10.0):
        self.algorithms = convalgos.ALGORITHMS if algorithms is None else algorithms
        self.benchmark, self.deterministic = benchmark, deterministic
        self.benchmark_limit, self.workspace_limit = benchmark_limit, workspace_limit
        self.timer, self.cache_path = timer, cache_path
        self.heuristics = Heuristics.from_file() if heuristics is None else heuristics
        self.time_budget, self.min_runs, self.max_runs = time_budget, min_runs, max_runs
        self.precision, self.abandon_ratio, self.tie_tolerance = precision, abandon_ratio, tie_tolerance
        self.settle_ratio, self.prune_ratio = settle_ratio, prune_ratio
        self._table: dict = {}
        self._foreign: list = []          # cache-file entries of another machine or version, kept for saving
        self._notes: list = []
        self._hits = self._misses = 0
        self._tuning_seconds = 0.0
        self._lock = threading.Lock()     # guards the table and the counters
        self._tuning = threading.Lock()   # one tuning at a time: timings are not disturbed, a key tunes once
        self._cache_loaded = False

    # ---- flags -------------------------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if name in FLAG_CHECKS:
            value = FLAG_CHECKS[name](name, value)
        object.__setattr__(self, name, value)

    @contextlib.contextmanager
    def flags(self, **flags):
        """Set flags for the ``with`` block; the old values come back on exit, exception or not."""
        unknown = set(flags) - set(FLAG_CHECKS)
        if unknown:
            raise TypeError(f"unknown flag(s) {sorted(unknown)}; flags are {list(FLAG_CHECKS)}")
        old = {name: getattr(self, name) for name in flags}
        try:
            for name, value in flags.items():
                setattr(self, name, value)
            yield self
        finally:
            for name, value in old.items():
                object.__setattr__(self, name, value)

    # ---- the public calls --------------------------------------------------------------------------------
    def conv2d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None):
        """``convalgos.conv2d`` semantics, the algorithm chosen through the dispatch table."""
        p = ConvParams.from_arrays(x, weight, bias, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups)
        if out is not None and (tuple(out.shape) != p.out_shape or out.dtype != x.dtype):
            raise ValueError(f"out must be a {x.dtype} array of shape {p.out_shape}, "
                             f"got {out.dtype} of shape {tuple(out.shape)}")
        device = device_of(x)
        if p.N == 0:
            return device.empty(p.out_shape, x.dtype) if out is None else out
        entry = self.entry_for(x, weight, p)
        return device.run(self.algorithms[entry.algo], x, weight, bias, p, out)

    def entry_for(self, x, weight, p: ConvParams) -> Entry:
        """The table's entry for this call, made (by heuristic or tuning) on a miss."""
        device = device_of(x)
        key = Key(p, device.layout(x), device.name, self.deterministic, device.threads())
        self._load_cache_once()
        entry = self._lookup(key)
        if entry is not None:
            return entry
        if not self.benchmark:
            return self._store(self.heuristic_entry(key))
        with self._tuning:
            entry = self._lookup(key)   # another thread may have tuned it while this one waited
            if entry is not None:
                return entry
            entry = self._store(self.tune(key, x, weight, device))
        if self._cache_file():
            self.save(self._cache_file())
        return entry

    def dispatch_table(self) -> DispatchTable:
        self._load_cache_once()
        with self._lock:
            return DispatchTable(self._table.values(), self._info(), self._notes)

    def cache_info(self) -> CacheInfo:
        with self._lock:
            return self._info()

    def clear(self) -> None:
        with self._lock:
            self._table.clear()
            self._hits = self._misses = 0
            self._tuning_seconds = 0.0

    def save(self, path) -> None:
        """Write the benchmark entries to ``path``, merged with what the file holds (atomic, locked)."""
        with self._lock:
            entries = [e for e in self._table.values() if e.source == "benchmark"]
            foreign = list(self._foreign)
        cache.save(path, entries, foreign)

    def load(self, path) -> None:
        """Add the usable entries of ``path`` to the table; the others are reported and kept for saving."""
        entries, foreign, notes = cache.load(path)
        with self._lock:
            for entry in entries:
                self._table[entry.key] = entry
            self._foreign = cache.merge_raw(self._foreign, foreign)
            self._notes = [n for n in self._notes if not n.startswith(f"{path}:")] + notes

    # ---- table -------------------------------------------------------------------------------------------
    def _info(self) -> CacheInfo:
        return CacheInfo(self._hits, self._misses, len(self._table), self._tuning_seconds)

    def _usable(self, entry: Entry) -> bool:
        if entry.algo not in self.algorithms:
            return False
        if self.benchmark and entry.source != "benchmark":
            return False
        limit = self.workspace_limit
        return limit is None or entry.workspace.get(entry.algo, 0) <= limit

    def _lookup(self, key: Key):
        with self._lock:
            entry = self._table.get(key)
            if entry is not None and self._usable(entry):
                self._hits += 1
                return entry
            return None

    def _store(self, entry: Entry) -> Entry:
        with self._lock:
            self._table[entry.key] = entry
            self._misses += 1
            self._tuning_seconds += entry.tuning_seconds
        return entry

    def _cache_file(self):
        return os.environ.get("AUTOTUNE_CACHE") if self.cache_path == ENV else self.cache_path

    def _load_cache_once(self) -> None:
        if not self._cache_loaded:
            self._cache_loaded = True
            path = self._cache_file()
            if path and os.path.exists(path):
                self.load(path)

    # ---- choosing ----------------------------------------------------------------------------------------
    def eligible(self, key: Key) -> tuple[list, dict, dict, str]:
        """(eligible names best-ranked first, workspace bytes per name, skip reasons, the ranking rule)."""
        p, skipped, workspace, names = key.params, {}, {}, []
        for name, algorithm in self.algorithms.items():
            support = algorithm.supports(p)
            if not support:
                skipped[name] = support.reason
                continue
            workspace[name] = int(algorithm.workspace_bytes(p))
            if self.workspace_limit is not None and workspace[name] > self.workspace_limit:
                skipped[name] = (f"needs {workspace[name] / MiB:.1f} MiB workspace, "
                                 f"limit {self.workspace_limit / MiB:.1f} MiB")
            elif key.deterministic and not algorithm.deterministic:
                skipped[name] = "not deterministic (deterministic=True)"
            else:
                names.append(name)
        if not names:
            raise convalgos.UnsupportedError(f"no algorithm can run {key}: {skipped}")
        ranked, rule = self.heuristics.rank(p, names)
        return ranked, workspace, skipped, rule

    def heuristic_entry(self, key: Key) -> Entry:
        ranked, workspace, skipped, rule = self.eligible(key)
        return Entry(key, ranked[0], "heuristic", rule=rule, workspace=workspace, skipped=skipped)

    def tune(self, key: Key, x, weight, device) -> Entry:
        """Measure the candidates on the real input and choose (steps 1-4 of the module docstring)."""
        timer = self.timer or device.timer
        start = timer.now()
        ranked, workspace, skipped, rule = self.eligible(key)
        if self.benchmark_limit is not None:
            for rank, name in enumerate(ranked[self.benchmark_limit:], self.benchmark_limit + 1):
                skipped[name] = f"benchmark_limit={self.benchmark_limit}: ranked {rank} by rule {rule!r}"
            ranked = ranked[:self.benchmark_limit]
        if self.prune_ratio is not None:
            for name, slowdown in self.heuristics.slowdowns(rule, ranked).items():
                if slowdown >= self.prune_ratio:
                    skipped[name] = (f"pruned: rule {rule!r} measured it {slowdown:.1f}x slower than the best "
                                     f"of its class (prune_ratio={self.prune_ratio})")
            ranked = [n for n in ranked if n not in skipped]
        entry = Entry(key, "", "benchmark", rule=rule, workspace=workspace, skipped=skipped)
        p, out = key.params, device.empty(key.params.out_shape, x.dtype)
        calls = {name: (lambda a=self.algorithms[name]: device.run(a, x, weight, None, p, out)) for name in ranked}
        checker = ReferenceCheck("forward", device.host(x), device.host(weight), p)
        for name in ranked:
            try:
                entry.warmup[name] = timer.time(calls[name])
            except device.failures as e:
                skipped[name] = f"failed: {type(e).__name__}: {e}"
                device.release()
                continue
            if device.last_workspace is not None:
                workspace[name] = device.last_workspace
            entry.errors[name] = checker.error(device.host(out))
            tolerance = self.algorithms[name].tolerance[p.dtype]
            if not entry.errors[name] <= tolerance:
                skipped[name] = (f"rejected: normwise error {entry.errors[name]:.1e} exceeds its {p.dtype} "
                                 f"tolerance {tolerance:.0e}")
        samples = self._timed_rounds({n: calls[n] for n in ranked if n not in skipped}, timer, entry)
        if not samples:
            raise RuntimeError(f"every candidate for {key} was rejected: {skipped}")
        entry.times = {n: float(np.median(s)) for n, s in samples.items()}
        entry.runs = {n: len(s) for n, s in samples.items()}
        entry.algo = self._choose(samples, entry)
        entry.tuning_seconds = timer.now() - start
        return entry

    def _timed_rounds(self, calls: dict, timer, entry: Entry) -> dict:
        samples = {name: [] for name in calls}
        active, spent = list(calls), 0.0
        while active:
            for name in active:
                t = timer.time(calls[name])
                samples[name].append(t)
                spent += t
            best = min(np.median(samples[n]) for n in samples)
            for name in list(active):
                s = samples[name]
                if min(s) >= self.abandon_ratio * best and name != self._fastest(samples):
                    entry.abandoned[name] = f"fastest run {min(s) / best:.1f}x the best median after {len(s)} run(s)"
                    active.remove(name)
                elif len(s) >= self.max_runs or (len(s) >= self.min_runs and (
                        noise(s) <= self.precision or min(s) > self.settle_ratio * best)):
                    active.remove(name)   # its median is known well enough, or it cannot tie the best
            if spent >= self.time_budget:   # out of time: only the fastest still completes its min_runs
                active = [n for n in active if n == self._fastest(samples) and len(samples[n]) < self.min_runs]
        return samples

    @staticmethod
    def _fastest(samples: dict) -> str:
        return min(samples, key=lambda n: np.median(samples[n]))

    def _choose(self, samples: dict, entry: Entry) -> str:
        """The fastest, near-ties broken by determinism, workspace, error, name."""
        best = self._fastest(samples)
        m = entry.times
        tied = [n for n in samples
                if m[n] <= m[best] * (1 + max(self.tie_tolerance, noise(samples[n]), noise(samples[best])))]
        return min(tied, key=lambda n: (not self.algorithms[n].deterministic, entry.workspace.get(n, 0),
                                        entry.errors.get(n, 0.0), n))
