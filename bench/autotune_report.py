"""The record of ``python -m bench.autotune`` (bench/results/cpu-autotune.md): per import order and condition
the regret, tuning cost and dispatch overhead against their targets, then per order every layer's row."""
from __future__ import annotations

import numpy as np

from convalgos import ALGORITHMS

from . import orders
from .common import header

REGRET_TARGETS, COST_TARGETS, DISPATCH_TARGET_US = (0.02, 0.10), (40, 150), 10.0
CONDITIONS = {"quiet": "quiet (nothing else started)",
              "neighbour": "neighbour (a pure-Python busy loop on one core during the tunings)"}


def verdict(ok: bool) -> str:
    return "**met**" if ok else "**missed**"


def row_line(name, op, r, conditions) -> str:
    cells = [f"{name}{'' if op == 'forward' else ' ' + op}", f"{r['best']} {r['times'][r['best']] * 1e3:.3f}",
             f"{r['gap']:.1%}"]
    for c in conditions:
        d = r[c]
        costs = [k["total"] for k in d["costs"]]
        cells += [", ".join(d["choices"]) + (f" ({d['ties']} tied)" if d["ties"] else ""), f"{max(d['regrets']):.1%}",
                  f"{np.median(costs):.0f}" if costs else "-"]
    cells += [f"{r['heuristic']} ({r['heuristic_regret']:.1%})", f"{r['first_seconds']:.2f}"]
    return "| " + " | ".join(cells) + " |"


def stats(rows, condition) -> dict:
    """The regrets and tuning costs of every tuning of ``rows`` in ``condition``, and their medians and worst."""
    regrets = [g for r in rows for g in r[condition]["regrets"]]
    costs = [k for r in rows for k in r[condition]["costs"]]
    total = [k["total"] for k in costs]
    return {"regrets": regrets, "costs": costs, "regret": (np.median(regrets), max(regrets)),
            "cost": (np.median(total), max(total)) if total else None}


def totals(rows, condition) -> list:
    s = stats(rows, condition)
    separated = [r for r in rows if r["gap"] > 0.05]
    agree = np.mean([r[condition]["agree"] for r in separated]) if separated else float("nan")
    chosen = sum(r["times"][c] for r in rows for c in r[condition]["choices"]) / len(rows[0][condition]["choices"])
    best = sum(r["times"][r["best"]] for r in rows)
    med, worst = s["regret"]
    lines = [f"- regret of the tuned choice: median {med:.1%}, worst {worst:.1%} (targets <= "
             f"{REGRET_TARGETS[0]:.0%}, <= {REGRET_TARGETS[1]:.0%}): {verdict(med <= REGRET_TARGETS[0])}, "
             f"{verdict(worst <= REGRET_TARGETS[1])}",
             f"- sum over layers: chosen {chosen * 1e3:.1f} ms (mean over tunings) against the oracle's best "
             f"{best * 1e3:.1f} ms",
             f"- same choice in {agree:.0%} of tunings on the {len(separated)} layers whose two best differ by "
             "more than 5%"]
    if s["cost"]:
        (med, worst), costs = s["cost"], s["costs"]
        parts = {k: np.median([c[k] for c in costs]) for k in ("warmups", "timed", "rest", "runs")}
        lines.append(f"- tuning cost in runs of the chosen algorithm (every tuning but each layer's first): median "
                     f"{med:.0f}, worst {worst:.0f} (targets <= {COST_TARGETS[0]}, <= {COST_TARGETS[1]}): "
                     f"{verdict(med <= COST_TARGETS[0])}, {verdict(worst <= COST_TARGETS[1])}; medians of its parts: "
                     f"warm-ups {parts['warmups']:.0f}, timed runs ~{parts['timed']:.0f} "
                     f"({parts['runs']:.0f} runs), the rest (reference check, bookkeeping) {parts['rest']:.0f}")
    return lines


def summary_rows(per_order, conditions) -> list:
    rows = []
    for order, child in per_order.items():
        layers = [r for _, _, r in child["rows"]]
        for c in conditions:
            s = stats(layers, c)
            cost = f"{s['cost'][0]:.0f} / {s['cost'][1]:.0f}" if s["cost"] else "-"
            dispatch = [f"{us:.1f}" for us, _, _ in child["dispatch"][c].values()]
            rows.append(f"| {order} | {c} | {s['regret'][0]:.1%} / {s['regret'][1]:.1%} | {cost} | "
                        + " | ".join(dispatch) + " |")
    return rows


def order_section(order, child, conditions, dispatch_layer) -> list:
    rows = {(name, op): r for name, op, r in child["rows"]}
    head = ["| layer | oracle best (ms) | 2nd best gap |"]
    for c in conditions:
        head.append(f" {c}: chosen (each tuning) | regret | cost in runs |")
    lines = ["", f"## {order} first: every layer", "", "".join(head) + " heuristic (regret) | first tuning s |",
             "|---" * (5 + 3 * len(conditions)) + "|"]
    lines += [row_line(name, op, r, conditions) for (name, op), r in rows.items()]
    for c in conditions:
        lines += ["", f"Totals, {order} first, {c}:", ""] + totals(list(rows.values()), c)
    heur = [r["heuristic_regret"] for r in rows.values()]
    lines.append(f"\nRegret of the heuristic's choice (benchmark off), {order} first: median "
                 f"{np.nanmedian(heur):.1%}, worst {np.nanmax(heur):.1%}.")
    lines += ["", f"Dispatch overhead, {order} first: a hit of `autotune.<pass>` over `convalgos.<pass>(..., "
              f"algo=<the choice>)` on `{dispatch_layer}`, difference of the medians of interleaved calls (target "
              "<= 10 us); beside it, over `convalgos.run(<the choice>, ...)` with the layer's ConvParams built once "
              "(no validation at all):", ""]
    for condition, per_pass in child["dispatch"].items():
        lines += [f"- {condition}, {op}: **{us:.1f} us** ({algo}): {verdict(us <= DISPATCH_TARGET_US)}; over "
                  f"convalgos.run {bare:.1f} us" for op, (us, bare, algo) in per_pass.items()]
    return lines


def report(per_order: dict, conditions, args, dispatch_layer) -> str:
    """``per_order``: order -> a child's JSON (``bench.autotune.measure_all``)."""
    flags = " ".join(f for f, on in (("--quick", args.quick), ("--both", args.both),
                                     ("--neighbour", args.neighbour and not args.both)) if on)
    command = (f"python -m bench.autotune {flags} --tunings {args.tunings} --oracle-rounds {args.oracle_rounds} "
               f"--passes {' '.join(args.passes)}").replace("  ", " ")
    passes = list(next(iter(per_order.values()))["dispatch"][conditions[0]])
    lines = [header("autotune: regret, tuning cost and dispatch overhead on the CPU, in each import order"),
             f"Command: `{command}`; {orders.describe(args)}. Algorithms: {', '.join(ALGORITHMS)}. Conditions: "
             + ", ".join(CONDITIONS[c] for c in conditions)
             + ". The oracle re-times every candidate quietly, in the same process. Each tuning writes into the "
             "caller's buffer (out=). Regret: the worst of the layer's tunings; cost: the median over its tunings "
             "but the first.\n",
             f"Per import order (the module the process imported first) and condition: regret of the tuned choice "
             f"over every tuning, median / worst (targets <= {REGRET_TARGETS[0]:.0%} / {REGRET_TARGETS[1]:.0%}); "
             f"tuning cost in runs of the chosen algorithm, median / worst (targets <= {COST_TARGETS[0]} / "
             f"{COST_TARGETS[1]}); dispatch overhead in us per pass (target <= {DISPATCH_TARGET_US:g}).\n",
             "| first import | condition | regret | tuning cost | " + " | ".join(f"dispatch {op}" for op in passes)
             + " |", "|---" * (4 + len(passes)) + "|"]
    lines += summary_rows(per_order, conditions)
    for order, child in per_order.items():
        lines += order_section(order, child, conditions, dispatch_layer)
    return "\n".join(lines) + "\n"
