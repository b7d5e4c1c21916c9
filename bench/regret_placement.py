"""Judging a choice in the placement it was raced in: where the host had put the VM's vCPUs.

On these 2-core VMs the host changes where the two vCPUs run, for tens of seconds to minutes at a time, without
a word to the guest (``fork_join_seconds``: an empty parallel region takes 1.5 us, then 2.8 us; a one-thread
loop keeps its speed; inside the guest the threads stay on their two vCPUs). The race does not read it. The two
placements rank some algorithms differently (ResNet-18's C256 layer: ``winograd_fused_4x4`` 0.92x ``direct``'s
time in one, 1.04x in the other; the 1x1 stride-2 layer: ``direct`` 0.96x ``direct_channels`` in one, 1.38x in
the other). A race run in one placement and judged in the other reads as a regret though it kept the fastest of
its moment.

So ``bench.regret`` reads the latency before each tuning and before each of the judge's rounds, and the record
judges each choice twice: against every round (the judge's figure over the whole run), and against the rounds
taken in the placement its race ran in, where there are at least ``MIN_ROUNDS`` of them. A reading is "near"
within ``NEAR`` times the run's lowest reading, else "far".
"""
from __future__ import annotations

import time

from autotune.measure import median
from autotune.race.clock import wake_pool

#: a reading within this factor of the run's lowest is the near placement (the lower latency)
NEAR = 1.35
#: the fewest judge rounds in one placement to judge a choice on them alone
MIN_ROUNDS = 5


def fork_join_seconds(regions: int = 500) -> float:
    """Seconds per empty parallel region over Numba's threads, back to back with the pool awake: how fast the
    threads signal each other, which says how the cores they run on sit. Measured here (2026-12-05, a 2-core AMD
    EPYC VM): 1.5 us for minutes, then 2.8 us for tens of seconds, switching abruptly, while a one-thread loop
    kept its speed within 1% (the clock did not change) and inside the guest nothing moved (the two threads on
    their two vCPUs, the same run-queue waits): the host changed where the VM's vCPUs run (cores that share a
    cache or not, a busy sibling hyperthread: the guest cannot tell which)."""
    wake_pool()
    start = time.perf_counter()
    for _ in range(regions):
        wake_pool()
    return (time.perf_counter() - start) / regions


def placement_us() -> float:
    """The fork/join latency in microseconds, the median of three readings (about 3 ms)."""
    return median([fork_join_seconds() for _ in range(3)]) * 1e6


def has_placements(run: dict) -> bool:
    return "judge_quiet_rounds_1" in run and all("placement_us" in e for e in run["first"])


def readings(run: dict) -> list:
    """Every fork/join latency read in the run, us: before each tuning, after each phase of calls once a
    neighbour has gone, before each judge round."""
    tunings = [e["placement_us"] for phase in ("first", "warm", "steady", "after", "bursty", "after_bursty")
               for e in run.get(phase, []) if "placement_us" in e]
    rounds = [us for k in (1, 2) for rec in run[f"judge_quiet_rounds_{k}"] for us in rec["placements"]]
    return tunings + rounds


def near_limit(run: dict) -> float:
    return NEAR * min(readings(run))


def place(run: dict, us: float, limit: float | None = None) -> str:
    """"near" or "far" (``limit``: the run's ``near_limit``, where the caller has it)."""
    return "near" if us <= (near_limit(run) if limit is None else limit) else "far"


def rounds_in(run: dict, i: int, where: str) -> int:
    """How many of layer i's quiet judge rounds, both passes, ran in placement ``where``."""
    limit = near_limit(run)
    return sum(place(run, us, limit) == where for k in (1, 2)
               for us in run[f"judge_quiet_rounds_{k}"][i]["placements"])


def judge_in(run: dict, i: int, where: str) -> dict | None:
    """name -> the median of layer i's quiet judge blocks taken in placement ``where`` (both passes); an
    algorithm dismissed after its first blocks (``regret_layers.SLOW``) with none in ``where`` keeps them all; None
    under ``MIN_ROUNDS`` such rounds."""
    if rounds_in(run, i, where) < MIN_ROUNDS:
        return None
    picked, every, limit = {}, {}, near_limit(run)
    for k in (1, 2):
        rec = run[f"judge_quiet_rounds_{k}"][i]
        for name, blocks in rec["samples"].items():
            every.setdefault(name, []).extend(blocks)
            picked.setdefault(name, []).extend(t for t, us in zip(blocks, rec["placements"])
                                               if place(run, us, limit) == where)
    return {name: median(picked[name] or every[name]) for name in every}


def regrets_in_place(run: dict, phase: str) -> list:
    """Each layer's regret of the phase's choice against the judge's rounds in the placement its race ran in
    (None where the judge has too few rounds there)."""
    out = []
    for i, e in enumerate(run[phase]):
        judged = judge_in(run, i, place(run, e["placement_us"]))
        out.append(None if judged is None else judged[e["algo"]] / min(judged.values()) - 1)
    return out


def summary(run: dict) -> str:
    """The run's placements in a phrase: the readings' range, the near limit, how many tunings and rounds in each."""
    values, limit = readings(run), near_limit(run)
    tunings = [place(run, e["placement_us"], limit) for phase in ("first", "warm", "bursty") for e in run[phase]]
    rounds = [place(run, us, limit) for k in (1, 2) for rec in run[f"judge_quiet_rounds_{k}"]
              for us in rec["placements"]]
    return (f"fork/join {min(values):.2f}-{max(values):.2f} us, near <= {limit:.2f}; quiet and bursty "
            f"tunings near {tunings.count('near')}, far {tunings.count('far')}; judge rounds near "
            f"{rounds.count('near')}, far {rounds.count('far')}")
