"""autotune.Tuner selection, the race, flags and table, with fake algorithms and a fake clock (no timing
asserted)."""
import threading

import numba
import numpy as np
import pytest

import autotune
from autotune import Tuner
from autotune.heuristics import Heuristics
from autotune_fakes import NO_RULES, FakeClock, FakeReader, arrays, fake_timer, fakes, tuned, tuner
from convalgos import UnsupportedError, reference

def test_choice_is_the_fastest_and_output_is_right():
    clock = FakeClock()
    algos = fakes(clock, a=3e-3, b=1e-3, c=2e-3)
    t = tuner(clock, algos)
    x, w = arrays()
    y = t.conv2d(x, w, padding=1)
    np.testing.assert_allclose(y, reference.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)
    (entry,) = t.dispatch_table()
    assert entry.algo == "b" and entry.source == "benchmark" and entry.key.op == "forward"
    assert entry.times == pytest.approx({"a": 3e-3, "b": 1e-3, "c": 2e-3})
    assert set(entry.errors) == {"a", "b", "c"} and entry.tuning_seconds > 0
    assert entry.tied == ["b"] and entry.ranked == ["b", "c", "a"] and entry.fresh_output
    assert str(entry.key.params) in str(t.dispatch_table())


def test_ties_broken_by_determinism_then_workspace_then_error_then_name_and_shown():
    clock = FakeClock()
    cases = [
        (dict(a=(1e-3, {"deterministic": False}), b=1e-3), "b", True),
        (dict(a=(1e-3, {"workspace": 100}), b=(1e-3, {"workspace": 10})), "b", True),
        (dict(b=1e-3, a=1e-3), "a", True),
        (dict(a=1e-3, b=1.005e-3), "a", True),                     # within the 1% tie tolerance: name decides
        (dict(b=1e-3, a=1.005e-3), "a", True),
        (dict(b=1e-3, a=1.05e-3), "b", False),                     # 5% apart: not a tie
    ]
    for specs, expected, tie in cases:
        t = tuner(clock, fakes(clock, **specs))
        t.conv2d(*arrays())
        (entry,) = t.dispatch_table()
        assert entry.algo == expected and (sorted(entry.tied) == ["a", "b"]) == tie, specs
        report = entry.report()
        assert ("a tie within the noise" in report) == tie and (f"{expected} *" in report)


def test_second_call_is_a_hit_and_times_nothing_new_shape_is_a_miss():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=2e-3)
    t = tuner(clock, algos)
    x, w = arrays()
    t.conv2d(x, w)
    calls = {n: a.calls for n, a in algos.items()}
    spent = t.cache_info().tuning_seconds
    t.conv2d(x, w)
    assert algos["a"].calls == calls["a"] + 1 and algos["b"].calls == calls["b"]
    assert t.cache_info()[:4] == (1, 1, 1, spent)
    t.conv2d(*arrays(H=9))
    info = t.cache_info()
    assert (info.hits, info.misses, info.entries) == (1, 2, 2) and info.tuning_seconds > spent
    t.clear()
    assert t.cache_info()[:4] == (0, 0, 0, 0.0) and t.cache_info().layers == {}


def test_key_holds_layout_dtype_deterministic_flag():
    clock = FakeClock()
    t = tuner(clock, fakes(clock, a=1e-3))
    x, w = arrays()
    t.conv2d(x, w)
    t.conv2d(np.asfortranarray(x), w)
    t.conv2d(x.astype(np.float64), w.astype(np.float64))
    with t.flags(deterministic=True):
        t.conv2d(x, w)
    keys = [e.key for e in t.dispatch_table()]
    assert len(set(keys)) == 4 and {k.layout for k in keys} == {"contiguous", "strided"}
    if numba.config.NUMBA_NUM_THREADS > 1:      # the thread count in use enters the key, after a first call too
        before = numba.get_num_threads()
        try:
            numba.set_num_threads(1)
            t.conv2d(x, w)
        finally:
            numba.set_num_threads(before)
        assert t.dispatch_table().entries[-1].key.threads == 1 and len(t.dispatch_table()) == 5


def test_benchmark_limit_times_only_the_best_ranked():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=2e-3, c=3e-3)
    rules = Heuristics({"rules": [{"name": "mine", "when": {}, "order": ["c", "b", "a"]}]})
    entry = tuned(clock, algos, heuristics=rules, benchmark_limit=2)
    assert entry.algo == "b" and set(entry.times) == {"c", "b"} and algos["a"].calls == 0
    assert "benchmark_limit=2" in entry.skipped["a"] and entry.rule == "mine"


def test_workspace_limit_never_runs_the_big_one_and_zero_still_runs():
    clock = FakeClock()
    algos = fakes(clock, big=(1e-4, {"workspace": 8 << 20}), small=(1e-3, {"workspace": 1 << 20}),
                  none=(2e-3, {"workspace": 0}))
    t = tuner(clock, algos, workspace_limit=2 << 20)
    t.conv2d(*arrays())
    (entry,) = t.dispatch_table()
    assert entry.algo == "small" and algos["big"].calls == 0
    assert "8.0 MiB" in entry.skipped["big"] and "limit 2.0 MiB" in entry.skipped["big"]
    t.workspace_limit = None
    t.benchmark = False                    # a tuned entry over a later, lower limit is not used
    with t.flags(workspace_limit=0):
        t.conv2d(*arrays())
        assert t.dispatch_table().entries[0].algo == "none"
    del algos["none"]
    with t.flags(workspace_limit=1 << 19):
        with pytest.raises(UnsupportedError, match=f"smallest workspace that would have worked is {1 << 20} bytes"):
            t.conv2d(*arrays(H=8))


@pytest.mark.parametrize("wrong", ["everywhere", "last_row"])
def test_wrong_algorithm_is_rejected_with_its_error(wrong):
    clock = FakeClock()
    algos = fakes(clock, broken=(1e-4, {"wrong": wrong}), good=1e-3)
    t = tuner(clock, algos)
    x, w = arrays(H=12)
    y = t.conv2d(x, w, padding=1)
    (entry,) = t.dispatch_table()
    assert entry.algo == "good" and "broken" not in entry.times
    assert entry.errors["broken"] > 1e-3 and entry.skipped["broken"].startswith("rejected: normwise error")
    np.testing.assert_allclose(y, reference.conv2d(x, w, padding=1), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("error", [MemoryError("out of memory"), AttributeError("'NoneType' has no 'tiles'"),
                                   ZeroDivisionError("division by zero")])
def test_any_exception_skips_the_candidate_with_its_error(error):
    clock = FakeClock()
    algos = fakes(clock, failing=(1e-4, {"raises": error}), good=1e-3, late=(1e-4, {"raises": error, "raise_from": 2}))
    entry = tuned(clock, algos)
    assert entry.algo == "good"
    assert entry.skipped["failing"] == f"failed: {type(error).__name__}: {error}"
    assert type(error).__name__ in entry.skipped["late"] and "while timed" in entry.skipped["late"]


def test_heuristic_choice_that_fails_falls_back_to_the_next_ranked():
    clock = FakeClock()
    algos = fakes(clock, first=(1e-4, {"raises": MemoryError("Unable to allocate 5.67 GiB")}), second=1e-3)
    t = Tuner(algos, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=NO_RULES)
    x, w = arrays()
    np.testing.assert_allclose(t.conv2d(x, w), reference.conv2d(x, w), rtol=1e-5, atol=1e-5)
    (entry,) = t.dispatch_table()
    assert entry.algo == "second" and "MemoryError" in entry.skipped["first"] and entry.source == "heuristic"
    t.conv2d(x, w)
    assert algos["first"].calls == 1                  # the failed choice is not tried again


def test_deterministic_excludes_nondeterministic():
    clock = FakeClock()
    algos = fakes(clock, fast=(1e-4, {"deterministic": False}), steady=1e-3)
    entry = tuned(clock, algos, deterministic=True)
    assert entry.algo == "steady" and algos["fast"].calls == 0 and entry.key.deterministic
    assert "not deterministic" in entry.skipped["fast"]


def test_unsupported_reason_recorded_and_heuristic_mode_times_nothing():
    clock = FakeClock()
    algos = fakes(clock, wino=(1e-4, {"only_3x3": True}), plain=1e-3)
    t = Tuner(algos, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=Heuristics({"rules": [
        {"name": "3x3", "when": {"kernel": [3, 3]}, "order": ["wino", "plain"]},
        {"name": "default", "when": {}, "order": ["plain"]}]}))
    t.conv2d(*arrays(R=3))
    t.conv2d(*arrays(R=5, H=9))
    e3, e5 = t.dispatch_table()
    assert (e3.algo, e3.rule, e3.source) == ("wino", "3x3", "heuristic") and (e5.algo, e5.rule) == ("plain", "default")
    assert e5.skipped["wino"] == "wino needs a 3x3 kernel, got 5x5"       # the algorithm's own reason, passed on
    assert algos["wino"].calls == 1 and algos["plain"].calls == 1 and e3.times == {}   # each ran once: no timing


def test_flags_validated_and_restored_on_exception():
    t = Tuner({})
    with pytest.raises(ValueError, match="benchmark_limit must be .* got 0"):
        t.benchmark_limit = 0
    with pytest.raises(ValueError, match="workspace_limit .* got -1"):
        t.workspace_limit = -1
    with pytest.raises(ValueError, match="patience .* got 0"):
        t.patience = 0
    with pytest.raises(AttributeError, match="benchmrk"):
        t.benchmrk = True
    with pytest.raises(TypeError, match="unknown flag"):
        with t.flags(benchmarks=True):
            pass
    with pytest.raises(RuntimeError):
        with t.flags(benchmark=True, deterministic=True, benchmark_limit=2, workspace_limit=10):
            assert t.benchmark and t.benchmark_limit == 2
            raise RuntimeError
    assert (t.benchmark, t.deterministic, t.benchmark_limit, t.workspace_limit) == (False, False, None, None)


def test_module_flags_forward_to_the_default_tuner_and_a_misspelt_one_raises():
    default = autotune.default_tuner()
    assert autotune.benchmark is False
    with pytest.raises(ValueError, match="benchmark must be True or False, got 'yes'"):
        autotune.benchmark = "yes"
    with pytest.raises(AttributeError, match="benchmrk"):
        autotune.benchmrk = True
    assert not hasattr(autotune, "benchmrk")
    try:
        autotune.benchmark = True
        assert default.benchmark is True
        with autotune.flags(benchmark=False, workspace_limit=5):
            assert autotune.benchmark is False and autotune.workspace_limit == 5
        assert autotune.benchmark is True and autotune.workspace_limit is None
    finally:
        autotune.benchmark = False


def test_eight_threads_on_one_new_key_tune_once():
    clock = FakeClock()
    algos = fakes(clock, a=(1e-3, {"sleep": 0.01}), b=(2e-3, {"sleep": 0.01}))
    t = tuner(clock, algos)
    x, w = arrays()
    barrier, results, errors = threading.Barrier(8), [None] * 8, []

    def call(i):
        try:
            barrier.wait()
            results[i] = t.conv2d(x, w)
        except Exception as e:  # pragma: no cover - reported below
            errors.append(e)

    threads = [threading.Thread(target=call, args=(i,)) for i in range(8)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors
    info = t.cache_info()
    assert (info.hits, info.misses, info.entries) == (7, 1, 1)
    (entry,) = t.dispatch_table()
    assert algos["b"].calls == entry.runs["b"]       # b only ran while tuning: its checked call its first run
    for y in results[1:]:
        np.testing.assert_array_equal(y, results[0])


def test_entry_to_dict_round_trips():
    clock = FakeClock()
    t = tuner(clock, fakes(clock, a=1e-3, b=(2e-3, {"workspace": 7})))
    t.conv2d(*arrays(), stride=2, padding=((1, 0), (0, 2)))
    (entry,) = t.dispatch_table()
    again = autotune.Entry.from_dict(entry.to_dict())
    assert again == entry and hash(again.key) == hash(entry.key)


def test_report_shows_speedups_skips_abandons_and_what_was_timed():
    clock = FakeClock()
    algos = fakes(clock, direct=4e-3, im2col=2e-3, fast=1e-3, wino=(1e-4, {"only_3x3": True}))
    t = tuner(clock, algos)
    x, w = arrays(R=5, H=9)
    t.conv2d(x, w)
    t.conv2d(x[:1], w, out=np.empty((1, 4, 5, 5), np.float32))
    fresh, into_out = t.dispatch_table()
    assert fresh.speedup_over("direct") == pytest.approx(4.0) and fresh.speedup_over("im2col") == pytest.approx(2.0)
    assert fresh.fresh_output and not into_out.fresh_output
    text = fresh.report()
    assert "benchmark: fast" in text and "forward" in text and "kept for the race" in text
    assert "wino: skipped" in text and fresh.skipped["wino"] in text and "direct: abandoned" in text
    assert "out= buffer" in into_out.report()


def test_n_zero_gives_empty_output_without_tuning():
    clock = FakeClock()
    t = tuner(clock, fakes(clock, a=1e-3))
    y = t.conv2d(np.zeros((0, 3, 5, 5), np.float32), np.zeros((4, 3, 3, 3), np.float32))
    assert y.shape == (0, 4, 3, 3) and t.cache_info().entries == 0


def test_every_candidate_times_into_one_output_and_the_call_still_gets_its_own():
    """Without out=, the race writes into one buffer allocated for it (a call's allocation is the same for every
    algorithm, and a large fresh one costs a different amount each time); the caller gets a fresh array."""
    clock = FakeClock()
    algos = fakes(clock, direct=4e-3, im2col=1.5e-3, fast=1e-3)
    t = tuner(clock, algos)
    y = t.conv2d(*arrays())
    assert algos["fast"].outputs[-1] is y                       # the call itself, after the race
    raced = [o for a in algos.values() for o in a.outputs if o is not y]
    assert len(raced) >= 3 * 2 and all(o is raced[0] for o in raced) and not np.shares_memory(raced[0], y)
