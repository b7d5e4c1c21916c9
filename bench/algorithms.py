"""Time every algorithm on the benchmark layer set; write bench/results/cpu-algorithms.md.

    python -m bench.algorithms                 # the whole layer set (a few minutes)
    python -m bench.algorithms --sets vgg16    # one set; --layers NAME... for single layers

Per layer: ms and direct-equivalent GFLOP/s (ConvParams.flops / seconds) of each algorithm that supports it,
torch's conv2d when torch is installed, and numpy's sgemm GFLOP/s measured in the same run. Timings are
interleaved medians: each round runs every candidate once, so drift on the shared cores hits all alike.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import convalgos
from convalgos import ALGORITHMS

from .common import RESULTS, header, interleaved_medians, sgemm_gflops, torch_conv
from .layers import ALL_LAYERS, LAYER_SETS


def arrays(p, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((p.N, p.C, p.H, p.W)).astype(np.float32)
    w = (rng.standard_normal((p.K, p.Cg, p.R, p.S)) / np.sqrt(p.Cg * p.R * p.S)).astype(np.float32)
    return x, w


def time_layer(p, rounds: int) -> dict:
    """name -> median seconds for every algorithm that supports p (and 'torch')."""
    x, w = arrays(p)
    kw = dict(stride=p.stride, padding=p.padding, dilation=p.dilation, groups=p.groups)
    fns = {}
    for name, algorithm in ALGORITHMS.items():
        if algorithm.supports(p):
            out = np.empty(p.out_shape, np.float32)
            fns[name] = (lambda name=name, out=out: convalgos.conv2d(x, w, **kw, algo=name, out=out))
    torch_fn = torch_conv(p, x, w)
    if torch_fn is not None:
        fns["torch"] = torch_fn
    times = interleaved_medians(fns, rounds=rounds, min_seconds=0.3)
    for algorithm in ALGORITHMS.values():
        algorithm.release()
    return times


def report(results: dict, sgemm: float) -> str:
    names = list(ALGORITHMS) + ["torch"]
    lines = [header("CPU algorithms: time per layer"),
             f"numpy sgemm (256x2304 @ 2304x3136, float32), measured in this run: **{sgemm:.1f} GFLOP/s**.\n",
             "Each cell: milliseconds / direct-equivalent GFLOP/s; `-` = not supported. Best of ours in bold.\n",
             "| layer | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for layer, (p, times) in results.items():
        ours = {n: t for n, t in times.items() if n != "torch"}
        best = min(ours, key=ours.get) if ours else None
        cells = []
        for n in names:
            if n not in times:
                cells.append("-")
                continue
            cell = f"{times[n] * 1e3:.2f} / {p.flops / times[n] / 1e9:.0f}"
            cells.append(f"**{cell}**" if n == best else cell)
        lines.append(f"| {layer} `{p}` | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def targets(results: dict, sgemm: float) -> str:
    """The issue's four targets, computed from this run."""
    def ratio(layer_names, a, b):
        return [results[n][1][b] / results[n][1][a] for n in layer_names
                if n in results and a in results[n][1] and b in results[n][1]]

    def summary(values):
        return f"min {min(values):.2f}, median {np.median(values):.2f}, max {max(values):.2f}" if values else "n/a"

    vgg = [n for n in results if n.startswith("vgg16.")]
    im2col_eff = [results[n][0].flops / results[n][1]["im2col"] / 1e9 / sgemm for n in vgg
                  if "im2col" in results[n][1]]
    deep = [n for n, (p, _) in results.items()
            if p.R == p.S == 3 and p.stride == (1, 1) and p.dilation == (1, 1) and p.groups == 1
            and p.C >= 128 and p.K >= 128]
    large = [n for n, (p, _) in results.items() if p.R in (7, 11)]
    depthwise = [n for n, (p, _) in results.items() if p.is_depthwise and p.R == 3]
    return "\n".join([
        "## Targets (ratios from this run)\n",
        f"- im2col / sgemm GFLOP/s on VGG-16 3x3 layers (target >= 0.70): {summary(im2col_eff)}",
        f"- im2col time / winograd_4x4 time on 3x3 s1 layers with C, K >= 128 (target >= 1.5): "
        f"{summary(ratio(deep, 'winograd_4x4', 'im2col'))} over {len(deep)} layers",
        f"- im2col time / fft time on 7x7 and 11x11 layers (target > 1): {summary(ratio(large, 'fft', 'im2col'))}"
        f"; fft_tiled: {summary(ratio(large, 'fft_tiled', 'im2col'))}",
        f"- torch time / direct time on depthwise 3x3 layers (target >= 2): "
        f"{summary(ratio(depthwise, 'direct', 'torch'))}",
    ]) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", choices=list(LAYER_SETS), help="layer sets (default: all)")
    parser.add_argument("--layers", nargs="*", help="single layers by name")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds per layer (default 5)")
    parser.add_argument("--output", default=str(RESULTS / "cpu-algorithms.md"), help="report file ('-': none)")
    args = parser.parse_args(argv)
    if args.layers:
        unknown = [n for n in args.layers if n not in ALL_LAYERS]
        if unknown:
            parser.error(f"unknown layers {unknown}; known: {list(ALL_LAYERS)}")
        chosen = {n: ALL_LAYERS[n] for n in args.layers}
    else:
        chosen = {n: p for s in (args.sets or LAYER_SETS) for n, p in LAYER_SETS[s].items()}
    sgemm = sgemm_gflops()
    print(f"numpy sgemm: {sgemm:.1f} GFLOP/s", flush=True)
    results = {}
    for name, p in chosen.items():
        times = time_layer(p, args.rounds)
        results[name] = (p, times)
        best = min((n for n in times if n != "torch"), key=times.get)
        print(f"{name:32s} " + "  ".join(f"{n}={t * 1e3:.2f}ms" for n, t in times.items()) + f"  -> {best}",
              flush=True)
    text = report(results, sgemm) + "\n" + targets(results, sgemm)
    print(text)
    if args.output != "-":
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
