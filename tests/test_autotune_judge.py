"""The judge (autotune.race.judge): close calls decided on paired ratios with an interval, ties within the band
going to the preference, close calls marked; with fake algorithms and a fake clock (no timing asserted)."""
import pytest

from autotune import Tuner
from autotune.race.judge import choose, median_interval
from autotune_fakes import NO_RULES, FakeClock, fakes, tuned


def test_the_median_interval_is_the_order_statistics_of_the_binomial():
    assert median_interval([5, 1, 4, 2, 3], 0.9) == (1, 5)                    # 5 values: min and max (94%)
    assert median_interval(list(range(10)), 0.9) == (1, 8)                   # 10 values: 2nd and 9th (98%)
    assert median_interval(list(range(20)), 0.9) == (5, 14)                  # 20: 6th and 15th (96%)
    assert median_interval([1.0, 2.0], 0.9) == (1.0, 2.0)                    # too few: the whole range


def drifting(base, factor, rounds=60):
    """Per-call costs drifting 1x-2.2x round to round (a machine whose speed changes), scaled by ``factor``: one
    candidate is ``factor`` times the other in every round, though their medians alone overlap."""
    cycle = [1.0, 2.2, 1.3, 1.9, 1.1, 1.6]
    return [base * factor * cycle[i % len(cycle)] for i in range(rounds)]


def test_a_close_call_is_decided_on_paired_ratios_not_on_medians():
    clock = FakeClock()
    # b is 6% slower than a in every round; both drift together, so runs of one overlap runs of the other
    # (their first calls touch fresh memory: warm-ups, not samples)
    warm = {"faults": [100, 0]}
    entry = tuned(clock, fakes(clock, a=([1e-3] + drifting(1e-3, 1.0), warm), b=([1e-3] + drifting(1e-3, 1.06), warm)))
    v = entry.verdict
    assert entry.algo == "a" and v["outcome"] == "decided" and v["ratio"] == pytest.approx(1.06)
    assert v["pairs"] >= 5 and v["low"] > 1.03 and "shoot-out b / a = 1.060" in entry.report()


def test_a_tie_within_the_band_goes_to_the_deterministic_candidate():
    clock = FakeClock()
    # c is 1% faster than d, but not deterministic: within the 3% tie band the preference decides
    entry = tuned(clock, fakes(clock, c=(1e-3, {"deterministic": False}), d=1.01e-3))
    assert entry.algo == "d" and entry.verdict["outcome"] == "tie" and set(entry.tied) == {"c", "d"}


def test_a_close_call_is_marked_and_the_median_ratio_decides_outside_the_band():
    clock = FakeClock()
    # b / a alternates 0.96 and 1.12 round to round: the interval straddles the band's edges until the
    # shoot-out's budget (shootout_cap times a's median) is spent
    a = [1e-3] * 80
    b = [1e-3] + [1e-3 * (0.96 if i % 2 else 1.12) for i in range(79)]
    entry = tuned(clock, fakes(clock, a=a, b=b), max_pairs=12)
    v = entry.verdict
    assert v["outcome"] == "close call" and v["pairs"] >= 5 and v["low"] < 1 / 1.03 < 1.03 < v["high"]
    assert "CLOSE CALL" in entry.report()
    faster = "b" if v["ratio"] < 1 / 1.03 else "a" if v["ratio"] > 1.03 else None
    if faster:
        assert entry.algo == faster


def test_a_runner_up_beyond_reach_needs_no_shoot_out():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=1.3e-3)
    entry = tuned(clock, algos)
    assert entry.algo == "a" and not entry.verdict and entry.runs["b"] <= 2


def test_pairs_are_of_clean_runs_only_spikes_and_waits_never_decide():
    clock = FakeClock()
    # a's calls cost 1.0 ms, but every other one is a spike of 2.0 ms (an interrupt, a neighbour's burst); b's
    # 1.08 ms. Rounds in which a spiked pair b's 1.08 with a's 2.0 (0.54): taken as evidence they would say b
    # is twice as fast. The few clean pairs say 1.08, and decide for a, a close call for want of pairs
    entry = tuned(clock, fakes(clock, a=[1e-3, 2e-3] * 60, b=1.08e-3))
    v = entry.verdict
    assert entry.algo == "a" and v["ratio"] == pytest.approx(1.08) and v["pairs"] < 5


class ShootoutRace:
    """What ``judge.choose`` reads of a race: medians that the shoot-out's extra rounds move, and its pairs."""

    def __init__(self, before: dict, after: dict, ratio: float):
        self.rounds, self.medians, self.after, self.ratio, self.spent = dict.fromkeys(before), before, after, ratio, 0.0
        self.extended = 0

    def typical(self, name):
        return self.medians[name]

    def pairs(self, a, b):
        return [(1.0, self.ratio)] * (4 + self.extended)          # 4 pairs before the shoot-out's first round

    def extend(self, names):
        self.extended += 1
        self.medians = self.after


def test_a_third_candidate_joins_a_tie_only_within_the_band_of_the_faster_of_the_two():
    # x led (1.00) and y (1.02) came within reach; in the shoot-out x's runs slowed (median 1.06) and the pair
    # tied (y / x = 0.98). c, 1.05, is within 3% of x's slowed median but 5% over y's: no part of the tie, though
    # the preference (here the name) would take it
    race = ShootoutRace({"x": 1.00, "y": 1.02, "c": 1.05}, {"x": 1.06, "y": 1.00, "c": 1.05}, 0.98)
    algo, tied, verdict = choose(race, lambda n: n, Tuner(benchmark=True, heuristics=NO_RULES))
    assert verdict.outcome == "tie" and sorted(tied) == ["x", "y"] and algo == "x"
