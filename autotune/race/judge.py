"""The judge: between the race's top two, a decision on paired ratios with an interval, not on two medians.

Two medians, each over its own runs, carry the drift between those runs. A pair, the two
candidates' runs of one round, shares its conditions (the same cache state, the same neighbours, the same
clock speed), so the ratio ``t_b / t_a`` of a pair cancels what both suffered. The judge takes the ratios of
every round in which both ran clean (``Race.pairs``), runs more rounds of the two alone while the answer is
open (a shoot-out, as Helion's final interleaved benchmark, which cut its mean regret from 3.5% to 1.4%), and
decides on the median ratio and its interval:

- the interval: a distribution-free confidence interval of the median of n ratios, the order statistics
  ``r_(k)`` and ``r_(n+1-k)`` with k the largest for which P(Binomial(n, 1/2) < k) <= (1 - confidence) / 2
  (with 5 pairs at 90%: the smallest and the largest ratio, 94% coverage); it assumes nothing about how run
  times are spread, which on a shared machine is anything but normal;
- "decided": the interval lies wholly outside the tie band [1/(1+band), 1+band]: the faster one wins;
- "tie": the interval lies wholly inside it: the tie-break's preference decides (deterministic, then the
  smaller workspace, the smaller error, the name);
- "close call": after ``max_pairs`` pairs (or the shoot-out's budget) the interval still straddles an edge
  of the band: the median ratio decides when it is outside the band, the preference when inside, and the
  table says "close call".

The shoot-out runs only when the runner-up's median is within ``reach`` of the leader's: a candidate 1.5x
slower needs no interval. Cost: each pair costs both runs, so 5-12 pairs cost 10-24 runs of the leader.

Beside a neighbour that stays (``provisional.stayed``) no pair is clean for long, and blocks of calls decide
instead (``blocks.py``).
"""
from __future__ import annotations

import math
from typing import NamedTuple

from ..measure import median


class Verdict(NamedTuple):
    """The judge's answer on ``first`` (the race's leader) and ``second``: ``ratio`` the median of second's
    time over first's per pair, ``low``/``high`` its interval, ``pairs`` how many, ``outcome`` "decided",
    "tie" or "close call", ``band`` the tie band it was judged against."""

    first: str
    second: str
    ratio: float
    low: float
    high: float
    pairs: int
    outcome: str
    band: float

    def faster(self) -> str:
        return self.second if self.ratio < 1 else self.first

    def within_band(self) -> bool:
        return 1 / (1 + self.band) <= self.ratio <= 1 + self.band

    def to_dict(self) -> dict:
        return self._asdict()


def median_interval(values: list, confidence: float) -> tuple[float, float]:
    """A distribution-free interval for the median of ``values`` (module docstring); (min, max) when too few
    values reach ``confidence``."""
    v, n = sorted(values), len(values)
    tail, k, below = (1 - confidence) / 2, 0, 0.0
    while True:
        below += math.comb(n, k) / 2 ** n                # P(Binomial(n, 1/2) <= k)
        if below > tail or k + 1 > n // 2:
            break
        k += 1
    k = max(k, 1)
    return v[k - 1], v[n - k]


def shootout(race, first: str, second: str, settings) -> Verdict:
    """Paired rounds of ``first`` and ``second`` until the interval of their median ratio decides, for at most
    ``max_pairs`` pairs or ``shootout_cap`` times first's median of extra time (``settings``: the Tuner)."""
    band, start = settings.tie_tolerance, race.spent
    cap = settings.shootout_cap * race.typical(first)
    extra = 0
    while True:
        ratios = [b / a for a, b in race.pairs(first, second) if a > 0]
        if len(ratios) >= settings.min_pairs:
            low, high = median_interval(ratios, settings.confidence)
            outcome = _outcome(low, high, band)
            if outcome:
                return Verdict(first, second, median(ratios), low, high, len(ratios), outcome, band)
        spent = race.spent - start
        if len(ratios) >= settings.max_pairs or spent >= cap or extra >= 2 * settings.max_pairs \
                or first not in race.rounds or second not in race.rounds:
            break
        race.extend([first, second])
        extra += 1
    if not ratios:
        return Verdict(first, second, 1.0, 0.0, math.inf, 0, "close call", band)
    low, high = median_interval(ratios, settings.confidence)
    return Verdict(first, second, median(ratios), low, high, len(ratios), "close call", band)


def _outcome(low: float, high: float, band: float) -> str:
    if low > 1 + band or high < 1 / (1 + band):
        return "decided"
    if low >= 1 / (1 + band) and high <= 1 + band:
        return "tie"
    return ""


def choose(race, preference, settings) -> tuple[str, list, Verdict | None]:
    """(the choice, the candidates it was a tie among, the judge's verdict or None): the race's leader, unless
    the runner-up is within ``reach`` and the shoot-out finds it faster or tied (then ``preference`` decides:
    the smallest ``preference(name)`` wins)."""
    order = sorted(race.rounds, key=race.typical)
    leader = order[0]
    if len(order) < 2 or race.typical(order[1]) > settings.reach * race.typical(leader):
        return leader, [leader], None
    verdict = shootout(race, leader, order[1], settings)
    if not verdict.pairs:                    # no round in which both ran clean: the medians decide
        return leader, [leader], verdict
    if verdict.outcome == "decided" or not verdict.within_band():
        return verdict.faster(), [verdict.faster()], verdict
    best = min(race.typical(leader), race.typical(order[1]))     # the shoot-out's runs may have moved either
    tied = [leader, order[1]] + [n for n in order[2:] if race.typical(n) <= (1 + verdict.band) * best]
    return min(tied, key=preference), tied, verdict

