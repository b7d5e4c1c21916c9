"""The tuner's regret: does benchmark mode keep the fastest, quietly, beside a neighbour, and once it has gone?

    python -m bench.regret                      # every import order, a fresh process each; cpu-regret.md
    python -m bench.regret --orders convalgos --layers 4      # a quick look

The record is ``bench/results/cpu-regret.md``; beside it ``cpu-regret.json`` holds the whole run, each tuning's
evidence included (``regret_misses.py``), and the record traces every miss over a target from it.

In a fresh process per import order (``bench.orders``), for each of a dozen layers (``regret_layers.py``),
each tuned with a fresh ``autotune.Tuner(benchmark=True)``:

1. first: the first tuning in the process (kernels loaded from Numba's cache: that JIT is measured apart);
2. warm: a second tuning, in the same process;
3. steady: a tuning beside a neighbour spinning on one core (``neighbours.py``), judged against a race under
   that same neighbour; the neighbour stops, the layer is called through the tuner for ``--after`` seconds
   (1), and the choice then (re-raced or not) is judged against the quiet race;
4. bursty: a tuning beside neighbours that come and go on every core; they stop, and the layer is called for
   ``--after`` seconds, as in 3 (a choice marked provisional there is raced again once the machine is quiet);
5. the judge, quietly, twice: every algorithm that supports the pass, timed as a step pays for a call
   (``regret_layers.judge_layers``: blocks of back-to-back calls with the pool awake, ``--rounds`` interleaved
   rounds, 15 by default (7 until 2026-12-05 evening: two passes of 7 disagreed by up to 33% on the 1x1
   stride-2 pair), medians; quietly each round goes over every layer before the next, ``judge_layers``, so a
   layer's rounds span the pass rather than one of the machine's slow phases; under the steady neighbour the same,
   waits included), once after the warm phase and once last, a minute or two apart. A choice's regret is its
   time over the best time, less one, both the mean of the two passes. The two passes also judge each other
   (the first's fastest timed by the second): the noise floor of any regret here. Under the steady neighbour
   the judge also runs twice, back to back, after the twelve tunings, each pass of ``--steady-rounds`` (21)
   spread over the layers as the quiet one, and its two passes judge each other the same way: a neighbour's
   time slices stall a sub-millisecond call's whole thread pool by luck, so a block's cost per call falls on
   one of a few levels (none of its slices, one, two), and there the judge takes the mean of the blocks, not the
   median, and dismisses an algorithm only at ``STEADY_SLOW`` times the best after three blocks. Medians of 21
   rounds back to back, dismissing after one block, disagreed with themselves by up to 520% (2026-12-05 21:45);
   means of 21 rounds back to back, by up to 38% (23:40); means spread over the layers, by 4-79% in eleven
   processes of twelve and 356% in one (23:53-00:28). This machine
   (a 2-core VM) changes speed, quiet as it is, and slows algorithms unequally: the host moves its vCPUs
   (``regret_placement.fork_join_seconds``, ``bench.speed_states``, ``cpu-speed-states.md``: on the 1x1
   stride-2 layer, ``direct`` over ``direct_channels`` 0.97 in the median moment with the vCPUs near, 1.30 far,
   and 0.82-1.13 within one placement), so each choice is also judged on the rounds in its race's placement
   (``regret_placement.py``); a choice right in one moment can still read as a regret in the next.

Right after each warm tuning, each tuning beside the steady neighbour (under it, on the mean of
``STEADY_MOMENT_ROUNDS`` blocks), and each second of calls once a neighbour has gone, a short judge of the layer
alone (``regret_layers.moment``: ``MOMENT_ROUNDS`` rounds of blocks) times every algorithm in the same moment as
the choice: against it, a regret is mostly the race's own error, not the machine's drift between
the choice and the quiet judge a minute later (in the second after a neighbour has left, the moment itself moves).

The tuning cost is a tuning's seconds over the quiet judge's time of the algorithm it chose (JIT excluded).
Before each phase the machine's contention is probed from outside (``machine_wait_share``), so the record
says how quiet "quiet" was.
"""
from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path
from statistics import fmean

from bench import orders
from bench.common import RESULTS, write_record

#: phases of a child, in order
PHASES = ("first", "warm", "steady", "after", "bursty", "after_bursty")


def child(args) -> dict:
    import numpy as np

    import autotune
    from autotune.race.contention import machine_wait_share
    from bench.neighbours import neighbour
    from bench.regret_layers import LAYERS, STEADY_MOMENT_ROUNDS, STEADY_SLOW, Layer, judge_layers, moment
    from bench.regret_misses import evidence
    from bench.regret_placement import placement_us

    layers = [Layer(*spec) for spec in LAYERS[:args.layers]]
    out = {"layers": [l.name for l in layers], "ops": [l.op for l in layers], "quiet": {}}

    def tune(layer):
        placement = placement_us()                 # where the vCPUs sit as it races (regret_report)
        t = autotune.Tuner(benchmark=True)
        start = time.perf_counter()
        layer.call(t)
        wall = time.perf_counter() - start
        (entry,) = t.dispatch_table()
        return t, {"algo": entry.algo, "seconds": entry.tuning_seconds, "wall": wall,
                   "jit": sum(entry.jit.values()), "provisional": bool(entry.provisional),
                   "verdict": entry.verdict.get("outcome", ""), "times": entry.times, "placement_us": placement,
                   "evidence": evidence(entry)}

    out["quiet"]["first"] = machine_wait_share(0.2)
    out["first"] = [tune(l)[1] for l in layers]
    out["quiet"]["warm"] = machine_wait_share(0.2)
    out["warm"], out["judge_moment_warm"] = [], []
    for layer in layers:
        out["warm"].append(tune(layer)[1])
        out["judge_moment_warm"].append(moment(layer))
    out["quiet"]["judge 1"] = machine_wait_share(0.2)
    judges = judge_layers(layers, args.rounds)
    out["judge_quiet_1"], out["judge_quiet_rounds_1"] = [j.times() for j in judges], [j.record() for j in judges]
    with neighbour("steady"):
        tuned, out["judge_moment_steady"] = [], []
        for layer in layers:
            tuned.append(tune(layer))
            out["judge_moment_steady"].append(moment(layer, STEADY_MOMENT_ROUNDS, fmean, STEADY_SLOW))
        for k in (1, 2):
            judges = judge_layers(layers, args.steady_rounds, statistic=fmean, slow=STEADY_SLOW)
            out[f"judge_steady_{k}"] = [j.times() for j in judges]
    tuners, out["steady"] = [t for t, _ in tuned], [entry for _, entry in tuned]
    out["judge_steady"] = [{n: (one[n] + two[n]) / 2 for n in one}
                           for one, two in zip(out["judge_steady_1"], out["judge_steady_2"])]

    def called_for(phase, tuners) -> None:
        """Each layer's choice once it has been called through its tuner for ``--after`` seconds (re-raced or
        not), and a race of the layer right after (``moment``)."""
        out[phase], out[f"judge_moment_{phase}"] = [], []
        for layer, t in zip(layers, tuners):
            end = time.perf_counter() + args.after
            while time.perf_counter() < end:
                layer.call(t)
            (entry,) = t.dispatch_table()
            out[phase].append({"algo": entry.algo, "reraced": entry.reraced, "provisional": bool(entry.provisional),
                               "placement_us": placement_us(), "evidence": evidence(entry)})
            out[f"judge_moment_{phase}"].append(moment(layer))

    out["quiet"]["after"] = machine_wait_share(0.2)
    called_for("after", tuners)
    with neighbour("bursty"):
        tuned = [tune(l) for l in layers]
    out["bursty"] = [entry for _, entry in tuned]
    called_for("after_bursty", [t for t, _ in tuned])
    out["quiet"]["judge 2"] = machine_wait_share(0.2)
    judges = judge_layers(layers, args.rounds)
    out["judge_quiet_2"], out["judge_quiet_rounds_2"] = [j.times() for j in judges], [j.record() for j in judges]
    out["judge_quiet"] = [{n: (one[n] + two[n]) / 2 for n in one}
                          for one, two in zip(out["judge_quiet_1"], out["judge_quiet_2"])]
    out["threads"], out["numpy"] = __import__("numba").get_num_threads(), np.__version__
    return out


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    orders.add_arguments(ap, rounds=None)
    ap.add_argument("--layers", type=int, default=12, help="how many of the layers (default all 12)")
    ap.add_argument("--rounds", type=int, default=15,
                    help="the quiet judge's interleaved rounds of blocks (default 15)")
    ap.add_argument("--steady-rounds", type=int, default=21,
                    help="the steady neighbour's judge's rounds, each pass (default 21)")
    ap.add_argument("--after", type=float, default=1.0, help="seconds of calls once the neighbour is gone")
    ap.add_argument("--out", default=str(RESULTS / "cpu-regret.md"))
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    orders.resolve(args, rounds=1)
    from bench.regret_misses import traced
    from bench.regret_report import render
    load = os.getloadavg()[0]
    runs = {}
    for order in args.orders:
        child_argv = ["--child", "--layers", str(args.layers), "--rounds", str(args.rounds), "--steady-rounds",
                      str(args.steady_rounds), "--after", str(args.after)]
        runs[order] = orders.run_child(order, "bench.regret", child_argv, args.keep_env)
    out = Path(args.out)
    write_record(out, render(runs, load, args) + "".join(line + "\n" for line in traced(runs)))
    out.with_suffix(".json").write_text(json.dumps(runs, separators=(",", ":")) + "\n")
    print(f"wrote {out.with_suffix('.json')} (every tuning's evidence, for tracing a miss)")


if __name__ == "__main__":
    main()
