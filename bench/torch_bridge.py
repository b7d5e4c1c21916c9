"""The torch bridge (``autotune.torch``) against torch itself; bench/results/cpu-torch-bridge.md.

    python -m bench.torch_bridge            # the record (a few minutes on a quiet machine)
    python -m bench.torch_bridge --quick    # a smoke test: small shapes, few rounds, under /tmp unless --out

Issue 21's targets, each case in two fresh processes: torch imported first (as users do), and autotune first.

| case | measures | bar |
|---|---|---|
| train | a training step of a converted torch ResNet-20 b32 / the same model unconverted | <= 1.1x |
| eval | an eval forward of a converted torch ResNet-18 b1 224 / unconverted | <= 1.0x |
| call | ``autotune.torch.conv2d`` on a tiny layer less ``convalgos.run`` (CPU time, one thread) | <= 20 us |

Beside the step, each conv pass is summed over the layers, timed alone, ours against torch's, so a miss says
where it lies (``bench.torch_bridge_cases``). The steps run interleaved, round by round
(``autotune.measure.interleaved``); the table gives medians and the quartiles of the per-round ratio.

The processes start without OMP_WAIT_POLICY, GOMP_SPINCOUNT and OPENBLAS_THREAD_TIMEOUT (as a user's shell
has them; this process's own import of convalgos set them): convalgos sets them when it loads, and torch and
numpy read them when they load, so the import order decides how torch's OpenMP threads wait between its ops
(BatchNorm, ReLU, the optimizer) and our passes. ``--keep-env`` passes this process's environment on instead.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

from .common import RESULTS, header, write_record

CASES = ("train", "eval", "call")
ORDERS = {"torch first": "import torch; import autotune", "autotune first": "import autotune; import torch"}
#: the call case runs on one thread and is timed in CPU time: the work of a call, not the other processes' share
ONE_THREAD = {"NUMBA_NUM_THREADS": "1", "OMP_NUM_THREADS": "1"}
#: the variables convalgos sets when it loads (its __init__ says why)
THREAD_VARIABLES = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_THREAD_TIMEOUT")
LABELS = {"train": ("ResNet-20 b32 training step", "ResNet-20 b4 training step"),
          "eval": ("ResNet-18 b1 224 eval forward", "ResNet-18 b1 64 eval forward")}
BARS = {"train": 1.1, "eval": 1.0, "call": 20.0}


def run_case(case: str, order: str, quick: bool, rounds: int, keep_env: bool) -> dict:
    """The case's numbers from a fresh process that imported torch and autotune in ``order``."""
    env = dict(os.environ) if keep_env else {k: v for k, v in os.environ.items() if k not in THREAD_VARIABLES}
    env.update(ONE_THREAD if case == "call" else {})
    code = (f"{ORDERS[order]}; from bench import torch_bridge_cases; "
            f"torch_bridge_cases.main({case!r}, {quick}, {rounds})")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                          cwd=Path(__file__).resolve().parent.parent)
    if done.returncode != 0:
        raise RuntimeError(f"{case} ({order}) failed:\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def report(results: dict, quick: bool, rounds: int, keep_env: bool, load: tuple) -> str:
    threads = next(iter(results.values()))["threads"]
    env = "this process's environment" if keep_env else f"no {', '.join(THREAD_VARIABLES)} in the environment"
    lines = [header("CPU: a torch model through autotune.torch, against torch"),
             f"Command: `python -m bench.torch_bridge{' --quick' if quick else ''}`; each case in a fresh process "
             f"per import order, {env}; numba {threads['numba']} threads, torch {threads['torch']} threads (their "
             f"defaults); benchmark mode on, tuned in an untimed first run; {rounds} interleaved rounds. Load average "
             f"{load[0]:.1f} before the cases ran, {load[1]:.1f} at the end (the cases' own threads included), on "
             f"{os.cpu_count()} cores" + (": other processes were using the cores, the timings are disturbed."
                                          if load[0] > 1.0 else ".") + "\n",
             "| target | import order | converted | torch | ratio (quartiles per round) | bar | tuning s |",
             "|---|---|---|---|---|---|---|"]
    for case in ("train", "eval"):
        for order in ORDERS:
            r = results[(case, order)]
            met = "met" if r["ratio"] <= BARS[case] else "missed"
            lines.append(f"| {LABELS[case][quick]} | {order} | {ms(r['ours'])} ms | {ms(r['torch'])} ms | "
                         f"**{r['ratio']:.2f}** ({r['quartiles'][0]:.2f}-{r['quartiles'][1]:.2f}) | "
                         f"<= {BARS[case]} ({met}) | {r['tuning']:.1f} |")
    for order in ORDERS:
        us = results[("call", order)]["us"]
        cost = us["autotune.torch.conv2d"] - us["convalgos.run"]
        met = "met" if cost <= BARS["call"] else "missed"
        lines.append(f"| the bridge's cost per call, tiny layer (CPU time, 1 thread) | {order} | "
                     f"{us['autotune.torch.conv2d']:.1f} us | {us['torch conv2d']:.1f} us | **+{cost:.1f} us** over "
                     f"convalgos.run | <= {BARS['call']:.0f} us ({met}) | - |")
    lines += ["", "## Each conv pass of the training step, summed over the layers, timed alone (ms)", "",
              "Ours: the dispatcher's table hit on torch tensors; torch's: `F.conv2d` and `torch.nn.grad`. The "
              "first layer's backward_data is left out, as in a step.", "",
              "| import order | pass | ours | torch | ours / torch |", "|---|---|---|---|---|"]
    for order in ORDERS:
        passes = results[("train", order)]["passes"]
        for op, t in passes.items():
            lines.append(f"| {order} | {op} | {ms(t['ours'])} | {ms(t['torch'])} | {t['ours'] / t['torch']:.2f} |")
        total = {who: sum(t[who] for t in passes.values()) for who in ("ours", "torch")}
        step = results[("train", order)]
        lines.append(f"| {order} | rest of the step (step less the passes alone) | {ms(step['ours'] - total['ours'])}"
                     f" | {ms(step['torch'] - total['torch'])} | |")
    lines += ["", "## The cost of one call on a tiny layer (N1 C4 8x8, K4 3x3, padding 1), CPU us per call, one "
              "thread", "",
              "| import order | algorithm | " + " | ".join(results[("call", "torch first")]["us"]) + " |",
              "|---|---" + "|---" * len(results[("call", "torch first")]["us"]) + "|"]
    for order in ORDERS:
        r = results[("call", order)]
        lines.append(f"| {order} | {r['algorithm']} | " + " | ".join(f"{v:.1f}" for v in r["us"].values()) + " |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="small shapes and few rounds (a smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds (default 30, quick 3)")
    parser.add_argument("--keep-env", action="store_true", help="pass this process's environment to the cases")
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args(argv)
    rounds = args.rounds or (3 if args.quick else 30)
    out = args.out or (Path("/tmp/cpu-torch-bridge.md") if args.quick else RESULTS / "cpu-torch-bridge.md")
    results, start_load = {}, os.getloadavg()[0]
    for case in CASES:
        for order in ORDERS:
            print(f"{case}, {order} ...", flush=True)
            results[(case, order)] = run_case(case, order, args.quick, rounds, args.keep_env)
    load = (start_load, os.getloadavg()[0])
    write_record(out, report(results, args.quick, rounds, args.keep_env, load))
    return 0


if __name__ == "__main__":
    sys.exit(main())
