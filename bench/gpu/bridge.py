"""The bridge job: a torch user's model on CUDA tensors converted by ``autotune.torch.convert``, against the same
model unconverted (torch's cuDNN, benchmark on), TF32 off on both sides: an SGD step (cross-entropy, backward,
momentum) and an eval forward pass, timed in interleaved rounds between CUDA events, with the convs' calls the
dispatcher served and those torch's conv served instead (fallbacks), and the first step's losses.

Torch runs everything but the convs on both sides, so the ratio is the convs' own cost (and the bridge's). The
converted model dispatches through a fresh ``Tuner()`` with its defaults (benchmark off: the heuristic's
choices, as a user who only calls ``convert`` gets, and few kernels to compile on a fresh machine).

Under the simulator a tiny torch model on CPU tensors runs its convs in the GPU registry through the simulated
GPU's device, im2col only (the simulator's cheapest), when torch is installed, to exercise the path; the times
are a simulator's.
"""
from __future__ import annotations

import copy

import numpy as np

from autotune import Tuner, models
from autotune.measure import interleaved, median

from .common import Device, TorchStep, emit, short_error

ROUNDS, MIN_SECONDS = 5, 0.3
#: model name -> (batch, input size) the check runs
BRIDGE_NETS = {"resnet20": (32, 32)}


def tiny_torch(torch):
    """The simulator's model: a conv, BatchNorm, ReLU, pooling and a linear layer on 1x3x3 inputs."""
    torch.manual_seed(0)
    nn = torch.nn
    return nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, bias=False), nn.BatchNorm2d(2), nn.ReLU(),
                         nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(2, 10))


def served(model, at) -> dict:
    """{"dispatched": calls the dispatcher served, "by torch": calls torch's conv served} over every pass."""
    records = [m.record for m in model.modules() if isinstance(m, at.Conv2d)]
    return {"dispatched": sum(r.dispatched for rec in records for r in rec.passes.values()),
            "by torch": sum(r.by_torch for rec in records for r in rec.passes.values())}


def run_bridge(name: str, batch: int, size: int) -> None:
    """The job: one row (ms per step and per eval pass of each side, the ratio, calls served, first losses)."""
    dev = Device()
    try:
        import torch

        import autotune.torch as at
    except ImportError as e:
        emit("note", text=f"no torch here ({short_error(e)}): the bridge needs torch")
        return
    if not dev.simulated and not torch.cuda.is_available():
        emit("note", text=f"torch {torch.__version__} has no CUDA here: the bridge on CUDA tensors needs it")
        return
    from autotune.devices import SimulatedGpuDevice
    from autotune.profile.tf32 import torch_tf32_off
    tf32 = torch_tf32_off(torch)
    where = "cpu" if dev.simulated else "cuda"
    if dev.simulated:                       # im2col alone: the simulator's cheapest (its GEMM is NumPy's)
        from convalgos import cuda as gpu
        plain, C = tiny_torch(torch), 1
        tuner = Tuner({"im2col": gpu.ALGORITHMS["im2col"]}, devices=[SimulatedGpuDevice()], **dev.race)
    else:
        from bench.torch_twin import torch_twin
        ours = models.get_model(name, seed=0)
        plain, C = torch_twin(ours), ours.input_shape[0]
        plain.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in ours.state_dict().items()}, strict=False)
        torch.backends.cudnn.benchmark = True
        tuner = Tuner()
    plain = plain.to(where)
    converted = at.convert(copy.deepcopy(plain), tuner=tuner)
    rng = np.random.default_rng(0)
    x = torch.from_numpy(rng.standard_normal((batch, C, size, size)).astype(np.float32)).to(where)
    labels = torch.from_numpy(rng.integers(0, 10, batch)).to(where)
    sides = {"torch": TorchStep(torch, plain, x, labels), "converted": TorchStep(torch, converted, x, labels)}
    losses = {label: side.step() for label, side in sides.items()}    # the same weights: the same first loss
    rounds, least = (1, 0.0) if dev.simulated else (ROUNDS, MIN_SECONDS)
    row = dict(model=name, batch=batch, size=size, losses=losses, device=where,
               torch="its CPU backend" if dev.simulated else f"cuDNN with benchmark on, {tf32}",
               tuner="the simulated GPU, im2col only" if dev.simulated else
               "Tuner() defaults: benchmark off, the heuristic's choices")
    for what in ("forward", "step"):
        calls = {label: getattr(side, what) for label, side in sides.items()}
        for fn in calls.values():
            fn()                                                      # eval mode's first pass: its keys
        samples = interleaved(calls, rounds, timer=dev.timer, warmup=0, min_seconds=least)
        row[f"{what}_ms"] = {label: 1e3 * median(s) for label, s in samples.items()}
    row["served"] = served(converted, at)
    emit("row", **row)
