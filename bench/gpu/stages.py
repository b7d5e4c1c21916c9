"""The GPU check's stages, run by the parent in order: each starts its jobs (``runner.py``) within what is left
of the time budget and writes their rows to the report as they arrive (``report.py``). The parent imports the
GPU registry (pure Python: names, ``supports``) but never runs anything on the GPU."""
from __future__ import annotations

import subprocess
import sys
import time

from . import check, timing
from .report import PASS_NAMES, Report, check_cell, timing_cells, timing_columns
from .runner import ROOT, job_env, run_job


#: the correctness stage's share of the time left when it starts, and the least any one algorithm's job gets.
CHECK_SHARE, CHECK_MIN_S = 0.5, 20.0


class Run:
    """What the stages share: the report, simulate or not, the deadline, and what was found so far."""

    def __init__(self, report: Report, simulate: bool, budget: float):
        self.report, self.simulate, self.start = report, simulate, time.perf_counter()
        self.deadline = self.start + budget
        self.cut, self.died, self.check_rows, self.time_rows, self.nets = [], [], [], [], []
        self.profiles, self.bridge = [], []
        self.cudnn = {False: {}, True: {}}
        self.torch_usable = False

    def job(self, label: str, args: list, on_event, cap: float, minimum: float = 5.0):
        """Run a job within min(cap, what is left); None (and ``label`` listed as cut) when under ``minimum``."""
        left = self.deadline - time.perf_counter()
        if left < minimum:
            self.cut.append(label)
            return None
        outcome = run_job(args, on_event, min(cap, left), self.simulate)
        if not outcome.finished:
            self.died.append(f"{label}: {outcome.why()}")
        return outcome


def preflight(run: Run) -> bool:
    """Versions, device, TF32, the four checks; False (and the reason in the report) when one failed."""
    rep = run.report

    def on(event):
        kind = event["kind"]
        if kind == "versions":
            rep.heading("Versions")
            rep.table(["library", "version"])
            for name, version in event["versions"].items():
                rep.row([name, version])
            rep.heading("Preflight")
            rep.table(["step", "ok", "detail", "seconds"])
        elif kind == "row":
            rep.row([event["step"], "yes" if event["ok"] else "**NO**", event["detail"], f"{event['seconds']:.2f}"])
            if not event["ok"]:
                failed.append(f"{event['step']}: {event['detail']}")
        elif kind == "torch":
            run.torch_usable = event["usable"]
            rep.line(f"\ntorch: {event['detail']}")
        elif kind == "tf32":
            rep.line(f"TF32 as CuPy reports it: {event['cupy']}; torch's is set and reported in each torch job.")
    failed = []
    outcome = run.job("preflight", ["preflight"], on, cap=90, minimum=0)
    if outcome.finished:
        return True
    why = failed[0] if failed else outcome.why()
    rep.line(f"\n**Preflight failed** ({why}): nothing else is worth running; the check stops here.")
    rep.line("```\n" + outcome.stderr_tail[-1500:] + "\n```")
    return False


def launch_cost(run: Run) -> None:
    rep = run.report
    rep.heading("Per-launch cost by route (wall time of back-to-back launches of a one-thread kernel, one "
                "synchronise)")

    def on(event):
        if event["kind"] == "setting":
            rep.line(f"NUMBA_CUDA_ARRAY_INTERFACE_SYNC in Numba's config: {event['sync']}\n")
            rep.table(["route", "us per launch", "launches"])
        elif event["kind"] == "row":
            us = "" if event["us"] is None else f"{event['us']:.1f}"
            rep.row([event["way"], us or event.get("error", ""), event["launches"]])
    run.job("launch cost", ["launch"], on, cap=40)


def correctness(run: Run) -> None:
    """One job per GPU algorithm: a table per algorithm, a row per (pass, dtype) written when complete."""
    from convalgos import cuda as gpu
    rep, grid = run.report, check.grid(run.simulate)
    rep.heading("Correctness: normwise error against the float64 reference, outputs NaN-poisoned before each run")
    rep.line("Each algorithm in its own process. A cell: error and status (ok within the algorithm's tolerance "
             "for the pass and dtype, no element left NaN); '-' unsupported (reasons below each table).")
    names = list(gpu.ALGORITHMS)
    stage_end = time.perf_counter() + CHECK_SHARE * (run.deadline - time.perf_counter())
    for i, name in enumerate(names):
        cap = max(CHECK_MIN_S, (stage_end - time.perf_counter()) / (len(names) - i))
        expected = check.cases(name, run.simulate)
        groups = list(dict.fromkeys((c["op"], c["dtype"]) for c in expected))
        got, written, notes = {}, set(), []
        rep.line(f"\n### {name}\n")
        rep.table(["pass", "dtype"] + list(grid))

        def write(group, got=got, written=written):
            op, dtype = group
            written.add(group)
            rep.row([PASS_NAMES[op], dtype] + [check_cell(got.get((op, dtype, layer))) for layer in grid])

        def on(event, got=got, groups=groups, notes=notes, write=write):
            if event["kind"] == "row":
                got[(event["op"], event["dtype"], event["layer"])] = event
                run.check_rows.append(dict(event, algo=name))
                if event.get("note"):
                    notes.append(f"- {event['status']} in {PASS_NAMES[event['op']]} {event['dtype']} on "
                                 f"{event['layer']}: {event['note']}")
                group = (event["op"], event["dtype"])
                if all((group[0], group[1], layer) in got for layer in grid):
                    write(group)
            elif event["kind"] == "sticky":
                notes.append(f"- the CUDA context died (sticky error: {event['error']}); the job ended there")
        outcome = run.job(f"check {name}", ["check", name], on, cap=cap)
        for group in groups:
            if group not in written:
                write(group)
        if outcome is not None and not outcome.finished:
            notes.append(f"- **the job did not finish**: {outcome.why()}; cells 'not run' were not reached")
        reasons: dict = {}
        for c in expected:
            if c["reason"]:
                reasons.setdefault((c["op"], c["reason"]), []).append(c["layer"])
        for (op, reason), layers in reasons.items():
            notes.append(f"- unsupported, {PASS_NAMES[op]}: {reason} "
                         f"({'every layer' if len(layers) == len(grid) * 2 else ', '.join(dict.fromkeys(layers))})")
        rep.line("\n" + "\n".join(notes) if notes else "")


def gpu_tests(run: Run) -> None:
    rep = run.report
    rep.heading("tests/gpu on this device")
    if run.simulate:
        rep.line("Not run under --simulate: CI runs `NUMBA_ENABLE_CUDASIM=1 python -m pytest tests/gpu` itself.")
        return
    left = run.deadline - time.perf_counter()
    if left < 20:
        run.cut.append("tests/gpu")
        rep.line("Cut by the time budget.")
        return
    command = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/gpu"]
    try:
        done = subprocess.run(command, cwd=ROOT, env=job_env(False), capture_output=True, text=True,
                              timeout=min(120, left))
        lines = done.stdout.strip().splitlines()
        failures = [line for line in lines if line.startswith(("FAILED", "ERROR"))]
        rep.line(f"`{' '.join(command[1:])}`: {lines[-1] if lines else 'no output'} (exit status {done.returncode})")
        rep.line("\n".join(f"- {line}" for line in failures[:30]))
    except subprocess.TimeoutExpired:
        run.died.append("tests/gpu: killed at its time limit")
        rep.line(f"Killed at its time limit ({min(120, left):.0f} s).")


def cudnn(run: Run) -> None:
    rep = run.report
    if not run.torch_usable:
        rep.heading("cuDNN")
        rep.line("No cuDNN columns: torch cannot use CUDA here (see the preflight's torch line).")
        return
    for benchmark in (False, True):
        rep.heading(f"cuDNN with benchmark {'on' if benchmark else 'off'} (ms; a process of its own: fresh plans)")
        found = run.cudnn[benchmark]

        def on(event, found=found):
            if event["kind"] == "tf32":
                rep.line(f"torch: {event['torch']}; cudnn.benchmark={event['benchmark']}\n")
                rep.table(["layer", "fwd", "bwd data", "bwd filter"])
            elif event["kind"] == "row":
                found[(event["layer"], event["op"])] = event["ms"]
                if event["op"] == "backward_filter":
                    rep.row([event["layer"]] + [f"{found.get((event['layer'], op), 0):.3f}" for op in PASS_NAMES])
        run.job(f"cuDNN benchmark {'on' if benchmark else 'off'}", ["cudnn", "on" if benchmark else "off"], on,
                cap=45)


def layer_times(run: Run) -> None:
    """The time job; after it dies on a (layer, pass), restarted on the next one, at most twice."""
    from convalgos import cuda as gpu
    rep, names = run.report, list(gpu.ALGORITHMS)
    plan = [(layer, op) for layer in timing.layers(run.simulate) for op in PASS_NAMES]
    rep.heading("Times per layer and pass (ms, fp32; medians of interleaved rounds between CUDA events)")
    done = [0]                                  # rows received, in plan order

    def on(event):
        if event["kind"] == "row":
            run.time_rows.append(event)
            done[0] += 1
            rep.row(timing_cells(event, names, run.cudnn))
    for attempt in range(3):
        rep.table(timing_columns(names))
        label = "layer times" + (f" (restart {attempt})" if attempt else "")
        outcome = run.job(label, ["time", str(done[0])], on, cap=150)
        if outcome is None or outcome.finished:
            return
        if outcome.timed_out:
            run.cut += [f"{layer} {PASS_NAMES[op]}" for layer, op in plan[done[0]:]]
            return
        layer, op = plan[done[0]]
        rep.line(f"\n{layer} {PASS_NAMES[op]}: not timed, the job died there ({outcome.why()})\n")
        done[0] += 1
        if done[0] >= len(plan):
            return


def nets(run: Run) -> None:
    rep = run.report
    rep.heading("Forward pass and training step (ms): autotuned, the heuristic's choices, torch's same model")
    rep.line("TF32 off on both sides; torch with cudnn.benchmark on; the first step's loss of each from the same "
             "weights and batch.")
    for name, (batch, size) in ({"tiny": (2, 3)} if run.simulate else timing_nets()).items():
        def on(event, name=name):
            if event["kind"] == "tuned":
                rep.line(f"\n{name} b{event['batch']} {event['size']}x{event['size']}: tuned {event['keys']} keys "
                         f"in {event['tuning_s']:.1f} s; choices per pass {event['choices']}; first-step losses "
                         + ", ".join(f"{k} {v:.6f}" for k, v in event["losses"].items()))
            elif event["kind"] == "note":
                rep.line(f"\n{name}: {event['text']}")
            elif event["kind"] == "row":
                run.nets.append(event)
                sides = list(event["step_ms"])
                rep.line("")
                rep.table(["model", "what"] + sides)
                for what in ("forward", "step"):
                    rep.row([name, what] + [f"{event[f'{what}_ms'][s]:.2f}" for s in sides])
            elif event["kind"] == "profile":
                run.profiles.append(event)
                write_profile(rep, name, event["sides"])
        run.job(f"net {name} b{batch} {size}x{size}", ["net", name, str(batch), str(size)], on,
                cap=120 if name == "resnet18" else 80, minimum=20)


def bridge(run: Run) -> None:
    """The torch bridge on CUDA tensors: a converted model against the same model unconverted."""
    from .bridge import BRIDGE_NETS
    rep = run.report
    rep.heading("The torch bridge: a converted torch model against the same model unconverted (ms)")
    for name, (batch, size) in ({"tiny": (2, 3)} if run.simulate else BRIDGE_NETS).items():
        def on(event, name=name):
            if event["kind"] == "note":
                rep.line(f"{name}: {event['text']}")
            elif event["kind"] == "row":
                run.bridge.append(event)
                rep.line(f"{name} b{event['batch']} {event['size']}x{event['size']} on {event['device']} tensors; "
                         f"converted through {event['tuner']}; torch: {event['torch']}; "
                         f"conv calls served by the dispatcher {event['served']['dispatched']}, by torch's conv "
                         f"(fallbacks) {event['served']['by torch']}; first-step losses "
                         + ", ".join(f"{k} {v:.6f}" for k, v in event["losses"].items()) + "\n")
                rep.table(["model", "what", "torch", "converted", "converted / torch"])
                for what in ("forward", "step"):
                    t = event[f"{what}_ms"]
                    rep.row([name, "eval forward" if what == "forward" else "SGD step", f"{t['torch']:.2f}",
                             f"{t['converted']:.2f}", f"{t['converted'] / t['torch']:.2f}x"])
        run.job(f"bridge {name} b{batch} {size}x{size}", ["bridge", name, str(batch), str(size)], on, cap=60,
                minimum=15)


def write_profile(rep: Report, name: str, sides: dict) -> None:
    """Where a step's time goes, per side (``step_profile.py``), and each side's top kernels or operations."""
    rep.line("\nWhere one training step's time goes (torch.profiler over every kernel of the process; device "
             "operations: convalgos.cuda.count_ops, ours only):\n")
    rep.table(["model", "side", "kernels per step", "device operations per step", "GPU kernel ms per step",
               "wall ms per step", "GPU busy"])
    for side, r in sides.items():
        kernels = f"{r['kernels']:.0f}" if "kernels" in r else r.get("profiler", "")
        rep.row([name, side, kernels, r.get("device_ops", ""), f"{r['gpu_ms']:.2f}" if "gpu_ms" in r else "",
                 f"{r['wall_ms']:.2f}", f"{r['busy']:.0%}" if "busy" in r else ""])
    for side, r in sides.items():
        if r.get("top_kernels"):
            rep.line(f"- {side}, top kernels by GPU time (count, ms per step): " + "; ".join(
                f"`{k}` {n:.0f}, {ms:.2f}" for k, n, ms in r["top_kernels"]))
        if r.get("top_ops"):
            rep.line(f"- {side}, top device operations (count per step): " + ", ".join(
                f"{k} {n}" for k, n in r["top_ops"]))


def timing_nets() -> dict:
    from .nets import NETS
    return NETS
