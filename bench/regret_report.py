"""The regret bench's record: the issue's targets per import order, then each layer's choices and regrets."""
from __future__ import annotations

import statistics

from bench.common import header
from bench.regret_placement import has_placements, place, regrets_in_place, rounds_in
from bench.regret_placement import summary as placement_summary

#: (row, phase, judged against which race)
ROWS = (("quiet, first tunings in a process", "first", "judge_quiet"),
        ("quiet, second tunings (warm)", "warm", "judge_quiet"),
        ("beside a steady one-core neighbour, while it runs (against a race under it)", "steady", "judge_steady"),
        ("the same choices, against the quiet race", "steady", "judge_quiet"),
        ("once the neighbour has gone, after a second of calls (against the quiet race)", "after", "judge_quiet"),
        ("beside a neighbour that comes and goes (against the quiet race)", "bursty", "judge_quiet"),
        ("the same, once it has gone, after a second of calls (against the quiet race)", "after_bursty",
         "judge_quiet"))

#: the issue's targets, worst regret per phase, each against its own judge (``TARGET_JUDGES``; ``regret_misses``)
TARGETS = {"first": 0.05, "steady": 0.10, "after": 0.05, "bursty": 0.10}
TARGET_JUDGES = {"first": "judge_quiet", "steady": "judge_steady", "after": "judge_quiet", "bursty": "judge_quiet"}

#: (row, phase, judge): the same choices against a judge of their layer taken right after them
MOMENT_ROWS = (("quiet, second tunings (warm), against a race right after each", "warm", "judge_moment_warm"),
               ("beside the steady neighbour, against a race under it right after each", "steady",
                "judge_moment_steady"),
               ("once the steady neighbour has gone, after a second of calls, against a race right after",
                "after", "judge_moment_after"),
               ("once the neighbour that comes and goes has gone, the same", "after_bursty",
                "judge_moment_after_bursty"))


def regrets(run: dict, phase: str, against: str) -> list:
    """Each layer's regret: the judge's median of the phase's choice over the judge's best, less one."""
    return [judged[e["algo"]] / min(judged.values()) - 1 for e, judged in zip(run[phase], run[against])]


def judge_against_itself(run: dict, judge: str = "judge_quiet") -> list:
    """Each layer's regret of the judge's first pass's fastest, timed by its second: the noise floor."""
    return [two[min(one, key=one.get)] / min(two.values()) - 1
            for one, two in zip(run[judge + "_1"], run[judge + "_2"])]


def costs(run: dict, phase: str) -> list:
    """Each layer's tuning seconds (JIT excluded) over the quiet judge's median of the algorithm it chose."""
    return [(e["seconds"] - e["jit"]) / judged[e["algo"]] for e, judged in zip(run[phase], run["judge_quiet"])]


def _pct(values) -> str:
    return f"{statistics.median(values):.0%} / {max(values):.0%}"


def _places(run: dict, i: int) -> str:
    """Layer i's placements, N(ear) or F(ar), in its first, warm, after and bursty tunings, and its judge rounds."""
    marks = "".join(place(run, run[phase][i]["placement_us"])[0].upper()
                    for phase in ("first", "warm", "after", "bursty"))
    return f"{marks} ({rounds_in(run, i, 'near')} / {rounds_in(run, i, 'far')})"


def _in_place(run: dict, phase: str) -> str:
    judged = [r for r in regrets_in_place(run, phase) if r is not None]
    return f"{_pct(judged)} ({len(judged)} of {len(run[phase])} layers)" if judged else "(no judge rounds there)"


def render(runs: dict, load: float, args) -> str:
    orders = list(runs)
    lines = [header("The tuner's regret: benchmark mode's choices against races of every algorithm"), "",
             f"`python -m bench.regret --layers {args.layers} --rounds {args.rounds} --steady-rounds "
             f"{args.steady_rounds} --after {args.after}`: one fresh process per import order. Load average at "
             f"the start: {load:.2f}. The machine's contention, "
             f"probed from outside before each quiet phase (share of two spinning probes' time spent waiting for a "
             f"CPU; ~0 is quiet, ~0.33 is one core of two taken): "
             + "; ".join(f"{o} first: " + ", ".join(f"{k} {v:.3f}" for k, v in runs[o]["quiet"].items())
                         for o in orders) + ".", "",
             "Regret: the judge's time of the choice over the judge's best, less one (0% = the fastest "
             "was kept); the judge times blocks of back-to-back calls, as a step pays for them "
             "(`bench/regret_layers.py`); the quiet judge is the mean of two passes a minute or two apart (after "
             "the warm tunings, and last), each an algorithm's median block; the steady neighbour's the mean of "
             f"two passes back to back under it after its tunings, of {args.steady_rounds} rounds each spread over "
             "the layers, each an algorithm's mean block (a block there holds none of the neighbour's time "
             "slices, one or two). Tuning cost: the tuning's seconds (JIT excluded) over the quiet "
             "judge's time of the chosen algorithm.", ""]
    if all(has_placements(runs[o]) for o in orders):
        lines += ["Where the host had put the VM's two vCPUs (`bench/regret_placement.py`: the pool's fork/join "
                  "latency, read before each tuning and each judge round; near: the lower latency), and the "
                  "rows judged on the quiet judge's rounds in the placement the choice was raced in: "
                  + "; ".join(f"{o} first: {placement_summary(runs[o])}" for o in orders) + ".", ""]
    lines += [
             "| measure | " + " | ".join(f"{o} first" for o in orders) + " | target |",
             "|---|" + "---|" * len(orders) + "---|"]
    for row, phase, against in ROWS:
        if not all(phase in runs[o] for o in orders):            # a record from before the phase existed
            continue
        target = f"<= {TARGETS[phase]:.0%} worst" if TARGET_JUDGES.get(phase) == against else ""
        if row.startswith("the same choices"):
            target = "(none)"
        cells = [f"{_pct(regrets(runs[o], phase, against))} (median / worst)" for o in orders]
        lines.append(f"| {row} | " + " | ".join(cells) + f" | {target} |")
        if phase in ("first", "after", "bursty") and against == "judge_quiet" \
                and all(has_placements(runs[o]) for o in orders):
            lines.append(f"| {row.split(' (')[0]}, judged in its race's vCPU placement | "
                         + " | ".join(_in_place(runs[o], phase) for o in orders) + f" | {target} |")
    for row, phase, against in MOMENT_ROWS:
        if all(against in runs[o] for o in orders):
            lines.append(f"| {row} | " + " | ".join(f"{_pct(regrets(runs[o], phase, against))} (median / worst)"
                                                   for o in orders) + " | (mostly the race's own error) |")
    for judge, where in (("judge_quiet", "quiet"), ("judge_steady", "steady neighbour's")):
        if all(judge + "_2" in runs[o] for o in orders):
            floor = [f"{_pct(judge_against_itself(runs[o], judge))} (median / worst)" for o in orders]
            lines.append(f"| the {where} judge against itself: its first pass's fastest, timed by its second | "
                         + " | ".join(floor) + " | (noise floor) |")
    for phase, after, who, target in (("steady", "after", "steady neighbour", "all"),
                                      ("bursty", "after_bursty", "neighbour that comes and goes", "")):
        if not all(after in runs[o] for o in orders):
            continue
        marked = [f"{sum(e['provisional'] for e in runs[o][phase])} of {len(runs[o][phase])}" for o in orders]
        lines.append(f"| {who}: choices marked provisional | " + " | ".join(marked) + f" | {target} |")
        reraced = [f"{sum(e['reraced'] > 0 for e in runs[o][after])} re-raced, "
                   f"{sum(e['provisional'] for e in runs[o][after])} still provisional" for o in orders]
        lines.append(f"| {who}: once it has gone, after a second of calls | " + " | ".join(reraced) + " | |")
    for phase, target in (("warm", "<= 40x / <= 150x"), ("first", "")):
        cells = [f"{statistics.median(costs(runs[o], phase)):.0f}x / {max(costs(runs[o], phase)):.0f}x" for o in orders]
        lines.append(f"| tuning cost over the choice's time, {phase} (median / worst) | " + " | ".join(cells)
                     + f" | {target} |")
    for o in orders:
        run = runs[o]
        placed = has_placements(run)
        lines += ["", f"## {o} first", "", "| layer | pass | first | warm | steady (regret under it / quiet) | "
                  "after | bursty | quiet judge's best | judge against itself | cost warm / first |"
                  + (" placement: first, warm, after, bursty (judge rounds near / far) |" if placed else ""),
                  "|---|---|---|---|---|---|---|---|---|---|" + ("---|" if placed else "")]
        r = {phase + against: regrets(run, phase, against) for _, phase, against in ROWS if phase in run}
        cw, cf, floor = costs(run, "warm"), costs(run, "first"), judge_against_itself(run)
        for i, name in enumerate(run["layers"]):
            best = min(run["judge_quiet"][i], key=run["judge_quiet"][i].get)

            def cell(phase, against="judge_quiet"):
                e = run[phase][i]
                mark = " P" if phase == "bursty" and e["provisional"] else ""
                return f"{e['algo']}{mark} {r[phase + against][i]:+.0%}" + now(phase)

            def now(phase):
                """The regret against the race right after the choice, where the run has one."""
                judged = run.get(f"judge_moment_{phase}")
                return f" (now {regrets(run, phase, f'judge_moment_{phase}')[i]:+.0%})" if judged else ""

            def bursty_cell():
                if "after_bursty" not in run:
                    return cell("bursty")
                after = run["after_bursty"][i]
                return (cell("bursty") + (f" -> {after['algo']} {r['after_burstyjudge_quiet'][i]:+.0%} (re-raced)"
                                          + now("after_bursty") if after["reraced"] else ""))
            steady = run["steady"][i]
            mark = " P" if steady["provisional"] else ""
            after = run["after"][i]
            lines.append(f"| {name} | {run['ops'][i]} | {cell('first')} | {cell('warm')} | {steady['algo']}{mark} "
                         f"{r['steadyjudge_steady'][i]:+.0%} / {r['steadyjudge_quiet'][i]:+.0%}{now('steady')} | "
                         f"{after['algo']} {r['afterjudge_quiet'][i]:+.0%}{' (re-raced)' if after['reraced'] else ''}"
                         f"{now('after')} "
                         f"| {bursty_cell()} | {best} {run['judge_quiet'][i][best] * 1e3:.3f} ms | "
                         f"{floor[i]:+.0%} | {cw[i]:.0f}x / {cf[i]:.0f}x |"
                         + (f" {_places(run, i)} |" if placed else ""))
        lines.append("")
        lines.append("P: marked provisional (chosen while another process shared the cores); bursty: the choice "
                     "beside the neighbours, and where it was re-raced once they had gone, the choice then; now: "
                     "the regret against a race of the layer alone right after the choice (`regret_layers.moment`).")
    return "\n".join(lines) + "\n"
