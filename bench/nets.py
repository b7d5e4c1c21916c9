"""Conv time of whole CNNs: autotuned, forced to each single algorithm, and torch's; bench/results/cpu-nets.md.

    python -m bench.nets            # ResNet-18 b1 224, ResNet-20 b32, LeNet-5 b64, VGG-16 b1 224, MobileNet-v1 b1 224
    python -m bench.nets --quick    # a smoke test: small inputs, one round, results under /tmp unless --out
    python -m bench.nets --models resnet20,lenet5 --out /tmp/nets.md    # some of the nets

Per net, one forward pass at a time runs with every conv autotuned (benchmark mode, tuned first), forced to
one algorithm (where that algorithm supports every conv of the net), or computed by torch's conv2d (torch
gets numba's thread count). Each conv call is timed on its own and summed: "conv time" excludes BatchNorm,
pooling and the classifier, which are the same NumPy code in every mode. Modes run interleaved, round by
round (``autotune.profile.time_layers``, through ``autotune.measure.interleaved``), so drift on the shared
cores hits all alike; the table holds medians over rounds, and per layer where the time goes in the
autotuned pass against torch.
"""
from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

import autotune
from autotune import measure, models, profile
from convalgos import ALGORITHMS

from .common import RESULTS, header, write_record
from .torch_twin import torch_twin

#: (label, model, batch, input H=W); the issue's targets as ratios to torch's conv time.
NETS = [("ResNet-18 b1 224", "resnet18", 1, 224), ("ResNet-20 b32", "resnet20", 32, 32),
        ("LeNet-5 b64", "lenet5", 64, 32), ("VGG-16 b1 224", "vgg16", 1, 224),
        ("MobileNet-v1 b1 224", "mobilenet_v1", 1, 224)]
QUICK = [("ResNet-18 b1 64", "resnet18", 1, 64), ("ResNet-20 b2", "resnet20", 2, 32),
         ("LeNet-5 b4", "lenet5", 4, 32), ("VGG-16 b1 32", "vgg16", 1, 32),
         ("MobileNet-v1 b1 64", "mobilenet_v1", 1, 64)]
#: issue 12's targets: conv time / torch's conv time, and the whole forward pass / torch's same model (<= 1.0).
TARGETS = {"vgg16": 0.6, "resnet18": 0.7, "mobilenet_v1": 0.6, "resnet20": 1.0, "lenet5": 1.0}
WHOLE_TARGET = 1.0


def conv_times(model_name, batch, size, rounds):
    """mode -> {layer: median seconds}, the params per layer, the unsupported counts, and the tuning seconds."""
    model = models.get_model(model_name)
    x = np.random.default_rng(0).standard_normal((batch, model.input_shape[0], size, size)).astype(np.float32)
    with autotune.flags(benchmark=True):
        prof, tuning = profile.first_pass(model, x)          # tunes every new key
        layers = prof.layers()
        modes, reasons = profile.forced_passes(ALGORITHMS, layers)
        unsupported = {name: len(why) for name, why in reasons.items()}
        torch_conv = profile.torch_conv2d()
        if torch_conv is not None:
            modes["torch"] = torch_conv
        medians = profile.time_layers(model, x, modes, rounds)      # one warm-up round, not counted
    chosen = {p: e.algo for p, e in profile.forward_entries(layers).items()}
    return medians, prof.params, unsupported, tuning, chosen


def whole_pass(model_name, batch, size, rounds):
    """mode -> median seconds of the whole forward pass (eval mode, one table, the benchmark-mode choices):
    ``plain`` (every layer on its own, no prepared weights), ``fused`` (``model.fuse()``: BatchNorm folded, ReLU
    and shortcut as conv epilogues, kept activation buffers, prepared weights), and ``torch``, the twin
    (``bench.torch_twin``) holding the same state_dict; None without torch."""
    plain = models.get_model(model_name).prepare_weights(False)
    fused = models.get_model(model_name).fuse().prepare_weights(True)
    fused.load_state_dict(plain.state_dict())
    x = np.random.default_rng(1).standard_normal((batch, plain.input_shape[0], size, size)).astype(np.float32)
    calls = {"plain": lambda: plain(x), "fused": lambda: fused(x)}
    try:
        import torch
        twin = torch_twin(plain).eval()
        twin.load_state_dict({k: torch.from_numpy(np.array(v)) for k, v in plain.state_dict().items()})
        tx = torch.from_numpy(x)
        calls["torch"] = lambda: twin(tx)
    except ImportError:
        return None
    with autotune.flags(benchmark=True):
        with torch.no_grad():
            samples = measure.interleaved(calls, rounds)      # one warm-up each (tunes the eval keys), not counted
    paired = np.array(samples["fused"]) / np.array(samples["torch"])
    return {**{mode: measure.median(s) for mode, s in samples.items()},
            "quartiles": (np.percentile(paired, 25), np.percentile(paired, 75))}


def report(results, rounds) -> str:
    names = list(ALGORITHMS)
    lines = [header("CPU nets: conv time autotuned, per single algorithm, and torch's"),
             f"Conv time of one forward pass (sum of every conv call), median of {rounds} interleaved rounds; "
             "ms. `n/a (k)`: the algorithm does not support k distinct conv layers of the net. "
             "Ratio = autotuned / torch (target in brackets); speedup = best single algorithm / autotuned.\n",
             "| net | autotuned | " + " | ".join(names) + " | torch | ratio to torch | speedup over best single "
             "| tuning s |", "|---" * (len(names) + 6) + "|"]
    for label, (model_name, medians, params, unsupported, tuning, chosen, _) in results.items():
        total = {mode: sum(per.values()) for mode, per in medians.items()}
        singles = {n: total[n] for n in names if n in total}
        best = min(singles, key=singles.get) if singles else None
        cells = [f"{total[n] * 1e3:.1f}" if n in total else f"n/a ({unsupported[n]})" for n in names]
        torch_ms = f"{total['torch'] * 1e3:.1f}" if "torch" in total else "-"
        target = TARGETS.get(model_name)
        ratio = (f"{total['autotuned'] / total['torch']:.2f}" + (f" (<= {target})" if target else "")
                 if "torch" in total else "-")
        speedup = f"{singles[best] / total['autotuned']:.2f}x ({best})" if best else "-"
        lines.append(f"| {label} | **{total['autotuned'] * 1e3:.1f}** | " + " | ".join(cells)
                     + f" | {torch_ms} | {ratio} | {speedup} | {tuning:.1f} |")
    lines += ["", f"## The whole forward pass against torch's same model (same weights), eval mode, median of "
              f"{rounds} interleaved rounds, ms (target <= {WHOLE_TARGET})", "",
              "| net | plain | fused + prepared | torch | plain / torch | fused / torch "
              "| fused / torch round by round: quartiles | fused / plain |",
              "|---|---|---|---|---|---|---|---|"]
    for label, (model_name, *_rest, whole) in results.items():
        if whole:
            met = "met" if whole["fused"] / whole["torch"] <= WHOLE_TARGET else "missed"
            lines.append(f"| {label} | {whole['plain'] * 1e3:.1f} | {whole['fused'] * 1e3:.1f} | "
                         f"{whole['torch'] * 1e3:.1f} | {whole['plain'] / whole['torch']:.2f} | "
                         f"**{whole['fused'] / whole['torch']:.2f}** ({met}) | {whole['quartiles'][0]:.2f}-"
                         f"{whole['quartiles'][1]:.2f} | {whole['fused'] / whole['plain']:.2f} |")
    for label, (model_name, medians, params, unsupported, tuning, chosen, _) in results.items():
        lines += [f"\n## {label}: per layer (ms)\n", "| layer | shape | chosen | autotuned | torch | ratio |",
                  "|---|---|---|---|---|---|"]
        for layer, p in params.items():
            auto = medians["autotuned"][layer]
            theirs = medians.get("torch", {}).get(layer)
            t = f"{theirs * 1e3:.2f} | {auto / theirs:.2f}" if theirs else "- | -"
            lines.append(f"| {layer} | {p} | {chosen.get(p, '?')} | {auto * 1e3:.2f} | {t} |")
    return "\n".join(lines) + "\n"


def plot(results, path):
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = ["autotuned"] + list(ALGORITHMS)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(modes)
    for j, mode in enumerate(modes):
        xs, ys = [], []
        for i, (_, medians, *_rest) in enumerate(results.values()):
            if mode in medians and "torch" in medians:
                xs.append(i + j * width)
                ys.append(sum(medians[mode].values()) / sum(medians["torch"].values()))
        ax.bar(xs, ys, width, label=mode)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(results))], list(results), fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel("conv time / torch's (log; lower is better)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, one round (a smoke test)")
    ap.add_argument("--rounds", type=int, default=None, help="timed rounds (default 5, 1 with --quick)")
    ap.add_argument("--out", type=Path, default=None, help="markdown path (default bench/results/cpu-nets.md; "
                                                           "/tmp/cpu-nets-quick.md with --quick)")
    ap.add_argument("--models", default=None, help="comma-separated model names to run (default: all five)")
    args = ap.parse_args(argv)
    rounds = args.rounds or (1 if args.quick else 5)
    out = args.out or (Path("/tmp/cpu-nets-quick.md") if args.quick else RESULTS / "cpu-nets.md")
    results = {}
    chosen = set(args.models.split(",")) if args.models else None
    for label, model_name, batch, size in (QUICK if args.quick else NETS):
        if chosen is not None and model_name not in chosen:
            continue
        print(f"{label} ...", flush=True)
        results[label] = (model_name, *conv_times(model_name, batch, size, rounds),
                          whole_pass(model_name, batch, size, rounds))
    text = report(results, rounds)
    try:
        plot(results, out.with_suffix(".png"))
        text = text.replace("\n\n## ", f"\n\n![conv time / torch's]({out.with_suffix('.png').name})\n\n## ", 1)
    except ImportError:
        text += "\n(matplotlib not installed: no plot)\n"
    write_record(out, text)


if __name__ == "__main__":
    main()
