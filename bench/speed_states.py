"""Does the machine keep one speed? Two algorithms of one layer, timed over and over for a minute.

    python -m bench.speed_states                 # the 1x1 stride-2 layer, direct against direct_channels
    python -m bench.speed_states --layer 9 --algorithms direct,direct_channels --seconds 30 --orders convalgos

The regret bench (``bench.regret``) judges each choice against a race of every algorithm taken later. That
is fair only if the machine runs each algorithm at one speed from one moment to the next, or slows them all
alike. This bench asks: in one fresh process per import order (``bench.orders``: numpy, torch or convalgos
first), one after the other, on a quiet machine (no other process: probed before and after), every
``--every`` seconds it times both algorithms by the judge's rule (``regret_layers.block``: the pool
woken, one call untimed, a block of back-to-back calls; the median of three blocks each), by the race's rule
(``autotune.race.clock.Sampler``: the pool woken, one call of its own untimed, one call timed, the contention
readings around it; the median of five samples each, interleaved) and the pool's fork/join latency
(``regret_placement.fork_join_seconds``: where the host placed the VM's vCPUs), and writes each moment's times,
their ratio by both rules, and the latency. (A STREAM triad took that column until 2026-12-05 evening: its
bandwidth did not move with the ratio, correlation 0.02; the fork/join latency does.) Where the two rules' ratios move
together moment by moment, the race and the judge measure the same thing, and a choice that a later judge calls
a regret was right in the race's moment. Where the ratio moves
run to run by more than a tie band, no race taken at one moment can be right at every other: that spread is
the floor under any regret measured across moments (``bench.regret``'s "judge against itself" row).
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from bench import orders
from bench.common import RESULTS, header, write_record


def child(args) -> dict:
    """Time the two algorithms every ``args.every`` seconds for ``args.seconds``: the moments' times (ms) and
    fork/join latencies, with the machine probed before and after."""
    import convalgos
    from autotune.measure import Timer, median
    from autotune.race.clock import Sampler
    from autotune.race.contention import machine_wait_share, reader
    from bench.regret_layers import LAYERS, Layer, block
    from bench.regret_placement import placement_us

    layer = Layer(*LAYERS[args.layer])
    names = args.algorithms.split(",")
    out = np.empty(layer.p.result_shape(layer.op), np.float32)
    calls = {n: (lambda a=convalgos.ALGORITHMS[n]: convalgos.run(a, layer.op, layer.a, layer.b, layer.p, out))
             for n in names}

    for name in names:
        block(calls[name], 30)                                 # compiled and warm before the first moment
    sampler = Sampler(Timer(), reader())
    sampler.reader.refresh()

    def race_ms():
        samples = {n: [] for n in names}
        for _ in range(5):
            for n in names:
                samples[n].append(sampler.take(calls[n], lead=1).seconds)
        return {n: median(v) * 1e3 for n, v in samples.items()}
    before = machine_wait_share(0.3)
    rows, end = [], time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        times = {n: median([block(calls[n], 30) for _ in range(3)]) * 1e3 for n in names}
        rows.append({"when": time.strftime("%H:%M:%S"), "ms": times, "race_ms": race_ms(),
                     "fork_join_us": placement_us()})
        time.sleep(args.every)
    return {"layer": f"{layer.name} ({layer.op})", "rows": rows, "before": before,
            "after": machine_wait_share(0.3)}


def section(order: str, run: dict, names: list) -> list:
    """One order's lines: the ratio's range and who was faster how often, computed from its rows, then the rows."""
    from autotune.measure import median
    first, second = names
    rows = run["rows"]
    ratios = [r["ms"][first] / r["ms"][second] for r in rows]
    race = [r["race_ms"][first] / r["race_ms"][second] for r in rows]
    fork = [r["fork_join_us"] for r in rows]
    fast = {n: min(r["ms"][n] for r in rows) for n in names}
    slow = {n: max(r["ms"][n] for r in rows) for n in names}
    return ["", f"## {order} first", "",
            f"{len(rows)} moments; the machine probed from outside (share of spinning probes' time spent waiting for a "
            f"CPU; ~0 is quiet): {run['before']:.3f} before, {run['after']:.3f} after. Ratio {first} / {second}: from "
            f"{min(ratios):.2f} to {max(ratios):.2f} (median {median(ratios):.2f}); a ratio over 1 means {second} is "
            f"the faster at that moment. Slowest moment over fastest: {first} {slow[first] / fast[first]:.2f}x, "
            f"{second} {slow[second] / fast[second]:.2f}x. Moments with {first} the faster by over 3%: "
            f"{sum(r < 1 / 1.03 for r in ratios)}; with {second} the faster by over 3%: "
            f"{sum(r > 1.03 for r in ratios)}; within 3%: {sum(1 / 1.03 <= r <= 1.03 for r in ratios)}. By the "
            f"race's rule the ratio ran from {min(race):.2f} to {max(race):.2f} (median {median(race):.2f}); "
            f"correlation with the judge's, moment by moment: {correlation(ratios, race):.2f}. The pool's fork/join "
            f"latency ran from {min(fork):.2f} to {max(fork):.2f} us; its correlation, moment by moment, with the "
            f"judge's ratio: {correlation(ratios, fork):.2f}, with {first}'s time: "
            f"{correlation([r['ms'][first] for r in rows], fork):.2f}, with {second}'s: "
            f"{correlation([r['ms'][second] for r in rows], fork):.2f}.", "",
            f"| time (UTC) | {first} ms | {second} ms | ratio | race's rule: ratio | fork/join us |",
            "|---|---|---|---|---|---|"] + [
            f"| {r['when']} | {r['ms'][first]:.3f} | {r['ms'][second]:.3f} | {r['ms'][first] / r['ms'][second]:.2f} "
            f"| {x:.2f} | {r['fork_join_us']:.2f} |" for r, x in zip(rows, race)]


def correlation(a: list, b: list) -> float:
    """Pearson's correlation of two equal-length lists (0 where either is constant)."""
    return float(np.corrcoef(a, b)[0, 1]) if len(a) > 1 and np.std(a) > 0 and np.std(b) > 0 else 0.0


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", type=int, default=4, help="index into bench.regret_layers.LAYERS (default 4: 1x1 s2)")
    ap.add_argument("--algorithms", default="direct,direct_channels", help="two algorithm names, comma-separated")
    ap.add_argument("--seconds", type=float, default=45.0, help="how long to keep timing, per order (default 45)")
    ap.add_argument("--every", type=float, default=1.5, help="seconds between moments (default 1.5)")
    ap.add_argument("--out", default=str(RESULTS / "cpu-speed-states.md"))
    orders.add_arguments(ap, rounds=None)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args)))
        return
    orders.resolve(args, rounds=1)
    names = args.algorithms.split(",")
    argv = ["--child", "--layer", str(args.layer), "--algorithms", args.algorithms, "--seconds", str(args.seconds),
            "--every", str(args.every)]
    runs = {order: orders.run_child(order, "bench.speed_states", argv, args.keep_env) for order in args.orders}
    lines = [header(f"Speed states: {names[0]} and {names[1]} on one layer, timed every {args.every:g} s"), "",
             f"`python -m bench.speed_states --layer {args.layer} --algorithms {args.algorithms} --seconds "
             f"{args.seconds:g}`: layer \"{next(iter(runs.values()))['layer']}\", one fresh process per import "
             f"order, one after the other; each moment times both by the judge's rule (the median of three blocks "
             f"of 30 back-to-back calls, the pool woken and one call untimed before each) and by the race's (the "
             f"median of five single calls, each after an untimed one of its own, interleaved)."]
    for order, run in runs.items():
        lines += section(order, run, names)
    write_record(Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
