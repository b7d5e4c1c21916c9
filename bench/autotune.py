"""How well the autotuner chooses: regret against an independent oracle, quiet and beside a noisy neighbour,
what tuning costs, and what a table hit costs; bench/results/cpu-autotune.md.

    python -m bench.autotune                  # quiet, the whole layer set (minutes)
    python -m bench.autotune --neighbour      # tunings beside a process busy on one core
    python -m bench.autotune --both           # both, per layer, in one record (the record: about 10 min)
    python -m bench.autotune --quick --both   # a smoke test on four small layers, convalgos first, under /tmp
    python -m bench.autotune --orders numpy   # one import order

Everything below runs in one fresh process per import order (numpy, torch or convalgos imported first:
``bench.orders``), one order after the other; the record gives each order's figures.

For every layer of ``bench.layers`` and each pass in ``--passes`` (forward by default), with random operands
and the caller's output buffer:

- tune it ``--tunings`` times, each in a fresh ``autotune.Tuner(benchmark=True)``; with ``--neighbour`` (or
  ``--both``, after the quiet ones) as many tunings run while a second process spins a pure-Python loop on one
  core (``Neighbour``: started once, paused with SIGSTOP outside those tunings);
- the oracle: every candidate any tuning timed, re-timed quietly in ``--oracle-rounds`` interleaved rounds
  (``autotune.measure.interleaved``), medians;
- regret of a choice = oracle time of the chosen / the oracle's best - 1 (the heuristic's choice too);
- tuning cost = the entry's ``tuning_seconds`` (warm-ups, the reference check, timed runs) over the oracle
  time of the chosen algorithm, for every tuning but the first of each layer, which compiles or loads the
  kernels; it is split into warm-ups (the entry's ``warmup``), timed runs (``runs`` x ``times``, about) and
  the rest (the reference check, bookkeeping);
- stability: how often a tuning makes the layer's most common choice, where the oracle's two best differ by
  more than 5% (below that either choice is fine).

Dispatch overhead: on a small layer, a hit of ``autotune.conv2d`` (``conv2d_input``, ``conv2d_weight``)
against ``convalgos``' same function with the algorithm the table chose, interleaved for 1 s per pass (0.1 s
with ``--quick``), difference of medians.
Targets: regret median <= 2% and worst <= 10%; tuning cost median <= 40 and worst <= 150 runs of the choice;
dispatch overhead <= 10 us.

Hit path (``--hit-path``, printed, no record): what a hit costs the host alone, on ``DISPATCH_LAYER`` with one
algorithm that does no work, in thread CPU time per call (the least over repeats), beside ``convalgos.run`` of
that algorithm. CPU time leaves out the time other processes hold the core, so it holds on a loaded machine
where wall-clock differences of medians of real passes (the dispatch overhead above) drown in the noise.
"""
from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import numpy as np

import autotune
import convalgos
from autotune import measure
from autotune.heuristics import Heuristics
from convalgos import ALGORITHMS, PASSES, Algorithm
from convalgos.registry import SUPPORTED

from . import orders
from .autotune_report import report
from .common import RESULTS, write_record
from .layers import ALL_LAYERS, layer

QUICK = {"3x3.c16.16": layer(1, 16, 16, 16, 3), "dw3x3.c32.16": layer(1, 32, 16, 32, 3, groups=32),
         "1x1.c32.14": layer(1, 32, 14, 32, 1), "5x5.c8.16": layer(1, 8, 16, 8, 5)}
DISPATCH_LAYER = layer(1, 8, 8, 8, 3)


class Neighbour:
    """A second process busy on one core (a pure-Python loop), paused unless inside ``busy()``."""

    def __init__(self):
        self.process = subprocess.Popen([sys.executable, "-c", "while True: pass"])
        os.kill(self.process.pid, signal.SIGSTOP)

    @contextlib.contextmanager
    def busy(self):
        os.kill(self.process.pid, signal.SIGCONT)
        try:
            yield
        finally:
            os.kill(self.process.pid, signal.SIGSTOP)

    def close(self):
        self.process.kill()
        self.process.wait()


def operands(p, op, seed=0):
    """(a, b, out) of pass ``op``: random float32 operands and a result buffer."""
    rng = np.random.default_rng(seed)
    x, w, dy = (rng.standard_normal(s).astype(p.dtype) for s in (p.in_shape, p.weight_shape, p.out_shape))
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    return a, b, np.empty(p.result_shape(op), p.dtype)


def tune(p, op, a, b, out, benchmark=True):
    """The entry a fresh Tuner makes for pass ``op`` of layer p."""
    tuner = autotune.Tuner(benchmark=benchmark)
    layer_args = (p.stride, p.padding, p.dilation, p.groups)
    if op == "forward":
        tuner.conv2d(a, b, None, *layer_args, out=out)
    elif op == "backward_data":
        tuner.conv2d_input(p.in_shape, b, a, *layer_args, out=out)
    else:
        tuner.conv2d_weight(a, p.weight_shape, b, *layer_args, out=out)
    (entry,) = tuner.dispatch_table()
    return entry


def oracle(p, op, a, b, out, names, rounds: int) -> dict:
    """name -> median seconds of each of ``names``, interleaved: ``rounds`` rounds, more while under 0.5 s."""
    calls = {n: (lambda a_=ALGORITHMS[n]: convalgos.run(a_, op, a, b, p, out)) for n in names}
    return {n: measure.median(s) for n, s in measure.interleaved(calls, rounds, min_seconds=0.5).items()}


def disturbed(neighbour, condition: str):
    """The context of a condition: the neighbour busy for "neighbour", nothing for "quiet"."""
    return neighbour.busy() if condition == "neighbour" else contextlib.nullcontext()


def cost(entry, own: float) -> dict:
    """The tuning's cost in runs of the chosen algorithm (``own`` seconds), split by what the entry records."""
    warmups = sum(entry.warmup.values())
    timed = sum(entry.runs[n] * entry.times[n] for n in entry.runs)
    return {"total": entry.tuning_seconds / own, "warmups": warmups / own, "timed": timed / own,
            "rest": (entry.tuning_seconds - warmups - timed) / own, "runs": sum(entry.runs.values()),
            "seconds": entry.tuning_seconds}


def measure_layer(p, op, tunings: int, rounds: int, neighbour, conditions) -> dict:
    a, b, out = operands(p, op)
    entries = {}
    for condition in conditions:
        with disturbed(neighbour, condition):
            entries[condition] = [tune(p, op, a, b, out) for _ in range(tunings)]
    every = [e for es in entries.values() for e in es]
    heuristic = tune(p, op, a, b, out, benchmark=False).algo
    times = oracle(p, op, a, b, out, sorted({n for e in every for n in e.times} | {heuristic}), rounds)
    best = min(times, key=times.get)
    ranked = sorted(times.values())
    for algorithm in ALGORITHMS.values():
        algorithm.release()
    first = entries[conditions[0]][0]
    row = {"params": p, "times": times, "best": best, "first_seconds": first.tuning_seconds,
           "gap": ranked[1] / ranked[0] - 1 if len(ranked) > 1 else float("inf"), "heuristic": heuristic,
           "heuristic_regret": times[heuristic] / times[best] - 1}
    for condition, es in entries.items():
        choices = [e.algo for e in es]
        warm = [e for e in es if e is not first]
        row[condition] = {"choices": choices, "regrets": [times[c] / times[best] - 1 for c in choices],
                          "costs": [cost(e, times[e.algo]) for e in warm], "ties": sum(len(e.tied) > 1 for e in es),
                          "agree": Counter(choices).most_common(1)[0][1] / len(choices)}
    return row


def dispatch_overhead(rounds: int, min_seconds: float) -> dict:
    """pass -> (microseconds a hit of autotune's function costs over convalgos' same function with the
    algorithm the table chose, over ``convalgos.run`` of that algorithm on the layer's ConvParams built once,
    the algorithm), on ``DISPATCH_LAYER``, called as a user calls them (no out=). The calls go to a fresh
    benchmark-mode Tuner (``autotune.conv2d`` is the default Tuner's method), so no cache file is touched."""
    p = DISPATCH_LAYER
    layer_args = (p.stride, p.padding, p.dilation, p.groups)
    rng = np.random.default_rng(5)
    x, w, dy = (rng.standard_normal(s).astype(p.dtype) for s in (p.in_shape, p.weight_shape, p.out_shape))
    tuner = autotune.Tuner(benchmark=True)
    calls = {"forward": (tuner.conv2d, convalgos.conv2d, (x, w, None) + layer_args, (x, w)),
             "backward_data": (tuner.conv2d_input, convalgos.conv2d_input, (p.in_shape, w, dy) + layer_args,
                               (dy, w)),
             "backward_filter": (tuner.conv2d_weight, convalgos.conv2d_weight, (x, p.weight_shape, dy) + layer_args,
                                 (x, dy))}
    results = {}
    for op, (ours, theirs, args, operands_) in calls.items():
        ours(*args)                                                # tunes the key: the calls below hit it
        algo = next(e.algo for e in tuner.dispatch_table() if e.key.op == op)
        samples = measure.interleaved(
            {"autotune": lambda f=ours, a=args: f(*a),
             "convalgos": lambda f=theirs, a=args, n=algo: f(*a, algo=n),
             "run": lambda o=op, a=operands_, n=algo: convalgos.run(ALGORITHMS[n], o, *a, p)},
            rounds, warmup=20, min_seconds=min_seconds)
        median = {k: measure.median(v) for k, v in samples.items()}
        results[op] = ((median["autotune"] - median["convalgos"]) * 1e6,
                       (median["autotune"] - median["run"]) * 1e6, algo)
    return results


class NoWork(Algorithm):
    """An algorithm whose passes do nothing: a call through it is the dispatcher's host path alone."""

    name, deterministic = "no_work", True

    def constraints(self, p, op):
        return SUPPORTED

    def workspace_bytes(self, p, op="forward"):
        return 0

    def flops(self, p, op="forward"):
        return p.flops

    def forward(self, x, w, p, out):
        pass

    def backward_data(self, dy, w, p, out):
        pass

    def backward_filter(self, x, dy, p, out):
        pass


def hit_path_cost(calls: int = 2000, repeats: int = 40) -> dict:
    """pass -> (us of thread CPU time per hit of a Tuner whose one algorithm does nothing, us per
    ``convalgos.run`` of it), the least over ``repeats`` batches of ``calls`` (module docstring)."""
    p, no_work = DISPATCH_LAYER, NoWork()
    tuner = autotune.Tuner({no_work.name: no_work}, heuristics=Heuristics({"rules": []}))
    rng = np.random.default_rng(5)
    x, w, dy = (rng.standard_normal(s).astype(p.dtype) for s in (p.in_shape, p.weight_shape, p.out_shape))
    layer_args = (p.stride, p.padding, p.dilation, p.groups)
    calls_of = {"forward": (lambda: tuner.conv2d(x, w, None, *layer_args), (x, w)),
                "backward_data": (lambda: tuner.conv2d_input(p.in_shape, w, dy, *layer_args), (dy, w)),
                "backward_filter": (lambda: tuner.conv2d_weight(x, p.weight_shape, dy, *layer_args), (x, dy))}

    def per_call(fn) -> float:
        fn()
        best = float("inf")
        for _ in range(repeats):
            start = time.thread_time()
            for _ in range(calls):
                fn()
            best = min(best, (time.thread_time() - start) / calls)
        return best * 1e6

    return {op: (per_call(hit), per_call(lambda o=op, a=operands_: convalgos.run(no_work, o, *a, p)))
            for op, (hit, operands_) in calls_of.items()}


def measure_all(args, conditions) -> dict:
    """What a child process measures (JSON): every layer's row, and the dispatch overhead per condition."""
    layers = QUICK if args.quick else ALL_LAYERS
    neighbour = Neighbour() if "neighbour" in conditions else None
    try:
        rows = []
        for name, p in layers.items():
            for op in args.passes:
                r = measure_layer(p, op, args.tunings, args.oracle_rounds, neighbour, conditions)
                rows.append([name, op, {**r, "params": str(p)}])
                print(f"{name:<28} {op:<16} best {r['best']:<13} "
                      + "  ".join(f"{c}: {','.join(r[c]['choices'])} regret {max(r[c]['regrets']):.1%}"
                                  for c in conditions), file=sys.stderr, flush=True)
        dispatch = {}
        for c in conditions:
            with disturbed(neighbour, c):
                dispatch[c] = dispatch_overhead(200, 0.1) if args.quick else dispatch_overhead(2000, 1.0)
    finally:
        if neighbour is not None:
            neighbour.close()
    return {"rows": rows, "dispatch": dispatch}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only the small layers {', '.join(QUICK)}, 2 tunings, "
                                                         "3 oracle rounds (a smoke test)")
    ap.add_argument("--neighbour", action="store_true", help="tune beside a process busy on one core")
    ap.add_argument("--both", action="store_true", help="tune quietly, then beside the neighbour, per layer")
    ap.add_argument("--tunings", type=int, default=None, help="tunings per layer and condition (default 3)")
    ap.add_argument("--oracle-rounds", type=int, default=None, help="interleaved oracle rounds (default 15)")
    ap.add_argument("--passes", nargs="+", choices=PASSES, default=["forward"])
    ap.add_argument("--out", type=Path, default=None, help="markdown path (default bench/results/cpu-autotune.md; "
                                                         "/tmp/cpu-autotune-quick.md with --quick)")
    ap.add_argument("--hit-path", action="store_true", help="print the host cost of a hit (us per call, a no-work "
                                                            "algorithm) and of convalgos.run, then stop")
    orders.add_arguments(ap, rounds=None)
    args = ap.parse_args(argv)
    if args.hit_path:
        print(json.dumps({op: [round(v, 2) for v in us] for op, us in hit_path_cost().items()}))
        return None
    orders.resolve(args, rounds=1)
    args.tunings = args.tunings or (2 if args.quick else 3)
    args.oracle_rounds = args.oracle_rounds or (3 if args.quick else 15)
    conditions = ["quiet", "neighbour"] if args.both else ["neighbour"] if args.neighbour else ["quiet"]
    if args.child:
        return orders.emit(measure_all(args, conditions))
    out = args.out or (Path("/tmp/cpu-autotune-quick.md") if args.quick else RESULTS / "cpu-autotune.md")
    child = ["--child", "--tunings", str(args.tunings), "--oracle-rounds", str(args.oracle_rounds),
             "--passes", *args.passes] + [f"--{flag}" for flag in ("quick", "neighbour", "both") if getattr(args, flag)]
    per_order = {order: children[0] for order, children in orders.run("bench.autotune", child, args).items()}
    write_record(out, report(per_order, conditions, args, str(DISPATCH_LAYER)))


if __name__ == "__main__":
    main()
