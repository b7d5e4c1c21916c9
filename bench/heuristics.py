"""Re-measure the heuristic rules and write ``autotune/heuristics.json`` (the CPU's rules, per pass).

    python -m bench.heuristics [--passes forward "forward prepared" backward_data backward_filter] [--out PATH]
    python -m bench.heuristics --quick     # one layer per class, 3 rounds, to /tmp/heuristics-quick.json

For each pass and each layer class (most specific first) it times every algorithm that supports the pass on
the class's representative layers (``bench.algorithms.time_pass``: interleaved rounds, medians; an algorithm
over ``SLOW`` times the fastest is timed once), scores each algorithm by the geometric mean over those layers
of its time divided by the layer's best time (layers it does not support are left out of its mean), and
writes the class's rule: the algorithms from best score to worst. A last rule with no condition, ranked over
every representative layer, is the default. ``autotune.heuristics`` reads the rules, per device and pass:
first match wins. The other devices' rules in the file (the GPU's) and the passes not re-measured are kept.
"forward prepared" is the forward pass on weights each algorithm prepared once, untimed (eval mode's path).

    python -m bench.heuristics --device cuda    # on a GPU: the GPU registry's rules, per pass, into the same file

``--device cuda`` times the GPU algorithms (``bench.gpu.timing.pass_times``: CUDA events) on the same layer
classes at batch ``GPU_BATCH`` (a GPU trains on batches; a batch of 1 leaves most of it idle) and writes the
file's "cuda" rules, which then replace the seed's estimate (``autotune.heuristics``); the CPU's are kept.
There is no "forward prepared" on the GPU: its algorithms prepare nothing.
"""
from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os

import numpy as np

import convalgos
from convalgos import PASSES
from autotune.cache import fingerprint
from autotune.heuristics import DEFAULT_PATH, gemm_sizes
from bench.algorithms import arrays, time_pass
from bench.layers import layer

THREE = {"kernel": [3, 3], "stride": [1, 1], "dilation": [1, 1]}

#: (rule name, condition, representative layers): first matching class wins, so specific classes come first.
CLASSES = [
    ("depthwise", {"depthwise": True},
     [layer(1, 32, 112, 32, 3, groups=32), layer(1, 128, 56, 128, 3, groups=128),
      layer(1, 512, 14, 512, 3, groups=512), layer(1, 64, 112, 64, 3, stride=2, groups=64)]),
    ("pointwise 1x1", {"kernel": [1, 1]},
     [layer(1, 32, 112, 64, 1), layer(1, 128, 56, 128, 1), layer(1, 512, 14, 512, 1)]),
    ("3x3 stride 1, wide", dict(THREE, min_channels=64),
     [layer(1, 64, 56, 64, 3), layer(1, 128, 28, 128, 3), layer(1, 256, 14, 256, 3), layer(1, 512, 7, 512, 3)]),
    ("3x3 stride 1, narrow", dict(THREE, max_channels=63),
     [layer(1, 3, 112, 64, 3), layer(32, 16, 32, 16, 3), layer(32, 32, 16, 32, 3)]),
    ("large kernel, stride 1", {"min_kernel_size": 5, "stride": [1, 1]},
     [layer(1, 64, 28, 64, 5), layer(1, 64, 28, 64, 7), layer(1, 32, 28, 32, 11)]),
    ("strided", {"min_stride_size": 2},
     [layer(1, 64, 56, 128, 3, stride=2), layer(1, 3, 112, 64, 7, stride=2, padding=3),
      layer(32, 16, 32, 32, 3, stride=2)]),
    ("dilated", {"min_dilation_size": 2},
     [layer(1, 64, 28, 64, 3, dilation=2), layer(1, 128, 14, 128, 3, dilation=2)]),
]


#: an algorithm over this many times the fastest is timed once: three times the tuner's default prune_ratio,
#: so every algorithm the scores could prune is measured in full.
SLOW = 30.0


#: what is measured: each pass, and the forward pass on prepared weights (the tuner's eval-mode keys)
MEASURED = (*PASSES, "forward prepared")
#: the batch of every representative layer on the GPU.
GPU_BATCH = 32


def layer_times(p, measured: str, rounds: int, device: str = "cpu") -> dict:
    """Median seconds of every algorithm of ``device`` that supports the pass of layer p (``measured``: one of
    MEASURED)."""
    op = measured.removesuffix(" prepared")
    if device == "cuda":
        from bench.gpu.timing import pass_times
        return pass_times(dataclasses.replace(p, N=GPU_BATCH), op, rounds, SLOW)
    x, w, dy = arrays(p)
    return time_pass(p, op, x, w, dy, rounds, peer=False, slow=SLOW, prepared=op != measured)[0]


def ranking(times_per_layer: list) -> tuple[list, dict, dict]:
    """(algorithm names by score, name -> score, name -> closest): the score is the geometric mean of time / best
    time over the layers each supports, what ranks them; the closest, the smallest of those ratios, is how near
    the best it ever came on one of the class's layers, what the tuner prunes by (a mean can hide one layer
    where it won)."""
    ratios: dict = {}
    for times in times_per_layer:
        best = min(times.values())
        for name, t in times.items():
            ratios.setdefault(name, []).append(t / best)
    score = {name: float(np.exp(np.mean(np.log(r)))) for name, r in ratios.items()}
    closest = {name: float(min(r)) for name, r in ratios.items()}
    return sorted(score, key=lambda n: (score[n], n)), score, closest


def rule(name: str, when: dict, times_per_layer: list, layers: list) -> dict:
    """The class's rule: its order, scores and closest, and each representative layer's GEMM sizes (``at``:
    output pixels N*Ho*Wo, input and output channels per group) with every algorithm's time / that layer's best,
    what the tuner prunes by on a layer near one of them (``autotune.heuristics.Heuristics.slowdowns``)."""
    order, score, closest = ranking(times_per_layer)
    at = [list(gemm_sizes(p)) for p in layers]
    return {"name": name, "when": when, "order": order, "score": {n: round(score[n], 3) for n in order},
            "closest": {n: round(closest[n], 3) for n in order},
            "layers": [{"at": a, "ratios": {n: round(t / min(times.values()), 3) for n, t in times.items()}}
                       for a, times in zip(at, times_per_layer)]}


def pass_rules(measured: str, rounds: int, quick: bool, device: str = "cpu") -> list:
    rules, every_layer = [], []
    suffix = " (prepared weight)" if measured.endswith(" prepared") else ""
    every_p = []
    for name, when, layers in CLASSES:
        layers = layers[:1] if quick else layers
        if device == "cuda":
            layers = [dataclasses.replace(p, N=GPU_BATCH) for p in layers]
        times = [layer_times(p, measured, rounds, device) for p in layers]
        every_layer += times
        every_p += layers
        rules.append(rule(name + suffix, when, times, layers))
        print(f"{measured:<17} {name:<24} {' > '.join(rules[-1]['order'])}")
    rules.append(rule("default" + suffix, {}, every_layer, every_p))
    return rules


def measure(rounds: int, quick: bool, passes=MEASURED, old=None, device: str = "cpu") -> dict:
    """The heuristics file with ``device``'s passes in ``passes`` re-measured; the other passes' rules, the other
    devices' and the seeds are kept from ``old`` (an unmeasured pass has none: the tuner then ranks by the
    device's seed, or by FLOPs)."""
    old = old or {}
    devices = dict(old.get("devices", {}))
    kept = devices.get(device, {})
    ops = MEASURED if device == "cpu" else PASSES
    devices[device] = {op: pass_rules(op, rounds, quick, device) if op in passes else kept.get(op, [])
                       for op in ops}
    flag = (" --quick" if quick else "") + ("" if device == "cpu" else f" --device {device}")
    return {"schema": 2, "produced_by": "python -m bench.heuristics" + flag,
            "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": fingerprint(), "convalgos": convalgos.__version__,
            "score": "geometric mean of time / best time over the class's layers",
            "closest": "smallest time / best time over the class's layers",
            **({"seeds": old["seeds"]} if "seeds" in old else {}), "devices": devices}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one layer per class, 3 rounds")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--passes", nargs="+", choices=MEASURED, default=None, help="default: every pass the device has")
    ap.add_argument("--device", choices=("cpu", "cuda"), default="cpu", help="whose rules to measure (default cpu)")
    ap.add_argument("--out", default=None, help=f"default {DEFAULT_PATH}; /tmp/heuristics-quick.json with --quick")
    args = ap.parse_args(argv)
    args.out = args.out or ("/tmp/heuristics-quick.json" if args.quick else DEFAULT_PATH)
    try:
        with open(args.out if os.path.exists(args.out) else DEFAULT_PATH) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = None
    if args.device == "cuda" and "forward prepared" in (args.passes or ()):
        ap.error("--passes 'forward prepared': the GPU's algorithms prepare nothing")
    passes = args.passes or (MEASURED if args.device == "cpu" else PASSES)
    data = measure(3 if args.quick else args.rounds, args.quick, passes, old, args.device)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
