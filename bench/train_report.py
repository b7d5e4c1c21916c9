"""The record of ``python -m bench.train`` (bench/results/cpu-train.md): the step in each import order, then
per order the step table and the targets judged from the numbers, the cold tuning, and the per-layer choices."""
from __future__ import annotations

from collections import Counter

import numba
import numpy as np

from autotune import measure
from convalgos import PASSES

from . import orders
from .common import header
from .regret_placement import NEAR

#: the issues' targets: step / torch's step per model (#9: 1.5 for both; #12, speed: 1.0 for ResNet-20),
#: autotuned speedup over the best single algorithm (ResNet-20), cold tuning seconds of all three passes.
TORCH_TARGET = {"lenet5": 1.5, "resnet20": 1.0}
SINGLE_TARGET = {"resnet20": 1.2}
COLD_TARGET = {"resnet20": 10.0}
ABANDON = 4.0


def ms(seconds) -> str:
    return f"{seconds * 1e3:.1f}"


def choice(algos: list) -> str:
    """A pass's autotuned choice over the processes: one name, or each name with its count."""
    counts = Counter(algos)
    return algos[0] if len(counts) == 1 else ", ".join(f"{a} {k}/{len(algos)}" for a, k in counts.most_common())


def summarize(m: dict) -> dict:
    """One order's children pooled (``orders.merge`` of ``bench.train.measure_model``'s JSON), in the form the
    record reads: medians over the pooled samples, (layer, pass) and (shape, pass) keys, choices counted."""
    med = measure.median
    times, abandoned = m["times"], set(m["abandoned"])
    auto, theirs = times["autotuned"], times.get("torch", [])
    paired = (np.array(auto) / np.array(theirs) if theirs and "torch" not in abandoned and len(auto) == len(theirs)
              else np.array([]))
    return {"times": {n: med(s) for n, s in times.items()}, "steps": {n: len(s) for n, s in times.items()},
            "abandoned": abandoned, "round_ratios": paired, "placements": np.array(m.get("placements", [])),
            "losses": {n: v[0] for n, v in m["losses"].items()},
            "parts": {n: {(layer, op): med(s) for layer, per in log.items() for op, s in per.items()}
                      for n, log in m["parts"].items()},
            "cold": {"wall": med(m["cold"]["wall"]), "late_compile": med(m["cold"]["late_compile"]),
                     "passes": {op: med(s) for op, s in m["cold"]["passes"].items()}},
            "unsupported": {n: k[0] for n, k in m["unsupported"].items()},
            "calls": [(name, shapes[0]) for name, shapes in m["calls"].items()],
            "chosen": {(p, op): choice(a) for p, per in m["chosen"].items() for op, a in per.items()},
            "alone": {(p, op): {who: med(s) for who, s in d.items()} for p, per in m["alone"].items()
                      for op, d in per.items()},
            "compile": med(m["compile"]), "processes": len(m["compile"])}


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
        step = f"{ms(t)} ({r['steps'][mode]} steps)" if mode in r["abandoned"] else ms(t)
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
        paired = r.get("round_ratios", [])
        spread = (f" (the same ratio round by round, {len(paired)} rounds: quartiles {np.percentile(paired, 25):.2f}-"
                  f"{np.percentile(paired, 75):.2f})" if len(paired) >= 4 else "")
        lines.append(f"- {label} train step / torch's: **{ratio:.2f}**{spread} (target <= {target}): "
                     f"{verdict(ratio <= target)}. Where it goes, ms ours / torch's: conv passes alone {gaps}; "
                     f"the rest of the step {rest}.")
        inside = ", ".join(f"{op} {auto_parts[op] / ours[op]:.2f}x" for op in PASSES if ours[op] > 0)
        lines.append(f"- {label}: what a user pays is the step. Our conv passes inside it / alone: {inside} (the "
                     "conv columns against the alone figures above); torch's are timed alone only, so where ours "
                     "take longer inside the step, torch's conv columns (~) likely understate what its step spends "
                     "on them and its rest overstates it by as much. bench.train_passes times passes alone too, "
                     "after every algorithm of ours: its torch column is no step's either.")
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


def order_rows(label, per_order) -> list:
    """The step per import order: autotuned against forced direct, the best single algorithm and torch."""
    rows = []
    lowest = min((r["placements"].min() for r in per_order.values() if len(r["placements"])), default=0.0)
    for order, r in per_order.items():
        t = r["times"]
        singles = {n: v for n, v in t.items() if n not in ("autotuned", "torch")}
        best = min(singles, key=singles.get) if singles else None
        base = per_order.get("convalgos")
        paired = r["round_ratios"]
        cells = [f"**{ms(t['autotuned'])}**", ms(t["direct"]) if "direct" in t else "-",
                 f"{ms(singles[best])} ({best})" if best else "-", ms(t["torch"]) if "torch" in t else "-",
                 f"{t['autotuned'] / t['direct']:.2f}" if "direct" in t else "-",
                 f"{t['autotuned'] / singles[best]:.2f}" if best else "-",
                 f"{t['autotuned'] / t['torch']:.2f}" if "torch" in t else "-",
                 f"{np.percentile(paired, 25):.2f}-{np.percentile(paired, 75):.2f}" if len(paired) >= 4 else "-",
                 by_placement(r, lowest),
                 f"{t['autotuned'] / base['times']['autotuned']:.2f}" if base else "-"]
        rows.append(f"| {label} | {order} | " + " | ".join(cells) + " |")
    return rows


def by_placement(r: dict, lowest: float) -> str:
    """The round-by-round ratio to torch's step, its median over the rounds with the vCPUs near each other and over
    those with them far apart (the fork/join latency before the round within ``NEAR`` times ``lowest``, the run's
    lowest, or not: ``regret_placement.py``), with the rounds' counts."""
    paired, where = r["round_ratios"], r["placements"]
    if not len(paired) or len(where) != len(paired):
        return "-"
    near = where <= NEAR * lowest
    return " / ".join(f"{np.median(paired[side]):.2f} ({side.sum()})" if side.any() else "- (0)"
                      for side in (near, ~near))


def report(results, args, rounds, min_seconds) -> str:
    command = "python -m bench.train" + (" --quick" if args.quick else "")
    first = next(iter(results.values()))[1]
    lines = [header("CPU training step: autotuned, each single algorithm, and torch, in each import order"),
             f"Command: `{command}`; {orders.describe(args)}; in each process a JIT warm-up, then {rounds} "
             f"interleaved rounds at least (more while under {min_seconds:g} s), pooled per order. numba and torch "
             f"with {numba.get_num_threads()} threads. One training step = forward, CrossEntropyLoss, backward, "
             f"SGD(lr=0.1, momentum=0.9, weight_decay=5e-4), on one fixed batch with the weights reset (untimed) "
             "before each step. Step: median ms over the pooled rounds. First import: the module the processes "
             "imported first (a user's program starts with numpy, or torch, which imports numpy). Near / far: the "
             "round-by-round ratio's median over the rounds taken with the host's two vCPUs near each other or far "
             f"apart (the pool's fork/join latency before the round within {NEAR:g}x the model's lowest reading, "
             "or not: `bench/regret_placement.py`); a process runs in one or the other by chance, whatever it "
             "imported first.\n",
             "| model | first import | autotuned | forced direct | best single | torch | autotuned / direct | "
             "autotuned / best single | autotuned / torch | its quartiles round by round | the same, vCPUs near / far "
             "(rounds) | autotuned / convalgos first |", "|---" * 12 + "|"]
    for label, (_, per_order) in results.items():
        lines += order_rows(label, per_order)
    for order in first:
        lines += ["", f"## {order} first: every mode", "",
                  "Conv columns: the sum over layers of each conv pass's median time inside the step; other = step - "
                  "conv passes (BatchNorm, ReLU, pooling, Linear, loss, update). torch's conv columns (~) are its "
                  f"layers timed alone, pass by pass. A mode over {ABANDON:g}x the autotuned step is timed once per "
                  "process and left out of the rounds. loss: the step's loss from the shared weights (the torch "
                  "twin must agree).", "",
                  "| model | mode | step ms | forward convs | backward-data convs | backward-filter convs | other | "
                  "step / torch | loss |", "|---" * 9 + "|"]
        for label, (_, per_order) in results.items():
            lines += summary_rows(label, per_order[order])
        lines += ["", "Targets:", ""]
        for label, (model_name, per_order) in results.items():
            lines += target_lines(label, model_name, per_order[order])
    lines += ["", "## Cold tuning (medians over each order's processes)", ""]
    for order in first:
        for label, (_, per_order) in results.items():
            r = per_order[order]
            c = r["cold"]
            lines.append(
                f"- {label}, {order} first: JIT warm-up {r['compile']:.1f} s (one cold-tuned step at batch 2: every "
                f"candidate compiled or loaded from Numba's cache, not counted after); first step {c['wall']:.1f} s; "
                "tuning " + ", ".join(f"{op} {s:.1f} s" for op, s in c["passes"].items())
                + f" (sum {sum(c['passes'].values()):.1f} s); Numba compiling or loading kernels in it: "
                f"{c['late_compile']:.1f} s. Not forced (keys of the step unsupported): "
                + (", ".join(f"{n} ({k})" for n, k in r["unsupported"].items()) or "none") + ".")
    order = next(iter(first))
    for label, (_, per_order) in results.items():
        lines += [f"\n## {label}: per layer, {order} first", "",
                  "Each pass: the autotuned choice (over the processes) and its median ms in the step (alone: ours / "
                  "torch's ms).", "", "| layer | shape | forward | backward-data | backward-filter |",
                  "|---|---|---|---|---|"]
        lines += layer_rows(per_order[order])
    return "\n".join(lines) + "\n"
