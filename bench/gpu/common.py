"""What the GPU check's jobs share: the device (CuPy and CUDA events on a GPU, NumPy and wall time under the
simulator), layer shapes and grids, the line protocol between a job and the parent, the fault hook the tests
use, short error texts, and torch's side of a training job (its SGD step and eval pass)."""
from __future__ import annotations

import json
import os
import sys

import numpy as np

from convalgos.arrays import simulator_enabled

#: the prefix of a job's protocol lines on stdout (anything else a library prints there is ignored).
MARK = "@@gpu_check "
#: the interpreter's thread switch interval under the simulator (seconds): its ``syncthreads`` is a barrier of
#: Python threads, each wait up to one interval (5 ms by default), so block reductions crawl at the default.
SIM_SWITCH_INTERVAL = 1e-4
#: the tuner's race under the simulator, where a run costs ~1 ms per simulated thread: one timed run each.
SIM_RACE = dict(min_runs=1, max_runs=1, time_budget=0.0)
#: test hook: "ALGO:sticky" makes ALGO's check job raise a CUDA-like error and find the context dead (as after
#: an illegal address); "ALGO:abort" kills that job's process mid-case (as a segfault would); "time:abort" kills
#: the first time job at its second (layer, pass). Comma-separated.
FAULT_ENV = "GPU_CHECK_FAULT"


def emit(kind: str, **fields) -> None:
    """One protocol line: {"kind": kind, **fields}, flushed at once (the parent writes it before the next)."""
    sys.stdout.write(MARK + json.dumps({"kind": kind, **fields}, default=str) + "\n")
    sys.stdout.flush()


def fault(name: str) -> str | None:
    """The fault the test hook plants in ``name``'s check job ("sticky", "abort"), or None."""
    for item in os.environ.get(FAULT_ENV, "").split(","):
        algo, _, mode = item.partition(":")
        if algo == name and mode:
            return mode
    return None


def short_error(e: BaseException) -> str:
    text = str(e).splitlines()[0][:160] if str(e) else ""
    return f"{type(e).__name__}: {text}"


def shapes(N, C, H, K, R, stride=1, padding=None, dilation=1, groups=1, W=None) -> dict:
    """A layer: x and w shapes and conv2d's keywords (padding defaults to "same" for odd kernels)."""
    pad = (R // 2) * dilation if padding is None else padding
    return dict(x=(N, C, H, W or H), w=(K, C // groups, R, R),
                kw=dict(stride=stride, padding=pad, dilation=dilation, groups=groups))


class Device:
    """The tuner's device (``autotune.devices``: the GPU's, or the simulator's stand-in), its array module, its
    timer (CUDA events, or wall time), and how arrays go there and back."""

    def __init__(self):
        from autotune.devices import GpuDevice, SimulatedGpuDevice
        self.simulated = simulator_enabled()
        if self.simulated:                   # this process is the check's own: quick barriers (SIM_SWITCH_INTERVAL)
            sys.setswitchinterval(SIM_SWITCH_INTERVAL)
        self.tuner_device = SimulatedGpuDevice() if self.simulated else GpuDevice()
        self.xp, self.timer = self.tuner_device.xp, self.tuner_device.timer
        self.race = SIM_RACE if self.simulated else {}

    def asarray(self, a):
        return self.xp.asarray(a)

    def host(self, a) -> np.ndarray:
        return a if isinstance(a, np.ndarray) else a.get()

    def synchronize(self) -> None:
        if not self.simulated:
            self.xp.cuda.Device().synchronize()

    def alive(self) -> str | None:
        """None when the CUDA context still works, else why not (after a sticky error every call fails)."""
        if self.simulated:
            return None
        try:
            self.xp.cuda.runtime.deviceSynchronize()
            (self.xp.zeros(1) + 1).get()
            return None
        except Exception as e:  # noqa: BLE001 - any failure here means the context is gone
            return short_error(e)

    def free(self) -> None:
        """Drop the GPU algorithms' kept buffers and the memory pool's cached blocks."""
        from convalgos import cuda as gpu
        gpu.release_workspaces()
        if not self.simulated:
            self.xp.get_default_memory_pool().free_all_blocks()


#: the SGD both sides of a GPU job train with (ours through autotune.optim, torch's through torch.optim)
LR, MOMENTUM, WEIGHT_DECAY = 0.01, 0.9, 5e-4


class TorchStep:
    """A torch model's SGD step and eval pass on one batch."""

    def __init__(self, torch, model, x, labels):
        self.torch, self.model, self.x, self.labels = torch, model, x, labels
        self.opt = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)

    def step(self) -> float:
        self.model.train()
        loss = self.torch.nn.functional.cross_entropy(self.model(self.x), self.labels)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        self.opt.step()
        return float(loss.detach())

    def forward(self) -> None:
        self.model.eval()
        with self.torch.no_grad():
            self.model(self.x)
