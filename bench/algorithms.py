"""Time every algorithm's three passes on the benchmark layer set; write bench/results/cpu-algorithms.md.

    python -m bench.algorithms                      # the whole layer set, all three passes
    python -m bench.algorithms --sets vgg16         # one set; --layers NAME... for single layers
    python -m bench.algorithms --passes forward     # some passes only
    python -m bench.algorithms --quick              # a smoke test on small layers, under /tmp unless --output

Per layer and pass: ms and direct-equivalent GFLOP/s (ConvParams.flops / seconds, the same count for each
pass) of each algorithm that implements and supports the pass (``convalgos.run``, into a kept result buffer),
torch's when torch is installed (forward: ``aten.convolution.out`` into a kept output, as ours; backward:
``aten.convolution_backward`` asked for the one gradient, which it allocates), and
numpy's sgemm GFLOP/s measured in the same run. Per layer and pass the candidates run interleaved
(``autotune.measure.interleaved``), medians; after one untimed run each, one timed run decides: a candidate
over ``SLOW`` times the fastest of them is left out of the rounds and reported from that run (marked ``1x``).
"""
from __future__ import annotations

import argparse
import sys

import numba
import numpy as np

import convalgos
from autotune import measure
from convalgos import ALGORITHMS, PASSES

from .common import RESULTS, header, sgemm_gflops, torch_conv
from .layers import ALL_LAYERS, LAYER_SETS, layer

QUICK = {"3x3.c32.28": layer(2, 32, 28, 32, 3), "dw3x3.c32.28": layer(1, 32, 28, 32, 3, groups=32),
         "7x7.c16.28": layer(1, 16, 28, 16, 7), "1x1.s2.c32.28": layer(1, 32, 28, 64, 1, stride=2, padding=0)}
SLOW = 10.0


def arrays(p, seed=0):
    """x, w and dy of layer p: random float32, the weight scaled by 1/sqrt(fan-in)."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(p.in_shape).astype(np.float32)
    w = (rng.standard_normal(p.weight_shape) / np.sqrt(p.Cg * p.R * p.S)).astype(np.float32)
    dy = rng.standard_normal(p.out_shape).astype(np.float32)
    return x, w, dy


def torch_pass(p, op, x, w, dy):
    """A callable running torch's pass ``op`` of layer p, or None (no torch, or padding torch cannot take)."""
    if op == "forward":
        return torch_conv(p, x, w)
    try:
        import torch
    except ImportError:
        return None
    (top, bottom), (left, right) = p.padding
    if top != bottom or left != right:
        return None
    torch.set_num_threads(numba.get_num_threads())
    tx, tw, tdy = torch.from_numpy(x), torch.from_numpy(w), torch.from_numpy(dy)
    mask = (op == "backward_data", op == "backward_filter", False)
    return lambda: torch.ops.aten.convolution_backward(tdy, tx, tw, None, p.stride, (top, left), p.dilation,
                                                       False, (0, 0), p.groups, mask)


def time_pass(p, op, x, w, dy, rounds: int, *, peer=True, slow=SLOW, prepared=False) -> tuple[dict, set]:
    """(name -> median seconds of pass ``op`` of p for every algorithm that supports it, and torch's with
    ``peer``; the names over ``slow`` times the fastest, timed once only). With ``prepared``, an algorithm
    that prepares its weight for the pass does so once, untimed, and is timed on that form (eval mode)."""
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    calls = {}
    for name, algorithm in ALGORITHMS.items():
        if algorithm.supports(p, op):
            out = np.empty(p.result_shape(op), np.float32)
            form = algorithm.prepare(w, p, op) if prepared else None
            calls[name] = (lambda algorithm=algorithm, out=out, form=form:
                           convalgos.run(algorithm, op, a, b, p, out, prepared=form))
    theirs = torch_pass(p, op, x, w, dy) if peer else None
    if theirs is not None:
        calls["torch"] = theirs
    timer = measure.Timer()
    for fn in calls.values():
        fn()                                        # compilation, first touch of the buffers
    first = {name: timer.time(fn) for name, fn in calls.items()}
    fastest = min(first.values())
    once = {name for name, t in first.items() if t > slow * fastest}
    samples = measure.interleaved({n: fn for n, fn in calls.items() if n not in once}, rounds, warmup=0,
                                  min_seconds=0.3)
    times = {name: measure.median(s) for name, s in samples.items()}
    times.update({name: first[name] for name in once})
    return times, once


def pass_table(results: dict, op: str) -> list:
    names = list(ALGORITHMS) + ["torch"]
    lines = [f"\n## {op}\n", "| layer | " + " | ".join(names) + " |", "|---" * (len(names) + 1) + "|"]
    for layer_name, (p, passes) in results.items():
        if op not in passes:
            continue
        times, once = passes[op]
        ours = {n: t for n, t in times.items() if n != "torch"}
        best = min(ours, key=ours.get) if ours else None
        cells = []
        for n in names:
            if n not in times:
                cells.append("-")
                continue
            cell = f"{times[n] * 1e3:.2f} / {p.flops / times[n] / 1e9:.0f}" + (" 1x" if n in once else "")
            cells.append(f"**{cell}**" if n == best else cell)
        lines.append(f"| {layer_name} `{p}` | " + " | ".join(cells) + " |")
    return lines


def report(results: dict, sgemm: float, passes, command: str) -> str:
    lines = [header("CPU algorithms: time per layer and pass"), f"Command: `{command}`.\n",
             f"numpy sgemm (256x2304 @ 2304x3136, float32), measured in this run: **{sgemm:.1f} GFLOP/s**.\n",
             "Each cell: milliseconds / direct-equivalent GFLOP/s (the same FLOP count for each pass); `-` = not "
             f"supported; `1x` = over {SLOW:g}x the fastest, timed once. Best of ours in bold. Ours write into a kept "
             "result; torch's forward too (`aten.convolution.out`), its backward passes allocate their gradient."]
    for op in passes:
        lines += pass_table(results, op)
    return "\n".join(lines) + "\n"


def targets(results: dict, sgemm: float, passes) -> str:
    """The issue's targets on the forward pass, met or missed on every layer they name, computed from this run;
    the same ratios for the backward passes, for information."""
    def times_of(op, test) -> dict:
        """layer name -> times of pass op, for the layers that pass ``test(name, p)``."""
        return {n: by_pass[op][0] for n, (p, by_pass) in results.items() if op in by_pass and test(n, p)}

    def over(times, slow, fast):
        """times[slow] / the fastest of ``fast`` (None unless both were timed)."""
        fast = [t for n, t in times.items() if n in fast]
        return times[slow] / min(fast) if slow in times and fast else None

    def line(what, threshold, values, judged) -> str:
        if not values:
            return f"- {what} (target >= {threshold:g}): no such layer in this run"
        text = (f"- {what} (target >= {threshold:g}): min {min(values):.2f}, median {np.median(values):.2f}, "
                f"max {max(values):.2f} over {len(values)} layers")
        if not judged:
            return text
        ok = sum(v >= threshold for v in values)
        return text + f"; {ok} of {len(values)} meet it: " + ("**met**" if ok == len(values) else "**missed**")

    lines = ["\n## Targets (ratios from this run)\n"]
    for op in passes:
        judged = op == "forward"
        if not judged:
            lines.append(f"\n{op}, for information:\n")
        vgg = times_of(op, lambda n, p: n.startswith("vgg16.") and p.R == 3)
        wide = times_of(op, lambda n, p: n.startswith("vgg16.") and p.R == 3 and min(p.C, p.K) >= 256)
        large = times_of(op, lambda n, p: p.R in (7, 11) and p.H == 56 and min(p.C, p.K) >= 64)
        depthwise = times_of(op, lambda n, p: p.is_depthwise and p.R == 3)
        lines += [
            line("im2col GFLOP/s / sgemm's on VGG-16's 3x3 layers", 0.8,
                 [results[n][0].flops / t["im2col"] / 1e9 / sgemm for n, t in vgg.items() if "im2col" in t], judged),
            line("im2col time / winograd_4x4 time on VGG-16's 3x3 layers with C, K >= 256", 2,
                 [r for t in wide.values() if (r := over(t, "im2col", {"winograd_4x4"}))], judged),
            line("the same with the fused F(4x4, 3x3), im2col time / winograd_fused_4x4 time", 2,
                 [r for t in wide.values() if (r := over(t, "im2col", {"winograd_fused_4x4"}))], False),
            line("im2col time / the faster FFT's (fft, fft_tiled) on 7x7 and 11x11 layers, C, K >= 64, 56x56", 2,
                 [r for t in large.values() if (r := over(t, "im2col", {"fft", "fft_tiled"}))], judged),
            line("torch time / depthwise time on depthwise 3x3 layers", 2,
                 [r for t in depthwise.values() if (r := over(t, "torch", {"depthwise"}))], judged)]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sets", nargs="*", choices=list(LAYER_SETS), help="layer sets (default: all)")
    parser.add_argument("--layers", nargs="*", help="single layers by name")
    parser.add_argument("--passes", nargs="+", choices=PASSES, default=list(PASSES))
    parser.add_argument("--quick", action="store_true", help=f"only {', '.join(QUICK)}, 2 rounds (a smoke test)")
    parser.add_argument("--rounds", type=int, default=None, help="interleaved rounds per layer (default 5)")
    parser.add_argument("--output", default=None, help="report file (default bench/results/cpu-algorithms.md, "
                                                       "/tmp/cpu-algorithms-quick.md with --quick; '-': none)")
    args = parser.parse_args(argv)
    if args.quick:
        chosen = QUICK
    elif args.layers:
        unknown = [n for n in args.layers if n not in ALL_LAYERS]
        if unknown:
            parser.error(f"unknown layers {unknown}; known: {list(ALL_LAYERS)}")
        chosen = {n: ALL_LAYERS[n] for n in args.layers}
    else:
        chosen = {n: p for s in (args.sets or LAYER_SETS) for n, p in LAYER_SETS[s].items()}
    rounds = args.rounds or (2 if args.quick else 5)
    output = args.output or ("/tmp/cpu-algorithms-quick.md" if args.quick else str(RESULTS / "cpu-algorithms.md"))
    sgemm = sgemm_gflops(rounds=3 if args.quick else 7)
    print(f"numpy sgemm: {sgemm:.1f} GFLOP/s", flush=True)
    results = {}
    for name, p in chosen.items():
        x, w, dy = arrays(p)
        results[name] = (p, {})
        for op in args.passes:
            times, once = results[name][1][op] = time_pass(p, op, x, w, dy, rounds)
            best = min((n for n in times if n != "torch"), key=times.get)
            print(f"{name:32s} {op:16s} " + "  ".join(f"{n}={t * 1e3:.2f}ms" for n, t in times.items())
                  + f"  -> {best}", flush=True)
        for algorithm in ALGORITHMS.values():
            algorithm.release()
    command = "python -m bench.algorithms " + " ".join(argv if argv is not None else sys.argv[1:])
    text = report(results, sgemm, args.passes, command.strip()) + targets(results, sgemm, args.passes)
    print(text)
    if output != "-":
        with open(output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
