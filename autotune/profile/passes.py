"""Timing whole passes of a model (or of its conv layers alone, as on a GPU) with every conv autotuned, forced
to one algorithm, or computed by a peer, through ``autotune.measure.interleaved``; and what the comparison
may claim (``compare``, ``summary``)."""
from __future__ import annotations

import functools

import numpy as np

import convalgos
from convalgos import ConvParams

import autotune

from .. import measure, nn
from .layers import ConvProfile, grouped_reasons


# ---- timing whole passes ----------------------------------------------------------------------------------
class Abandoned(Exception):
    """A pass ran past its deadline and was stopped."""


def as_conv(algo):
    """A pass (None, an algorithm name, or a callable) as a conv2d-like callable."""
    if algo is None:
        return autotune.conv2d
    if isinstance(algo, str):
        return functools.partial(convalgos.conv2d, algo=algo)
    return algo


def model_workload(model, x):
    """Runs ``model(x)`` with every conv computed by the pass it is given."""
    def run(algo):
        with nn.use_algorithm(model, algo):
            model(x)
    return run


def layer_workload(calls, convs: dict, xp=np, dtype="float32", seed=0):
    """Runs every conv call in ``calls`` ((layer name, ConvParams)) on its own, on arrays of ``xp`` (NumPy,
    or CuPy for the GPU), with the weights of ``convs[name]`` (an nn.Conv2d): the conv time of a model."""
    rng = np.random.default_rng(seed)
    inputs = {p: xp.asarray(rng.standard_normal(p.in_shape).astype(dtype)) for _, p in calls}
    args = [(inputs[p], xp.asarray(convs[name].weight), None if convs[name].bias is None
             else xp.asarray(convs[name].bias), convs[name].stride, convs[name].padding, convs[name].dilation,
             convs[name].groups) for name, p in calls]

    def run(algo):
        conv = as_conv(algo)
        for a in args:
            conv(*a)
    return run


def jit_warmup(layers, dtype, registry=None, xp=np):
    """Run every algorithm of ``registry`` once on a small copy of each distinct layer (same channels, kernel,
    stride, padding, groups; at most 16x16 unless the kernel needs more), so compilation is not charged to a
    timed pass."""
    registry = convalgos.ALGORITHMS if registry is None else registry
    rng = np.random.default_rng(1)
    for p in layers:
        h, w = (min(size, max(16, extent)) for size, extent in zip((p.H, p.W), p.kernel_extent))
        x = rng.standard_normal((1, p.C, h, w)).astype(dtype)
        weight = rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(dtype)
        small = ConvParams.from_arrays(x, weight, stride=p.stride, padding=p.padding, dilation=p.dilation,
                                       groups=p.groups)
        for name, algorithm in registry.items():
            if algorithm.supports(small):
                convalgos.conv2d(xp.asarray(x), xp.asarray(weight), stride=p.stride, padding=p.padding,
                                 dilation=p.dilation, groups=p.groups, algo=name)


def time_passes(workload, passes: dict, rounds: int, *, timer=None, abandon_ratio=3.0, min_seconds=0.0):
    """(name -> median seconds of ``workload(passes[name])``, name -> why a pass was abandoned).

    The first pass (the autotuned one) is run once warm to set the deadline. Every other pass gets one run that
    is abandoned once it is still running at ``abandon_ratio`` times that (the tuner's rule, applied to a whole
    pass; None: never), so a slow forced algorithm cannot stretch the run. A peer (a callable, such as torch's
    conv) is warmed up with one full untimed run first: its first call starts thread pools and allocators,
    which is not its speed. The passes left are then timed in ``rounds`` interleaved rounds (more while they
    have lasted under ``min_seconds``).
    """
    timer = measure.Timer() if timer is None else timer
    names = list(passes)
    auto = timer.time(lambda: workload(passes[names[0]]))
    abandoned = {}
    for name in names[1:]:
        if callable(passes[name]):
            workload(passes[name])
        deadline = None if abandon_ratio is None else timer.now() + abandon_ratio * auto
        done, start = [], timer.now()
        try:
            workload(_with_deadline(as_conv(passes[name]), deadline, done, timer))
        except Abandoned:
            abandoned[name] = (f"abandoned: still running at {abandon_ratio:g}x the {names[0]} pass "
                               f"({(timer.now() - start) * 1e3:.0f} ms, {len(done)} conv calls done)")
    kept = {name: functools.partial(workload, algo) for name, algo in passes.items() if name not in abandoned}
    samples = measure.interleaved(kept, rounds, timer=timer, warmup=0, min_seconds=min_seconds)
    return {name: measure.median(s) for name, s in samples.items()}, abandoned


def _with_deadline(conv, deadline, done: list, timer):
    def call(*args):
        if deadline is not None and timer.now() > deadline:
            raise Abandoned
        y = conv(*args)
        done.append(1)
        return y
    return call


def layer_samples(model, x, passes: dict, rounds: int, *, timer=None) -> dict:
    """name -> {layer name: seconds of its conv call in each timed round} with every conv of ``model`` computed
    by ``passes[name]``: whole forward passes in interleaved rounds (one warm-up, not kept), each conv timed on
    its own."""
    samples = {name: [] for name in passes}
    with ConvProfile(model, timer=timer) as prof:
        def run(name):
            with nn.use_algorithm(model, passes[name]):
                model(x)
            samples[name].append(dict(prof.seconds))
        measure.interleaved({name: functools.partial(run, name) for name in passes}, rounds, timer=timer)
    return {name: {layer: [s[layer] for s in runs[1:]] for layer in runs[0]} for name, runs in samples.items()}


def time_layers(model, x, passes: dict, rounds: int, *, timer=None) -> dict:
    """name -> {layer name: median seconds of its conv calls} (``layer_samples``' medians)."""
    return {name: {layer: measure.median(s) for layer, s in per_layer.items()}
            for name, per_layer in layer_samples(model, x, passes, rounds, timer=timer).items()}


def compare(times: dict, choices: list, singles) -> dict:
    """What the autotuned pass bought: the best single algorithm among ``singles`` that was timed, and either
    its ratio to the autotuned pass or, where the autotuner chose that same algorithm for every layer
    (``choices``), that the two are the same choice (their ratio is then only overhead and noise)."""
    timed = {n: times[n] for n in singles if n in times}
    if not timed:
        return {}
    best = min(timed, key=timed.get)
    out = {"best_single": best, "ratio": timed[best] / times["autotuned"]}
    out["same_choice"] = bool(choices) and set(choices) == {best}
    return out


def summary(times, na, abandoned, tuning_s, counts, choices, what="forward pass", registry=None, jit_s=0.0):
    """The report's closing lines and the JSON totals. ``counts``: new keys by source, "reused" the others;
    ``jit_s``: seconds of the first pass that Numba spent compiling or loading kernels (``Entry.jit``)."""
    registry = convalgos.ALGORITHMS if registry is None else registry
    auto, fresh = times["autotuned"], {k: v for k, v in counts.items() if k != "reused"}
    done = ", ".join(f"{n} key(s) {'tuned (timed)' if s == 'benchmark' else f'chosen by the {s}'}"
                     for s, n in fresh.items()) or "nothing new to choose"
    jit = f" (of which JIT {jit_s:.2f} s: Numba compiling or loading kernels)" if jit_s else ""
    lines = [f"first pass: {tuning_s:.2f} s{jit}, {done}, {counts.get('reused', 0)} from the table or cache",
             f"{what}, autotuned: {auto * 1e3:.2f} ms"]
    singles = {n: times[n] for n in registry if n in times}
    width = max(len(f"forced {n}") for n in list(registry) + ["torch"])
    for name in registry:
        label = f"forced {name}"
        if name in singles:
            lines.append(f"  {label:<{width}} {singles[name] * 1e3:10.2f} ms  ({singles[name] / auto:.2f}x autotuned)")
        elif name in abandoned:
            lines.append(f"  {label:<{width}}     > {3 * auto * 1e3:.0f} ms  ({abandoned[name]})")
        else:
            lines.append(f"  {label:<{width}}        n/a  (unsupported on {len(na[name])} layer(s): "
                         f"{grouped_reasons(name, na[name])})")
    if "torch" in abandoned:
        lines.append(f"  {'torch conv2d':<{width}}  ({abandoned['torch']})")
    if "torch" in times:
        lines.append(f"  {'torch conv2d':<{width}} {times['torch'] * 1e3:10.2f} ms  ({times['torch'] / auto:.2f}x "
                     f"autotuned)")
    totals = {"tuning_seconds": tuning_s, "jit_seconds": jit_s, "keys_tuned": fresh.get("benchmark", 0),
              "keys_by_source": fresh, "keys_reused": counts.get("reused", 0), "autotuned_seconds": auto,
              "forced_seconds": singles, "unsupported_layers": {n: len(v) for n, v in na.items()},
              "abandoned": abandoned}
    best = compare(times, choices, registry)
    if best and best["same_choice"]:
        lines.append(f"best single algorithm: {best['best_single']}, which the autotuner chose for every layer: "
                     f"the same choice (measured {best['ratio']:.2f}x: overhead and noise, not a speedup)")
    elif best:
        lines.append(f"speedup over the best single algorithm ({best['best_single']}): {best['ratio']:.2f}x")
        totals["speedup_over_best_single"] = best["ratio"]
    if best:
        totals.update(best_single=best["best_single"], same_choice=best["same_choice"])
    if "torch" in times:
        lines.append(f"speedup over torch's conv2d: {times['torch'] / auto:.2f}x")
        totals.update(torch_seconds=times["torch"], speedup_over_torch=times["torch"] / auto)
    return lines, totals
