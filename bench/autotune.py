"""How well the autotuner chooses: regret against a careful oracle, tuning cost, and stability.

    python -m bench.autotune [--quick] [--tunings 3] [--oracle-rounds 15] [--output PATH]

For every layer of ``bench.layers`` (``--quick``: a few), with random input:

- tune it ``--tunings`` times, each in a fresh ``autotune.Tuner(benchmark=True)``;
- re-time every candidate that passed the reference check, interleaved, ``--oracle-rounds`` rounds: the
  oracle's medians;
- regret of a choice = oracle time of the chosen / oracle's best - 1 (the heuristic's choice too);
- tuning cost = the tuning's seconds / one oracle run of the chosen algorithm (the first tuning includes
  loading or compiling the kernels, so the cost is reported for the later, warm tunings);
- stability = how often a tuning picks the most common choice, counted where the oracle's two best differ
  by more than 5% (below that either choice is fine).

Writes ``bench/results/cpu-autotune.md``. Targets: median regret <= 3%, worst <= 10%; the same choice in
>= 95% of tunings where the two best differ by more than 5%; tuning a key costs <= 30 runs of its choice.
"""
from __future__ import annotations

import argparse
from collections import Counter

import numpy as np

import autotune
import convalgos
from bench.common import RESULTS, header, interleaved_medians
from bench.layers import ALL_LAYERS

QUICK = ["vgg16.conv3_2", "resnet20.stage1.conv", "mobilenet.dw3", "mobilenet.pw7", "7x7.c64.56"]


def arrays(p, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((p.N, p.C, p.H, p.W)).astype(p.dtype),
            rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(p.dtype))


def choose(p, x, w, benchmark: bool):
    tuner = autotune.Tuner(benchmark=benchmark)
    tuner.conv2d(x, w, stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    (entry,) = tuner.dispatch_table()
    return entry


def oracle(p, x, w, names, rounds: int) -> dict:
    out = np.empty(p.out_shape, p.dtype)
    algos = convalgos.ALGORITHMS
    return interleaved_medians({n: (lambda a=algos[n]: convalgos.run(a, x, w, None, p, out)) for n in names},
                               rounds=rounds)


def measure_layer(name, p, tunings: int, rounds: int) -> dict:
    x, w = arrays(p)
    entries = [choose(p, x, w, True) for _ in range(tunings)]
    names = sorted({n for e in entries for n in e.times})
    times = oracle(p, x, w, names, rounds)
    best = min(times, key=times.get)
    ranked = sorted(times.values())
    gap = ranked[1] / ranked[0] - 1 if len(ranked) > 1 else float("inf")
    choices = [e.algo for e in entries]
    heuristic = choose(p, x, w, False).algo
    return {"name": name, "params": p, "times": times, "best": best, "gap": gap, "choices": choices,
            "regrets": [times[c] / times[best] - 1 for c in choices],
            "heuristic": heuristic,
            "heuristic_regret": times[heuristic] / times[best] - 1 if heuristic in times else float("nan"),
            "costs": [e.tuning_seconds / times[e.algo] for e in entries],
            "tuning_s": [e.tuning_seconds for e in entries],
            "agree": Counter(choices).most_common(1)[0][1] / len(choices)}


def report(rows, args) -> str:
    lines = [header("autotune: regret, tuning cost and stability on the CPU"),
             f"Command: `python -m bench.autotune{' --quick' if args.quick else ''} --tunings {args.tunings} "
             f"--oracle-rounds {args.oracle_rounds}`. Algorithms: {', '.join(convalgos.ALGORITHMS)}.\n",
             "| layer | oracle best (ms) | 2nd best gap | chosen (each tuning) | regret | heuristic (regret) "
             "| tuning s (first / warm) | cost in runs (warm) |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        warm = r["costs"][1:] or r["costs"]
        lines.append(
            f"| {r['name']} | {r['best']} {r['times'][r['best']] * 1e3:.3f} | {r['gap']:.1%} | "
            f"{', '.join(r['choices'])} | {max(r['regrets']):.1%} | {r['heuristic']} ({r['heuristic_regret']:.1%}) | "
            f"{r['tuning_s'][0]:.2f} / {np.median(r['tuning_s'][1:] or r['tuning_s']):.2f} | {np.median(warm):.0f} |")
    regrets = [g for r in rows for g in r["regrets"]]
    heur = [r["heuristic_regret"] for r in rows]
    separated = [r for r in rows if r["gap"] > 0.05]
    agree = np.mean([r["agree"] for r in separated]) if separated else float("nan")
    warm_costs = [c for r in rows for c in (r["costs"][1:] or r["costs"])]
    chosen_total = sum(r["times"][r["choices"][0]] for r in rows)
    best_total = sum(r["times"][r["best"]] for r in rows)
    lines += ["", "## Totals", "",
              f"- regret of the tuned choice: median {np.median(regrets):.1%}, worst {max(regrets):.1%} "
              f"(targets <= 3%, <= 10%); of the heuristic's choice: median {np.nanmedian(heur):.1%}, "
              f"worst {np.nanmax(heur):.1%}",
              f"- sum over layers: chosen {chosen_total * 1e3:.1f} ms against the oracle's best "
              f"{best_total * 1e3:.1f} ms",
              f"- same choice in {agree:.0%} of tunings on the {len(separated)} layers whose two best differ by "
              f"more than 5% (target >= 95%)",
              f"- tuning cost, warm, in runs of the chosen algorithm: median {np.median(warm_costs):.0f}, "
              f"worst {max(warm_costs):.0f} (target <= 30)"]
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}")
    ap.add_argument("--tunings", type=int, default=3)
    ap.add_argument("--oracle-rounds", type=int, default=15)
    ap.add_argument("--output", default=str(RESULTS / "cpu-autotune.md"), help="report file ('-': none)")
    args = ap.parse_args(argv)
    layers = {n: ALL_LAYERS[n] for n in QUICK} if args.quick else ALL_LAYERS
    rows = []
    for name, p in layers.items():
        rows.append(measure_layer(name, p, args.tunings, args.oracle_rounds))
        r = rows[-1]
        print(f"{name:<28} best {r['best']:<13} chosen {','.join(r['choices']):<40} "
              f"regret {max(r['regrets']):6.1%}  cost {np.median(r['costs']):5.0f} runs", flush=True)
    text = report(rows, args)
    print(text)
    if args.output != "-":
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
