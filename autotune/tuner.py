"""The Tuner: a dispatch table and its flags. A call's key is looked up; on a miss the choice is made by the
heuristic (benchmark off) or by measuring (benchmark on, ``tuning.py``), stored, and used from then on.

Where the rest lives: ``calls.py`` (a call's arrays and its memo record), ``flags.py``, ``store.py`` (the
table and its counters), ``measure.py`` (timing, noise, the choice, the reference check), ``tuning.py`` (one
key's candidates and tuning), ``race/`` (their timed race), ``devices.py`` (CPU and GPU, each with its own
algorithms), ``table.py`` (keys, entries, the report), ``shapes.py`` (changing shapes, patience), ``cache.py``
(the JSON file), ``heuristics.py``.

A hit is lean: the call's arguments (array types, shapes, strides and dtypes, the layer's parameters, the
flag and the thread count that enter the key) map through a memo to the layer validated once and its Key,
so a hit validates nothing again; then one table look-up and the run.
"""
from __future__ import annotations

import logging
import os
import threading

import numba

from convalgos.interop import from_arrays
from convalgos.passes import (backward_data_params, backward_filter_params, batched, check_out, forward_params,
                              result_array)

from .calls import Call, as_arrays, signature
from .devices import DEVICES, device_of
from .flags import FLAG_CHECKS, flags_set
from .graph import capturing, refuse_in_capture
from .heuristics import Heuristics
from .race import contention
from .race.quiet import QuietWatch
from .shapes import ShapeLog, distance, layer_of
from .store import Table
from .table import CacheInfo, Choice, DispatchTable, Entry, Key
from .tuning import heuristic_entry, reused_entry, tune

LOG = logging.getLogger("autotune")
#: ``cache_path=ENV``: the path in the AUTOTUNE_CACHE environment variable, read at first use.
ENV = "$AUTOTUNE_CACHE"


class Tuner:
    """A dispatch table with its flags (``FLAG_CHECKS``) and the race's settings (``tuning.py``).

    ``algorithms``: name -> Algorithm for every device (default: each device's own registry).
    ``devices``: the devices arrays may belong to (default ``devices.DEVICES``). ``timer``: overrides the
    devices' timers. ``cache_path``: a JSON file loaded at first use and saved after each new tuning (``ENV``:
    the AUTOTUNE_CACHE environment variable; None: no file). ``retune_warning``: warn past this many input
    shapes of one layer; ``patience``: stop timing new shapes of a layer after this many (``shapes.py``).
    ``graph_mode``: the step runs as a CUDA graph (``autotune.cuda_graph`` sets it), so a GPU candidate's cost
    is its GPU time alone; off (eager), the larger of its GPU time and the host time it takes to issue
    (``race/clock.py``). The race's settings are described where they act: ``tuning.py`` (steps 3-5),
    ``race/rounds.py``, ``race/judge.py``, ``race/provisional.py``; ``reader``: the contention reader
    (``race/contention.py``; tests give a fake), ``quiet``: the ``race/quiet.py`` watch over provisional
    entries.
    ``fleet``: None, or the ``autotune.fleet.Fleet`` this tuner joined, which has one rank of a torch.distributed
    fleet time each missed key and shares its entry (``_tune``).
    """

    def __init__(self, algorithms=None, *, devices=None, benchmark=False, deterministic=False,
                 benchmark_limit=None, workspace_limit=None, patience=None, timer=None, heuristics=None,
                 cache_path=None, retune_warning=8, time_budget=1.0, cost_cap=10.0, min_runs=3, max_runs=50,
                 precision=0.01, screen_ratio=2.0, abandon_ratio=3.0, settle_ratio=1.1, spike_ratio=1.5,
                 tie_tolerance=0.03, prune_ratio=2.0, wait_share=0.05, retakes=2, reach=1.15, min_pairs=5,
                 max_pairs=12, confidence=0.9, shootout_cap=12.0, contended_share=0.25, block_seconds=0.01,
                 pair_below=0.002, neighbour_share=0.9, retake_wait=0.03, contention_ratio=0.3, reader=None,
                 quiet=None, graph_mode=False):
        self.algorithms = algorithms
        self.devices = DEVICES if devices is None else list(devices)
        self.benchmark, self.deterministic, self.patience = benchmark, deterministic, patience
        self.benchmark_limit, self.workspace_limit = benchmark_limit, workspace_limit
        self.timer, self.cache_path = timer, cache_path
        self.heuristics = Heuristics.from_file() if heuristics is None else heuristics
        self.time_budget, self.cost_cap, self.min_runs, self.max_runs = time_budget, cost_cap, min_runs, max_runs
        self.precision, self.abandon_ratio, self.settle_ratio = precision, abandon_ratio, settle_ratio
        self.screen_ratio = screen_ratio
        self.spike_ratio, self.tie_tolerance, self.prune_ratio = spike_ratio, tie_tolerance, prune_ratio
        self.wait_share, self.retakes, self.reach, self.confidence = wait_share, retakes, reach, confidence
        self.min_pairs, self.max_pairs, self.shootout_cap = min_pairs, max_pairs, shootout_cap
        self.contended_share, self.block_seconds, self.pair_below = contended_share, block_seconds, pair_below
        self.contention_ratio, self.graph_mode = contention_ratio, graph_mode
        self.neighbour_share, self.retake_wait = neighbour_share, retake_wait
        self.reader = contention.reader() if reader is None else reader
        self.quiet = QuietWatch(self.reader) if quiet is None else quiet
        self.fleet = None
        self.shapes = ShapeLog(retune_warning)
        self.table, self._memo = Table(), {}
        self._tuning = threading.Lock()       # one tuning at a time: timings are not disturbed, a key tunes once
        self._cache_loaded = False

    # ---- flags -------------------------------------------------------------------------------------------
    def __setattr__(self, name, value):
        if name in FLAG_CHECKS:
            value = FLAG_CHECKS[name](name, value)
        elif "_cache_loaded" in self.__dict__ and not name.startswith("_") and not hasattr(self, name):
            raise AttributeError(f"Tuner has no setting {name!r}; its flags are {list(FLAG_CHECKS)}")
        object.__setattr__(self, name, value)

    def flags(self, **flags):
        """Set flags for the ``with`` block; the old values come back on exit, exception or not."""
        return flags_set(self, **flags)

    # ---- the public calls: convalgos' signatures, the algorithm chosen through the table -------------------
    def conv2d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None):
        """``convalgos.conv2d`` (torch tensors in, torch tensors out; one unbatched sample too), the algorithm
        chosen per key."""
        (x, weight, bias, out), back = as_arrays(x, weight, bias, out, names=("x", "weight", "bias", "out"))
        unbatch = batched("x", x, out=out) if getattr(x, "ndim", 4) != 4 else None
        if unbatch:
            x, out = unbatch.add(x), unbatch.add(out)
        call = self._forward_call(x, weight, bias, stride, padding, dilation, groups)
        result = self._dispatch(call, x, weight, out, bias)
        return from_arrays(unbatch.drop(result) if unbatch else result, back)

    def forward_choice(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, out=None,
                       prepared=False):
        """What ``conv2d`` would run on batched ``x`` (chosen now on a miss; None for an empty batch), for a
        caller that runs it itself on a prepared weight through ``run_choice`` (``nn.Conv2d`` in eval mode, with
        ``prepared=True``: ``Key.prepared``)."""
        call = self._forward_call(x, weight, bias, stride, padding, dilation, groups, prepared)
        if call.params.N == 0:
            return None
        entry, registry = self._entry(call, x, weight, out)
        return Choice(registry[entry.algo], call.params, entry, call.device)

    def run_choice(self, choice: Choice, x, weight, bias=None, *, out=None, prepared=None):
        """Run the forward pass as ``choice`` says, on its algorithm's ``prepared`` weight when given. A failure
        is served as any call's is (``_fall_back``): by the same algorithm on the plain weight when the prepared
        run failed, then by the next ranked."""
        try:
            return choice.device.run(choice.algorithm, "forward", x, weight, choice.params, out, bias,
                                     prepared=prepared)
        except Exception as error:  # noqa: BLE001 - another run serves the call
            return self._fall_back(choice.entry, error, choice.device, self._registry(choice.device),
                                   ("forward", x, weight, choice.params, out, bias),
                                   retry=choice.algorithm.name if prepared is not None else None)

    def conv2d_input(self, input_shape, weight, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                     out=None):
        """``convalgos.conv2d_input``: the input's gradient, the algorithm chosen per key (op "backward_data")."""
        (grad_output, weight, out), back = as_arrays(grad_output, weight, out, names=("grad_output", "weight", "out"))
        unbatch = (batched("grad_output", grad_output, input_shape=input_shape, out=out)
                   if getattr(grad_output, "ndim", 4) != 4 else None)
        if unbatch:
            grad_output, out, input_shape = unbatch.add(grad_output), unbatch.add(out), unbatch.add_shape(input_shape)
        call = self._call("backward_data", input_shape, grad_output, weight, None, stride, padding, dilation,
                          groups, lambda: backward_data_params(input_shape, weight, grad_output, stride, padding,
                                                               dilation, groups))
        result = self._dispatch(call, grad_output, weight, out, None)
        return from_arrays(unbatch.drop(result) if unbatch else result, back)

    def conv2d_weight(self, input, weight_shape, grad_output, stride=1, padding=0, dilation=1, groups=1, *,
                      out=None):
        """``convalgos.conv2d_weight``: the weight's gradient, the algorithm chosen per key (op
        "backward_filter")."""
        (input, grad_output, out), back = as_arrays(input, grad_output, out, names=("input", "grad_output", "out"),
                                                  activation=False)
        if getattr(input, "ndim", 4) != 4:
            unbatch = batched("input", input, grad_output=grad_output)
            input, grad_output = unbatch.add(input), unbatch.add(grad_output)
        call = self._call("backward_filter", weight_shape, input, grad_output, None, stride, padding, dilation,
                          groups, lambda: backward_filter_params(input, weight_shape, grad_output, stride,
                                                                 padding, dilation, groups))
        return from_arrays(self._dispatch(call, input, grad_output, out, None), back)

    # ---- one call ----------------------------------------------------------------------------------------
    def _forward_call(self, x, weight, bias, stride, padding, dilation, groups, prepared=False) -> Call:
        return self._call("forward", None, x, weight, bias, stride, padding, dilation, groups, lambda: (
            forward_params(x, weight, bias, stride, padding, dilation, groups)), bool(prepared))

    def _call(self, op, spec, a, b, bias, stride, padding, dilation, groups, validate, prepared=False) -> Call:
        """The call's device, layer and key: from the memo, else validated and remembered."""
        try:
            memo = (op, spec, signature(a), signature(b), None if bias is None else signature(bias), stride,
                    padding, dilation, groups, self.deterministic, numba.get_num_threads(), prepared)
            call = self._memo.get(memo)
        except (TypeError, AttributeError):     # unhashable arguments or non-arrays: validate() says what is wrong
            memo = call = None
        if call is None:
            p = validate()
            device = device_of(a, self.devices)
            call = Call(device, p, Key(p, device.layout(a), device.name, self.deterministic, device.threads(), op,
                                       prepared), p.result_shape(op))
            if memo is not None:
                self._memo[memo] = call
        return call

    def _dispatch(self, call: Call, a, b, out, bias):
        """A call, once its ``Call`` is known: the output (the caller's, checked, or allocated here, of the
        shape the memo keeps), the table's entry (``_entry``: a hit is one locked look-up), the run."""
        device = call.device
        if out is not None:
            check_out(out, call.result_shape, a.dtype)
        if call.params.N == 0:
            return result_array(device.xp, call.params, call.key.op, a.dtype, out)
        entry, registry = self._entry(call, a, b, out)
        if out is None:
            out = device.xp.empty(call.result_shape, a.dtype)
        try:
            return device.run(registry[entry.algo], call.key.op, a, b, call.params, out, bias)
        except Exception as error:  # noqa: BLE001 - the next ranked algorithm serves the call
            return self._fall_back(entry, error, call.device, registry, (call.key.op, a, b, call.params, out, bias))

    def _registry(self, device) -> dict:
        return device.algorithms if self.algorithms is None else self.algorithms

    def _entry(self, call: Call, a, b, out) -> tuple:
        """(the key's entry, chosen now on a miss; the registry its name is in)."""
        if not self._cache_loaded:
            self._load_cache_once()
        registry = self._registry(call.device)
        entry = self._lookup(call.key, registry)
        if entry is None:
            return self._miss(call.key, a, b, call.device, registry, out), registry
        # a capture defers the re-race to a later eager call: no timing inside a graph (``graph.py``); a fleet's
        # ranks re-race together or not at all (``autotune.fleet``), never on one rank's own reading
        if entry.provisional and self.benchmark and self.fleet is None and not capturing() and self.quiet.quiet():
            entry = self._rerace(entry, call, a, b, out, registry)
        return entry, registry

    def _rerace(self, entry: Entry, call: Call, a, b, out, registry: dict) -> Entry:
        """A provisional choice (made on runs that waited for a CPU) raced again now that the machine is quiet
        (``race/quiet.py``); the new entry replaces it, provisional again only if its runs waited too."""
        with self._tuning:
            if self.table.get(call.key) is not entry:
                return self.table.get(call.key) or entry
            again = self._tune(call.key, a, b, call.device, registry, out)
            again.reraced = entry.reraced + 1
            self.quiet.raced(bool(again.provisional))
            LOG.info("re-raced %s, chosen while the cores were shared: %s (was %s)%s", call.key, again.algo,
                     entry.algo, "; still waiting for a CPU" if again.provisional else "")
            self.table.rerace(again)
        if self._cache_file():
            self.save(self._cache_file())
        return again

    def _fall_back(self, entry: Entry, error, device, registry, call, retry=None):
        """The chosen algorithm failed at a call: the next ranked that runs serves it, and becomes the choice
        (``retry``: an algorithm to try first, as it is: the choice itself, after its prepared run failed)."""
        failed, tried = entry.algo, [entry.algo]
        first = [retry] if retry is not None else []
        for name in first + [n for n in entry.ranked if n != failed and n in registry]:
            device.release(registry[tried[-1]])
            try:
                result = device.run(registry[name], *call)
            except Exception:  # noqa: BLE001 - try the next one
                tried.append(name)
                continue
            if name == failed:
                return result
            self.table.fell_back(entry, failed, name, f"failed at a call ({type(error).__name__}: {error}); "
                                                      f"{name} serves instead")
            return result
        raise error

    def _miss(self, key: Key, a, b, device, registry: dict, out) -> Entry:
        refuse_in_capture("tuner", str(key))
        if not self.benchmark:
            return self.table.store(heuristic_entry(self, key, registry, device.kind))
        with self._tuning:
            entry = self._lookup(key, registry)   # another thread may have tuned it while this one waited
            if entry is not None:
                return entry
            tuned = self.shapes.shapes(key)
            if self.patience is not None and tuned >= self.patience and not self.shapes.knows(key):
                why = f"patience={self.patience}: {tuned} shapes of this layer tuned"
                return self.table.store(reused_entry(self, key, registry, device.kind, self._nearest(key), why))
            entry = self.table.store(self._tune(key, a, b, device, registry, out))
            self.shapes.record(entry)
        if self._cache_file():
            self.save(self._cache_file())
        return entry

    def _tune(self, key: Key, a, b, device, registry: dict, out) -> Entry:
        """``tuning.tune`` of ``key`` here, or through ``fleet``: one rank of the fleet times it, every rank gets
        the entry (``autotune.fleet``)."""
        timer = self.timer or device.timer
        if self.fleet is not None:
            return self.fleet.tune(self, key, a, b, device, registry, out, timer)
        return tune(self, key, a, b, device, registry, out, timer)

    # ---- the table ---------------------------------------------------------------------------------------
    def dispatch_table(self) -> DispatchTable:
        self._load_cache_once()
        return self.table.report(self.shapes.info())

    def cache_info(self) -> CacheInfo:
        return self.table.info(self.shapes.info())

    def clear(self) -> None:
        self.table.clear()
        self._memo.clear()
        self.shapes.clear()

    def save(self, path) -> None:
        """Write the benchmark entries to ``path``, merged with what the file holds (atomic, locked)."""
        self.table.save(path)

    def load(self, path) -> None:
        """Add the usable entries of ``path`` to the table; the others are reported and kept for saving."""
        self.table.load(path)

    def _usable(self, entry: Entry, registry: dict) -> bool:
        if entry.algo not in registry or (self.benchmark and entry.source == "heuristic"):
            return False
        limit = self.workspace_limit
        return limit is None or entry.workspace.get(entry.algo, 0) <= limit

    def _lookup(self, key: Key, registry: dict):
        return self.table.hit(key, lambda entry: self._usable(entry, registry))

    def _nearest(self, key: Key):
        """The tuned entry of the same layer and pass whose input shape is nearest ``key``'s (or None)."""
        layer = layer_of(key)
        same = self.table.entries(lambda k, e: (k.op, k.prepared, e.source) == (key.op, key.prepared, "benchmark")
                                  and layer_of(k) == layer)
        return min(same, key=lambda e: distance(e.key, key), default=None)

    def _cache_file(self):
        return os.environ.get("AUTOTUNE_CACHE") if self.cache_path == ENV else self.cache_path

    def _load_cache_once(self) -> None:
        if not self._cache_loaded:
            self._cache_loaded = True
            path = self._cache_file()
            if path and os.path.exists(path):
                self.load(path)
