"""``python -m autotune``: tune a model's convolutions, print the dispatch table and what the choice bought.

    python -m autotune                                  # resnet18, batch 1, 3x224x224, float32, benchmark on
    python -m autotune --model resnet20 --batch 32 --cache ~/.autotune.json --json out.json --plot out.png

Steps: build the model (seeded), run one forward pass with the autotuner (a progress bar per conv layer:
this pass tunes every new key), print per conv layer its shape and choice and then the dispatch table's
report (every candidate's time, error, workspace, skip reasons), then time whole forward passes in
interleaved rounds: autotuned, every conv forced to each single algorithm, and every conv computed by
torch's conv2d when torch is installed (torch gets numba's thread count). A forced pass still running at 3x
the autotuned pass is abandoned and reported as such (it cannot be the best single algorithm). An algorithm
that cannot run every conv of the model is reported as n/a with the number of layers it does not support (no
silent fallback to another algorithm), so "best single algorithm" means the best one that runs the whole
model.
With a warm ``--cache`` the tuning pass times nothing: every key is a cache hit.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import convalgos
from convalgos import ALGORITHMS, ConvParams

import autotune
from autotune import models, nn

DTYPES = ("float32", "float64", "float16")


# ---- options ------------------------------------------------------------------------------------------------
def positive_int(text: str) -> int:
    value = int(text) if text.lstrip("-").isdigit() else None
    if value is None or value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def size(text: str) -> tuple[int, ...]:
    """"224", "224x200" (H x W) or "3x224x224" (C x H x W)."""
    parts = text.lower().split("x")
    if not 1 <= len(parts) <= 3 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"must be H, HxW or CxHxW with positive integers, got {text!r}")
    return tuple(int(p) for p in parts)


def byte_count(text: str) -> int:
    """Bytes, with an optional K/M/G suffix (powers of 1024)."""
    scale = {"k": 1 << 10, "m": 1 << 20, "g": 1 << 30}.get(text[-1:].lower(), 1)
    digits = text[:-1] if scale > 1 else text
    if not digits.isdigit():
        raise argparse.ArgumentTypeError(f"must be a byte count such as 64M or 1048576, got {text!r}")
    return int(digits) * scale


def parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="autotune", description=__doc__.split("\n\n")[0].split(": ", 1)[1])
    ap.add_argument("--model", default="resnet18", help=f"one of {', '.join(models.MODELS)} (default resnet18)")
    ap.add_argument("--batch", type=positive_int, default=1, help="batch size (default 1)")
    ap.add_argument("--size", type=size, default=None,
                    help="input H, HxW or CxHxW (default: the model's own, 3x224x224 for resnet18)")
    ap.add_argument("--dtype", choices=DTYPES, default="float32")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu")
    ap.add_argument("--no-benchmark", action="store_true", help="no timing: the heuristic picks")
    ap.add_argument("--deterministic", action="store_true", help="only bitwise-repeatable algorithms")
    ap.add_argument("--benchmark-limit", type=positive_int, default=None, metavar="N",
                    help="time at most N best-ranked candidates per layer")
    ap.add_argument("--workspace-limit", type=byte_count, default=None, metavar="BYTES",
                    help="skip algorithms needing more workspace (e.g. 64M)")
    ap.add_argument("--cache", metavar="PATH", help="persistent tuning cache (JSON), loaded and saved")
    ap.add_argument("--plot", metavar="FILE.png", help="per-layer time of every candidate, chosen marked")
    ap.add_argument("--json", metavar="FILE", help="write the layers, entries and totals as JSON")
    ap.add_argument("--rounds", type=positive_int, default=3, help="timed rounds per forward pass (default 3)")
    return ap


def check_options(ap, args):
    """The checks argparse cannot do alone; each ends in ap.error (message, exit status 2)."""
    if args.model not in models.MODELS:
        ap.error(f"unknown model {args.model!r}; known models: {', '.join(models.MODELS)}")
    if args.device == "cuda":
        ap.error("--device cuda: " + cuda_problem())
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error("--plot needs matplotlib: pip install 'convalgos[plot]'")


def cuda_problem() -> str:
    try:
        from numba import cuda
        found = cuda.is_available()
    except Exception:  # noqa: BLE001 - any failure to probe means no usable GPU
        found = False
    return ("the GPU backend of convalgos is not built yet; use --device cpu" if found
            else "no CUDA GPU is available on this machine; use --device cpu")


def input_shape(ap, model, args) -> tuple[int, int, int, int]:
    C, H, W = model.input_shape
    if args.size is not None:
        given = args.size
        H, W = (given[0], given[0]) if len(given) == 1 else given[-2:]
        if len(given) == 3 and given[0] != C:
            ap.error(f"--size {'x'.join(map(str, given))}: {args.model} takes {C} input channels")
    return args.batch, C, H, W


# ---- running the model --------------------------------------------------------------------------------------
class LayerLog:
    """Wraps every conv of a model to record (name, ConvParams) on each call and advance a progress bar."""

    def __init__(self, model):
        self.convs = nn.conv_layers(model)
        self.calls: list[tuple[str, ConvParams]] = []
        self.bar = None

    def __enter__(self):
        for name, conv in self.convs:
            conv.forward = self._wrap(name, conv, type(conv).forward.__get__(conv))
        return self

    def __exit__(self, *exc):
        for _, conv in self.convs:
            del conv.forward

    def _wrap(self, name, conv, forward):
        def logged(x):
            p = ConvParams.from_arrays(x, conv.weight, conv.bias, stride=conv.stride, padding=conv.padding,
                                       dilation=conv.dilation, groups=conv.groups)
            self.calls.append((name, p))
            if self.bar is not None:
                self.bar.set_postfix_str(name)
            y = forward(x)
            if self.bar is not None:
                self.bar.update()
            return y
        return logged


def tune(model, x):
    """One forward pass through the autotuner with a progress bar; (layer log, seconds)."""
    from tqdm import tqdm
    with LayerLog(model) as log:
        with tqdm(total=len(log.convs), desc="tuning", unit="conv", file=sys.stderr, leave=False) as bar:
            log.bar = bar
            start = time.perf_counter()
            model(x)
            seconds = time.perf_counter() - start
    return log, seconds


def torch_conv2d():
    """A conv2d with convalgos' signature computed by torch (numba's thread count), or None without torch."""
    try:
        import torch
    except ImportError:
        return None
    import numba
    torch.set_num_threads(numba.get_num_threads())

    def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        with torch.no_grad():
            t = lambda a: None if a is None else torch.from_numpy(np.ascontiguousarray(a))  # noqa: E731
            return torch.nn.functional.conv2d(t(x), t(weight), t(bias), stride, padding, dilation, groups).numpy()
    return conv2d


def unsupported_layers(name, layer_params) -> list[str]:
    algorithm = ALGORITHMS[name]
    return [algorithm.supports(p).reason for p in layer_params if not algorithm.supports(p)]


class Abandoned(Exception):
    """A forced pass ran past its deadline (3x the autotuned pass) and was stopped."""


def jit_warmup(layer_params, dtype):
    """Run every algorithm once on a small copy of each distinct layer (same channels, kernel, stride,
    padding, groups; at most 16x16 unless the kernel needs more), so Numba compilation or cache loading is
    not charged to the first timed pass."""
    rng = np.random.default_rng(1)
    for p in layer_params:
        h, w = (min(size, max(16, extent)) for size, extent in zip((p.H, p.W), p.kernel_extent))
        x = rng.standard_normal((1, p.C, h, w)).astype(dtype)
        weight = rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(dtype)
        for name, algorithm in ALGORITHMS.items():
            small = ConvParams.from_arrays(x, weight, stride=p.stride, padding=p.padding, dilation=p.dilation,
                                           groups=p.groups)
            if algorithm.supports(small):
                convalgos.conv2d(x, weight, stride=p.stride, padding=p.padding, dilation=p.dilation,
                                 groups=p.groups, algo=name)


def with_deadline(algo, deadline: float, done: list):
    """``algo`` (a name or a conv2d-like callable) as a callable that raises Abandoned past ``deadline``."""
    def conv(x, *args):
        if time.perf_counter() > deadline:
            raise Abandoned
        y = algo(x, *args) if callable(algo) else convalgos.conv2d(x, *args, algo=algo)
        done.append(1)
        return y
    return conv


def time_passes(model, x, passes: dict, rounds: int, budget_s: float = 30.0):
    """(name -> median seconds of a whole forward pass with every conv set to passes[name], name -> why a pass
    was abandoned); interleaved rounds.

    Round 0 warms every pass up (workspaces) and is not counted; there a forced pass still running at 3x the
    autotuned pass's time is abandoned (the tuner's rule, applied to the whole pass), so the slow FFT passes
    cannot stretch a run. The others are timed ``rounds`` times while the timed rounds stay within
    ``budget_s`` (at least once), and on until they have taken 0.3 s per requested round.
    """
    def once(algo):
        with nn.use_algorithm(model, algo):
            start = time.perf_counter()
            model(x)
            return time.perf_counter() - start

    auto = once(passes["autotuned"])
    abandoned = {}
    for name, algo in list(passes.items())[1:]:
        done, start = [], time.perf_counter()
        try:
            once(with_deadline(algo, start + 3 * auto, done))
        except Abandoned:
            abandoned[name] = (f"abandoned: still running at 3x the autotuned pass "
                               f"({(time.perf_counter() - start) * 1e3:.0f} ms, {len(done)} conv calls done)")
    kept = {name: algo for name, algo in passes.items() if name not in abandoned}
    samples = {name: [] for name in kept}
    start, r, min_s = time.perf_counter(), 0, 0.3 * rounds
    while r < 1 or (time.perf_counter() - start < (budget_s if r < rounds else min_s)):
        for name, algo in kept.items():
            samples[name].append(once(algo))
        r += 1
    return {name: float(np.median(s)) for name, s in samples.items()}, abandoned


# ---- the dispatch table, per layer --------------------------------------------------------------------------
def entry_params(entry):
    """The ConvParams inside an entry's key."""
    key = entry.key
    if isinstance(key, ConvParams):
        return key
    for part in (getattr(key, "params", None), *(key if isinstance(key, tuple) else ())):
        if isinstance(part, ConvParams):
            return part
    return None


def entries_by_params(layer_params):
    wanted = set(layer_params)
    found = {}
    for entry in autotune.dispatch_table():
        p = entry_params(entry)
        if p in wanted:
            found[p] = entry
    return found


def layer_lines(calls, entries) -> list[str]:
    lines = [f"{'layer':<28} {'shape':<52} {'chosen':<14} {'ms':>8}  source"]
    for name, p in calls:
        e = entries.get(p)
        ms = f"{e.times[e.algo] * 1e3:8.3f}" if e is not None and e.algo in e.times else f"{'-':>8}"
        lines.append(f"{name:<28} {str(p):<52} {e.algo if e else '?':<14} {ms}  {e.source if e else ''}")
    return lines


def summary(times: dict, na: dict, abandoned: dict, tuning_s: float, hits: int, tuned: int):
    auto = times["autotuned"]
    singles = {n: t for n, t in times.items() if n in ALGORITHMS}
    best = min(singles, key=singles.get) if singles else None
    lines = [f"tuning pass: {tuning_s:.2f} s, {tuned} key(s) tuned, {hits} from the table or cache",
             f"forward pass, autotuned: {auto * 1e3:.2f} ms"]
    for name in ALGORITHMS:
        if name in singles:
            lines.append(f"  forced {name:<14} {singles[name] * 1e3:10.2f} ms  ({singles[name] / auto:.2f}x autotuned)")
        elif name in abandoned:
            lines.append(f"  forced {name:<14}     > {3 * auto * 1e3:.0f} ms  ({abandoned[name]})")
        else:
            lines.append(f"  forced {name:<14}        n/a  (unsupported on {len(na[name])} layer(s): {na[name][0]})")
    totals = {"tuning_seconds": tuning_s, "keys_tuned": tuned, "keys_reused": hits, "autotuned_seconds": auto,
              "forced_seconds": singles, "unsupported_layers": {n: len(v) for n, v in na.items()},
              "abandoned": abandoned}
    if best:
        lines.append(f"speedup over the best single algorithm ({best}): {singles[best] / auto:.2f}x")
        totals.update(best_single=best, speedup_over_best_single=singles[best] / auto)
    if "torch" in abandoned:
        lines.append(f"  torch conv2d: {abandoned['torch']}")
    if "torch" in times:
        lines.append(f"  torch conv2d           {times['torch'] * 1e3:10.2f} ms")
        lines.append(f"speedup over torch's conv2d: {times['torch'] / auto:.2f}x")
        totals.update(torch_seconds=times["torch"], speedup_over_torch=times["torch"] / auto)
    return lines, totals


def plot(path, calls, entries, title):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [(name, entries[p]) for name, p in calls if p in entries]
    names = list(ALGORITHMS)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows)), 4.5))
    width = 0.8 / len(names)
    for j, algo in enumerate(names):
        xs = [i + (j - len(names) / 2) * width for i, (_, e) in enumerate(rows) if algo in e.times]
        ts = [e.times[algo] * 1e3 for _, e in rows if algo in e.times]
        ax.bar(xs, ts, width, label=algo, align="edge")
        chosen = [(x, t) for x, t, (_, e) in zip(xs, ts, [r for r in rows if algo in r[1].times]) if e.algo == algo]
        if chosen:
            ax.plot([x + width / 2 for x, _ in chosen], [t for _, t in chosen], "k*", markersize=7)
    ax.set_yscale("log")
    ax.set_xticks(range(len(rows)), [name for name, _ in rows], rotation=90, fontsize=7)
    ax.set_ylabel("ms per call (log)")
    ax.set_title(title + "  (* = chosen)")
    ax.legend(fontsize=7, ncol=2)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# ---- main ---------------------------------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = parser()
    args = ap.parse_args(argv)
    check_options(ap, args)
    model = models.get_model(args.model, dtype=args.dtype)
    shape = input_shape(ap, model, args)
    x = np.random.default_rng(0).standard_normal(shape).astype(args.dtype)
    flags = dict(benchmark=not args.no_benchmark, deterministic=args.deterministic,
                 benchmark_limit=args.benchmark_limit, workspace_limit=args.workspace_limit)
    print(f"autotune: {args.model}, input {'x'.join(map(str, shape))} {args.dtype}, cpu, "
          + ", ".join(f"{k}={v}" for k, v in flags.items()))
    if args.cache and os.path.exists(args.cache):
        autotune.load(args.cache)
    with autotune.flags(**flags):
        before = autotune.cache_info()
        try:
            log, tuning_s = tune(model, x)
        except ValueError as err:               # e.g. an input size the model's layers cannot take
            ap.error(f"{args.model} cannot run input {'x'.join(map(str, shape))}: {err}")
        after = autotune.cache_info()
        if args.cache:
            autotune.save(args.cache)
        layer_params = list(dict.fromkeys(p for _, p in log.calls))
        entries = entries_by_params(layer_params)
        print("\n".join(layer_lines(log.calls, entries)))
        print(f"\ndispatch table ({len(layer_params)} distinct conv layers):")
        print(autotune.dispatch_table())
        passes = {"autotuned": None}
        na = {}
        for name in ALGORITHMS:
            reasons = unsupported_layers(name, layer_params)
            if reasons:
                na[name] = reasons
            else:
                passes[name] = name
        torch_conv = torch_conv2d() if args.dtype != "float16" else None
        if torch_conv is not None:
            passes["torch"] = torch_conv
        jit_warmup(layer_params, args.dtype)
        times, abandoned = time_passes(model, x, passes, args.rounds)
    tuned = after.misses - before.misses
    lines, totals = summary(times, na, abandoned, tuning_s, len(log.calls) - tuned, tuned)
    print("\n" + "\n".join(lines))
    if args.json:
        write_json(args, shape, flags, log.calls, layer_params, entries, totals)
    if args.plot:
        plot(args.plot, log.calls, entries, f"{args.model} b{shape[0]} {shape[2]}x{shape[3]} {args.dtype}")
    return 0


def write_json(args, shape, flags, calls, layer_params, entries, totals):
    doc = {"model": args.model, "input": list(shape), "dtype": args.dtype, "device": args.device,
           "flags": flags, "convalgos_version": convalgos.__version__,
           "layers": [{"name": name, "shape": str(p), "entry": layer_params.index(p)} for name, p in calls],
           "entries": [entries[p].to_dict() if p in entries else {"shape": str(p)} for p in layer_params],
           "totals": totals}
    with open(args.json, "w") as f:
        json.dump(doc, f, indent=1, default=str)


if __name__ == "__main__":
    sys.exit(main())
