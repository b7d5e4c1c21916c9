"""The regret bench's misses, traced: for each choice over its row's target, the race's own evidence beside the
judge's times, so that a miss can be told apart after the fact (the race timed the candidates wrong, or the
machine moved between the race and the judge) without running it again.

``evidence(entry)`` keeps what a trace needs of a tuning's ``Entry`` (each candidate's median and runs in ms,
runs retaken for waiting, the share of its time its threads waited, why its runs were judged waits and all, the
share of the race's samples before which another process was runnable, the shoot-out, the provisional mark);
``bench.regret`` stores it with every tuning, and the whole run beside the record as JSON. ``traced(runs)``
writes one paragraph per miss.
"""
from __future__ import annotations

from bench.regret_report import TARGET_JUDGES, TARGETS, regrets

#: the candidates a trace shows: the race's fastest few, and the judge's best and the choice wherever they rank
SHOWN = 3


def evidence(entry) -> dict:
    """What a trace needs of a tuning's ``autotune`` Entry (plain JSON: milliseconds rounded to the us)."""
    ms = {n: round(t * 1e3, 3) for n, t in entry.times.items()}
    return {"times_ms": ms, "samples_ms": {n: [round(t * 1e3, 3) for t in s] for n, s in entry.samples.items()},
            "retaken": dict(entry.retaken), "waited": dict(entry.waited), "waits_kept": dict(entry.waits_kept),
            "neighbours": entry.neighbours, "abandoned": sorted(entry.abandoned), "mean_times": entry.mean_times,
            "verdict": {k: entry.verdict[k] for k in ("first", "second", "ratio", "low", "high", "pairs", "outcome")
                        if k in entry.verdict}, "provisional": entry.provisional}


def _candidate(name: str, ev: dict, judged: dict) -> str:
    runs = ", ".join(f"{t:.3f}" for t in ev["samples_ms"].get(name, []))
    notes = [f"{ev['retaken'][name]} retaken" if ev["retaken"].get(name) else "",
             f"waited {ev['waited'][name]:.0%} of its time" if ev["waited"].get(name) else "",
             f"judged waits and all: {ev['waits_kept'][name]}" if name in ev["waits_kept"] else "",
             "abandoned" if name in ev["abandoned"] else ""]
    said = "; ".join(n for n in notes if n)
    quiet = f"{judged[name] * 1e3:.3f} ms" if name in judged else "not judged"
    return (f"`{name}` {ev['times_ms'][name]:.3f} ms in the race (runs {runs}{'; ' + said if said else ''}), "
            f"{quiet} in the judge")


def trace(run: dict, phase: str, against: str, i: int) -> str:
    """One miss: the choice, its regret, and the race's evidence for the candidates that matter."""
    e, judged = run[phase][i], run[against][i]
    ev = e["evidence"]
    best = min(judged, key=judged.get)
    order = sorted(ev["times_ms"], key=ev["times_ms"].get)
    shown = list(dict.fromkeys(order[:SHOWN] + [n for n in (e["algo"], best) if n in ev["times_ms"]]))
    seen = ("another process runnable before "
            f"{ev['neighbours']:.0%} of its samples" if ev["neighbours"] is not None else "no run-queue readings")
    verdict = ev["verdict"]
    shootout = (f"shoot-out {verdict['second']} / {verdict['first']} = {verdict['ratio']:.3f} [{verdict['low']:.3f}, "
                f"{verdict['high']:.3f}] over {verdict['pairs']} pairs: {verdict['outcome']}" if verdict else
                "no shoot-out (the runner-up out of reach)")
    mark = f"provisional: {ev['provisional']}" if ev["provisional"] else "not provisional"
    means = "; times are means under the neighbour (blocks)" if ev["mean_times"] else ""
    return (f"**{run['layers'][i]}**, {phase}: kept `{e['algo']}`, {regrets(run, phase, against)[i]:+.0%} against "
            f"the {against.replace('judge_', '')} judge (best `{best}`). The race: "
            + "; ".join(_candidate(n, ev, judged) for n in shown)
            + f". {seen}; {shootout}; {mark}{means}.")


def traced(runs: dict) -> list:
    """The record's section: every choice over its row's target, traced (records without evidence: none)."""
    lines = []
    for order, run in runs.items():
        for phase, target in TARGETS.items():
            against = TARGET_JUDGES[phase]
            if phase not in run or against not in run or not all("evidence" in e for e in run[phase]):
                continue
            for i, regret in enumerate(regrets(run, phase, against)):
                if regret > target:
                    lines.append(f"- {order} first, " + trace(run, phase, against, i))
    if not lines:
        return []
    return ["", "## The misses, traced", "",
            "Each choice over its row's target, with the race's own evidence (`bench/regret_misses.py`; times in "
            "ms; a race's runs in the order taken, the checked call first where it was evidence; the whole run is "
            "in the JSON beside this record):", ""] + lines
