"""The net job: a model's forward pass (eval mode) and training step (forward, cross-entropy, backward, SGD),
autotuned on the GPU, against the same model with the heuristic's choices (benchmark mode off) and against
torch's same model (``bench.torch_twin``, same weights) on cuDNN with benchmark mode on, TF32 off on both sides.

The autotuned model's first step tunes every pass of every layer (its seconds are reported apart); then the
steps and forward passes of the three are timed in interleaved rounds between CUDA events. The first step's
loss of each is reported too: the same weights and batch give the same loss on every side, within rounding.
Then where each side's step spends its time (``step_profile.py``): kernels, GPU time, wall time, GPU busy.
A fourth side, "graphed", is the autotuned model's step and forward pass each replayed as one CUDA graph
(``autotune.cuda_graph``: the same model, optimiser and tuner, its labels on the device); a capture the graph
refuses is reported with its reason and the side left out. Under the simulator a tiny model stands in (no torch
there), to exercise the code path (the graph runs eagerly there).
"""
from __future__ import annotations

import time

import numpy as np

from autotune import CaptureError, Tuner, cuda_graph, models, nn, optim
from autotune.measure import interleaved, median

from .common import LR, MOMENTUM, WEIGHT_DECAY, Device, TorchStep, emit, short_error
from .step_profile import profile_sides

ROUNDS, MIN_SECONDS = 5, 0.5
#: model name -> (batch, input size) the check runs.
NETS = {"resnet20": (32, 32), "resnet18": (32, 224)}


def tiny(tuner, seed=0) -> nn.Sequential:
    """The simulator's stand-in: the kinds of layer a ResNet has, on a 1x3x3 input (the simulator's cost grows
    with the threads a kernel runs)."""
    rng = np.random.default_rng(seed)
    model = nn.Sequential(nn.Conv2d(1, 2, 3, padding=1, bias=False, rng=rng, tuner=tuner), nn.BatchNorm2d(2),
                          nn.ReLU(), nn.MaxPool2d(2), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                          nn.Linear(2, 10, rng=rng))
    model.input_shape = (1, 3, 3)
    return model


class Side:
    """One model with its optimiser and loss on one batch: ``step()`` and ``forward()``."""

    def __init__(self, model, x, labels):
        self.model, self.x, self.labels = model, x, labels
        self.opt = optim.SGD(model, lr=LR, momentum=MOMENTUM, weight_decay=WEIGHT_DECAY)
        self.loss_fn = nn.CrossEntropyLoss()

    def step(self) -> float:
        return self.train_step(self.x, self.labels)

    def forward(self) -> None:
        self.eval_forward(self.x)

    def train_step(self, x, labels):
        self.model.train()
        loss = self.loss_fn(self.model(x), labels)
        self.model.zero_grad()
        self.model.backward(self.loss_fn.backward())
        self.opt.step()
        return loss

    def eval_forward(self, x):
        self.model.eval()
        return self.model(x)


class GraphedSide:
    """``side``'s step and forward pass, each replayed as one CUDA graph (its model, optimiser and tuner: two
    optimisers over one model would each lay its parameters out flat), the labels on the device."""

    def __init__(self, side: Side, tuner, dev: Device):
        self.side, self.labels = side, dev.asarray(side.labels)
        self.graphed_step = cuda_graph(side.train_step, tuners=[tuner])
        self.graphed_forward = cuda_graph(side.eval_forward, tuners=[tuner])

    def step(self):
        return self.graphed_step(self.side.x, self.labels)

    def forward(self) -> None:
        self.graphed_forward(self.side.x)

    def captured(self) -> str | None:
        """Run each graph until it replays (eager, capture, replay); why not, when a capture is refused."""
        try:
            for _ in range(3):
                self.step()
                self.forward()
        except CaptureError as e:
            return str(e)
        return None


class TorchSide(TorchStep):
    """torch's twin of the model on cuDNN (benchmark on), same weights, same batch, the same SGD."""

    def __init__(self, model, x, labels):
        import torch

        from autotune.profile.tf32 import torch_tf32_off
        from bench.torch_twin import torch_twin
        self.tf32 = torch_tf32_off(torch)
        torch.backends.cudnn.benchmark = True
        twin = torch_twin(model)
        twin.load_state_dict({k: torch.from_numpy(np.asarray(v.get() if hasattr(v, "get") else v))
                              for k, v in model.state_dict().items()}, strict=False)
        super().__init__(torch, twin.cuda(), torch.from_numpy(np.asarray(x.get() if hasattr(x, "get") else x)).cuda(),
                         torch.from_numpy(np.asarray(labels)).cuda())


def build(name: str, dev: Device, benchmark: bool):
    tuner = Tuner(devices=[dev.tuner_device], benchmark=benchmark, **dev.race)
    model = tiny(tuner) if name == "tiny" else models.get_model(name, seed=0, tuner=tuner)
    return model.to("cuda"), tuner


def torch_usable() -> bool:
    try:
        import torch
        return torch.cuda.is_available()
    except ImportError:
        return False


def run_net(name: str, batch: int, size: int) -> None:
    """The job: one row for the model (tuning seconds, first losses, ms per forward pass and per step)."""
    dev = Device()
    tuned, tuner = build(name, dev, benchmark=True)
    C = tuned.input_shape[0]
    rng = np.random.default_rng(0)
    x_host = rng.standard_normal((batch, C, size, size)).astype(np.float32)
    labels = rng.integers(0, 10, batch)
    x = dev.asarray(x_host)
    sides = {"autotuned": Side(tuned, x, labels), "heuristic": Side(build(name, dev, benchmark=False)[0], x, labels)}
    if torch_usable() and not dev.simulated:
        try:
            sides["torch cuDNN"] = TorchSide(tuned, x_host, labels)    # the weights before any step: the same start
        except Exception as e:  # noqa: BLE001 - our two sides are still worth timing
            emit("note", text=f"no torch side: {short_error(e)}")
    losses, start = {}, time.perf_counter()
    losses["autotuned"] = float(sides["autotuned"].step())           # tunes every pass of every layer
    dev.synchronize()
    tuning = time.perf_counter() - start
    for label, side in sides.items():
        if label != "autotuned":
            losses[label] = float(side.step())                      # a GPU loss stays on the device until read
    emit("tuned", model=name, batch=batch, size=size, tuning_s=tuning, losses=losses,
         keys=len(list(tuner.dispatch_table())), choices=_choices(tuner))
    graphed = GraphedSide(sides["autotuned"], tuner, dev)
    refused = graphed.captured()
    if refused:
        emit("note", text=f"no graphed side: {refused}")
    else:
        sides["graphed"] = graphed
    rounds, least = (1, 0.0) if dev.simulated else (ROUNDS, MIN_SECONDS)
    row = dict(model=name, batch=batch, size=size, tuning_s=tuning, losses=losses,
               tf32=getattr(sides.get("torch cuDNN"), "tf32", None))
    for what in ("forward", "step"):
        calls = {label: getattr(side, what) for label, side in sides.items()}
        for fn in calls.values():
            fn()                                                    # eval mode's first pass tunes its keys
        samples = interleaved(calls, rounds, timer=dev.timer, warmup=0, min_seconds=least)
        row[f"{what}_ms"] = {label: 1e3 * median(s) for label, s in samples.items()}
    emit("row", **row)
    emit("profile", model=name, batch=batch,
         sides=profile_sides(sides, dev, ours=("autotuned", "heuristic", "graphed")))


def _choices(tuner) -> dict:
    """pass -> {algorithm: how many layers chose it}."""
    counts: dict = {}
    for entry in tuner.dispatch_table():
        per_pass = counts.setdefault(entry.key.op, {})
        per_pass[entry.algo] = per_pass.get(entry.algo, 0) + 1
    return counts
