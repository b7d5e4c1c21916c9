"""The regret bench's layers, one or two on each algorithm family's winning ground, and its judge.

Each layer is (name, pass, input shape, weight shape, conv arguments). The judge races every CPU algorithm that
supports the layer's pass by the tuner's own sampling rule (``autotune.race.clock.Sampler``: the worker pool
awake, one call timed, the run-queue wait read around it), interleaved rounds in a seeded shuffled order, no
retakes (under a neighbour the judge must see what the neighbour does), medians (means under a neighbour that
stays: the cost a step pays there, as the race judges it then); every algorithm writes into one output, as in
the tuner's race.
"""
from __future__ import annotations

import random

import numpy as np

import convalgos
from autotune.measure import Timer, median
from autotune.race.clock import Sampler
from autotune.race.contention import reader

LAYERS = (
    ("ResNet-20 stage 3, C64 8px b32", "forward", (32, 64, 8, 8), (64, 64, 3, 3), dict(padding=1)),
    ("ResNet-20 stage 1, C16 32px b32", "forward", (32, 16, 32, 32), (16, 16, 3, 3), dict(padding=1)),
    ("ResNet-18 C256 14px b1", "forward", (1, 256, 14, 14), (256, 256, 3, 3), dict(padding=1)),
    ("ResNet-18 C64 56px b1", "forward", (1, 64, 56, 56), (64, 64, 3, 3), dict(padding=1)),
    ("1x1 stride 2, C128 28px -> 256", "forward", (1, 128, 28, 28), (256, 128, 1, 1), dict(stride=2)),
    ("7x7 stem, 224px stride 2", "forward", (1, 3, 224, 224), (64, 3, 7, 7), dict(stride=2, padding=3)),
    ("7x7 wide, C32 28px", "forward", (1, 32, 28, 28), (32, 32, 7, 7), dict(padding=3)),
    ("depthwise C64 56px", "forward", (1, 64, 56, 56), (64, 1, 3, 3), dict(padding=1, groups=64)),
    ("LeNet-5 C6 14px 5x5 b64", "forward", (64, 6, 14, 14), (16, 6, 5, 5), {}),
    ("11x11 stride 4, 128px", "forward", (1, 3, 128, 128), (32, 3, 11, 11), dict(stride=4, padding=2)),
    ("ResNet-20 C32 16px b32, backward-data", "backward_data", (32, 32, 16, 16), (32, 32, 3, 3), dict(padding=1)),
    ("ResNet-20 C64 8px b32, backward-filter", "backward_filter", (32, 64, 8, 8), (64, 64, 3, 3), dict(padding=1)),
)


class Layer:
    """A layer's operands (seeded) and its call through a tuner."""

    def __init__(self, name, op, x_shape, w_shape, kw):
        rng = np.random.default_rng(0)
        self.name, self.op, self.kw = name, op, kw
        self.x = rng.standard_normal(x_shape).astype(np.float32)
        self.w = rng.standard_normal(w_shape).astype(np.float32)
        self.p = convalgos.ConvParams.from_shapes(x_shape, w_shape, **kw)
        self.dy = rng.standard_normal(self.p.result_shape("forward")).astype(np.float32)
        self.a, self.b = {"forward": (self.x, self.w), "backward_data": (self.dy, self.w),
                          "backward_filter": (self.x, self.dy)}[op]

    def call(self, tuner):
        if self.op == "forward":
            return tuner.conv2d(self.x, self.w, **self.kw)
        if self.op == "backward_data":
            return tuner.conv2d_input(self.x.shape, self.w, self.dy, **self.kw)
        return tuner.conv2d_weight(self.x, self.w.shape, self.dy, **self.kw)


def judge(layer: Layer, rounds: int, statistic: str = "median") -> dict:
    """name -> median (or mean) seconds of every algorithm supporting the layer's pass (module docstring); the
    mean under a neighbour that stays, as the race then decides (``autotune.race.judge``)."""
    out = np.empty(layer.p.result_shape(layer.op), np.float32)
    calls = {name: (lambda alg=alg: convalgos.run(alg, layer.op, layer.a, layer.b, layer.p, out))
             for name, alg in convalgos.ALGORITHMS.items() if alg.supports(layer.p, layer.op)}
    for call in calls.values():
        call()
        call()
    r = reader()
    r.refresh()
    sampler, order = Sampler(Timer(), r), random.Random(0)
    samples = {name: [] for name in calls}
    for _ in range(rounds):
        names = list(calls)
        order.shuffle(names)
        for name in names:
            samples[name].append(sampler.take(calls[name]).seconds)
    return {name: median(s) if statistic == "median" else float(np.mean(s)) for name, s in samples.items()}
