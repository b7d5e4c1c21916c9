"""The record of ``python -m bench.nets`` (bench/results/cpu-nets.md): per net and import order the conv time in
every mode, the whole forward pass against torch's same model, and per layer the choice and its time; a plot of
conv time / torch's for the first order. Every figure is computed from the pooled samples of the children."""
from __future__ import annotations

from collections import Counter

import numpy as np

from autotune import measure
from convalgos import ALGORITHMS

from . import orders
from .common import header

#: issue 12's targets: conv time / torch's conv time, and the whole forward pass / torch's same model (<= 1.0).
TARGETS = {"vgg16": 0.6, "resnet18": 0.7, "mobilenet_v1": 0.6, "resnet20": 1.0, "lenet5": 1.0}
WHOLE_TARGET = 1.0


def conv_totals(r) -> dict:
    """mode -> the conv time of one pass: the sum over layers of each layer's median."""
    return {mode: sum(measure.median(s) for s in per_layer.values()) for mode, per_layer in r["conv"].items()}


def whole_medians(r) -> dict:
    return {mode: measure.median(s) for mode, s in r["whole"].items()}


def against_first(value, per_order, order, key) -> str:
    """value / the convalgos-first value of the same measure (``key`` of each order's figures)."""
    base = per_order.get("convalgos")
    return f"{value / key(base):.2f}" if base is not None and key(base) else "-"


def choice(algos: list) -> str:
    """The autotuned choice of a layer over the processes: one name, or each name with its count."""
    counts = Counter(algos)
    return algos[0] if len(counts) == 1 else ", ".join(f"{a} {k}/{len(algos)}" for a, k in counts.most_common())


def conv_rows(label, model_name, per_order, names) -> list:
    rows, totals = [], {o: conv_totals(r) for o, r in per_order.items()}
    for order, r in per_order.items():
        total = totals[order]
        singles = {n: total[n] for n in names if n in total}
        best = min(singles, key=singles.get) if singles else None
        cells = [f"{total[n] * 1e3:.1f}" if n in total else f"n/a ({r['unsupported'][n][0]})" for n in names]
        target = TARGETS.get(model_name)
        ratio = (f"{total['autotuned'] / total['torch']:.2f}" + (f" (<= {target})" if target else "")
                 if "torch" in total else "-")
        speedup = f"{singles[best] / total['autotuned']:.2f}x ({best})" if best else "-"
        base = against_first(total["autotuned"], totals, order, lambda t: t["autotuned"])
        torch_ms = f"{total['torch'] * 1e3:.1f}" if "torch" in total else "-"
        rows.append(f"| {label} | {order} | **{total['autotuned'] * 1e3:.1f}** | " + " | ".join(cells)
                    + f" | {torch_ms} | {ratio} | {speedup} | {base} | {np.median(r['tuning']):.1f} |")
    return rows


def whole_rows(label, per_order) -> list:
    rows, medians = [], {o: whole_medians(r) for o, r in per_order.items()}
    for order, r in per_order.items():
        w = medians[order]
        cells = [f"{w[m] * 1e3:.1f}" if m in w else "-" for m in ("plain", "fused", "direct", "torch")]
        if "torch" in w:
            paired = np.array(r["whole"]["fused"]) / np.array(r["whole"]["torch"])
            met = "met" if w["fused"] / w["torch"] <= WHOLE_TARGET else "missed"
            cells += [f"**{w['fused'] / w['torch']:.2f}** ({met})",
                      f"{np.percentile(paired, 25):.2f}-{np.percentile(paired, 75):.2f}"]
        else:
            cells += ["-", "-"]
        cells += [f"{w['fused'] / w['direct']:.2f}", f"{w['fused'] / w['plain']:.2f}",
                  against_first(w["fused"], medians, order, lambda m: m["fused"])]
        rows.append(f"| {label} | {order} | " + " | ".join(cells) + " |")
    return rows


def layer_rows(per_order) -> list:
    first = next(iter(per_order.values()))
    rows = []
    for layer, shapes in first["params"].items():
        cells = []
        for r in per_order.values():
            auto = measure.median(r["conv"]["autotuned"][layer])
            theirs = measure.median(r["conv"]["torch"][layer]) if "torch" in r["conv"] else None
            t = f" / {theirs * 1e3:.2f} ({auto / theirs:.2f})" if theirs else ""
            cells.append(f"{choice(r['chosen'][layer])}: {auto * 1e3:.2f}{t}")
        rows.append(f"| {layer} | {shapes[0]} | " + " | ".join(cells) + " |")
    return rows


def report(results, rounds, args) -> str:
    names = list(ALGORITHMS)
    first = next(iter(results.values()))[1]
    pooled = {o: len(next(iter(r["whole"].values()))) for o, r in first.items()}
    lines = [header("CPU nets: conv time autotuned, per single algorithm, and torch's, in each import order"),
             f"Command: `python -m bench.nets{' --quick' if args.quick else ''}`; {orders.describe(args)}; "
             f"{rounds} interleaved rounds in each process, pooled per order "
             f"({', '.join(f'{o}: {n}' for o, n in pooled.items())} rounds for the first net). "
             "First import: the module the process imported first (what a user's program starts with: numpy, "
             "or torch, which imports numpy).\n",
             "Conv time of one forward pass (sum over conv layers of each layer's median), ms. `n/a (k)`: the "
             "algorithm does not support k distinct conv layers of the net. Ratio = autotuned / torch (target in "
             "brackets); speedup = best single algorithm / autotuned; against convalgos first: autotuned / the "
             "same in the processes that imported convalgos first.\n",
             "| net | first import | autotuned | " + " | ".join(names) + " | torch | ratio to torch | speedup over "
             "best single | against convalgos first | tuning s |", "|---" * (len(names) + 8) + "|"]
    for label, (model_name, per_order) in results.items():
        lines += conv_rows(label, model_name, per_order, names)
    lines += ["", f"## The whole forward pass against torch's same model (same weights), eval mode, ms (target "
              f"fused / torch <= {WHOLE_TARGET})", "",
              "Plain: every layer on its own; fused: BatchNorm folded, ReLU and shortcut as epilogues, prepared "
              "weights (the benchmark-mode choices); direct: the fused net with every conv forced to direct. "
              "Quartiles: of fused / torch round by round.", "",
              "| net | first import | plain | fused + prepared | fused, forced direct | torch | fused / torch "
              "| quartiles | fused / direct | fused / plain | against convalgos first |", "|---" * 11 + "|"]
    for label, (_, per_order) in results.items():
        lines += whole_rows(label, per_order)
    for label, (_, per_order) in results.items():
        lines += [f"\n## {label}: per layer, autotuned choice and ms / torch's ms (ratio)\n",
                  "| layer | shape | " + " | ".join(f"{o} first" for o in per_order) + " |",
                  "|---" * (2 + len(per_order)) + "|"]
        lines += layer_rows(per_order)
    return "\n".join(lines) + "\n"


def plot(results, order, path):
    """Conv time / torch's per net and mode, in the processes that imported ``order`` first."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    modes = ["autotuned"] + list(ALGORITHMS)
    fig, ax = plt.subplots(figsize=(9, 4.5))
    width = 0.8 / len(modes)
    totals = [conv_totals(per_order[order]) for _, per_order in results.values()]
    for j, mode in enumerate(modes):
        xs, ys = [], []
        for i, total in enumerate(totals):
            if mode in total and "torch" in total:
                xs.append(i + j * width)
                ys.append(total[mode] / total["torch"])
        ax.bar(xs, ys, width, label=mode)
    ax.axhline(1.0, color="k", linewidth=0.8)
    ax.set_xticks([i + 0.4 - width / 2 for i in range(len(results))], list(results), fontsize=8)
    ax.set_yscale("log")
    ax.set_ylabel(f"conv time / torch's ({order} imported first; log; lower is better)")
    ax.legend(fontsize=7, ncol=4)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
