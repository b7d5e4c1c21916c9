"""The GPU check: every GPU algorithm and pass against the float64 reference, then timings against torch's cuDNN,
the autotuned ResNets against torch's, and tests/gpu, on the device, within a time budget (default 5 minutes).

    PYTHONPATH=. python3 -m bench.gpu_check --out DIR/gpu-h200.md    # on a GPU machine, from the repo root
    python -m bench.gpu_check --simulate                              # anywhere: the Numba CUDA simulator

It installs nothing (the H200 machine has no network) and touches the GPU only in subprocesses, one job each
(``bench/gpu/``): a sticky CUDA error (an illegal address, after which every CUDA call of the process fails)
ends one job, whose rows so far stay in the report, and the run goes on. The report is written line by line
as results arrive. In order:

1. preflight: versions (CuPy, numba-cuda, CUDA runtime and driver, torch, cuDNN), the device, TF32 as the
   libraries report it, one Numba kernel on a CuPy array, one matmul, one rfft2; a failure stops the run;
2. what a launch costs by route: a Numba kernel through gpu_base.launch on CuPy arrays, on a pre-made Numba
   view, through the CUDA array interface with and without NUMBA_CUDA_ARRAY_INTERFACE_SYNC, a CuPy RawKernel,
   CuPy's a += 1, and a captured CUDA graph's replay, per kernel (``bench/gpu/launch_routes.py``);
3. correctness: each GPU algorithm in its own process, each pass it has, float32 and float16, on a small grid
   of layers, outputs NaN-poisoned, against the float64 reference;
4. cuDNN's three passes on ResNet-18 and VGG-16 layers with benchmark mode off, then on, each in a fresh
   process (or why there are no cuDNN columns: a torch without CUDA);
5. every candidate, a fresh autotuner and the heuristic's pick per layer and pass, between CUDA events;
6. ResNet-20 b32 and ResNet-18 b32 (224x224): forward pass and training step, autotuned, with the heuristic's
   choices, and torch's same model on cuDNN; then, per side, where a step's time goes: kernels per step, GPU
   kernel time, wall time and the GPU-busy fraction (torch.profiler), and our sides' device operations
   (convalgos.cuda.count_ops) beside the profiler's count (``bench/gpu/step_profile.py``);
7. the torch bridge on CUDA tensors: ResNet-20 b32 converted against the same torch model unconverted, an SGD
   step and an eval pass (``bench/gpu/bridge.py``);
8. tests/gpu on the device;
then a summary computed from the numbers above it. The time budget cuts what does not fit, and lists it.
Exit status: 0 all correct and nothing died, 1 otherwise, 2 when the preflight failed.
"""
from __future__ import annotations

import os
import sys

if __name__ == "__main__" and not __package__:
    # run as a file (python bench/gpu_check.py): bench/ is first on sys.path, and its autotune.py would shadow
    # the autotune package. Put the repository there instead and run this as the module it is.
    sys.path[0] = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    import runpy
    runpy.run_module("bench.gpu_check", run_name="__main__", alter_sys=True)
    raise SystemExit(0)

import argparse  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

from bench.gpu import stages  # noqa: E402
from bench.gpu.report import PASS_NAMES, Report  # noqa: E402

RESULTS = Path(__file__).parent / "results"
#: seconds for the whole run on a GPU (the lent H200 gives 15 minutes, its start included).
TIME_BUDGET_S = 290


def summary(run: stages.Run) -> list[str]:
    """The conclusions, each computed from the numbers in the report above it."""
    runs = [r for r in run.check_rows if r["status"] != "unsupported"]
    bad = [r for r in runs if r["status"] != "ok"]
    lines = [f"correctness: {len(runs) - len(bad)}/{len(runs)} runs within tolerance with nothing left unwritten"
             f" ({len({r['algo'] for r in run.check_rows})} algorithms)"]
    lines += [f"{r['status']}: {r['algo']} {PASS_NAMES[r['op']]} {r['dtype']} on {r['layer']}"
              + (f", error {r['error']:.2e} > {r['tol']:.0e}" if r.get("error") is not None else "")
              + (f", {r['unwritten']} elements unwritten" if r.get("unwritten") else "")
              + (f": {r['note']}" if r.get("note") else "") for r in bad]
    for op, name in PASS_NAMES.items():
        rows = [r for r in run.time_rows if r["op"] == op and "autotune" in r["ms"]]
        tuned = sum(r["ms"]["autotune"] for r in rows)
        picked = [r["ms"].get(r["picks"].get("heuristic")) for r in rows]
        if rows and all(picked):
            lines.append(f"{name}, {len(rows)} layers: autotuned {tuned:.2f} ms against the heuristic's picks "
                         f"{sum(picked):.2f} ms: benchmark mode's gain {sum(picked) / tuned:.2f}x")
        on = [run.cudnn[True].get((r["layer"], op)) for r in rows]
        if rows and all(on):
            lines.append(f"{name}, {len(rows)} layers: autotuned {tuned:.2f} ms against cuDNN benchmark "
                         f"{sum(on):.2f} ms ({tuned / sum(on):.2f}x)")
    for net in run.nets:
        step, forward = net["step_ms"], net["forward_ms"]
        lines.append(f"{net['model']} b{net['batch']}: benchmark mode's gain over the heuristic "
                     f"{step['heuristic'] / step['autotuned']:.2f}x per step, "
                     f"{forward['heuristic'] / forward['autotuned']:.2f}x per forward pass")
        if "torch cuDNN" in step:
            torch = step["torch cuDNN"], forward["torch cuDNN"]
            lines.append(f"{net['model']} b{net['batch']}: autotuned / torch cuDNN {step['autotuned'] / torch[0]:.2f}x "
                         f"per step (target <= 3), {forward['autotuned'] / torch[1]:.2f}x per forward pass "
                         f"(target <= 2)")
            if "graphed" in step:
                lines.append(f"{net['model']} b{net['batch']}: graphed / torch's eager cuDNN "
                             f"{step['graphed'] / torch[0]:.2f}x per step (target <= 1.0), "
                             f"{forward['graphed'] / torch[1]:.2f}x per forward pass; graphed / eager autotuned "
                             f"{step['graphed'] / step['autotuned']:.2f}x per step")
    for profile in run.profiles:
        sides = profile["sides"]
        cells = [f"{side} {r['kernels']:.0f} kernels ({r['gpu_ms']:.2f} ms of GPU time in {r['wall_ms']:.2f} ms, "
                 f"{r['busy']:.0%} busy)" for side, r in sides.items() if "kernels" in r]
        ops = [f"{side} {r['device_ops']}" for side, r in sides.items() if "device_ops" in r]
        lines.append(f"{profile['model']} b{profile['batch']} per step: " + ("; ".join(cells) or
                     "kernels and GPU time need torch with CUDA") + f"; device operations counted: {', '.join(ops)}")
    for row in run.bridge:
        step, forward = row["step_ms"], row["forward_ms"]
        lines.append(f"torch bridge, {row['model']} b{row['batch']}: converted / unconverted "
                     f"{step['converted'] / step['torch']:.2f}x per SGD step, "
                     f"{forward['converted'] / forward['torch']:.2f}x per eval pass; "
                     f"{row['served']['by torch']} of {sum(row['served'].values())} conv calls fell back")
    lines += [f"did not finish: {d}" for d in run.died]
    if run.cut:
        lines.append(f"cut by the time budget: {', '.join(run.cut)}")
    return lines


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="tiny grids under the Numba CUDA simulator")
    parser.add_argument("--out", type=Path, help="the report (default bench/results/gpu-h200.md, or "
                                                 "gpu-simulated.md with --simulate)")
    parser.add_argument("--budget", type=float, default=TIME_BUDGET_S, help="seconds for the whole run")
    args = parser.parse_args(argv)
    out = args.out or RESULTS / ("gpu-simulated.md" if args.simulate else "gpu-h200.md")
    report = Report(out, "GPU check" + (" (Numba CUDA simulator)" if args.simulate else ""))
    report.line(f"Command: python -m bench.gpu_check {' '.join(argv if argv is not None else sys.argv[1:])}; "
                f"time budget {args.budget:.0f} s.")
    report.line("Import order: every job is a fresh process that imports numpy first (bench/gpu/common.py), then "
                "convalgos, and torch last where it is used: a user's order. Other orders are not timed here.")
    run = stages.Run(report, args.simulate, args.budget)
    print(f"writing {out}")
    if not stages.preflight(run):
        report.close()
        print(f"preflight failed: see {out}")
        return 2
    for stage in (stages.launch_cost, stages.correctness, stages.cudnn, stages.layer_times, stages.nets,
                  stages.bridge, stages.gpu_tests):
        stage(run)
        print(f"{stage.__name__} done at {time.perf_counter() - run.start:.0f} s")
    report.heading("Summary")
    lines = summary(run)
    report.line("\n".join(f"- {line}" for line in lines))
    report.line(f"\nRun time {time.perf_counter() - run.start:.0f} s.")
    report.close()
    print("\n".join(lines))
    print(f"wrote {out}")
    healthy = not run.died and all(r["status"] in ("ok", "unsupported") for r in run.check_rows)
    return 0 if healthy else 1


if __name__ == "__main__":
    sys.exit(main())
