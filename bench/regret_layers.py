"""The regret bench's layers, one or two on each algorithm family's winning ground, and its judge.

Each layer is (name, pass, input shape, weight shape, conv arguments). The judge times every CPU algorithm that
supports the layer's pass as a training step pays for a call, by the rule the race's samples approximate
(``autotune.race.clock``: the worker pool awake, the operands where the previous call left them): blocks of
back-to-back calls, interleaved (``judge``). Single calls interleaved over every algorithm are a worse judge:
measured here (2026-12-05, quiet), a call right after FFT's or im2col's megabytes of workspace ran 1.4-1.8x its
time in a block (``direct`` on the 1x1 stride-2 layer 0.247 against 0.137 ms; on the depthwise layer 0.186
against 0.112), which the race, among a few candidates of like size, does not see. No retakes: under a
neighbour the judge must see what the neighbour does. Every algorithm writes into one output, as in the race.
"""
from __future__ import annotations

import random
import time

import numpy as np

import convalgos
from autotune.measure import median
from autotune.race.clock import wake_pool
from bench.regret_placement import placement_us

#: quietly, an algorithm whose first ``TRIAL`` blocks' median is this many times the best is not timed again
SLOW = 3.0
#: blocks every algorithm runs before any is dismissed: beside a steady neighbour one block of 10 ms can take
#: 2-5x another of the same algorithm (measured 2026-12-05: per-block spread 0.1-0.5 of the mean), so a
#: dismissal on one block left the judge timing one algorithm and the rest by one unlucky block each; its two
#: passes then disagreed by up to 520%
TRIAL = 3
#: beside a neighbour that stays, the same on the mean of those blocks: wider, as the mean of three blocks still
#: holds one level or another (0.14 to 1.25 ms on one layer)
STEADY_SLOW = 5.0
#: rounds of the judge taken right after a choice, on its layer alone (``moment``)
MOMENT_ROUNDS = 5
#: the same beside a neighbour that stays, judged on the blocks' mean: more, as a block there holds none of the
#: neighbour's time slices, one or two
STEADY_MOMENT_ROUNDS = 9

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


def block(call, size: int) -> float:
    """Seconds per call of ``call`` as a step pays for it: the pool woken, one call untimed, then ``size`` back to
    back, timed together."""
    wake_pool()
    call()
    start = time.perf_counter()
    for _ in range(size):
        call()
    return (time.perf_counter() - start) / size


class Judge:
    """One layer's judge: every CPU algorithm that supports the layer's pass, timed as a step pays for a call:
    blocks of back-to-back calls (about ``block_seconds`` each, the first call of a block untimed, the pool woken
    before it), one block of each algorithm per round in a seeded shuffled order; ``times()`` the ``statistic``
    of its blocks: quietly the median (a block a background task slowed is not the algorithm's), beside a
    neighbour that stays the mean (a block holds the waits as a step meets them, none of the neighbour's time
    slices, one or two, so its cost per call is one of a few levels, and a median of them jumps between levels:
    ``autotune/race/blocks.py``). An algorithm whose first ``TRIAL`` blocks' statistic is over ``slow`` times the
    best is timed in those blocks only (it cannot be the best; its figure is still its cost, for a tuner that
    chose it). Before each round the pool's fork/join latency is read (``placements``, us: where the host had put
    the vCPUs, ``regret_placement.py``), so a choice can be judged on the rounds taken in the placement it was
    raced in (``regret_report``)."""

    def __init__(self, layer: Layer, block_seconds: float = 0.01, statistic=median, slow: float = SLOW):
        out = np.empty(layer.p.result_shape(layer.op), np.float32)
        self.calls = {name: (lambda alg=alg: convalgos.run(alg, layer.op, layer.a, layer.b, layer.p, out))
                      for name, alg in convalgos.ALGORITHMS.items() if alg.supports(layer.p, layer.op)}
        once = {}
        for name, call in self.calls.items():
            call()
            start = time.perf_counter()
            call()
            once[name] = time.perf_counter() - start
        self.size = {name: max(1, round(block_seconds / t)) for name, t in once.items()}
        self.placements = [placement_us()]
        self.samples = {name: [block(call, self.size[name])] for name, call in self.calls.items()}
        self.racing = list(self.calls)
        self.order = random.Random(0)
        self.statistic, self.slow = statistic, slow

    def round(self) -> None:
        self.placements.append(placement_us())
        self.order.shuffle(self.racing)
        for name in self.racing:
            self.samples[name].append(block(self.calls[name], self.size[name]))
        if len(self.samples[self.racing[0]]) == TRIAL:
            cost = {n: self.statistic(self.samples[n]) for n in self.racing}
            self.racing = [n for n in self.racing if cost[n] <= self.slow * min(cost.values())]

    def times(self) -> dict:
        return {name: self.statistic(s) for name, s in self.samples.items()}

    def record(self) -> dict:
        """Every round's placement (us) and every algorithm's blocks, round by round (the first only for one
        timed once)."""
        return {"placements": self.placements, "samples": self.samples}


def judge_layers(layers: list, rounds: int, block_seconds: float = 0.01, statistic=median,
                 slow: float = SLOW) -> list:
    """Every layer's ``Judge``, its rounds spread over the whole pass: round r of every layer, then round r + 1.
    This machine has slow phases of a few seconds that slow every algorithm 1.6-1.9x and at times one more than
    another (``cpu-speed-states.md``); one layer's rounds back to back (~0.5 s) can sit inside one, and the judge
    would disagree with itself by its swing. Spread over the pass (10-20 s), each layer's median is of the
    phases a run of that length meets. Beside a neighbour that stays the same holds more so: measured there
    (2026-12-05 23:45), one layer's 21 rounds back to back found ``direct`` at 0.12 ms a call in one pass and
    0.47 in the next (the neighbour's time slices fall on the pool one way for a second, then another), and two
    such passes disagreed with each other by up to 38%."""
    judges = [Judge(layer, block_seconds, statistic, slow) for layer in layers]
    for _ in range(rounds - 1):
        for one in judges:
            one.round()
    return judges


def moment(layer: Layer, rounds: int = MOMENT_ROUNDS, statistic=median, slow: float = SLOW) -> dict:
    """name -> seconds per call of every algorithm on ``layer``, judged now, on this layer alone
    (``rounds`` rounds, ~0.2-0.5 s; ``statistic`` and ``slow`` as ``Judge``'s): the machine as the choice just
    made met it. This VM's speed and its vCPUs' placement drift over seconds to minutes (``judge_layers``), so a
    choice judged a minute later can read as a regret though it was the fastest of its moment; judged now, what
    is left is mostly the race's own error (less where the moment itself is changing: measured 2026-12-06, in the
    second after a neighbour left, a layer's two fastest swapped by 1.5x between a re-race and this judge 0.8 s
    later)."""
    return judge_layers([layer], rounds, statistic=statistic, slow=slow)[0].times()
