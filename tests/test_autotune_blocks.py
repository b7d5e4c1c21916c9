"""Beside a neighbour that stays, blocks of calls decide on their mean cost per call (``race/blocks.py``): the
mean, not the median, of blocks that fall on a few levels; a clearly slower candidate leaves early; the tie
band's preference holds; a candidate failing in a block does not fail the choice. Fake blocks, no timing."""
import itertools
import math
import random
from types import SimpleNamespace

import pytest

from autotune.race import blocks


class FakeRace:
    """What ``blocks`` reads of a ``Race``: each candidate's blocks cost the next of its ``levels`` (cycled)."""

    def __init__(self, levels: dict, failing=()):
        self.rounds = {n: {} for n in levels}
        self.levels = {n: itertools.cycle(v) for n, v in levels.items()}
        self.calls = {n: n for n in levels}
        self.failing, self.taken = set(failing), {n: 0 for n in levels}
        self.order_rng, self.spent = random.Random(0), 0.0
        self.spent_by = {n: 0.0 for n in levels}
        self.calls_by = {n: 0 for n in levels}
        self.block_costs, self.block_evidence = {}, {}
        self.sampler = SimpleNamespace(take_block=self.take_block)
        self.first_means = {n: sum(v) / len(v) for n, v in levels.items()}

    def mean_cost(self, name):
        return self.first_means[name]

    def take_block(self, name, calls):
        if name in self.failing:
            raise RuntimeError("out of memory")
        self.taken[name] += 1
        return SimpleNamespace(seconds=next(self.levels[name]))


SETTINGS = SimpleNamespace(block_seconds=0.01, tie_tolerance=0.03)


def prefer_name(name):
    return name


def test_the_mean_decides_where_a_median_of_blocks_would_mislead():
    # a's blocks: clean twice, then one holding a whole time slice (0.14, 0.14, 1.25 ms: mean 0.51); b's steady
    # 0.45. A median of a's blocks says 0.14: the wrong winner. The mean is what a step pays beside the neighbour
    race = FakeRace({"a": [0.14e-3, 0.14e-3, 1.25e-3], "b": [0.45e-3]})
    algo, tied = blocks.choose(race, prefer_name, SETTINGS)
    assert algo == "b" and tied == ["b"]
    assert race.block_costs["a"] == pytest.approx(0.51e-3, rel=0.02)
    assert race.block_costs["b"] == pytest.approx(0.45e-3)


def test_a_clearly_slower_candidate_leaves_after_the_first_rounds_and_the_close_ones_race_on():
    race = FakeRace({"fast": [1.0e-3, 1.1e-3], "close": [1.05e-3, 1.15e-3], "slow": [3.0e-3, 3.2e-3]})
    algo, _ = blocks.choose(race, prefer_name, SETTINGS)
    assert algo == "fast"
    assert race.taken["slow"] == blocks.MIN_BLOCKS
    assert race.taken["fast"] == race.taken["close"] == blocks.MAX_BLOCKS


def test_only_the_cheapest_candidates_by_the_race_run_blocks():
    race = FakeRace({f"c{i}": [(1 + i / 10) * 1e-3] for i in range(5)})
    blocks.choose(race, prefer_name, SETTINGS)
    assert sorted(race.block_costs) == ["c0", "c1", "c2"][:blocks.CANDIDATES]
    assert race.taken["c4"] == 0


def test_within_the_tie_band_the_preference_decides():
    race = FakeRace({"b_fast": [1.00e-3, 1.02e-3], "a_pref": [1.01e-3, 1.03e-3]})
    algo, tied = blocks.choose(race, prefer_name, SETTINGS)
    assert algo == "a_pref" and set(tied) == {"a_pref", "b_fast"}


def test_a_candidate_failing_in_its_blocks_keeps_the_race_mean_and_another_is_chosen():
    race = FakeRace({"a": [0.5e-3], "b": [0.8e-3]}, failing={"a"})
    race.first_means["a"] = 0.9e-3                   # its runs' mean: slower than b's blocks
    algo, _ = blocks.choose(race, prefer_name, SETTINGS)
    assert algo == "b" and race.block_costs["a"] == pytest.approx(0.9e-3)


def test_mean_and_error():
    assert blocks.mean_and_error([2.0]) == (2.0, math.inf)
    mean, error = blocks.mean_and_error([1.0, 2.0, 3.0, 4.0])
    assert mean == 2.5 and error == pytest.approx(math.sqrt(5 / 3 / 4))


def test_still_in_drops_only_what_is_clearly_slower():
    assert blocks.still_in({"a": [1.0, 1.1, 0.9, 1.0], "b": [1.2, 0.8, 1.3, 0.9], "c": [3.0, 3.1, 2.9, 3.0]}) \
        == ["a", "b"]
    assert blocks.still_in({"a": [1.0], "b": []}) == ["a", "b"]      # one block: no error yet, nobody leaves


def test_the_table_line_names_each_interval_and_marks_a_close_call():
    times = {"a": 1.0e-3, "b": 1.1e-3}
    close = blocks.describe({"a": [12, 0.05e-3], "b": [12, 0.05e-3]}, times)
    assert close.startswith("CLOSE CALL: ") and "a 1.000 ms +- 0.100 (12 blocks), b 1.100 ms +- 0.100" in close
    apart = blocks.describe({"a": [12, 0.01e-3], "b": [4, 0.01e-3]}, times)
    assert not apart.startswith("CLOSE CALL") and "b 1.100 ms +- 0.020 (4 blocks)" in apart
    assert "a 1.000 ms (1 blocks)" in blocks.describe({"a": [1, None]}, {"a": 1.0e-3})


def test_the_race_keeps_each_candidates_blocks_and_error():
    race = FakeRace({"a": [1.0e-3, 1.2e-3], "b": [3.0e-3]})
    blocks.choose(race, prefer_name, SETTINGS)
    # b leaves after the first rounds, and with one candidate left the race ends: both ran MIN_BLOCKS blocks
    n, error = race.block_evidence["a"]
    assert n == blocks.MIN_BLOCKS and error == pytest.approx(blocks.mean_and_error([1.0e-3, 1.2e-3] * 2)[1])
    assert race.block_evidence["b"] == [blocks.MIN_BLOCKS, 0.0]
