"""Beside a neighbour that stays: a race of blocks of back-to-back calls, decided on their mean cost per call.

Beside one process spinning on one of two cores, a sub-millisecond call runs clean or waits a whole time slice
of the neighbour's, by luck, so no single run says what a call costs there (``provisional.stayed``). A block of
calls lasting ``block_seconds`` (10 ms) holds no slice, one or two, and its cost per call is one of a few levels.
Measured (2026-12-05, AMD EPYC, 2 cores, the 1x1 stride-2 layer of ``bench.regret``): ``direct``'s blocks cost
0.14, 0.65 or 1.25 ms per call; of 21 blocks, the median fell on one level or another by the luck of a few, and
the regret bench's judge, taking that median, disagreed with itself by up to 520%. What a step pays beside
the neighbour is the mean over many blocks: over 80 blocks, each quarter's mean came within 20% of the whole's.

So the candidates (the ``CANDIDATES`` of smallest mean cost in the race) run blocks in interleaved rounds, in a
seeded shuffled order, and each is judged on its mean cost per call, m, and that mean's standard error, e
(the blocks' standard deviation over the square root of their number):

- after ``MIN_BLOCKS`` rounds, a candidate leaves once m - 2e > m' + 2e' for the leader's m' and e' (racing,
  as F-race: the time saved goes to the close ones);
- it stops when one candidate is left or after ``MAX_BLOCKS`` rounds;
- the smallest mean wins; the candidates within the tie band of it tie, and the preference decides.

Only where the runs themselves waited (``provisional.stayed``). Tried and undone (2026-12-06): blocks also where
the runs came through clean though another process was runnable before 90% of them (a sub-millisecond call
with the pool awake slips between a spinning neighbour's slices: ``direct`` on the depthwise layer 0.116 ms a
call in the race, 0.685 in blocks under the neighbour), deciding where the neighbour was still seen before 90%
of the blocks. In ``bench.regret`` beside the steady neighbour (36 tunings a run) the choices more than 10% off
the judge under it went from 3-8 (four runs before) to 4-7 (three runs), their mean regret from 4.5-8.1% to
2.9-7.7%, while a tuning there took 2.5x as long (median 0.16 -> 0.35-0.42 s).

Cost: nominally at most CANDIDATES x MAX_BLOCKS x block_seconds (0.36 s); a block is sized by the race's mean
cost, so one the neighbour slows further runs longer: measured beside it (2026-12-06, the 12 layers twice) a
tuning took 0.1-0.6 s, median 0.21 (it was ~0.05 s of blocks before). The choice is provisional, and raced
again once the machine is quiet (``provisional.py``).
"""
from __future__ import annotations

import math
from statistics import fmean, stdev

CANDIDATES = 3
MIN_BLOCKS = 4
MAX_BLOCKS = 12


def mean_and_error(costs: list) -> tuple[float, float]:
    """(the mean, its standard error); the error is infinite below two costs."""
    if len(costs) < 2:
        return fmean(costs), math.inf
    return fmean(costs), stdev(costs) / math.sqrt(len(costs))


def still_in(costs: dict) -> list:
    """The candidates not yet clearly slower than the leader: m - 2e <= m' + 2e' (module docstring)."""
    judged = {n: mean_and_error(c) for n, c in costs.items() if c}
    if not judged:
        return list(costs)
    lead = min(judged, key=lambda n: judged[n][0])
    ceiling = judged[lead][0] + 2 * judged[lead][1]
    return [n for n in costs if n not in judged or judged[n][0] - 2 * judged[n][1] <= ceiling]


def race_blocks(race, seconds: float) -> dict:
    """name -> the mean cost per call of its blocks (``clock.Sampler.take_block``), for the ``CANDIDATES`` of
    smallest ``race.mean_cost``, racing as the module docstring says; kept in ``race.block_costs``. A candidate
    failing in a block keeps the costs it has (or its runs' mean); the blocks' time counts in ``race.spent``."""
    names = sorted(race.rounds, key=race.mean_cost)[:CANDIDATES]
    size = {n: max(1, round(seconds / max(race.mean_cost(n), 1e-9))) for n in names}
    costs = {n: [] for n in names}
    racing = list(names)
    for block in range(MAX_BLOCKS):
        race.order_rng.shuffle(racing)
        for name in racing:
            try:
                sample = race.sampler.take_block(race.calls[name], size[name])
            except Exception:  # noqa: BLE001 - it ran before; failing now, it races no more
                racing.remove(name)
                continue
            costs[name].append(sample.seconds)
            race.spent += sample.seconds * size[name]
            race.spent_by[name] += sample.seconds * size[name]
            race.calls_by[name] += size[name]
        if block + 1 >= MIN_BLOCKS:
            racing = [n for n in still_in(costs) if n in racing]
        if len(racing) <= 1:
            break
    stats = {n: mean_and_error(c) for n, c in costs.items() if c}
    race.block_costs = {n: stats[n][0] if n in stats else race.mean_cost(n) for n in costs}
    race.block_evidence = {n: [len(c), stats[n][1] if n in stats and math.isfinite(stats[n][1]) else None]
                           for n, c in costs.items()}
    return race.block_costs


def describe(evidence: dict, times: dict) -> str:
    """The table's line on the blocks: each candidate's mean per call, twice its standard error and its blocks,
    fastest first, and "CLOSE CALL" where the runner-up's interval reaches the leader's (``evidence``: name ->
    [blocks, standard error or None]; ``times``: name -> mean)."""
    names = sorted(evidence, key=times.get)

    def interval(n):
        blocks, error = evidence[n]
        return f"{n} {times[n] * 1e3:.3f} ms" + (f" +- {2 * error * 1e3:.3f}" if error is not None else "") \
            + f" ({blocks} blocks)"

    close = len(names) > 1 and None not in (evidence[names[0]][1], evidence[names[1]][1]) and \
        times[names[1]] - 2 * evidence[names[1]][1] <= times[names[0]] + 2 * evidence[names[0]][1]
    return ("CLOSE CALL: " if close else "") + "blocks, mean per call +- twice its standard error: " + \
        ", ".join(map(interval, names))


def choose(race, preference, settings) -> tuple[str, list]:
    """(the choice, the candidates it tied with): the smallest mean cost per call in blocks, the preference
    among those within ``settings.tie_tolerance`` of it."""
    cost = race_blocks(race, settings.block_seconds)
    best = min(cost.values())
    tied = sorted((n for n in cost if cost[n] <= (1 + settings.tie_tolerance) * best), key=cost.get)
    return min(tied, key=preference), tied
