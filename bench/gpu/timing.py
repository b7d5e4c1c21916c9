"""The timing jobs: per layer and pass, every GPU candidate, a fresh autotuner and the heuristic's pick (the
"time" job), and torch's cuDNN with benchmark mode off or on (the "cudnn" job, one process per mode: torch's
cuDNN v8 plan cache is consulted before the benchmark flag, and its key has no benchmark field, so a process
that ran benchmark off first would reuse the heuristic's plans with benchmark on).

The layers are the distinct conv layers of ResNet-18 (batch 32) and VGG-16 (batch 16) at 224x224, fp32. A
layer's candidates are timed in interleaved rounds (``autotune.measure.interleaved``), each run between two CUDA
events after a synchronise (``autotune.devices.CudaEventTimer``); a time is the median of its runs.
"autotune" is a benchmark-mode ``autotune.Tuner`` made for the layer, timed after it tuned; "heuristic" names
what a benchmark-off Tuner picks (its time is that algorithm's column). A candidate that fails is left out,
with its reason. Rows are emitted layer by layer and pass by pass (``common.emit``).
"""
from __future__ import annotations

import functools
import os
import time

import numpy as np

import convalgos
from convalgos import PASSES, ConvParams

from autotune.measure import interleaved, median

from .common import Device, emit, fault, shapes, short_error

#: interleaved rounds per layer and pass (more while they last under MIN_SECONDS), on a GPU and in the simulator.
ROUNDS, MIN_SECONDS, SIM_ROUNDS = 7, 0.1, 1

LAYERS = {  # distinct conv layers, 224x224 input
    "resnet18.conv1 b32": shapes(32, 3, 224, 64, 7, stride=2, padding=3),
    "resnet18.layer1 b32": shapes(32, 64, 56, 64, 3),
    "resnet18.layer2.0.conv1 b32": shapes(32, 64, 56, 128, 3, stride=2),
    "resnet18.layer2.0.down b32": shapes(32, 64, 56, 128, 1, stride=2, padding=0),
    "resnet18.layer2 b32": shapes(32, 128, 28, 128, 3),
    "resnet18.layer3.0.conv1 b32": shapes(32, 128, 28, 256, 3, stride=2),
    "resnet18.layer3 b32": shapes(32, 256, 14, 256, 3),
    "resnet18.layer4.0.conv1 b32": shapes(32, 256, 14, 512, 3, stride=2),
    "resnet18.layer4 b32": shapes(32, 512, 7, 512, 3),
    "vgg16.conv1_2 b16": shapes(16, 64, 224, 64, 3),
    "vgg16.conv3_2 b16": shapes(16, 256, 56, 256, 3),
    "vgg16.conv5_1 b16": shapes(16, 512, 14, 512, 3),
}
SIM_LAYERS = {"tiny 3x3": shapes(1, 1, 3, 1, 3)}    # the simulator's cost grows with the threads a kernel runs


def layers(simulated: bool) -> dict:
    return SIM_LAYERS if simulated else LAYERS


def operands(s: dict, xp, seed: int = 1):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(s["x"]).astype(np.float32)
    w = (rng.standard_normal(s["w"]) / np.sqrt(np.prod(s["w"][1:]))).astype(np.float32)
    p = ConvParams.from_arrays(x, w, **s["kw"])
    dy = rng.standard_normal(p.out_shape).astype(np.float32)
    return xp.asarray(x), xp.asarray(w), xp.asarray(dy), p


def pass_operands(op: str, x, w, dy):
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


def tuner_call(tuner, op: str, x, w, dy, s: dict, out):
    """The tuner's public call for pass ``op`` of the layer, into ``out``."""
    kw = dict(s["kw"], out=out)
    if op == "forward":
        return functools.partial(tuner.conv2d, x, w, **kw)
    if op == "backward_data":
        return functools.partial(tuner.conv2d_input, x.shape, w, dy, **kw)
    return functools.partial(tuner.conv2d_weight, x, w.shape, dy, **kw)


def candidates(dev: Device, op: str, s: dict, x, w, dy, p, out, row: dict) -> dict:
    """name -> a call that ran once (its warm-up; the autotuner's tunes), for every candidate of the pass; the
    others' reasons go to row["notes"]; the autotuner's and the heuristic's picks to row["picks"]."""
    from autotune import Tuner
    from convalgos import cuda as gpu
    a, b = pass_operands(op, x, w, dy)
    calls = {}
    for name, algorithm in gpu.ALGORITHMS.items():
        support = algorithm.supports(p, op)
        if not support:
            row["notes"][name] = support.reason
            continue
        calls[name] = functools.partial(convalgos.run, algorithm, op, a, b, p, out)
    tuners = {"autotune": Tuner(devices=[dev.tuner_device], benchmark=True, **dev.race),
              "heuristic": Tuner(devices=[dev.tuner_device], benchmark=False)}
    calls["autotune"] = tuner_call(tuners["autotune"], op, x, w, dy, s, out)
    ready = {}
    for name, fn in calls.items():
        emit("start", layer=row["layer"], op=op, candidate=name)
        try:
            fn()
            dev.synchronize()
            ready[name] = fn
        except Exception as e:  # noqa: BLE001 - out of memory or a kernel failure: skip it, with the reason
            row["notes"][name] = short_error(e)
            if dev.alive() is not None:               # the context died: this job ends, the parent goes on
                raise
            dev.free()
    for label, tuner in tuners.items():
        try:
            if label == "heuristic":
                tuner_call(tuner, op, x, w, dy, s, out)()
            row["picks"][label] = list(tuner.dispatch_table())[0].algo
        except Exception as e:  # noqa: BLE001
            row["notes"][label] = short_error(e)
    return ready


def time_calls(dev: Device, calls: dict, row: dict) -> dict:
    """name -> median milliseconds over interleaved rounds; a candidate failing mid-way is dropped (with its
    reason) and the rest timed again."""
    rounds, least = (SIM_ROUNDS, 0.0) if dev.simulated else (ROUNDS, MIN_SECONDS)
    while calls:
        failed = {}

        def guarded(name, fn):
            def call():
                try:
                    fn()
                except Exception as e:  # noqa: BLE001 - noted; this round's samples are discarded
                    failed[name] = e
            return call
        samples = interleaved({n: guarded(n, f) for n, f in calls.items()}, rounds, timer=dev.timer, warmup=0,
                              min_seconds=least)
        if not failed:
            return {name: 1e3 * median(runs) for name, runs in samples.items()}
        for name, e in failed.items():
            row["notes"][name] = short_error(e)
            del calls[name]
        dead = dev.alive()
        if dead is not None:
            raise RuntimeError(f"the CUDA context died while timing: {dead}")
        dev.free()
    return {}


def run_time(skip: int = 0) -> None:
    """The "time" job: a row per (layer, pass) from the ``skip``-th on (the parent restarts a dead job there)."""
    dev = Device()
    plan = [(layer, op) for layer in layers(dev.simulated) for op in PASSES]
    for i, (layer, op) in enumerate(plan[skip:]):
        if i == 1 and skip == 0 and fault("time") == "abort":      # the test hook: the first run dies here
            os.abort()
        s = layers(dev.simulated)[layer]
        x, w, dy, p = operands(s, dev.xp)
        row = dict(layer=layer, op=op, gflop=p.flops / 1e9, notes={}, picks={}, ms={})
        out = dev.xp.empty(p.result_shape(op), np.float32)
        row["ms"] = time_calls(dev, candidates(dev, op, s, x, w, dy, p, out, row), row)
        emit("row", **row)
        del x, w, dy, out
        dev.free()


def pass_times(p: ConvParams, op: str, rounds: int, slow: float) -> dict:
    """name -> median seconds of pass ``op`` of layer p for every GPU algorithm that has it, on the device
    (``bench.heuristics --device cuda``); one over ``slow`` times the fastest first run is timed once."""
    from convalgos import cuda as gpu
    dev = Device()
    rng = np.random.default_rng(0)
    x = dev.asarray(rng.standard_normal(p.in_shape).astype(np.float32))
    w = dev.asarray((rng.standard_normal(p.weight_shape) / np.sqrt(p.Cg * p.R * p.S)).astype(np.float32))
    dy = dev.asarray(rng.standard_normal(p.out_shape).astype(np.float32))
    a, b = pass_operands(op, x, w, dy)
    calls = {}
    for name, algorithm in gpu.ALGORITHMS.items():
        if algorithm.supports(p, op):
            out = dev.xp.empty(p.result_shape(op), np.float32)
            calls[name] = functools.partial(convalgos.run, algorithm, op, a, b, p, out)
    for fn in calls.values():
        fn()                                         # compilation, first touch
    first = {name: dev.timer.time(fn) for name, fn in calls.items()}
    once = {name for name, t in first.items() if t > slow * min(first.values())}
    samples = interleaved({n: f for n, f in calls.items() if n not in once}, rounds, timer=dev.timer, warmup=0,
                          min_seconds=0.0 if dev.simulated else MIN_SECONDS)
    times = {name: median(s) for name, s in samples.items()}
    times.update({name: first[name] for name in once})
    dev.free()
    return times


class TorchTimer:
    """Seconds of GPU time of a torch call, between two torch CUDA events after a synchronise."""

    def __init__(self, torch):
        self.torch = torch

    def now(self) -> float:
        return time.perf_counter()

    def time(self, fn) -> float:
        cuda = self.torch.cuda
        cuda.synchronize()
        start, end = cuda.Event(enable_timing=True), cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        return start.elapsed_time(end) / 1e3


def torch_passes(torch, s: dict) -> dict:
    """op -> a call of torch's pass on the layer (``torch.nn.grad`` for the gradients: cuDNN's backward calls)."""
    rng = np.random.default_rng(1)
    x = torch.from_numpy(rng.standard_normal(s["x"]).astype(np.float32)).cuda()
    w = torch.from_numpy(rng.standard_normal(s["w"]).astype(np.float32)).cuda()
    y = torch.nn.functional.conv2d(x, w, **s["kw"])
    dy = torch.randn_like(y)
    kw, grad = s["kw"], torch.nn.grad
    return {"forward": lambda: torch.nn.functional.conv2d(x, w, **kw),
            "backward_data": lambda: grad.conv2d_input(x.shape, w, dy, **kw),
            "backward_filter": lambda: grad.conv2d_weight(x, w.shape, dy, **kw)}


def run_cudnn(benchmark: bool) -> None:
    """The "cudnn" job: torch's three passes per layer, cuDNN's benchmark flag as given, TF32 off."""
    import torch
    if not torch.cuda.is_available():
        emit("skipped", why=f"torch {torch.__version__} has no CUDA here")
        return
    from autotune.profile.tf32 import torch_tf32_off
    torch.backends.cudnn.benchmark = benchmark
    emit("tf32", torch=torch_tf32_off(torch), benchmark=torch.backends.cudnn.benchmark)
    timer = TorchTimer(torch)
    with torch.no_grad():
        for layer, s in LAYERS.items():
            calls = torch_passes(torch, s)
            for fn in calls.values():
                fn()                                 # benchmark mode searches here
            samples = interleaved(calls, ROUNDS, timer=timer, warmup=0, min_seconds=MIN_SECONDS)
            for op, runs in samples.items():
                emit("row", layer=layer, op=op, ms=1e3 * median(runs))
