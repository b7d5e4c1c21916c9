"""autotune.measure: interleaved rounds, median and noise, the choice's tie-break, the sampled reference check."""
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from autotune import measure
from autotune_fakes import FakeClock
from convalgos import ConvParams, PASSES, reference


def test_interleaved_excludes_warmup_and_shuffles_the_order():
    clock, order = FakeClock(), []

    def call(name, cost):
        def run():
            order.append(name)
            clock.advance(cost)
        return run

    samples = measure.interleaved({"a": call("a", 1.0), "b": call("b", 2.0), "c": call("c", 3.0)}, rounds=12,
                                  timer=measure.Timer(clock), warmup=2)
    assert samples == {"a": [1.0] * 12, "b": [2.0] * 12, "c": [3.0] * 12}
    rounds = [order[i:i + 3] for i in range(6, len(order), 3)]
    assert order[:6] == list("abcabc") and rounds[0] == list("abc")
    assert all(sorted(r) == list("abc") for r in rounds)                 # each round runs each once
    before_a = {r[r.index("a") - 1] if r.index("a") else None for r in rounds}
    assert len(before_a) == 3                                             # a follows b, c, and runs first


def test_interleaved_runs_more_rounds_until_min_seconds():
    clock = FakeClock()
    samples = measure.interleaved({"a": lambda: clock.advance(0.125)}, rounds=2, timer=measure.Timer(clock),
                                  warmup=0, min_seconds=1.0)
    assert len(samples["a"]) == 8
    assert measure.interleaved({}, rounds=3) == {}


def test_median_and_noise():
    assert measure.median([3.0, 1.0, 2.0]) == 2.0
    assert measure.noise([1.0]) == 0.0 and measure.noise([2.0, 2.0, 2.0]) == 0.0
    # MAD of [1, 2, 3, 4, 10] about its median 3 is 1: 1/3/sqrt(5)
    assert measure.noise([1, 2, 3, 4, 10]) == pytest.approx(1 / 3 / 5 ** 0.5)


def test_choice_breaks_near_ties_by_preference_only():
    samples = {"a": [1.0, 1.0, 1.0], "b": [1.005, 1.005, 1.005], "c": [1.05, 1.05, 1.05]}
    assert measure.choose(samples, 0.01, preference=lambda n: n) == ("a", ["a", "b"])
    assert measure.choose(samples, 0.01, preference=lambda n: {"a": 1, "b": 0, "c": -1}[n]) == ("b", ["a", "b"])
    assert measure.choose(samples, 0.1, preference=lambda n: {"a": 1, "b": 1, "c": 0}[n]) == ("c", ["a", "b", "c"])
    noisy = {"a": [1.0, 0.7, 1.3], "b": [1.05] * 3}                # a's own noise (0.3/1/sqrt 3) covers b
    assert measure.choose(noisy, 0.01, preference=lambda n: n != "b")[1] == ["a", "b"]


def _operands(op, p, rng):
    x = rng.standard_normal(p.in_shape)
    w = rng.standard_normal(p.weight_shape)
    dy = rng.standard_normal(p.out_shape)
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


layers = st.builds(
    lambda N, G, cg, kg, H, R, s, pad, d: ConvParams.from_shapes(
        (N, G * cg, H, H + 1), (G * kg, cg, R, R), stride=s, padding=pad, dilation=d, groups=G),
    N=st.integers(1, 3), G=st.sampled_from([1, 2, 3]), cg=st.integers(1, 4), kg=st.integers(1, 4),
    H=st.integers(5, 30), R=st.integers(1, 3), s=st.integers(1, 2), pad=st.sampled_from([0, 1, ((2, 0), (0, 1))]),
    d=st.integers(1, 2))


@settings(max_examples=25, deadline=None)
@given(p=layers, op=st.sampled_from(PASSES), seed=st.integers(0, 2 ** 16))
def test_reference_check_accepts_the_right_answer_and_catches_a_wrong_corner(p, op, seed):
    rng = np.random.default_rng(seed)
    a, b = _operands(op, p, rng)
    check = measure.ReferenceCheck(op, a, b, p)
    right = reference.PASS[op](a, b, p)
    assert check.error(right) <= 1e-12
    for corner in ((0, 0, 0, 0), (-1, -1, -1, -1)):        # first and last of every axis are always sampled
        wrong = right.copy()
        wrong[corner] += 1.0 + np.abs(right).max()
        assert check.error(wrong) > 0.1, corner


@pytest.mark.parametrize("op", PASSES)
def test_reference_check_samples_a_big_layer(op):
    p = ConvParams.from_shapes((8, 32, 40, 40), (32, 8, 3, 3), padding=1, groups=4)
    a, b = _operands(op, p, np.random.default_rng(0))
    check = measure.ReferenceCheck(op, a, b, p)
    right = reference.PASS[op](a, b, p)
    assert check.error(right) <= 1e-12 and check.sample(right).size * 20 <= right.size
    wrong = right.copy()
    wrong[(-1,) * 4] *= 1.5
    assert check.error(wrong) > 1e-3


def test_without_spikes_keeps_the_runs_near_the_floor():
    assert measure.without_spikes([1.0, 1.2, 5.0], 1.5) == [1.0, 1.2]
    assert measure.without_spikes([1.1, 1.2, 3.0], 1.5, floor=0.9) == [1.1, 1.2]  # a clean warm-up as the floor
    assert measure.without_spikes([3.0, 3.1], 1.5, floor=4.0) == [3.0, 3.1]
    assert measure.without_spikes([1.0, 2.0], 1.5) == [1.0]                  # one of two: still a spike


def test_without_spikes_sees_a_level_shift_where_most_runs_would_be_spikes():
    # one run from a fast moment, then the machine slower for the rest: the one is odd, not the eleven
    assert measure.without_spikes([2.4] + [3.9] * 11, 1.5) == [2.4] + [3.9] * 11
    assert measure.without_spikes([3.0, 3.1], 1.5, floor=1.0) == [3.0, 3.1]   # two runs against one warm-up
    assert measure.without_spikes([2.4, 3.9, 3.8, 9.0], 1.5) == [2.4, 3.9, 3.8]  # a spike over the new level
