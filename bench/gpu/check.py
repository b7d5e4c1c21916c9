"""The check job: one GPU algorithm, every pass it has, against the float64 reference on a small grid of layers
(stride, asymmetric padding, dilation, groups, depthwise, 1x1, large kernels), float32 and float16.

Each run writes into an output filled with NaN first (a fresh ``xp.empty`` would usually get the block the
previous run just filled with a right answer from CuPy's pool), through the public front door
(``convalgos.conv2d / conv2d_input / conv2d_weight(..., algo=name, backend="cuda", out=...)``). A case passes
when its normwise error is within the algorithm's tolerance for the pass and dtype, no element is left NaN
and the dtype is kept. A case that raises is reported and the next one runs, unless the CUDA context died
with it (a sticky error): then the job says so and ends, and the parent lists what was not run.
"""
from __future__ import annotations

import os

import numpy as np

import convalgos
from convalgos import PASSES, ConvParams, reference

from .common import Device, emit, fault, shapes, short_error

DTYPES = ("float32", "float16")

GRID = {
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
SIM_GRID = {                 # small: the simulator's cost grows with the threads a kernel runs
    "3x3 same": shapes(1, 1, 3, 1, 3),
    "3x3 asym pad groups": shapes(2, 2, 3, 2, 3, padding=((0, 1), (1, 0)), groups=2),
    "3x3 stride 2 dilation 2": shapes(1, 1, 5, 1, 3, stride=2, dilation=2),
    "1x1": shapes(1, 2, 2, 2, 1),
}


def grid(simulated: bool) -> dict:
    return SIM_GRID if simulated else GRID


def cases(name: str, simulated: bool) -> list[dict]:
    """Every (pass, dtype, layer) of ``name``'s check, in run order, each with the reason when unsupported
    (the parent computes them too, without a GPU, to list what a dead job did not run)."""
    from convalgos import cuda as gpu
    algorithm, found = gpu.ALGORITHMS[name], []
    for op in PASSES:
        for dtype in DTYPES:
            for layer, s in grid(simulated).items():
                p = ConvParams.from_shapes(s["x"], s["w"], **s["kw"], dtype=dtype)
                support = algorithm.supports(p, op)
                found.append(dict(op=op, dtype=dtype, layer=layer, reason=None if support else support.reason))
    return found


def operands(s: dict, dtype: str, seed: int):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(s["x"]).astype(dtype)
    w = rng.standard_normal(s["w"]).astype(dtype)
    b = rng.standard_normal(s["w"][0]).astype(dtype)
    p = ConvParams.from_arrays(x, w, b, **s["kw"])
    dy = rng.standard_normal(p.out_shape).astype(dtype)
    return x, w, b, dy, p


def run_case(dev: Device, name: str, case: dict, seed: int) -> dict:
    """One case on the device into a NaN-poisoned output: its error, tolerance, unwritten count and status."""
    from convalgos import cuda as gpu
    s, op, dtype, xp = grid(dev.simulated)[case["layer"]], case["op"], case["dtype"], dev.xp
    x, w, b, dy, p = operands(s, dtype, seed)
    kw = dict(s["kw"], algo=name, backend="cuda")
    out = xp.full(p.result_shape(op), np.nan, dtype)
    if op == "forward":
        ref = reference.conv2d(x, w, b, **s["kw"])
        convalgos.conv2d(dev.asarray(x), dev.asarray(w), dev.asarray(b), **kw, out=out)
    elif op == "backward_data":
        ref = reference.backward_data(dy, w, p)
        convalgos.conv2d_input(x.shape, dev.asarray(w), dev.asarray(dy), **kw, out=out)
    else:
        ref = reference.backward_filter(x, dy, p)
        convalgos.conv2d_weight(dev.asarray(x), w.shape, dev.asarray(dy), **kw, out=out)
    result = dev.host(out)
    tolerance = gpu.ALGORITHMS[name].tolerance_of(op, dtype)
    error, unwritten = reference.normwise_error(result, ref), int(np.isnan(result).sum())
    ok = result.dtype == np.dtype(dtype) and error <= tolerance and unwritten == 0
    return dict(case, error=error, tol=tolerance, unwritten=unwritten, status="ok" if ok else "FAIL")


def run_check(name: str) -> None:
    """The job: every case of ``name`` in order, a row each; ends early (exit status 3) on a sticky error."""
    dev = Device()
    planted = fault(name)
    for i, case in enumerate(cases(name, dev.simulated)):
        if case["reason"] is not None:
            emit("row", **case, status="unsupported")
            continue
        emit("start", **case)
        try:
            if planted and i > 0:
                _plant(dev, planted)
            emit("row", **run_case(dev, name, case, seed=i))
        except Exception as e:  # noqa: BLE001 - report the case, then see whether the context survived
            emit("row", **case, status="ERROR", error=None, note=short_error(e))
            dead = dev.alive() or getattr(dev, "dead", None)
            if dead:
                emit("sticky", error=dead)
                raise SystemExit(3)
            dev.free()


def _plant(dev: Device, mode: str) -> None:
    """The test hook's fault (``common.FAULT_ENV``): a sticky error, or the process killed outright."""
    if mode == "abort":
        os.abort()
    dev.dead = "CUDARuntimeError: cudaErrorIllegalAddress (planted by GPU_CHECK_FAULT)"
    raise RuntimeError("cudaErrorIllegalAddress: an illegal memory access was encountered (planted)")
