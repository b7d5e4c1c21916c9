"""``python -m autotune``: tune a model's convolutions, print the dispatch table and what the choice bought.

    python -m autotune                                  # resnet18, batch 1, 3x224x224, float32, benchmark on
    python -m autotune --model resnet20 --batch 32 --cache ~/.autotune.json --json out.json --plot out.png
    python -m autotune train --model lenet5 --data digits --epochs 10      # see python -m autotune train -h

Steps: check every option and path (before any work); build the model (seeded); run one forward pass with
the autotuner (a progress bar per conv layer: this pass tunes every new key); print per conv layer its shape
and choice, then the dispatch table; then time whole passes in interleaved rounds (``autotune.profile``):
autotuned, every conv forced to each single algorithm that runs every layer, and torch's conv2d when torch is
installed. A forced pass still running at 3x the autotuned pass is abandoned (torch is warmed up first). With
``--device cuda`` the convs run alone on the GPU (the other layers are CPU-only), so the passes are the
model's conv time. With a warm ``--cache`` the tuning pass times nothing: every key is a cache hit. Ctrl-C
(here or in ``train``) ends the run with one line: the cache entries kept and where, and how to resume; exit
status 130.
"""
from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from collections import Counter

import numpy as np

import convalgos

import autotune
from autotune import cache, models, nn, profile
from autotune.cli_common import ctrl_c_lands, interrupted, positive_int, write_json
from autotune.devices import CudaEventTimer
from autotune.train_cli import train_main
from convalgos.backends import BACKENDS

DTYPES = ("float32", "float64", "float16")


# ---- options ------------------------------------------------------------------------------------------------
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
    ap = argparse.ArgumentParser(prog="autotune", description=__doc__.split("\n\n")[0].split(": ", 1)[1],
                                 epilog="python -m autotune train -h: train a model through the dispatcher")
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
    ap.add_argument("--json", metavar="PATH", help="write the layers, entries and totals as JSON ('-': stdout, "
                                                  "the report then goes to stderr)")
    ap.add_argument("--rounds", type=positive_int, default=3, help="timed rounds per pass (default 3)")
    return ap


def check_paths(ap, args) -> None:
    """Every path is checked before any work, so a typo costs no minutes of tuning."""
    if args.cache:
        problem = cache.problem(args.cache)
        if problem:
            ap.error(f"--cache {args.cache}: {problem}")
    for option in ("json", "plot"):
        path = getattr(args, option)
        if path and path != "-" and cache.writable_problem(path):
            ap.error(f"--{option} {path}: {cache.writable_problem(path)}")
    if args.cache and args.json and os.path.realpath(args.cache) == os.path.realpath(args.json):
        ap.error(f"--cache and --json name the same file {args.cache}: the report would replace the cache")


def check_options(ap, args) -> None:
    """The checks argparse cannot do alone; each ends in ap.error (message, exit status 2)."""
    if args.model not in models.MODELS:
        ap.error(f"unknown model {args.model!r}; known models: {', '.join(models.MODELS)}")
    if args.device == "cuda" and profile.gpu_problem():
        ap.error("--device cuda: " + profile.gpu_problem())
    if args.plot:
        try:
            import matplotlib  # noqa: F401
        except ImportError:
            ap.error('--plot needs matplotlib: pip install -e ".[plot]" in the clone (or pip install matplotlib)')
    check_paths(ap, args)


def input_shape(ap, model, args) -> tuple[int, int, int, int]:
    """The input's shape; a size the model cannot take is an error naming --size and the sizes it takes."""
    C, H, W = model.input_shape
    if args.size is not None:
        given = args.size
        H, W = (given[0], given[0]) if len(given) == 1 else given[-2:]
        if len(given) == 3 and given[0] != C:
            ap.error(f"--size {'x'.join(map(str, given))}: {args.model} takes {C} input channels")
        try:
            profile.conv_calls(model, (1, C, H, W), args.dtype)
        except (ValueError, IndexError):
            most = 2 * max(model.input_shape[1:])
            fits = profile.accepted_sizes(model, most)
            ap.error(f"--size {'x'.join(map(str, given))}: {args.model} cannot take a {H}x{W} input; "
                     f"it takes square sizes {profile.spans(fits) or 'none'} (tried 1 to {most}), "
                     f"{model.input_shape[1]}x{model.input_shape[2]} by design")
    return args.batch, C, H, W


def plot_layers(path, calls, entries, title, names):
    """A bar chart per conv layer of every candidate's time in its table entry, the chosen one starred."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = [(name, entries[p]) for name, p in calls if p in entries]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows)), 4.5))
    width = 0.8 / len(names)
    for j, algo in enumerate(names):
        timed = [(i + (j - len(names) / 2) * width, e) for i, (_, e) in enumerate(rows) if algo in e.times]
        ax.bar([x for x, _ in timed], [e.times[algo] * 1e3 for _, e in timed], width, label=algo, align="edge")
        chosen = [(x + width / 2, e.times[algo] * 1e3) for x, e in timed if e.algo == algo]
        if chosen:
            ax.plot(*zip(*chosen), "k*", markersize=7)
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
    argv = sys.argv[1:] if argv is None else list(argv)
    if argv[:1] == ["train"]:
        return train_main(argv[1:])
    ap = parser()
    args = ap.parse_args(argv)
    check_options(ap, args)
    try:
        with ctrl_c_lands():
            return tune_and_report(ap, args)
    except KeyboardInterrupt:
        return interrupted(args.cache, "resumes from them: a tuned key is not timed again")


def tune_and_report(ap, args) -> int:
    """Tune the model's convolutions and print the report (the steps of the module docstring)."""
    model = models.get_model(args.model, dtype=args.dtype)
    shape = input_shape(ap, model, args)
    out = sys.stderr if args.json == "-" else sys.stdout
    flags = dict(benchmark=not args.no_benchmark, deterministic=args.deterministic,
                 benchmark_limit=args.benchmark_limit, workspace_limit=args.workspace_limit)
    print(f"autotune: {args.model}, input {'x'.join(map(str, shape))} {args.dtype}, "
          f"{profile.device_description(args.device)}, " + ", ".join(f"{k}={v}" for k, v in flags.items()),
          file=out)
    if args.cache:
        autotune.load(args.cache)
    with autotune.flags(**flags):
        before = autotune.dispatch_table()
        try:
            calls, workload, tuning_s, registry, xp, timer = first_pass(model, shape, args)
        except (ValueError, RuntimeError, MemoryError) as err:      # the input was checked: this is the tuning
            limit = "" if args.workspace_limit is None else f" under --workspace-limit {args.workspace_limit}"
            ap.error(f"tuning {args.model} failed{limit}: {err}")
        if args.cache:
            autotune.save(args.cache)
        layer_params = list(dict.fromkeys(p for _, p in calls))
        entries = profile.forward_entries(layer_params, device=args.device)
        print("\n".join(profile.layer_lines(calls, entries)), file=out)
        print(f"\n{autotune.dispatch_table()}", file=out)
        passes, na = profile.forced_passes(registry, layer_params)
        torch_conv = profile.torch_conv2d(args.device) if args.dtype != "float16" else None
        if torch_conv is not None:
            passes["torch"] = torch_conv
            if torch_conv.tf32:
                print(f"torch's comparison on the GPU: TF32 turned off (torch reports {torch_conv.tf32})", file=out)
        profile.jit_warmup(layer_params, args.dtype, registry, xp)
        times, abandoned = profile.time_passes(workload, passes, args.rounds, timer=timer,
                                               min_seconds=0.3 * args.rounds)
    known = {e.key for e in before}
    counts = dict(Counter("reused" if e.key in known else e.source for e in entries.values()))
    jit_s = sum(sum(e.jit.values()) for e in autotune.dispatch_table() if e.key not in known)
    what = "forward pass" if args.device == "cpu" else "conv time of a forward pass (GPU)"
    lines, totals = profile.summary(times, na, abandoned, tuning_s, counts, [entries[p].algo for p in entries], what,
                                    registry, jit_s)
    print("\n" + "\n".join(lines), file=out)
    if args.json:
        write_json(args.json, {
            "model": args.model, "input": list(shape), "dtype": args.dtype, "device": args.device,
            "device_name": profile.device_description(args.device), "flags": flags,
            "convalgos_version": convalgos.__version__,
            "layers": [{"name": name, "shape": str(p), "entry": layer_params.index(p)} for name, p in calls],
            "entries": [entries[p].to_dict() if p in entries else {"shape": str(p)} for p in layer_params],
            "totals": totals})
    if args.plot:
        plot_layers(args.plot, calls, entries, f"{args.model} b{shape[0]} {shape[2]}x{shape[3]} "
                            f"{args.dtype}", list(registry))
    return 0


def first_pass(model, shape, args):
    """Tune every conv once: (calls, workload, seconds, registry, array module, timer) for the device."""
    x = np.random.default_rng(0).standard_normal(shape).astype(args.dtype)
    if args.device == "cpu":
        prof, seconds = profile.first_pass(model, x)
        return prof.calls, profile.model_workload(model, x), seconds, convalgos.ALGORITHMS, np, None
    import cupy
    calls = [(name, dataclasses.replace(p, N=shape[0])) for name, p in profile.conv_calls(model, (1,) + shape[1:],
                                                                                       args.dtype)]
    workload = profile.layer_workload(calls, dict(nn.conv_layers(model)), cupy, args.dtype)
    timer = CudaEventTimer()
    seconds = timer.time(lambda: workload(None))
    return calls, workload, seconds, BACKENDS["cuda"].registry, cupy, timer


if __name__ == "__main__":
    sys.exit(main())
