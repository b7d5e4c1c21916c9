"""One conv pass of each layer of a training net, ours (each algorithm) against torch's same call, in
interleaved rounds: the micro-benchmark behind bench.train's conv columns, one pass at a time.

    python -m bench.train_passes --passes backward_filter --threads 1        # -> bench/results/cpu-train-passes.md
    python -m bench.train_passes --orders numpy,torch,convalgos              # each first import, fresh processes

Each layer's candidates and torch (``conv2d``, ``torch.nn.grad.conv2d_input``, ``conv2d_weight``) run round
after round in one process, so a drift of the machine hits every column alike; the median per column is
reported, and the net's sum weights each layer by how often it occurs (an algorithm that refuses a layer has
no sum; "best" takes each layer's fastest of ours, as benchmark mode would). With one thread the clock is the
thread's CPU time (``time.thread_time``): on a machine shared with other work it leaves out the time the
thread waited for a core, which wall time at two threads cannot. The machine's CPU, load average and the
settings are written beside the figures. A user's program imports numpy (or torch) first, which decides how the
thread pools wait (README, "Import in any order"): ``--orders`` runs each first import in a fresh process and
writes one record, the sums of every order first, then each order's tables.

Not what a training step pays (``bench.train`` times the step): each layer's calls run alone, ours into outputs
kept across calls, torch's each into a fresh output through its allocator, right after every algorithm of ours.
Measured 2026-12-05 (AMD EPYC, 1 thread, thread CPU time, C16 32px forward): torch's call took 2.26 ms after
nothing and 5.82 ms, with 1504 minor page faults, right after our fft_tiled, whose freed workspace glibc had
handed back to the OS (its next call 2.60 ms; with glibc's trim and mmap thresholds fixed, no faults and 2.51
ms). So torch's column carries page faults that a step, whose allocations repeat, does not: the record counts
them (minor page faults per timed call, each column).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time

#: the modules a process may import first (``--first``)
FIRST = ("numpy", "torch", "convalgos")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--passes", default="forward,backward_data,backward_filter")
    parser.add_argument("--threads", type=int, default=1, help="numba and torch threads (default 1)")
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--algorithms", default=None, help="comma-separated (default: every one with the pass)")
    parser.add_argument("--out", default="bench/results/cpu-train-passes.md")
    parser.add_argument("--first", choices=FIRST, default="convalgos", help="the module this process imports first")
    parser.add_argument("--sums", default=None, help="also write each net's sums as JSON here (a child's job)")
    parser.add_argument("--orders", default=None, help="comma-separated first imports, each in a fresh process, "
                                                       "one record (default: this process, --first)")
    args = parser.parse_args(argv)
    if args.orders:
        return run_orders(args)
    os.environ["NUMBA_NUM_THREADS"] = str(args.threads)  # read when numba loads (a fresh process: python -m)
    importlib.import_module(args.first)                  # a user's order: see README "Import in any order"
    import convalgos
    import numba
    import numpy as np
    import torch
    from convalgos import ConvParams

    if numba.get_num_threads() != args.threads:          # numba was loaded before (a caller's process)
        numba.set_num_threads(args.threads)
    torch.set_num_threads(args.threads)
    clock = time.thread_time if args.threads == 1 else time.perf_counter

    def layer(N, C, H, K, stride=1, R=3):
        return ConvParams.from_shapes((N, C, H, H), (K, C, R, R), stride=stride, padding=R // 2)

    nets = {  # (layer, how often the net has it)
        "ResNet-20 b32": [("conv1 C3 32px", layer(32, 3, 32, 16), 1), ("C16 32px", layer(32, 16, 32, 16), 6),
                          ("C16->32 s2", layer(32, 16, 32, 32, 2), 1), ("C32 16px", layer(32, 32, 16, 32), 5),
                          ("C32->64 s2", layer(32, 32, 16, 64, 2), 1), ("C64 8px", layer(32, 64, 8, 64), 5)],
        "ResNet-18 b1": [("C64 56px", layer(1, 64, 56, 64), 4), ("C64->128 s2", layer(1, 64, 56, 128, 2), 1),
                         ("C128 28px", layer(1, 128, 28, 128), 3), ("C128->256 s2", layer(1, 128, 28, 256, 2), 1),
                         ("C256 14px", layer(1, 256, 14, 256), 3), ("C256->512 s2", layer(1, 256, 14, 512, 2), 1),
                         ("C512 7px", layer(1, 512, 7, 512), 3)],
    }
    torch_pass = {
        "forward": lambda x, w, dy, p: torch.nn.functional.conv2d(x, w, stride=p.stride, padding=p.padding[0][0]),
        "backward_data": lambda x, w, dy, p: torch.nn.grad.conv2d_input(x.shape, w, dy, stride=p.stride,
                                                                        padding=p.padding[0][0]),
        "backward_filter": lambda x, w, dy, p: torch.nn.grad.conv2d_weight(x, w.shape, dy, stride=p.stride,
                                                                           padding=p.padding[0][0]),
    }
    from .common import cpu_description
    lines = [f"# One conv pass per layer, ours against torch's ({', '.join(args.passes.split(','))})", "",
             f"Machine: {cpu_description()}, {os.cpu_count()} cores; numba and torch with {args.threads} thread(s); "
             f"load average before {os.getloadavg()[0]:.1f}.  ",
             f"Date: {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}. Command: `python -m bench.train_passes "
             f"--passes {args.passes} --threads {args.threads} --rounds {args.rounds}"
             f"{' --algorithms ' + args.algorithms if args.algorithms else ''}`; clock: "
             f"{'thread CPU time' if args.threads == 1 else 'wall time'}; median ms of {args.rounds} interleaved "
             f"rounds (two calls each), {args.first} imported first; Python {platform.python_version()}. Each "
             "layer's passes alone, ours into kept outputs, torch's into fresh ones after all of ours: not what a "
             "training step pays (bench.train's step is); page faults per call below the tables.", ""]
    summary, faults = {}, {}
    for op in args.passes.split(","):
        for net, layers in nets.items():
            names = [a.name for a in convalgos.ALGORITHMS.values() if a.implements(op)
                     and (args.algorithms is None or a.name in args.algorithms.split(","))]
            lines += [f"## {op}, {net}", "", "| layer | count | " + " | ".join(names) + " | torch | best / torch |",
                      "|---" * (len(names) + 4) + "|"]
            sums = dict.fromkeys(names + ["torch", "best"], 0.0)
            for label, p, count in layers:
                rng = np.random.default_rng(0)
                x = rng.standard_normal(p.in_shape, dtype=np.float32)
                w = rng.standard_normal(p.weight_shape, dtype=np.float32)
                dy = rng.standard_normal(p.out_shape, dtype=np.float32)
                a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
                calls = {}
                for name in names:
                    algorithm = convalgos.ALGORITHMS[name]
                    if algorithm.supports(p, op):
                        out = np.empty(p.result_shape(op), np.float32)
                        calls[name] = lambda alg=algorithm, out=out: convalgos.run(alg, op, a, b, p, out=out)
                tx, tw, tdy = map(torch.from_numpy, (x, w, dy))
                calls["torch"] = lambda: torch_pass[op](tx, tw, tdy, p)
                med = rounds(calls, args.rounds, clock, faults)
                best = min(v for k, v in med.items() if k != "torch")
                for k in sums:                     # a sum only over the layers every one of its terms ran
                    sums[k] += count * med[k] if k in med else (0.0 if k == "best" else float("nan"))
                sums["best"] += count * best
                cells = [f"{med[n]:.3f}" if n in med else "-" for n in names]
                lines.append(f"| {label} | {count} | " + " | ".join(cells) + f" | {med['torch']:.3f} | "
                             f"{best / med['torch']:.2f} |")
                print(lines[-1], flush=True)
            summary[f"{op}, {net}"] = {"best": sums["best"], "torch": sums["torch"]}
            summed = ["-" if sums[n] != sums[n] else f"{sums[n]:.2f}" for n in names]
            lines += ["| **summed** | | " + " | ".join(summed) + f" | {sums['torch']:.2f} | "
                      f"**{sums['best'] / sums['torch']:.2f}** |", ""]
    ours = [f for name, f in faults.items() if name != "torch"]
    lines.append(f"Minor page faults per timed call, median over layers and passes: torch's "
                 f"{np.median(faults['torch']):.0f} (mean {np.mean(faults['torch']):.0f}), ours "
                 f"{np.median(np.concatenate(ours)):.0f} (mean {np.mean(np.concatenate(ours)):.0f}).  ")
    lines.append(f"Load average after: {os.getloadavg()[0]:.1f}.")
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    if args.sums:
        with open(args.sums, "w") as f:
            json.dump(summary, f)
    print(f"wrote {args.out}")


def run_orders(args) -> None:
    """Each order of ``args.orders`` in a fresh process (``--first``), then one record: the sums of every order
    side by side, then each order's own tables."""
    orders = args.orders.split(",")
    unknown = [o for o in orders if o not in FIRST]
    if unknown:
        raise SystemExit(f"--orders must name modules of {FIRST}, got {unknown}")
    base = ["--passes", args.passes, "--threads", str(args.threads), "--rounds", str(args.rounds),
            *(["--algorithms", args.algorithms] if args.algorithms else [])]
    texts, sums = {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for order in orders:
            out = os.path.join(tmp, f"{order}.md")
            subprocess.run([sys.executable, "-m", "bench.train_passes", *base, "--first", order, "--out", out,
                            "--sums", out + ".json"], check=True)
            texts[order] = open(out).read()
            sums[order] = json.load(open(out + ".json"))
    first = texts[orders[0]].splitlines()
    lines = [first[0] + ", in each import order", "",
             f"Each order in its own fresh process, one after the other (a drift of the machine between them reads "
             f"as an order's effect); each process's settings below its heading. Sums: ours (best per layer) / "
             f"torch's, ms.", "", "| pass, net | " + " | ".join(f"{o} first" for o in orders) + " |",
             "|---" * (len(orders) + 1) + "|"]
    for key in sums[orders[0]]:
        cells = [f"{sums[o][key]['best']:.2f} / {sums[o][key]['torch']:.2f} = "
                 f"**{sums[o][key]['best'] / sums[o][key]['torch']:.2f}**" for o in orders]
        lines.append(f"| {key} | " + " | ".join(cells) + " |")
    for order in orders:
        body = texts[order].splitlines()[1:]
        lines += ["", f"## {order} imported first", *[("#" + line if line.startswith("## ") else line)
                                                       for line in body]]
    with open(args.out, "w") as f:
        f.write("\n".join(lines) + "\n")
    print(f"wrote {args.out}")


def rounds(calls, n, clock, faults=None):
    """Median seconds (ms) per call of each, in ``n`` interleaved rounds of two calls each after a warm-up;
    ``faults``: name -> list, each timed pair's minor page faults per call appended."""
    import numpy as np
    for call in calls.values():
        call()
    times = {k: [] for k in calls}
    for _ in range(n):
        for k, call in calls.items():
            before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
            start = clock()
            call()
            call()
            times[k].append((clock() - start) / 2)
            if faults is not None:
                faults.setdefault(k, []).append((resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / 2)
    return {k: float(np.median(v)) * 1e3 for k, v in times.items()}


if __name__ == "__main__":
    main()
