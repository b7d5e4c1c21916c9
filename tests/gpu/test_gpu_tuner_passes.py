"""The tuner's GPU path for all three passes (simulator): each pass is its own key on the GPU device, every GPU
algorithm that has the pass is a candidate, the winner's result is right, and a candidate that leaves part of
its output unwritten is rejected even where the sampled check does not look (the output is NaN-poisoned)."""
import numpy as np
import pytest

import convalgos
from autotune import Tuner, devices
from convalgos import cuda as gpu
from convalgos import reference
from convalgos.arrays import simulator_enabled
from float32_bounds import chosen_bound, within

pytestmark = pytest.mark.skipif(not simulator_enabled(), reason="NumPy arrays stand in for CuPy's only here")

QUICK = dict(benchmark=True, min_runs=1, max_runs=1, time_budget=0.0, prune_ratio=None)


def operands(seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    return x, w, dy, convalgos.ConvParams.from_arrays(x, w, padding=1)


def test_each_pass_is_tuned_on_the_gpu_among_the_gpu_algorithms_that_have_it():
    x, w, dy, p = operands()
    t = Tuner(devices=[devices.SimulatedGpuDevice()], **QUICK)
    dx = t.conv2d_input(x.shape, w, dy, padding=1)
    dw = t.conv2d_weight(x, w.shape, dy, padding=1)
    bound = chosen_bound(t, registry=gpu.ALGORITHMS)           # the race's choices: any the GPU may make
    assert within(dx, reference.backward_data(dy, w, p), bound)
    assert within(dw, reference.backward_filter(x, dy, p), bound)
    for entry in t.dispatch_table():
        op = entry.key.op
        having = {n for n, a in gpu.ALGORITHMS.items() if a.supports(p, op)}
        assert entry.key.device == "cuda:simulator" and having and set(entry.warmup) == having, op
        assert entry.algo in entry.times
    assert sorted(e.key.op for e in t.dispatch_table()) == ["backward_data", "backward_filter"]


class Lazy(convalgos.Algorithm):
    """A GPU-registry stand-in whose backward_data leaves input channel 1 as it found it (a skipped tile)."""

    name, deterministic = "lazy", True

    def forward(self, x, w, p, out):
        out[...] = reference.forward(x, w, p)

    def backward_data(self, dy, w, p, out):
        full = reference.backward_data(dy, w, p)
        out[:, 0], out[:, 2:] = full[:, 0], full[:, 2:]


def test_a_gpu_candidate_leaving_a_channel_unwritten_is_rejected():
    rng = np.random.default_rng(1)
    w = rng.standard_normal((2, 4, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((1, 2, 20, 20)).astype(np.float32)
    algorithms = {"im2col": gpu.ALGORITHMS["im2col"], "lazy": Lazy()}
    t = Tuner(algorithms, devices=[devices.SimulatedGpuDevice()], **QUICK)
    dx = t.conv2d_input((1, 4, 22, 22), w, dy)
    (entry,) = t.dispatch_table()
    assert entry.algo == "im2col" and "left unwritten" in entry.skipped["lazy"]
    assert np.isfinite(dx).all()
