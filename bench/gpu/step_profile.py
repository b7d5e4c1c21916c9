"""Where a training step's time goes, per side of the net job (ours autotuned, ours with the heuristic's
choices, torch's on cuDNN): kernels per step, GPU kernel time per step, wall time per step and the GPU-busy
fraction (kernel time over wall time: the rest is the host launching, or waiting on Python).

- wall time: ``STEPS`` steps between two synchronises, before any profiling;
- kernels and GPU time: ``torch.profiler`` with CUDA activity over ``STEPS`` more steps. It records every kernel
  of the process (CUPTI), CuPy's, Numba's and cuBLAS's as well as torch's, so both sides are counted the same
  way; it needs torch with CUDA;
- our sides also count the device operations the library issued (``convalgos.cuda.count_ops``, by name), beside
  the profiler's count: the difference is what a library call launches beyond one kernel (a cuBLAS GEMM may
  run two), or array-module work the counter does not see.

Under the simulator only the counter and the wall time apply (a simulated step, not a GPU's).
"""
from __future__ import annotations

import time

from convalgos import cuda as gpu

STEPS, SIM_STEPS = 3, 1
TOP = 6
HARDWARE = "needs torch with CUDA on a GPU"


def _profiler_usable(dev) -> bool:
    if dev.simulated:
        return False
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def _profiled(step, steps: int, dev) -> dict:
    import torch
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        dev.synchronize()
    kernels = [e for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA]
    by_name: dict = {}
    for e in kernels:
        count_us = by_name.setdefault(e.name[:60], [0, 0.0])
        count_us[0] += 1
        count_us[1] += e.device_time_total
    top = sorted(by_name.items(), key=lambda kv: -kv[1][1])[:TOP]
    return {"kernels": len(kernels) / steps, "gpu_ms": sum(e.device_time_total for e in kernels) / steps / 1e3,
            "top_kernels": [(name, n / steps, us / steps / 1e3) for name, (n, us) in top]}


def profile_sides(sides: dict, dev, ours: tuple) -> dict:
    """label -> what one step of that side costs (module docstring); ``ours``: the labels of our sides."""
    steps, usable = (SIM_STEPS if dev.simulated else STEPS), _profiler_usable(dev)
    found = {}
    for label, side in sides.items():
        row: dict = {}
        dev.synchronize()
        start = time.perf_counter()
        for _ in range(steps):
            if label in ours:
                with gpu.count_ops() as ops:
                    side.step()
            else:
                side.step()
        dev.synchronize()
        row["wall_ms"] = (time.perf_counter() - start) / steps * 1e3
        if label in ours:
            row["device_ops"] = ops.total
            row["top_ops"] = ops.by_name.most_common(TOP)
        if usable:
            row.update(_profiled(side.step, steps, dev))
            row["busy"] = row["gpu_ms"] / row["wall_ms"]
        else:
            row["profiler"] = HARDWARE
        found[label] = row
    return found
