"""One training step (forward, backward, SGD update) of LeNet-5 b64 and ResNet-20 b32: autotuned, forced to
each single algorithm, and torch's twin of the model, in each import order; bench/results/cpu-train.md.

    python -m bench.train            # the record
    python -m bench.train --quick    # a smoke test: batches of 4 and 2, two rounds, convalgos first, under /tmp
    python -m bench.train --models resnet20 --orders numpy,convalgos --out /tmp/train.md

Each model is measured in fresh processes, one per import order (numpy, torch or convalgos imported first) and
round, the orders rotated round by round (``bench.orders``); the record pools the samples of an order's
processes. In each process, after a JIT warm-up, every mode trains its own copy of the same weights with
``optim.SGD(lr=0.1, momentum=0.9, weight_decay=5e-4)`` on one fixed batch with random labels:

- ``autotuned``: every pass of every conv through a benchmark-mode Tuner (tuned cold on the first step, after
  a JIT warm-up on batch-2 copies, so compilation is reported apart);
- one mode per algorithm that supports every pass the step runs on every conv: a Tuner whose registry holds
  only that algorithm (the same dispatch path, no choice);
- ``torch``: a torch.nn twin of the model (``torch_twin``), loaded with the same state dict, torch given numba's
  thread count.

The modes run interleaved, one step each per round (``autotune.measure.interleaved``); before each timed step
the weights are reset, untimed, so every step does the same arithmetic (repeated steps on one batch at lr 0.1
otherwise kill LeNet's ReLUs within a hundred steps). A mode whose step takes over ``ABANDON`` times the
autotuned step is timed once and left out of the rounds. Each conv pass is clocked inside the step; the rest of
the step (BatchNorm, ReLU, pooling, the classifier, the loss, the update) is the step less its conv passes.
Per layer, the autotuned choice and torch are also timed alone, pass by pass, interleaved. Before each round the
pool's fork/join latency is read (``placed_rounds``), and the record gives the ratio to torch's step in the
rounds with the host's vCPUs near each other and far apart.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict, defaultdict
from pathlib import Path

import numba
import numpy as np

import autotune
from autotune import measure, models, nn, optim, profile
from convalgos import ALGORITHMS, PASSES

from . import orders
from .common import RESULTS, write_record
from .regret_placement import placement_us
from .torch_twin import torch_twin
from .train_report import ABANDON, report, summarize

#: (label, model, batch) of the record and of --quick.
NETS = [("LeNet-5 b64", "lenet5", 64), ("ResNet-20 b32", "resnet20", 32)]
QUICK = [("LeNet-5 b4", "lenet5", 4), ("ResNet-20 b2", "resnet20", 2)]
SGD = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)


class LayerClock:
    """Stands in for one conv layer's tuner: each pass goes to ``tuner`` and its seconds are appended to
    ``log[(layer, pass)]``."""

    clock = measure.Timer()

    def __init__(self, tuner, layer: str, log):
        self.tuner, self.layer, self.log = tuner, layer, log

    def _clocked(self, op, run, args, kwargs):
        start = self.clock.now()
        result = run(*args, **kwargs)
        self.log[(self.layer, op)].append(self.clock.now() - start)
        return result

    def conv2d(self, *args, **kwargs):
        return self._clocked("forward", self.tuner.conv2d, args, kwargs)

    def conv2d_input(self, *args, **kwargs):
        return self._clocked("backward_data", self.tuner.conv2d_input, args, kwargs)

    def conv2d_weight(self, *args, **kwargs):
        return self._clocked("backward_filter", self.tuner.conv2d_weight, args, kwargs)


class Step:
    """A training step of one mode: ``step()`` returns the loss; ``reset()`` puts the weights back."""

    def __init__(self, step, reset):
        self.step, self.reset = step, reset

    def __call__(self):
        return self.step()


class ResetTimer(measure.Timer):
    """Times a Step after resetting its weights, untimed."""

    def time(self, fn) -> float:
        fn.reset()
        return super().time(fn)


def our_step(model_name, tuner, state, x, labels, log) -> Step:
    """A training step of ``model_name`` loaded with ``state``, every conv pass through ``tuner``, clocked."""
    net = models.get_model(model_name)
    net.load_state_dict(state)
    for name, conv in nn.conv_layers(net):
        conv.tuner = LayerClock(tuner, name, log)
    net.train()
    opt, loss_fn = optim.SGD(net, **SGD), nn.CrossEntropyLoss()

    def step():
        loss = loss_fn(net(x), labels)
        net.zero_grad()
        net.backward(loss_fn.backward())
        opt.step()
        return loss
    return Step(step, lambda: net.load_state_dict(state))


def torch_step(model, state, x, labels) -> Step:
    import torch
    torch.set_num_threads(numba.get_num_threads())
    twin = torch_twin(model).train()
    tstate = {k: torch.from_numpy(np.array(v)) for k, v in state.items()}
    twin.load_state_dict(tstate, strict=False)     # our BatchNorm has no num_batches_tracked
    opt = torch.optim.SGD(twin.parameters(), **SGD)
    tx, tlabels = torch.from_numpy(x), torch.from_numpy(labels)

    def step():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(twin(tx), tlabels)
        loss.backward()
        opt.step()
        return loss.item()
    return Step(step, lambda: twin.load_state_dict(tstate, strict=False))


def jit_warmup(model_names) -> float:
    """Seconds of one cold-tuned training step of each model at batch 2: every candidate of every pass runs
    once, so Numba compiles (or loads from its cache) what the timed steps need."""
    timer = measure.Timer()
    start = timer.now()
    for name in model_names:
        net = models.get_model(name, tuner=autotune.Tuner(benchmark=True)).train()
        x = np.random.default_rng(2).standard_normal((2,) + net.input_shape).astype(np.float32)
        loss_fn = nn.CrossEntropyLoss()
        loss_fn(net(x), np.arange(2))
        net.backward(loss_fn.backward())
    return timer.now() - start


def single_modes(entries) -> tuple[dict, dict]:
    """(name -> a Tuner holding only that algorithm, for each algorithm that supports every key of the step;
    name -> how many of the step's keys (layer and pass) it does not support)."""
    modes, unsupported = {}, {}
    for name, algorithm in ALGORITHMS.items():
        missing = sum(not algorithm.supports(e.key.params, e.key.op) for e in entries)
        if missing:
            unsupported[name] = missing
        else:
            modes[name] = autotune.Tuner({name: algorithm})
    return modes, unsupported


def cold_tuning(tuner, step) -> dict:
    """The first step through a fresh benchmark-mode ``tuner`` (every pass of every conv tuned): its wall
    seconds, the tuning seconds per pass, and the seconds Numba spent compiling or loading kernels in it
    (``Entry.jit``: compilation the JIT warm-up missed)."""
    timer = measure.Timer()
    start = timer.now()
    step()
    wall = timer.now() - start
    passes = tuner.cache_info().passes
    late = sum(sum(e.jit.values()) for e in tuner.dispatch_table())
    return {"wall": wall, "passes": {op: passes[op].tuning_seconds for op in PASSES}, "late_compile": late}


def pass_pair(tuner, conv, p, rng) -> dict:
    """pass -> (ours, torch's): the pass of one conv layer alone, autotuned (a hit of ``tuner``'s table) and
    by torch (``aten.convolution_backward`` with one gradient asked for the backward passes)."""
    import torch
    x, dy = (rng.standard_normal(shape).astype(np.float32) for shape in (p.in_shape, p.out_shape))
    w, b = conv.weight, conv.bias
    tx, tw, tdy = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
    tb = None if b is None else torch.from_numpy(b)
    (top, _), (left, _) = p.padding                   # symmetric in these models
    layer = (p.stride, (top, left), p.dilation)
    args = (conv.stride, conv.padding, conv.dilation, conv.groups)

    def backward(mask):
        return lambda: torch.ops.aten.convolution_backward(tdy, tx, tw, None, *layer, False, (0, 0), p.groups, mask)
    return {"forward": (lambda: tuner.conv2d(x, w, b, *args),
                        lambda: torch.conv2d(tx, tw, tb, *layer, p.groups)),
            "backward_data": (lambda: tuner.conv2d_input(x.shape, w, dy, *args), backward((True, False, False))),
            "backward_filter": (lambda: tuner.conv2d_weight(x, w.shape, dy, *args), backward((False, True, False)))}


def alone(tuner, net, calls, ran, rounds) -> dict:
    """{str(ConvParams): {pass: {"ours": [s, ...], "torch": [s, ...]}}} for each distinct layer and pass the
    step ran, timed alone: ours and torch's interleaved."""
    convs, rng, results = dict(nn.conv_layers(net)), np.random.default_rng(3), defaultdict(dict)
    for name, p in calls:
        pairs = pass_pair(tuner, convs[name], p, rng)
        for op, (ours, theirs) in pairs.items():
            if (name, op) in ran and op not in results[str(p)]:
                results[str(p)][op] = measure.interleaved({"ours": ours, "torch": theirs}, rounds, min_seconds=0.1)
    return results


def placed_rounds(calls: dict, rounds: int, timer, min_seconds: float) -> tuple[dict, list]:
    """``measure.interleaved`` without warm-up, and before each round the pool's fork/join latency (us): where the
    host had put the VM's two vCPUs (``regret_placement.py``). Measured (2026-12-06, AMD EPYC, ResNet-20 b32),
    our step takes ~50 ms with them near each other and ~65 far apart, torch's ~13% more far apart: a process's
    ratio to torch follows the placement it happened to run in, whatever was imported first."""
    samples, placements, start = {name: [] for name in calls}, [placement_us()], timer.now()

    def more(names, done):
        if done < rounds or timer.now() - start < min_seconds:
            placements.append(placement_us())
            return names
        return []
    measure.rotate(list(calls), lambda name: samples[name].append(timer.time(calls[name])), more)
    return samples, placements


def measure_model(model_name, batch, rounds, min_seconds) -> dict:
    """Everything the record says about one model at one batch size."""
    base = models.get_model(model_name)
    state = OrderedDict((k, np.array(v)) for k, v in base.state_dict().items())
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch,) + base.input_shape).astype(np.float32)
    labels = rng.integers(0, 10, batch)
    tuner, logs = autotune.Tuner(benchmark=True), defaultdict(lambda: defaultdict(list))
    steps = {"autotuned": our_step(model_name, tuner, state, x, labels, logs["autotuned"])}
    cold = cold_tuning(tuner, steps["autotuned"])
    entries = list(tuner.dispatch_table())
    singles, unsupported = single_modes(entries)
    for name, single in singles.items():
        steps[name] = our_step(model_name, single, state, x, labels, logs[name])
    try:
        steps["torch"] = torch_step(base, state, x, labels)
    except ImportError:
        pass
    losses, warm, timer = {}, {}, ResetTimer()
    for name, step in steps.items():          # two warm steps each: the loss, then the time that decides
        step.reset()
        losses[name] = step()
        logs[name].clear()
        warm[name] = timer.time(step)
    abandoned = {n for n in steps if warm[n] > ABANDON * warm["autotuned"]}
    for name in set(steps) - abandoned:
        logs[name].clear()
    kept = {n: s for n, s in steps.items() if n not in abandoned}
    samples, placements = placed_rounds(kept, rounds, timer, min_seconds)
    calls = profile.conv_calls(base, x.shape)
    ran = set(logs["autotuned"])
    torch_alone = alone(tuner, base, calls, ran, max(3, rounds)) if "torch" in steps else {}
    parts, chosen = {n: defaultdict(dict) for n in logs}, defaultdict(dict)
    for n, log in logs.items():
        for (layer, op), s in log.items():
            parts[n][layer][op] = s
    for e in entries:
        chosen[str(e.key.params)][e.key.op] = e.algo
    return {"times": {n: samples.get(n, [warm[n]]) for n in steps}, "abandoned": sorted(abandoned),
            "parts": parts, "losses": losses, "cold": cold, "unsupported": unsupported,
            "calls": {name: str(p) for name, p in calls}, "alone": torch_alone,
            "chosen": chosen, "placements": placements}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="batches of 4 and 2, two rounds (a smoke test)")
    ap.add_argument("--rounds", type=int, default=None,
                    help="interleaved rounds at least, in each process (default 10; 2 quick)")
    ap.add_argument("--min-seconds", type=float, default=None,
                    help="more rounds while they last under this, in each process (default 10; 0 quick)")
    ap.add_argument("--models", default=None, help="comma-separated model names to run (default: both)")
    ap.add_argument("--out", type=Path, default=None,
                    help="markdown path (default bench/results/cpu-train.md; /tmp/cpu-train-quick.md with --quick)")
    orders.add_arguments(ap)
    args = ap.parse_args(argv)
    orders.resolve(args)
    rounds = args.rounds or (2 if args.quick else 10)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.0 if args.quick else 10.0)
    chosen = set(args.models.split(",")) if args.models else None
    nets = [net for net in (QUICK if args.quick else NETS) if chosen is None or net[1] in chosen]
    if args.child:
        compile_s = jit_warmup([model for _, model, _ in nets])
        return orders.emit({label: {**measure_model(model, batch, rounds, min_seconds), "compile": compile_s}
                            for label, model, batch in nets})
    out = args.out or (Path("/tmp/cpu-train-quick.md") if args.quick else RESULTS / "cpu-train.md")
    results = {}
    for label, model_name, batch in nets:
        child = ["--child", "--models", model_name, "--rounds", str(rounds), "--min-seconds", str(min_seconds)]
        per_order = orders.run("bench.train", child + (["--quick"] if args.quick else []), args, label)
        results[label] = (model_name, {o: summarize(orders.merge([c[label] for c in cs]))
                                       for o, cs in per_order.items()})
    write_record(out, report(results, args, rounds, min_seconds))


if __name__ == "__main__":
    main()
