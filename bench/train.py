"""One training step (forward, backward, SGD update) of LeNet-5 b64 and ResNet-20 b32: autotuned, forced to
each single algorithm, and torch's twin of the model; bench/results/cpu-train.md.

    python -m bench.train            # the record (a few minutes on a quiet machine)
    python -m bench.train --quick    # a smoke test: batches of 4 and 2, two rounds, under /tmp unless --out

Per model, every mode trains its own copy of the same weights with ``optim.SGD(lr=0.1, momentum=0.9,
weight_decay=5e-4)`` on one fixed batch with random labels:

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
Per layer, the autotuned choice and torch are also timed alone, pass by pass, interleaved.
"""
from __future__ import annotations

import argparse
from collections import OrderedDict, defaultdict
from pathlib import Path

import convalgos  # noqa: F401 - before torch: it sets OMP_WAIT_POLICY for every OpenMP runtime
import numba
import numpy as np

import autotune
from autotune import measure, models, nn, optim, profile
from convalgos import ALGORITHMS, PASSES

from .common import RESULTS, header, write_record

#: (label, model, batch) of the record and of --quick.
NETS = [("LeNet-5 b64", "lenet5", 64), ("ResNet-20 b32", "resnet20", 32)]
QUICK = [("LeNet-5 b4", "lenet5", 4), ("ResNet-20 b2", "resnet20", 2)]
#: the issue's targets: step / torch's step (per model), autotuned speedup over the best single algorithm
#: (ResNet-20), cold tuning seconds of all three passes (ResNet-20).
TORCH_TARGET = {"lenet5": 1.5, "resnet20": 1.5}
SINGLE_TARGET = {"resnet20": 1.2}
COLD_TARGET = {"resnet20": 10.0}
ABANDON = 4.0
SGD = dict(lr=0.1, momentum=0.9, weight_decay=5e-4)
#: convalgos/autotune pass function -> pass name.
PASS_OF = {"conv2d": "forward", "conv2d_input": "backward_data", "conv2d_weight": "backward_filter"}


class LayerClock:
    """Stands in for one conv layer's tuner: each pass goes to ``tuner`` and its seconds are appended to
    ``log[(layer, pass)]``."""

    clock = measure.Timer()

    def __init__(self, tuner, layer: str, log):
        self.tuner, self.layer, self.log = tuner, layer, log

    def _clocked(self, name, args, kwargs):
        start = self.clock.now()
        result = getattr(self.tuner, name)(*args, **kwargs)
        self.log[(self.layer, PASS_OF[name])].append(self.clock.now() - start)
        return result

    def conv2d(self, *args, **kwargs):
        return self._clocked("conv2d", args, kwargs)

    def conv2d_input(self, *args, **kwargs):
        return self._clocked("conv2d_input", args, kwargs)

    def conv2d_weight(self, *args, **kwargs):
        return self._clocked("conv2d_weight", args, kwargs)


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


def torch_twin(model):
    """A torch.nn module computing what ``model`` (an autotune.nn model) computes, with the same parameter
    names, so the model's state dict loads into it."""
    import torch
    tnn = torch.nn

    class Block(tnn.Module):
        """torchvision's BasicBlock, built from the twins of our block's children."""

        def __init__(self, children):
            super().__init__()
            for name, child in children.items():
                self.add_module(name, child)
            if "downsample" not in children:
                self.downsample = None

        def forward(self, x):
            shortcut = x if self.downsample is None else self.downsample(x)
            hidden = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(hidden)) + shortcut)

    def twin(m):
        children = OrderedDict((name, twin(child)) for name, child in m.named_children())
        if isinstance(m, nn.BasicBlock):
            return Block(children)
        if isinstance(m, nn.Sequential):
            return tnn.Sequential(children)
        if isinstance(m, nn.Conv2d):
            K, Cg, R, S = m.weight.shape
            return tnn.Conv2d(Cg * m.groups, K, (R, S), m.stride, m.padding, m.dilation, m.groups,
                              bias=m.bias is not None)
        if isinstance(m, nn.BatchNorm2d):
            return tnn.BatchNorm2d(len(m.weight), m.eps, m.momentum)
        if isinstance(m, nn.Linear):
            return tnn.Linear(m.weight.shape[1], m.weight.shape[0], bias=m.bias is not None)
        if isinstance(m, nn.MaxPool2d):
            return tnn.MaxPool2d(m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode)
        if isinstance(m, nn.AvgPool2d):
            return tnn.AvgPool2d(m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return tnn.AdaptiveAvgPool2d(m.output_size)
        simple = {nn.ReLU: tnn.ReLU, nn.Flatten: tnn.Flatten, nn.Identity: tnn.Identity}
        if type(m) in simple:
            return simple[type(m)]()
        raise NotImplementedError(f"no torch twin for {type(m).__name__}")
    return twin(model)


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
    seconds, the tuning seconds per pass, and the seconds by which first calls exceeded 10x their median
    (compilation the JIT warm-up missed)."""
    timer = measure.Timer()
    start = timer.now()
    step()
    wall = timer.now() - start
    passes = tuner.cache_info().passes
    late = sum(e.warmup[n] - e.times[n] for e in tuner.dispatch_table() for n in e.times
               if e.warmup.get(n, 0.0) > 10 * e.times[n] + 0.05)
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
    """(ConvParams, pass) -> {"ours": s, "torch": s} for each distinct layer and pass the step ran, timed
    alone: ours and torch's interleaved."""
    convs, rng, results = dict(nn.conv_layers(net)), np.random.default_rng(3), {}
    for name, p in calls:
        pairs = pass_pair(tuner, convs[name], p, rng)
        for op, (ours, theirs) in pairs.items():
            if (name, op) in ran and (p, op) not in results:
                samples = measure.interleaved({"ours": ours, "torch": theirs}, rounds, min_seconds=0.1)
                results[(p, op)] = {who: measure.median(s) for who, s in samples.items()}
    return results


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
    samples = measure.interleaved(kept, rounds, timer=timer, warmup=0, min_seconds=min_seconds)
    times = {n: measure.median(samples[n]) if n in samples else warm[n] for n in steps}
    parts = {n: {key: measure.median(s) for key, s in log.items()} for n, log in logs.items()}
    calls = profile.conv_calls(base, x.shape)
    torch_alone = alone(tuner, base, calls, set(parts["autotuned"]), max(3, rounds)) if "torch" in steps else {}
    return {"times": times, "rounds": {n: len(s) for n, s in samples.items()}, "abandoned": abandoned,
            "parts": parts, "losses": losses, "cold": cold, "unsupported": unsupported, "calls": calls,
            "chosen": {(e.key.params, e.key.op): e.algo for e in entries}, "alone": torch_alone}


# ---- the record ---------------------------------------------------------------------------------------------
def ms(seconds) -> str:
    return f"{seconds * 1e3:.1f}"


def pass_sums(parts: dict) -> dict:
    """pass -> the sum over layers of that pass's median seconds in the step."""
    return {op: sum(s for (_, o), s in parts.items() if o == op) for op in PASSES}


def alone_sums(r: dict, who: str) -> dict:
    """pass -> the sum over the step's conv calls of their time alone (``who``: "ours" or "torch")."""
    return {op: sum(r["alone"][(p, op)][who] for name, p in r["calls"] if (p, op) in r["alone"]
                    and (name, op) in r["parts"]["autotuned"]) for op in PASSES}


def summary_rows(label, r) -> list:
    times, torch_s = r["times"], r["times"].get("torch")
    rows = []
    for mode, t in times.items():
        if mode == "torch":
            conv = alone_sums(r, "torch") if r["alone"] else {}
            cells = [f"~{ms(conv[op])}" if conv else "-" for op in PASSES]
            other = f"~{ms(t - sum(conv.values()))}" if conv else "-"
        else:
            conv = pass_sums(r["parts"][mode])
            cells, other = [ms(conv[op]) for op in PASSES], ms(t - sum(conv.values()))
        step = f"{ms(t)} (1 step)" if mode in r["abandoned"] else ms(t)
        mark = "**" if mode == "autotuned" else ""
        ratio = f"{t / torch_s:.2f}" if torch_s else "-"
        rows.append(f"| {label} | {mark}{mode}{mark} | {step} | " + " | ".join(cells)
                    + f" | {other} | {ratio} | {r['losses'][mode]:.5f} |")
    return rows


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def target_lines(label, model_name, r) -> list:
    """The issue's targets that apply to this model, met or missed, with where the time goes."""
    times, lines = r["times"], []
    auto, auto_parts = times["autotuned"], pass_sums(r["parts"]["autotuned"])
    singles = {n: t for n, t in times.items() if n not in ("autotuned", "torch")}
    if model_name in TORCH_TARGET and "torch" in times:
        ratio, target = auto / times["torch"], TORCH_TARGET[model_name]
        ours, theirs = alone_sums(r, "ours"), alone_sums(r, "torch")
        gaps = ", ".join(f"{op} {ms(ours[op])} / {ms(theirs[op])}" for op in PASSES)
        rest = f"{ms(auto - sum(auto_parts.values()))} / ~{ms(times['torch'] - sum(theirs.values()))}"
        lines.append(f"- {label} train step / torch's: **{ratio:.2f}** (target <= {target}): "
                     f"{verdict(ratio <= target)}. Where it goes, ms ours / torch's: conv passes alone {gaps}; "
                     f"the rest of the step {rest}.")
    if model_name in SINGLE_TARGET:
        target = SINGLE_TARGET[model_name]
        if singles:
            best = min(singles, key=singles.get)
            speedup = singles[best] / auto
            lines.append(f"- {label} best single algorithm ({best}) / autotuned: **{speedup:.2f}x** (target >= "
                         f"{target}x): {verdict(speedup >= target)}.")
        else:
            lines.append(f"- {label}: no single algorithm supports every layer and pass (target >= {target}x "
                         "over the best of them): nothing to compare.")
    if singles:
        best_per_pass = []
        for op in PASSES:
            sums = {n: pass_sums(r["parts"][n])[op] for n in singles}
            best = min(sums, key=sums.get)
            best_per_pass.append(f"{op} {best} {ms(sums[best])} against autotuned {ms(auto_parts[op])}")
        lines.append(f"- {label} best single algorithm per pass (conv ms in the step): " + "; ".join(best_per_pass)
                     + ".")
    if model_name in COLD_TARGET:
        total, target = sum(r["cold"]["passes"].values()), COLD_TARGET[model_name]
        lines.append(f"- {label} cold tuning of all three passes: **{total:.1f} s** (target <= {target:.0f} s): "
                     f"{verdict(total <= target)}.")
    return lines


def layer_rows(r) -> list:
    rows = []
    for name, p in r["calls"]:
        cells = []
        for op in PASSES:
            if (name, op) not in r["parts"]["autotuned"]:
                cells.append("-")
                continue
            cell = f"{r['chosen'].get((p, op), '?')} {ms(r['parts']['autotuned'][(name, op)])}"
            if (p, op) in r["alone"]:
                a = r["alone"][(p, op)]
                cell += f" ({ms(a['ours'])} / {ms(a['torch'])})"
            cells.append(cell)
        rows.append(f"| {name} | `{p}` | " + " | ".join(cells) + " |")
    return rows


def report(results, args, rounds, compile_s) -> str:
    command = "python -m bench.train" + (" --quick" if args.quick else "")
    lines = [header("CPU training step: autotuned, each single algorithm, and torch"),
             f"Command: `{command}`; {rounds} interleaved rounds at least. numba and torch with "
             f"{numba.get_num_threads()} threads. One training step = forward, CrossEntropyLoss, backward, "
             f"SGD(lr=0.1, momentum=0.9, weight_decay=5e-4), on one fixed batch with the weights reset (untimed) "
             "before each step. Step: median ms. Conv columns: the sum over layers of each conv pass's median "
             "time inside the step; other = step - conv passes (BatchNorm, ReLU, pooling, Linear, loss, update). "
             "torch's conv columns (~) are its layers timed alone, pass by pass. A mode over "
             f"{ABANDON:g}x the autotuned step is timed once and left out of the rounds. loss: the step's loss "
             "from the shared weights (the torch twin must agree).\n",
             "| model | mode | step ms | forward convs | backward-data convs | backward-filter convs | other | "
             "step / torch | loss |", "|---" * 9 + "|"]
    for label, (_, r) in results.items():
        lines += summary_rows(label, r)
    lines += ["", "## Targets (from this run)", ""]
    for label, (model_name, r) in results.items():
        lines += target_lines(label, model_name, r)
    lines += ["", "## Cold tuning", "",
              f"JIT warm-up first (one cold-tuned step of each model at batch 2: every candidate of every pass "
              f"compiled or loaded from Numba's cache): **{compile_s:.1f} s**, not counted below.", ""]
    for label, (_, r) in results.items():
        c = r["cold"]
        lines.append(f"- {label}: first step {c['wall']:.1f} s; tuning " + ", ".join(
            f"{op} {s:.1f} s" for op, s in c["passes"].items()) + f" (sum {sum(c['passes'].values()):.1f} s); "
            f"first calls over 10x their median (compilation the warm-up missed): {c['late_compile']:.1f} s. "
            f"Not forced (keys of the step unsupported): "
            + (", ".join(f"{n} ({k})" for n, k in r["unsupported"].items()) or "none") + ".")
    for label, (_, r) in results.items():
        lines += [f"\n## {label}: per layer", "",
                  "Each pass: the autotuned choice and its median ms in the step (alone: ours / torch's ms).", "",
                  "| layer | shape | forward | backward-data | backward-filter |", "|---|---|---|---|---|"]
        lines += layer_rows(r)
    return "\n".join(lines) + "\n"


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="batches of 4 and 2, two rounds (a smoke test)")
    ap.add_argument("--rounds", type=int, default=None, help="interleaved rounds at least (default 10; 2 quick)")
    ap.add_argument("--min-seconds", type=float, default=None,
                    help="more rounds while they last under this (default 20; 0 quick)")
    ap.add_argument("--out", type=Path, default=None,
                    help="markdown path (default bench/results/cpu-train.md; /tmp/cpu-train-quick.md with --quick)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (2 if args.quick else 10)
    min_seconds = args.min_seconds if args.min_seconds is not None else (0.0 if args.quick else 20.0)
    out = args.out or (Path("/tmp/cpu-train-quick.md") if args.quick else RESULTS / "cpu-train.md")
    nets = QUICK if args.quick else NETS
    compile_s = jit_warmup(list(dict.fromkeys(model for _, model, _ in nets)))
    print(f"JIT warm-up {compile_s:.1f} s", flush=True)
    results = {}
    for label, model_name, batch in nets:
        print(f"{label} ...", flush=True)
        results[label] = (model_name, measure_model(model_name, batch, rounds, min_seconds))
    text = report(results, args, rounds, compile_s)
    write_record(out, text)


if __name__ == "__main__":
    main()
