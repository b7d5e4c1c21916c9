"""A race measured while something else took the cores (most runs spikes) is marked in the entry and timed
again once, on a later hit, when the cores are quiet: the choice it then makes stands, and the table says so."""
from autotune_fakes import FakeClock, arrays, fakes, tuner

from autotune.tuning import contention


def test_contention_is_the_share_of_runs_that_were_spikes():
    assert contention({"a": 4, "b": 4}, {"a": 3}, 0.3).startswith("3 of 8 timed runs were spikes")
    assert contention({"a": 4, "b": 4}, {"a": 2}, 0.3) == ""
    assert contention({"a": 2, "b": 2}, {"a": 2, "b": 2}, 0.3) == ""          # too few runs to say


def test_a_choice_made_under_contention_is_confirmed_once_on_a_later_hit():
    clock = FakeClock()
    # "a" is truly 1.0 and "b" 1.2; while contended, a's runs alternate with 3x spikes and b's run quiet but its
    # calls during the first race look fast: the first race picks b, the quiet re-timing picks a.
    noisy_a = [1.0] + [3.0, 1.0, 3.0, 3.0, 1.0, 3.0] * 4 + [1.0]
    noisy_b = [0.9, 2.7, 0.9, 2.7, 2.7] * 3 + [1.2]
    algos = fakes(clock, a=noisy_a, b=noisy_b)
    t = tuner(clock, algos, confirm_after=2, min_runs=3, max_runs=6)
    x, w = arrays()
    t.conv2d(x, w)
    first = next(iter(t.dispatch_table()))
    assert first.algo == "b" and first.contended and first.confirmed == 0
    assert "to be re-timed on a later call" in first.report()
    t.conv2d(x, w)                                   # the first hit: not yet
    assert next(iter(t.dispatch_table())) is first
    t.conv2d(x, w)                                   # the confirm_after-th: timed again
    again = next(iter(t.dispatch_table()))
    assert again is not first and again.confirmed == 1 and again.algo == "a"
    calls = {name: alg.calls for name, alg in algos.items()}
    for _ in range(5):
        t.conv2d(x, w)                               # confirmed once: never re-timed again
    assert next(iter(t.dispatch_table())) is again
    assert algos["b"].calls == calls["b"]


def test_a_quiet_race_is_not_re_timed():
    clock = FakeClock()
    algos = fakes(clock, a=1.0, b=1.5)
    t = tuner(clock, algos, confirm_after=1)
    x, w = arrays()
    for _ in range(4):
        t.conv2d(x, w)
    entry = next(iter(t.dispatch_table()))
    assert not entry.contended and t.cache_info().misses == 1
