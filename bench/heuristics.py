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
"""
from __future__ import annotations

import argparse
import datetime
import json
import os

import numpy as np

import convalgos
from convalgos import PASSES
from autotune.cache import fingerprint
from autotune.heuristics import DEFAULT_PATH
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


def layer_times(p, measured: str, rounds: int) -> dict:
    """Median seconds of every algorithm that supports the pass of layer p (``measured``: one of MEASURED)."""
    x, w, dy = arrays(p)
    op = measured.removesuffix(" prepared")
    return time_pass(p, op, x, w, dy, rounds, peer=False, slow=SLOW, prepared=op != measured)[0]


def ranking(times_per_layer: list) -> list:
    """Algorithm names by the geometric mean of time / best time over the layers each supports."""
    ratios: dict = {}
    for times in times_per_layer:
        best = min(times.values())
        for name, t in times.items():
            ratios.setdefault(name, []).append(t / best)
    score = {name: float(np.exp(np.mean(np.log(r)))) for name, r in ratios.items()}
    return sorted(score, key=lambda n: (score[n], n)), score


def rule(name: str, when: dict, times_per_layer: list) -> dict:
    order, score = ranking(times_per_layer)
    return {"name": name, "when": when, "order": order, "score": {n: round(score[n], 3) for n in order}}


def pass_rules(measured: str, rounds: int, quick: bool) -> list:
    rules, every_layer = [], []
    suffix = " (prepared weight)" if measured.endswith(" prepared") else ""
    for name, when, layers in CLASSES:
        times = [layer_times(p, measured, rounds) for p in (layers[:1] if quick else layers)]
        every_layer += times
        rules.append(rule(name + suffix, when, times))
        print(f"{measured:<17} {name:<24} {' > '.join(rules[-1]['order'])}")
    rules.append(rule("default" + suffix, {}, every_layer))
    return rules


def measure(rounds: int, quick: bool, passes=MEASURED, old=None) -> dict:
    """The heuristics file with the CPU's passes in ``passes`` re-measured; the other passes' rules and the other
    devices' are kept from ``old`` (an unmeasured pass has none: the tuner then ranks by FLOPs)."""
    devices = dict((old or {}).get("devices", {}))
    kept = devices.get("cpu", {})
    devices["cpu"] = {op: pass_rules(op, rounds, quick) if op in passes else kept.get(op, []) for op in MEASURED}
    return {"schema": 2, "produced_by": "python -m bench.heuristics" + (" --quick" if quick else ""),
            "measured": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
            "machine": fingerprint(), "convalgos": convalgos.__version__,
            "score": "geometric mean of time / best time over the class's layers", "devices": devices}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="one layer per class, 3 rounds")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--passes", nargs="+", choices=MEASURED, default=list(MEASURED))
    ap.add_argument("--out", default=None, help=f"default {DEFAULT_PATH}; /tmp/heuristics-quick.json with --quick")
    args = ap.parse_args(argv)
    args.out = args.out or ("/tmp/heuristics-quick.json" if args.quick else DEFAULT_PATH)
    try:
        with open(args.out if os.path.exists(args.out) else DEFAULT_PATH) as f:
            old = json.load(f)
    except (OSError, ValueError):
        old = None
    data = measure(3 if args.quick else args.rounds, args.quick, args.passes, old)
    with open(args.out, "w") as f:
        json.dump(data, f, indent=1)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
