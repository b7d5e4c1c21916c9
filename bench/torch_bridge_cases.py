"""The cases of ``bench.torch_bridge``, each run in a fresh process whose first import is the order's under test
(``python -m bench.orders ORDER bench.torch_bridge_cases CASE [--quick] [--rounds N]``); ``main`` prints one
JSON line with the case's numbers.

- ``train``: a training step (forward, cross-entropy, backward, SGD) of a torch ResNet-20 converted by
  ``autotune.torch.convert``, against the same model unconverted, interleaved; then each conv layer's three
  passes timed alone, ours (the dispatcher's hit on torch tensors) against torch's, summed per pass;
- ``eval``: an eval forward (``torch.no_grad()``) of a converted torch ResNet-18 against unconverted;
- ``call``: the cost per call on a tiny layer of ``autotune.torch.conv2d`` (without and with autograd), of the
  dispatcher's hit on NumPy arrays, of ``convalgos.run`` of the same algorithm, and of torch's conv2d, in CPU
  time (``time.process_time``) in a process of one thread (``bench.torch_bridge`` starts it so): the work
  itself, which other processes on the cores do not change as they change wall time.

Benchmark mode is on: the first (untimed) run tunes every pass; its seconds are reported. The torch models are
``bench.torch_twin``'s twins of ``autotune.models`` (the same architectures, He-initialised weights loaded).
"""
from __future__ import annotations

import argparse
import copy
import time

import numba
import numpy as np
import torch

import autotune
import autotune.torch as at
import convalgos
from autotune import measure, models

from . import orders
from .torch_twin import torch_twin

F = torch.nn.functional


def twins(name: str):
    """(the torch twin of ``autotune.models.<name>`` with its weights, a converted deep copy)."""
    model = models.get_model(name)
    twin = torch_twin(model)
    twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in model.state_dict().items()}, strict=False)
    return twin, at.convert(copy.deepcopy(twin))


def ratio_stats(samples: dict, ours: str, theirs: str) -> dict:
    """Medians in seconds, their ratio, and the quartiles of the ratio round by round."""
    paired = np.array(samples[ours]) / np.array(samples[theirs])
    return {"ours": measure.median(samples[ours]), "torch": measure.median(samples[theirs]),
            "ratio": measure.median(samples[ours]) / measure.median(samples[theirs]),
            "quartiles": [float(np.percentile(paired, 25)), float(np.percentile(paired, 75))], "rounds": len(paired)}


def layer_calls(model, x) -> list:
    """(x shape, weight, stride, padding, dilation, groups) of every conv call of one forward pass."""
    calls = []
    hooks = [m.register_forward_hook(lambda m, i, o: calls.append((tuple(i[0].shape), m.weight.detach(), m.stride,
                                                                     m.padding, m.dilation, m.groups)))
             for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with torch.no_grad():
        model(x)
    for h in hooks:
        h.remove()
    return calls


def passes_alone(calls, rounds: int) -> dict:
    """pass -> {"ours": s, "torch": s}: each layer's pass timed alone (ours: the dispatcher's table hit on
    tensors; torch's: ``F.conv2d`` and ``torch.nn.grad``, as its autograd runs them), summed over the layers.
    The first layer's backward_data is left out, as in a step (its input needs no gradient)."""
    tuner, totals = autotune.default_tuner(), {op: {"ours": 0.0, "torch": 0.0} for op in convalgos.PASSES}
    g = torch.Generator().manual_seed(3)
    for i, (shape, w, stride, padding, dilation, groups) in enumerate(calls):
        x = torch.randn(shape, generator=g)
        dy = torch.randn(F.conv2d(x, w, None, stride, padding, dilation, groups).shape, generator=g)
        args = (stride, padding, dilation, groups)
        pairs = {"forward": (lambda: tuner.conv2d(x, w, None, *args), lambda: F.conv2d(x, w, None, *args)),
                 "backward_data": (lambda: tuner.conv2d_input(shape, w, dy, *args),
                                   lambda: torch.nn.grad.conv2d_input(shape, w, dy, *args)),
                 "backward_filter": (lambda: tuner.conv2d_weight(x, tuple(w.shape), dy, *args),
                                     lambda: torch.nn.grad.conv2d_weight(x, w.shape, dy, *args))}
        for op, (ours, theirs) in pairs.items():
            if op == "backward_data" and i == 0:
                continue
            samples = measure.interleaved({"ours": ours, "torch": theirs}, rounds)    # warm-up tunes a new key
            for who, s in samples.items():
                totals[op][who] += measure.median(s)
    return totals


def train_case(batch: int, rounds: int) -> dict:
    theirs, ours = twins("resnet20")
    g = torch.Generator().manual_seed(1)
    x, labels = torch.randn(batch, 3, 32, 32, generator=g), torch.randint(0, 10, (batch,), generator=g)
    steps = {}
    for name, model in (("converted", ours), ("torch", theirs)):
        model.train()
        opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9, weight_decay=5e-4)

        def step(model=model, opt=opt):
            opt.zero_grad()
            F.cross_entropy(model(x), labels).backward()
            opt.step()
        steps[name] = step
    start = time.perf_counter()
    steps["converted"]()                                # tunes every pass of every layer
    tuning = time.perf_counter() - start
    result = ratio_stats(measure.interleaved(steps, rounds), "converted", "torch")
    result.update(tuning=tuning, passes=passes_alone(layer_calls(theirs, x), max(3, rounds // 3)))
    return result


def eval_case(size: int, rounds: int) -> dict:
    theirs, ours = twins("resnet18")
    x = torch.randn(1, 3, size, size, generator=torch.Generator().manual_seed(1))
    forwards = {"converted": lambda: ours(x), "torch": lambda: theirs(x)}
    with torch.no_grad():
        for model in (theirs, ours):
            model.eval()
        start = time.perf_counter()
        ours(x)
        tuning = time.perf_counter() - start
        result = ratio_stats(measure.interleaved(forwards, rounds), "converted", "torch")
    return {**result, "tuning": tuning}


def call_case(reps: int, rounds: int) -> dict:
    """CPU microseconds per call of each way to run one tiny layer's forward pass (``reps`` calls per timed
    run)."""
    g = torch.Generator().manual_seed(0)
    x, w = torch.randn(1, 4, 8, 8, generator=g), torch.randn(4, 4, 3, 3, generator=g)
    xg = x.clone().requires_grad_()
    xn, wn = x.numpy(), w.numpy()
    tuner = autotune.default_tuner()
    tuner.conv2d(xn, wn, None, 1, 1)
    (entry,) = [e for e in tuner.dispatch_table() if e.key.params.C == 4 and e.key.params.H == 8]
    algorithm, p = convalgos.ALGORITHMS[entry.algo], entry.key.params
    ways = {"autotune.torch.conv2d": lambda: at.conv2d(x, w, None, 1, 1),
            "autotune.torch.conv2d, autograd": lambda: at.conv2d(xg, w, None, 1, 1),
            "Tuner.conv2d on NumPy": lambda: tuner.conv2d(xn, wn, None, 1, 1),
            "convalgos.run": lambda: convalgos.run(algorithm, "forward", xn, wn, p),
            "torch conv2d": lambda: F.conv2d(x, w, None, 1, 1)}
    repeated = {name: (lambda fn=fn: [fn() for _ in range(reps)]) for name, fn in ways.items()}
    samples = measure.interleaved(repeated, rounds, timer=measure.Timer(time.process_time))
    return {"algorithm": entry.algo, "us": {n: measure.median(s) / reps * 1e6 for n, s in samples.items()}}


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description="one case of bench.torch_bridge, printed as JSON")
    ap.add_argument("case", choices=("train", "eval", "call"))
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args(argv)
    autotune.benchmark = True
    if args.case == "train":
        result = train_case(4 if args.quick else 32, args.rounds)
    elif args.case == "eval":
        result = eval_case(64 if args.quick else 224, args.rounds)
    else:
        result = call_case(50 if args.quick else 500, args.rounds)
    result["threads"] = {"numba": numba.get_num_threads(), "torch": torch.get_num_threads()}
    orders.emit(result)


if __name__ == "__main__":
    main()
