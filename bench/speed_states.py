"""Does the machine keep one speed? Two algorithms of one layer, timed over and over for a minute.

    python -m bench.speed_states                 # the 1x1 stride-2 layer, direct against direct_channels
    python -m bench.speed_states --layer 9 --algorithms direct,direct_channels --seconds 30

The regret bench (``bench.regret``) judges each choice against a race of every algorithm taken later. That
is fair only if the machine runs each algorithm at one speed from one moment to the next, or slows them all
alike. This bench asks: in one process, on a quiet machine (no other process: probed before and after), every
``--every`` seconds it times both algorithms by the judge's rule (``regret_layers.judge``'s blocks: the pool
woken, one call untimed, a block of back-to-back calls; the median of three blocks each) and a STREAM triad
(the memory bandwidth, best of three), and writes each moment's times and their ratio. Where the ratio moves
run to run by more than a tie band, no race taken at one moment can be right at every other: that spread is
the floor under any regret measured across moments (``bench.regret``'s "judge against itself" row).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

from bench.common import RESULTS, header, write_record


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--layer", type=int, default=4, help="index into bench.regret_layers.LAYERS (default 4: 1x1 s2)")
    ap.add_argument("--algorithms", default="direct,direct_channels", help="two algorithm names, comma-separated")
    ap.add_argument("--seconds", type=float, default=45.0, help="how long to keep timing (default 45)")
    ap.add_argument("--every", type=float, default=1.5, help="seconds between moments (default 1.5)")
    ap.add_argument("--out", default=str(RESULTS / "cpu-speed-states.md"))
    args = ap.parse_args(argv)

    import convalgos
    from autotune.measure import median
    from autotune.race.clock import wake_pool
    from autotune.race.contention import machine_wait_share
    from bench.regret_layers import LAYERS, Layer

    layer = Layer(*LAYERS[args.layer])
    names = args.algorithms.split(",")
    out = np.empty(layer.p.result_shape(layer.op), np.float32)
    calls = {n: (lambda a=convalgos.ALGORITHMS[n]: convalgos.run(a, layer.op, layer.a, layer.b, layer.p, out))
             for n in names}

    def block(name, size=30):
        wake_pool()
        calls[name]()
        start = time.perf_counter()
        for _ in range(size):
            calls[name]()
        return (time.perf_counter() - start) / size

    a, b, c = np.ones(8_000_000, np.float32), np.ones(8_000_000, np.float32), np.empty(8_000_000, np.float32)

    def triad_gbs():
        start = time.perf_counter()
        np.multiply(b, 2.0, out=c)
        np.add(c, a, out=c)
        return 4 * a.nbytes / (time.perf_counter() - start) / 1e9

    for name in names:
        block(name)                                            # compiled and warm before the first moment
    before = machine_wait_share(0.3)
    rows, end = [], time.perf_counter() + args.seconds
    while time.perf_counter() < end:
        times = {n: median([block(n) for _ in range(3)]) for n in names}
        rows.append((time.strftime("%H:%M:%S"), times, max(triad_gbs() for _ in range(3))))
        time.sleep(args.every)
    after = machine_wait_share(0.3)

    ratios = [t[names[0]] / t[names[1]] for _, t, _ in rows]
    fast = {n: min(t[n] for _, t, _ in rows) for n in names}
    lines = [header(f"Speed states: {names[0]} and {names[1]} on one layer, timed every {args.every} s"), "",
             f"`python -m bench.speed_states --layer {args.layer} --algorithms {args.algorithms} --seconds "
             f"{args.seconds:g}`: layer \"{layer.name}\" ({layer.op}), one process, {len(rows)} moments. The "
             f"machine's contention, probed from outside (share of spinning probes' time spent waiting for a CPU; ~0 "
             f"is quiet): {before:.3f} before, {after:.3f} after.", "",
             f"Ratio {names[0]} / {names[1]}: from {min(ratios):.2f} to {max(ratios):.2f} (median "
             f"{median(ratios):.2f}); a ratio over 1 means {names[1]} is the faster at that moment. Slowest moment "
             f"over fastest: {names[0]} {max(t[names[0]] for _, t, _ in rows) / fast[names[0]]:.2f}x, {names[1]} "
             f"{max(t[names[1]] for _, t, _ in rows) / fast[names[1]]:.2f}x. Moments with {names[0]} the faster by "
             f"over 3%: {sum(r < 1 / 1.03 for r in ratios)}; with {names[1]} the faster by over 3%: "
             f"{sum(r > 1.03 for r in ratios)}; within 3%: {sum(1 / 1.03 <= r <= 1.03 for r in ratios)}.", "",
             f"| time (UTC) | {names[0]} ms | {names[1]} ms | ratio | triad GB/s |", "|---|---|---|---|---|"]
    lines += [f"| {when} | {t[names[0]] * 1e3:.3f} | {t[names[1]] * 1e3:.3f} | {t[names[0]] / t[names[1]]:.2f} | "
              f"{gbs:.1f} |" for when, t, gbs in rows]
    write_record(__import__("pathlib").Path(args.out), "\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
