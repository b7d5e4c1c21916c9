"""The torch bridge (``autotune.torch``) against torch itself; bench/results/cpu-torch-bridge.md.

    python -m bench.torch_bridge            # the record (a few minutes on a quiet machine)
    python -m bench.torch_bridge --quick    # a smoke test: small shapes, few rounds, under /tmp unless --out

Issue 21's targets, each case in one fresh process per import order (``bench.orders``: numpy, torch or
convalgos imported first; torch users start with ``import torch``, or ``import numpy``).

| case | measures | bar |
|---|---|---|
| train | a training step of a converted torch ResNet-20 b32 / the same model unconverted | <= 1.1x |
| eval | an eval forward of a converted torch ResNet-18 b1 224 / unconverted | <= 1.0x |
| call | ``autotune.torch.conv2d`` on a tiny layer less ``convalgos.run`` (CPU time, one thread) | <= 20 us |

Beside the step, each conv pass is summed over the layers, timed alone, ours against torch's, so a miss says
where it lies (``bench.torch_bridge_cases``). The steps run interleaved, round by round
(``autotune.measure.interleaved``); the table gives medians and the quartiles of the per-round ratio.

The processes start without OMP_WAIT_POLICY, GOMP_SPINCOUNT and OPENBLAS_THREAD_TIMEOUT (as a user's shell
has them): torch and numpy read them when they load, so without them the import order decides how torch's
OpenMP threads wait between its ops (BatchNorm, ReLU, the optimizer) and our passes (``convalgos/threads.py``).
``--keep-env`` passes this process's environment on instead.
"""
from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from . import orders
from .common import RESULTS, header, write_record

CASES = ("train", "eval", "call")
#: the call case runs on one thread and is timed in CPU time: the work of a call, not the other processes' share
ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
LABELS = {"train": ("ResNet-20 b32 training step", "ResNet-20 b4 training step"),
          "eval": ("ResNet-18 b1 224 eval forward", "ResNet-18 b1 64 eval forward")}
BARS = {"train": 1.1, "eval": 1.0, "call": 20.0}


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def report(results: dict, args, rounds: int, load: tuple) -> str:
    threads, quick = next(iter(results.values()))["threads"], args.quick
    lines = [header("CPU: a torch model through autotune.torch, against torch"),
             f"Command: `python -m bench.torch_bridge{' --quick' if quick else ''}`; {orders.describe(args)}; "
             f"numba {threads['numba']} threads, torch {threads['torch']} threads (their "
             f"defaults); benchmark mode on, tuned in an untimed first run; {rounds} interleaved rounds. Load average "
             f"{load[0]:.1f} before the cases ran, {load[1]:.1f} at the end (the cases' own threads included), on "
             f"{os.cpu_count()} cores" + (": other processes were using the cores, the timings are disturbed."
                                          if load[0] > 1.0 else ".") + "\n",
             "| target | first import | converted | torch | ratio (quartiles per round) | bar | tuning s |",
             "|---|---|---|---|---|---|---|"]
    for case in ("train", "eval"):
        for order in args.orders:
            r = results[(case, order)]
            met = "met" if r["ratio"] <= BARS[case] else "missed"
            lines.append(f"| {LABELS[case][quick]} | {order} | {ms(r['ours'])} ms | {ms(r['torch'])} ms | "
                         f"**{r['ratio']:.2f}** ({r['quartiles'][0]:.2f}-{r['quartiles'][1]:.2f}) | "
                         f"<= {BARS[case]} ({met}) | {r['tuning']:.1f} |")
    for order in args.orders:
        us = results[("call", order)]["us"]
        cost = us["autotune.torch.conv2d"] - us["convalgos.run"]
        met = "met" if cost <= BARS["call"] else "missed"
        lines.append(f"| the bridge's cost per call, tiny layer (CPU time, 1 thread) | {order} | "
                     f"{us['autotune.torch.conv2d']:.1f} us | {us['torch conv2d']:.1f} us | **+{cost:.1f} us** over "
                     f"convalgos.run | <= {BARS['call']:.0f} us ({met}) | - |")
    lines += ["", "## Each conv pass of the training step, summed over the layers, timed alone (ms)", "",
              "Ours: the dispatcher's table hit on torch tensors; torch's: `F.conv2d` and `torch.nn.grad`. The "
              "first layer's backward_data is left out, as in a step.", "",
              "| first import | pass | ours | torch | ours / torch |", "|---|---|---|---|---|"]
    for order in args.orders:
        passes = results[("train", order)]["passes"]
        for op, t in passes.items():
            lines.append(f"| {order} | {op} | {ms(t['ours'])} | {ms(t['torch'])} | {t['ours'] / t['torch']:.2f} |")
        total = {who: sum(t[who] for t in passes.values()) for who in ("ours", "torch")}
        step = results[("train", order)]
        lines.append(f"| {order} | rest of the step (step less the passes alone) | {ms(step['ours'] - total['ours'])}"
                     f" | {ms(step['torch'] - total['torch'])} | |")
    lines += ["", "## The cost of one call on a tiny layer (N1 C4 8x8, K4 3x3, padding 1), CPU us per call, one "
              "thread", "",
              "| first import | algorithm | " + " | ".join(results[("call", args.orders[0])]["us"]) + " |",
              "|---|---" + "|---" * len(results[("call", args.orders[0])]["us"]) + "|"]
    for order in args.orders:
        r = results[("call", order)]
        lines.append(f"| {order} | {r['algorithm']} | " + " | ".join(f"{v:.1f}" for v in r["us"].values()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and few rounds (a smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 30, quick 3)")
    parser.add_argument("--out", type=Path, default=None)
    orders.add_arguments(parser, rounds=None, child=False)
    args = parser.parse_args(argv)
    orders.resolve(args, rounds=1)
    rounds = args.rounds or (3 if args.quick else 30)
    out = args.out or (Path("/tmp/cpu-torch-bridge.md") if args.quick else RESULTS / "cpu-torch-bridge.md")
    results, start_load = {}, os.getloadavg()[0]
    for case in CASES:
        child = [case, "--rounds", str(rounds)] + (["--quick"] if args.quick else [])
        per_order = orders.run("bench.torch_bridge_cases", child, args, case, ONE_THREAD if case == "call" else None)
        results.update({(case, order): children[0] for order, children in per_order.items()})
    load = (start_load, os.getloadavg()[0])
    write_record(out, report(results, args, rounds, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
