"""The GPU check: every GPU algorithm against the float64 reference, then timings against torch's cuDNN.

    python -m bench.gpu_check               # on a machine with a GPU: writes bench/results/gpu-h200.md
    python -m bench.gpu_check --simulate    # anywhere: a tiny grid under the Numba CUDA simulator (no torch;
                                            # one tiny layer timed in wall time, to exercise that code)

1. Correctness: every algorithm in ``convalgos.cuda.ALGORITHMS`` on a grid of layers (stride, asymmetric
   padding, dilation, groups, depthwise, 1x1, large kernels), fp32 and fp16, with bias, against
   ``convalgos.reference`` within the algorithm's tolerance. A failure or exception is reported, never fatal.
2. Timings (GPU only): every supported algorithm on the distinct conv layers of ResNet-18 (batch 32) and VGG-16
   (batch 16) at 224x224, fp32, against torch's conv2d with cuDNN benchmark on and off, TF32 off everywhere.
   All of a layer's candidates are timed in interleaved rounds (``autotune.measure.interleaved``, the one way
   this project measures), each run between two CUDA events after a synchronise (``autotune.devices``'
   timer); a time is the median of its runs. "best" is the fastest convalgos algorithm per layer (what a
   perfect autotuner picks); "autotune" is a fresh benchmark-mode ``autotune.Tuner``, timed after it tuned the
   layer. A candidate that fails (out of memory or otherwise) is skipped, with the reason.
A time budget (TIME_BUDGET_S) keeps the whole run within 6 minutes; what it cut is listed.
"""
from __future__ import annotations

import os
import sys

if "--simulate" in sys.argv[1:] and os.environ.get("NUMBA_ENABLE_CUDASIM") != "1":
    os.environ["NUMBA_ENABLE_CUDASIM"] = "1"            # must precede numba's first import
    if "numba" in sys.modules:                           # too late in this process: start afresh
        os.execve(sys.executable, [sys.executable, "-m", "bench.gpu_check", *sys.argv[1:]], os.environ)

# CuPy and Numba launch on the same (legacy default) stream, so Numba's synchronise before every launch on a
# CuPy array (its __cuda_array_interface__ stream) only adds host stalls to the timings.
os.environ.setdefault("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", "0")

import argparse  # noqa: E402
import datetime  # noqa: E402
import functools  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402

import convalgos  # noqa: E402
from convalgos import ConvParams, reference  # noqa: E402
from convalgos import cuda as gpu  # noqa: E402
from convalgos.arrays import simulator_enabled  # noqa: E402
from autotune.measure import interleaved, median  # noqa: E402

RESULTS = Path(__file__).parent / "results"
TIME_BUDGET_S = 300
#: interleaved rounds per layer (more while they last under MIN_SECONDS), on a GPU and in the simulator.
ROUNDS, MIN_SECONDS, SIM_ROUNDS = 7, 0.2, 1


def shapes(N, C, H, K, R, stride=1, padding=None, dilation=1, groups=1, W=None):
    pad = (R // 2) * dilation if padding is None else padding
    return dict(x=(N, C, H, W or H), w=(K, C // groups, R, R),
                kw=dict(stride=stride, padding=pad, dilation=dilation, groups=groups))


CHECK_GRID = {
    "3x3 same": shapes(2, 16, 20, 16, 3),
    "3x3 stride 2": shapes(2, 16, 21, 32, 3, stride=2),
    "3x3 asym pad": shapes(2, 8, 17, 8, 3, padding=((0, 2), (1, 0)), W=19),
    "3x3 dilation 2": shapes(1, 8, 20, 8, 3, dilation=2),
    "3x3 groups 4": shapes(2, 16, 16, 16, 3, groups=4),
    "3x3 depthwise": shapes(2, 32, 16, 32, 3, groups=32),
    "1x1": shapes(2, 32, 14, 64, 1),
    "1x1 stride 2": shapes(2, 32, 14, 64, 1, stride=2, padding=0),
    "5x5": shapes(1, 8, 24, 8, 5),
    "7x7 stride 2": shapes(2, 3, 32, 16, 7, stride=2, padding=3),
    "11x11 stride 4": shapes(1, 3, 63, 8, 11, stride=4, padding=2),
}
SIM_GRID = {
    "3x3 same": shapes(1, 2, 4, 2, 3),
    "3x3 asym pad groups": shapes(2, 4, 4, 4, 3, padding=((0, 1), (1, 0)), groups=2),
    "3x3 stride 2 dilation 2": shapes(1, 2, 7, 2, 3, stride=2, dilation=2),
    "1x1": shapes(1, 4, 3, 2, 1),
}
SIM_TIMING_LAYERS = {"resnet18.tiny": shapes(1, 2, 4, 2, 3)}   # the timing code path, in wall time
TIMING_LAYERS = {  # distinct conv layers, 224x224 input
    "resnet18.conv1 b32": shapes(32, 3, 224, 64, 7, stride=2, padding=3),
    "resnet18.layer1 b32": shapes(32, 64, 56, 64, 3),
    "resnet18.layer2.0.conv1 b32": shapes(32, 64, 56, 128, 3, stride=2),
    "resnet18.layer2.0.down b32": shapes(32, 64, 56, 128, 1, stride=2, padding=0),
    "resnet18.layer2 b32": shapes(32, 128, 28, 128, 3),
    "resnet18.layer3.0.conv1 b32": shapes(32, 128, 28, 256, 3, stride=2),
    "resnet18.layer3 b32": shapes(32, 256, 14, 256, 3),
    "resnet18.layer4.0.conv1 b32": shapes(32, 256, 14, 512, 3, stride=2),
    "resnet18.layer4 b32": shapes(32, 512, 7, 512, 3),
    "vgg16.conv1_1 b16": shapes(16, 3, 224, 64, 3),
    "vgg16.conv1_2 b16": shapes(16, 64, 224, 64, 3),
    "vgg16.conv2_2 b16": shapes(16, 128, 112, 128, 3),
    "vgg16.conv3_2 b16": shapes(16, 256, 56, 256, 3),
    "vgg16.conv4_2 b16": shapes(16, 512, 28, 512, 3),
    "vgg16.conv5_1 b16": shapes(16, 512, 14, 512, 3),
}


class Device:
    """The tuner's device (``autotune.devices``: convalgos' CUDA backend, or the simulator's stand-in), its array
    module and timer: CuPy and CUDA events on a GPU, NumPy and wall time in the simulator."""

    def __init__(self):
        from autotune.devices import GpuDevice, SimulatedGpuDevice
        self.tuner_device = SimulatedGpuDevice() if simulator_enabled() else GpuDevice()
        self.xp, self.timer = self.tuner_device.xp, self.tuner_device.timer
        if simulator_enabled():
            self.name, self.rounds, self.min_seconds = "Numba CUDA simulator", SIM_ROUNDS, 0.0
        else:
            props = self.xp.cuda.runtime.getDeviceProperties(self.xp.cuda.Device().id)
            name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
            self.name = f"{name} (compute capability {props['major']}.{props['minor']})"
            self.rounds, self.min_seconds = ROUNDS, MIN_SECONDS

    def asarray(self, a):
        return self.xp.asarray(a)

    def host(self, a):
        return a if isinstance(a, np.ndarray) else a.get()

    def free(self):
        gpu.release_workspaces()
        if self.xp is not np:
            self.xp.get_default_memory_pool().free_all_blocks()


class CandidateFailed(Exception):
    """A timed candidate raised: its name and the error, so the others can be timed without it."""

    def __init__(self, name: str, error: BaseException):
        super().__init__(name)
        self.name, self.error = name, error


def failing_as(name: str, fn):
    def call():
        try:
            fn()
        except Exception as e:
            raise CandidateFailed(name, e) from e
    return call


def short_error(e: BaseException) -> str:
    return f"{type(e).__name__}: {str(e).splitlines()[0][:120] if str(e) else ''}"


def check_correctness(dev: Device, grid: dict) -> list[dict]:
    """One row per (layer, dtype, algorithm): error, tolerance, status."""
    rows, rng = [], np.random.default_rng(0)
    for layer, s in grid.items():
        for dtype in ("float32", "float16"):
            x = rng.standard_normal(s["x"]).astype(dtype)
            w = rng.standard_normal(s["w"]).astype(dtype)
            b = rng.standard_normal(s["w"][0]).astype(dtype)
            ref = reference.conv2d(x, w, b, **s["kw"])
            p = ConvParams.from_arrays(x, w, b, **s["kw"])
            dx, dw, db = dev.asarray(x), dev.asarray(w), dev.asarray(b)
            for name, algorithm in gpu.ALGORITHMS.items():
                row = dict(layer=layer, dtype=dtype, algo=name, tol=algorithm.tolerance_of("forward", dtype),
                           error=None)
                support = algorithm.supports(p)
                if not support:
                    rows.append(dict(row, status="unsupported", note=support.reason))
                    continue
                try:
                    y = dev.host(convalgos.conv2d(dx, dw, db, **s["kw"], algo=name, backend="cuda"))
                    err = reference.normwise_error(y, ref)
                    ok = y.dtype == np.dtype(dtype) and err <= row["tol"]
                    rows.append(dict(row, error=err, status="ok" if ok else "FAIL", note=""))
                except Exception as e:  # report and go on: one broken algorithm must not hide the others
                    rows.append(dict(row, status="ERROR", note=short_error(e)))
                    traceback.print_exc(limit=3)
                    dev.free()
    return rows


def torch_call(s: dict, benchmark: bool):
    """A callable running torch's conv2d on the layer with cuDNN benchmark on/off, TF32 off; None without a
    CUDA torch. It sets the benchmark flag itself, so the two can be interleaved."""
    try:
        import torch
        if not torch.cuda.is_available():
            return None
    except ImportError:
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    x = torch.randn(s["x"], device="cuda")
    w = torch.randn(s["w"], device="cuda")
    kw = dict(s["kw"])

    def call():
        torch.backends.cudnn.benchmark = benchmark
        torch.nn.functional.conv2d(x, w, **kw)
    return call


def candidates(dev: Device, s: dict, x, w, out, row: dict) -> dict:
    """name -> callable for every candidate of the layer that ran once (its warm-up); the others' reasons go
    to row["notes"]. The autotune candidate's first call tunes the layer; its pick goes to row["pick"]."""
    from autotune import Tuner
    p = ConvParams.from_arrays(x, w, **s["kw"])
    calls = {}
    for name, algorithm in gpu.ALGORITHMS.items():
        support = algorithm.supports(p)
        if not support:
            row["notes"][name] = support.reason
            continue
        calls[name] = functools.partial(convalgos.conv2d, x, w, **s["kw"], algo=name, out=out, backend="cuda")
    tuner = Tuner(devices=[dev.tuner_device], benchmark=True)
    calls["autotune"] = functools.partial(tuner.conv2d, x, w, **s["kw"], out=out)
    for label, bench_on in (("cudnn", False), ("cudnn.benchmark", True)):
        fn = torch_call(s, bench_on)
        if fn is not None:
            calls[label] = fn
    ready = {}
    for name, fn in calls.items():
        try:
            fn()
            ready[name] = failing_as(name, fn)
        except Exception as e:  # OOM or a kernel failure: skip this candidate, with the reason
            row["notes"][name] = short_error(e)
            dev.free()
    if "autotune" in ready:
        row["pick"] = list(tuner.dispatch_table())[0].algo
    return ready


def time_interleaved(dev: Device, calls: dict, row: dict) -> dict:
    """name -> median seconds over interleaved rounds; a candidate failing mid-way is dropped with its reason
    and the rest timed again."""
    while calls:
        try:
            samples = interleaved(calls, dev.rounds, timer=dev.timer, warmup=0, min_seconds=dev.min_seconds)
            return {name: median(runs) for name, runs in samples.items()}
        except CandidateFailed as failed:
            row["notes"][failed.name] = short_error(failed.error)
            del calls[failed.name]
            dev.free()
    return {}


def time_layers(dev: Device, layers: dict, deadline: float) -> tuple[list[dict], list[str]]:
    """One row per layer: ms per algorithm (or why not), torch with benchmark off/on, the best convalgos."""
    rows, cut, rng = [], [], np.random.default_rng(1)
    for layer, s in layers.items():
        if time.perf_counter() > deadline:
            cut.append(layer)
            continue
        x = dev.asarray(rng.standard_normal(s["x"]).astype(np.float32))
        w = dev.asarray(rng.standard_normal(s["w"]).astype(np.float32))
        p = ConvParams.from_arrays(x, w, **s["kw"])
        row = dict(layer=layer, gflop=p.flops / 1e9, notes={}, pick=None)
        out = dev.xp.empty(p.out_shape, np.float32)
        seconds = time_interleaved(dev, candidates(dev, s, x, w, out, row), row)
        row["ms"] = {name: 1e3 * t for name, t in seconds.items()}
        ours = {k: v for k, v in row["ms"].items() if k in gpu.ALGORITHMS}
        row["best"] = min(ours, key=ours.get) if ours else None
        rows.append(row)
        del x, w, out
        dev.free()
    return rows, cut


def correctness_table(rows: list[dict]) -> str:
    names = list(gpu.ALGORITHMS)
    lines = ["| layer | dtype | " + " | ".join(names) + " |", "|---|---|" + "---|" * len(names)]
    keyed = {(r["layer"], r["dtype"], r["algo"]): r for r in rows}
    for layer, dtype in dict.fromkeys((r["layer"], r["dtype"]) for r in rows):
        cells = []
        for name in names:
            r = keyed[(layer, dtype, name)]
            cells.append("-" if r["status"] == "unsupported" else
                         r["status"] if r["error"] is None else f"{r['error']:.1e} {r['status']}")
        lines.append(f"| {layer} | {dtype} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def timing_table(rows: list[dict]) -> str:
    cols = list(gpu.ALGORITHMS) + ["autotune", "cudnn", "cudnn.benchmark"]
    lines = ["| layer | GFLOP | " + " | ".join(cols) + " | best | autotune pick |",
             "|---|---|" + "---|" * (len(cols) + 2)]
    for r in rows:
        cells = [f"{r['ms'][c]:.3f}" if c in r["ms"] else ("-" if c in r["notes"] else "") for c in cols]
        lines.append(f"| {r['layer']} | {r['gflop']:.1f} | " + " | ".join(cells) + f" | {r['best']} | {r['pick']} |")
    return "\n".join(lines)


def unsupported_list(rows: list[dict]) -> str:
    """Each refusal of the correctness grid, with the algorithm's reason (once per layer)."""
    reasons = {(r["algo"], r["layer"]): r["note"] for r in rows if r["status"] == "unsupported"}
    return "\n".join(f"- {algo} on {layer}: {note}" for (algo, layer), note in reasons.items())


def summary(check: list[dict], timing: list[dict]) -> list[str]:
    bad = [r for r in check if r["status"] in ("FAIL", "ERROR")]
    runs = [r for r in check if r["status"] != "unsupported"]
    cases = len({(r["layer"], r["dtype"]) for r in check})
    lines = [f"correctness: {len(runs) - len(bad)}/{len(runs)} runs within tolerance, "
             f"{len(check) - len(runs)} unsupported, of {cases} layer-dtype cases x {len(gpu.ALGORITHMS)} "
             f"algorithms"]
    for r in bad:
        error = "" if r["error"] is None else f" error {r['error']:.2e} > {r['tol']:.0e}"
        lines.append(f"  {r['status']}: {r['algo']} on {r['layer']} {r['dtype']}{error} {r['note']}")
    for net in ("resnet18", "vgg16"):
        rows = [r for r in timing if r["layer"].startswith(net) and r["best"]]
        if rows and all("cudnn.benchmark" in r["ms"] for r in rows):
            best = sum(r["ms"][r["best"]] for r in rows)
            cudnn = sum(r["ms"]["cudnn.benchmark"] for r in rows)
            tuned = sum(r["ms"].get("autotune", float("nan")) for r in rows)
            faster = [r["layer"] for r in rows if r["ms"][r["best"]] < r["ms"]["cudnn.benchmark"]]
            lines.append(f"{net}: autotuned {tuned:.2f} ms ({tuned / cudnn:.2f}x), best convalgos {best:.2f} ms "
                         f"({best / cudnn:.2f}x) vs cuDNN benchmark {cudnn:.2f} ms, summed over its distinct "
                         f"layers; best faster than cuDNN on: {', '.join(faster) or 'none'}")
    return lines


def report(dev: Device, check, timing, cut, seconds: float) -> str:
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    parts = [f"# GPU check\n\nDevice: {dev.name}. convalgos {convalgos.__version__}, numpy {np.__version__}, "
             f"Python {platform.python_version()}. Date: {today}. Run time {seconds:.0f} s. TF32 off.\n",
             "## Correctness (normwise error vs the float64 reference; '-' unsupported)\n",
             correctness_table(check)]
    if any(r["status"] == "unsupported" for r in check):
        parts += ["\nUnsupported ('-' above), with each algorithm's reason:\n", unsupported_list(check)]
    if timing:
        clock = "wall clock (simulator)" if dev.xp is np else "between CUDA events"
        parts += [f"\n## Times (ms, fp32; median of interleaved rounds, each run timed {clock})\n",
                  timing_table(timing)]
    if cut:
        parts.append(f"\nCut by the time budget: {', '.join(cut)}")
    parts += ["\n## Summary\n", "\n".join(f"- {line}" for line in summary(check, timing))]
    return "\n".join(parts) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--simulate", action="store_true", help="tiny grid under the Numba CUDA simulator")
    parser.add_argument("--out", type=Path, help="the results file (default bench/results/gpu-h200.md)")
    args = parser.parse_args(argv)
    start = time.perf_counter()
    gpu_missing = None
    try:
        from convalgos.arrays import require_gpu
        require_gpu()
    except Exception as e:
        gpu_missing = str(e)
    if gpu_missing:
        print(gpu_missing, file=sys.stderr)
        return 2
    dev = Device()
    check = check_correctness(dev, SIM_GRID if args.simulate else CHECK_GRID)
    timing, cut = time_layers(dev, SIM_TIMING_LAYERS if args.simulate else TIMING_LAYERS, start + TIME_BUDGET_S)
    out = args.out or RESULTS / ("gpu-simulated.md" if args.simulate else "gpu-h200.md")
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(report(dev, check, timing, cut, time.perf_counter() - start))
    if timing:
        print(timing_table(timing))
    print(f"wrote {out}")
    print("\n".join(summary(check, timing)))
    return 0 if all(r["status"] in ("ok", "unsupported") for r in check) else 1


if __name__ == "__main__":
    sys.exit(main())
