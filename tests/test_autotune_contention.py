"""Contention seen directly (how long the threads waited for a CPU), with fake readings: a run that waited is
retaken; a choice made beside a neighbour that stays is kept, marked provisional (in the table and in saved
files) and raced again once the machine is quiet, never while it is still contended. And the real reader
reads this process's counters."""
import gc
import json
import os
import threading

import pytest

from autotune import Entry, Tuner
from autotune.race import contention
from autotune.race.quiet import QuietWatch
from autotune_fakes import NO_RULES, FakeClock, FakeReader, OthersUnseenReader, arrays, fake_timer, fakes, tuner

#: fake seconds during which a neighbour process runs, then the machine is quiet
BUSY = 0.2


def neighbour_then_quiet(clock):
    """a is truly 1.0 ms and b 1.3 ms; beside the neighbour (the first BUSY seconds) a takes 2.0 ms (its
    workers wait at a barrier for the preempted one: 1 ms of waiting per call) and b 1.5 ms (0.3 ms)."""
    clock.busy_until = BUSY
    return fakes(clock, a=(1e-3, {"busy": (2e-3, 1e-3)}), b=(1.3e-3, {"busy": (1.5e-3, 0.3e-3)}))


def watched(clock, algos, **kw):
    reader = FakeReader(clock)
    return tuner(clock, algos, reader=reader, quiet=QuietWatch(reader, interval=0.0, clock=clock), **kw)


def test_a_neighbour_that_stays_gives_a_provisional_choice_raced_again_once_quiet():
    clock = FakeClock()
    algos = neighbour_then_quiet(clock)
    t = watched(clock, algos)
    x, w = arrays()
    t.conv2d(x, w)
    (first,) = t.dispatch_table()
    # every retake waited too: b was the faster under the neighbour, and the choice says what it rests on
    assert first.algo == "b" and first.provisional and first.retaken["a"] >= 1 and first.waited["a"] > 0.3
    assert first.mean_times and "mean cost per call, waits included" in first.report()
    assert "PROVISIONAL" in first.report() and t.cache_info().provisional == 1
    while clock.now < BUSY:                          # hits while the neighbour still runs: no re-race
        t.conv2d(x, w)
        assert next(iter(t.dispatch_table())) is first
    for _ in range(4):                               # quiet now: two quiet windows, then the re-race
        t.conv2d(x, w)
    (again,) = t.dispatch_table()
    assert again is not first and again.algo == "a" and not again.provisional and again.reraced == 1
    info = t.cache_info()
    assert info.reraces == 1 and info.provisional == 0 and info.misses == 1
    assert "raced again 1 time(s) once the machine was quiet" in again.report()
    calls = algos["b"].calls
    for _ in range(5):
        t.conv2d(x, w)                               # settled: never raced again
    assert next(iter(t.dispatch_table())) is again and algos["b"].calls == calls


def test_a_slow_run_that_waited_is_not_retaken_when_it_would_be_slow_without_its_wait():
    clock = FakeClock()
    # b's runs wait 0.5 ms, but take 1.8 ms: 1.3 ms without the wait is still over settle_ratio x a's 1 ms
    # (and under screen_ratio x a's checked call: b runs round 1)
    t = tuner(clock, fakes(clock, a=1e-3, b=(1.8e-3, {"waits": 0.5e-3})))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and not e.retaken and e.runs["b"] == 2          # its checked call and one run


def test_beside_a_neighbour_that_stays_a_slower_candidate_still_leaves_early():
    clock = FakeClock()
    # every run waits: after two rounds of retakes that never came back clean the race stops retaking, and the
    # runs that waited are the evidence: b, 2x slower under the same neighbour, leaves instead of running on
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": 0.5e-3}), b=(2e-3, {"waits": 1e-3})),
              reader=OthersUnseenReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and e.provisional and e.runs["b"] <= 3 and e.retaken["b"] <= 4


def test_one_candidate_whose_own_threads_wait_marks_nothing_and_stops_being_retaken():
    clock = FakeClock()
    # a's runs always wait (a BLAS pool beside Numba's on two cores: its own threads), b's never: no other process
    # runnable before any sample, so no retake (it would wait alike); judged on its runs, waits and all
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": 0.2e-3}), b=1.05e-3))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert not e.provisional and not e.mean_times and not e.retaken
    assert e.waited["a"] == pytest.approx(0.2) and e.algo == "a"
    # where other processes cannot be seen, the waits might be a neighbour's: retaken until they prove stuck
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": 0.2e-3}), b=1.05e-3), reader=OthersUnseenReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert not e.provisional and 1 <= e.retaken["a"] <= 2 * 2 and "b" not in e.retaken and e.algo == "a"
    # b's checked call, 2x a's, screens it out: a alone is timed more than once, and its waits are still its own
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": 0.5e-3}), b=2e-3))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.runs["b"] == 1 and e.waits_kept == {"a": "its own threads' waits"} and not e.provisional
    assert "a: judged on its runs, waits and all, not retaken (its own threads' waits)" in e.report()


class ArrivingReader(FakeReader):
    """Another process is runnable right after a call in which the threads waited, never before one: a
    neighbour's burst that began during the call."""

    def __init__(self, clock):
        super().__init__(clock)
        self.seen = clock.waited

    def runnable_others(self) -> int:
        arrived, self.seen = self.clock.waited > self.seen, self.clock.waited
        return int(arrived)


def test_a_wait_is_not_its_own_when_a_neighbour_was_runnable_as_the_call_ended():
    clock = FakeClock()
    # a's runs wait 0.2 ms of 1: no neighbour runnable as each starts, one as each ends (a burst began during the
    # call): a neighbour's waits, retaken, not its own threads' (which would end its retakes)
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": 0.2e-3}), b=1.05e-3), reader=ArrivingReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.retaken["a"] >= 2 and e.algo == "a"


def test_a_race_where_most_runs_waited_is_provisional_though_its_retakes_came_through_clean():
    clock = FakeClock()
    # every other call waits (a neighbour's time slices): retakes find clean runs, the choice rests on them, but
    # the neighbour was there half the time
    t = tuner(clock, fakes(clock, a=(1e-3, {"waits": [0.0, 1e-3] * 50}), b=(2e-3, {"waits": [0.0, 1e-3] * 50})),
              reader=OthersUnseenReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and e.retaken and "every candidate's runs waited" in e.provisional
    assert all(t == pytest.approx(1e-3) for t in e.samples["a"])       # only clean runs kept


def test_a_neighbour_whose_time_slices_no_run_met_is_seen_runnable_before_the_samples():
    clock = FakeClock()
    clock.busy_until = 10.0
    # a neighbour was runnable throughout, but no run of ours waited (sub-millisecond calls between its slices,
    # as measured beside one spinning process): seen before every sample, it marks the choice provisional; the
    # runs being clean, the choice is made on them (not by blocks, which are for runs that all waited)
    t = watched(clock, fakes(clock, a=(5e-3, {"busy": (5e-3, 0.0)}), b=(7e-3, {"busy": (7e-3, 0.0)})))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and not e.retaken and e.waited == {"a": 0.0, "b": 0.0}
    assert e.provisional.startswith("another process had a task runnable before 100% of its samples")
    assert not e.mean_times


def test_a_quiet_race_is_not_provisional_and_never_raced_again():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=1.5e-3)
    t = watched(clock, algos)
    x, w = arrays()
    for _ in range(6):
        t.conv2d(x, w)
    entry = next(iter(t.dispatch_table()))
    assert not entry.provisional and not entry.retaken and t.cache_info().reraces == 0


def test_the_watch_asks_whether_other_processes_used_the_cores_and_backs_off_after_a_failed_re_race():
    clock = FakeClock()
    watch = QuietWatch(FakeReader(clock), interval=0.1, windows=2, clock=clock, cores=2)
    assert not watch.quiet()                         # the first reading: nothing to judge yet
    for _ in range(2):
        clock.advance(0.2, others=0.2)               # a neighbour took half the machine: contended
        assert not watch.quiet()
    clock.advance(0.2, waited=0.1)                   # this process's own threads waited: not a neighbour
    assert not watch.quiet()
    clock.now += 0.2                                 # idle, and nobody else ran: quiet too
    assert watch.quiet()
    watch.raced(still_waiting=True)
    assert watch.interval == pytest.approx(0.2) and not watch.quiet()


class Blind(FakeReader):
    """A platform that cannot see other processes' CPU time: the process's own waits are judged instead."""

    def others(self):
        return None


def test_without_other_processes_cpu_time_the_watch_judges_busy_windows_by_their_waits():
    clock = FakeClock()
    watch = QuietWatch(Blind(clock), interval=0.1, windows=2, clock=clock)
    watch.quiet()
    clock.now += 0.2                                 # idle: too idle to say
    assert not watch.quiet()
    clock.advance(0.2, waited=0.05)                  # busy and waiting 25% of its CPU time: contended
    assert not watch.quiet()
    clock.advance(0.2)
    watch.quiet()
    clock.advance(0.2)
    assert watch.quiet()


def test_provisional_survives_save_and_load_and_an_old_contended_mark_loads_as_provisional(tmp_path):
    clock = FakeClock()
    t = watched(clock, neighbour_then_quiet(clock))
    t.conv2d(*arrays())
    path = tmp_path / "cache.json"
    t.save(path)
    fresh = Tuner(benchmark=True, heuristics=NO_RULES, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0,
                  algorithms=neighbour_then_quiet(clock))
    fresh.load(path)
    (loaded,) = fresh.dispatch_table()
    assert loaded.provisional == next(iter(t.dispatch_table())).provisional != ""
    old = loaded.to_dict()
    old.pop("provisional")
    old.update(contended="3 of 8 timed runs were spikes", confirmed=0)
    assert Entry.from_dict(old).provisional == "3 of 8 timed runs were spikes"


class SpikesOnly(FakeReader):
    """A platform that cannot see waiting (``contention.NullReader``)."""
    sees_wait = False


def test_where_waiting_cannot_be_seen_spikes_stand_in():
    clock = FakeClock()
    spiky = [1e-3, 3e-3] * 20
    t = tuner(clock, fakes(clock, a=spiky, b=[1.6e-3, 4e-3] * 20), reader=SpikesOnly(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and "spikes" in e.provisional and "no run-queue readings" in e.provisional


def test_the_real_reader_sees_every_thread_of_this_process():
    reader = contention.reader()
    if not reader.sees_wait:
        pytest.skip(f"no run-queue readings on this platform: {reader.kind}")
    reader.refresh()
    before = reader.read()
    stop = threading.Event()
    worker = threading.Thread(target=stop.wait)
    worker.start()
    try:
        reader.refresh()
        assert len(reader._files) >= 2
        after = reader.read()
        usage = after - before
        assert usage.waited >= 0 and usage.switches >= 0 and usage.wall > 0 and after.cpu_ns >= before.cpu_ns
    finally:
        stop.set()
        worker.join()
    assert reader.read().wait_ns >= 0                # the ended thread's file is dropped, not an error
    assert isinstance(reader.others(), float)        # other processes' CPU seconds, from /proc/stat


def test_the_real_reader_counts_other_processes_runnable_tasks():
    reader = contention.reader()
    reader.refresh()
    seen = reader.runnable_others()
    assert seen is None or (isinstance(seen, int) and seen >= 0)
    if isinstance(reader, contention.ProcReader):
        assert seen is not None                      # /proc/loadavg and every task's stat are there


def test_a_tuners_reader_closes_its_files_with_it():
    # each Tuner reads its threads through files kept open; they stayed open after it (9 per Tuner), so a
    # program making Tuners in a loop ran out of descriptors: they must close with the Tuner
    if not isinstance(contention.reader(), contention.ProcReader) or not os.path.isdir("/proc/self/fd"):
        pytest.skip("no /proc readings on this platform")
    x, w = arrays()
    Tuner(benchmark=True).conv2d(x, w)               # anything a first tuning opens for good (Numba, BLAS)
    gc.collect()
    before = len(os.listdir("/proc/self/fd"))
    for _ in range(30):
        Tuner(benchmark=True).conv2d(x, w)
    gc.collect()
    assert len(os.listdir("/proc/self/fd")) <= before + 2
    reader = contention.ProcReader()
    reader.refresh()
    reader.close()
    assert reader.read().wait_ns == 0 and reader.runnable_others() is None    # closed: reads nothing, no error


def test_the_machine_probe_returns_a_share():
    try:
        share = contention.machine_wait_share(0.02, processes=1)
    except OSError as e:
        pytest.skip(str(e))
    assert 0.0 <= share <= 1.0


def test_beside_neighbours_that_come_and_go_a_contended_race_chooses_on_its_clean_runs_not_blocks():
    clock = FakeClock()
    # every other call of each waits (a burst): a 1 ms clean, 3 ms in a burst; b 1.5 ms clean, 2 ms in a burst.
    # Most runs of both waited, retakes included (contended), but clean runs exist: a, 1.5x faster on them
    def algos():
        return fakes(clock, a=([1e-3, 3e-3] * 60, {"waits": [0.0, 2e-3] * 60}),
                     b=([1.5e-3, 2e-3] * 60, {"waits": [0.0, 0.5e-3] * 60}))
    t = tuner(clock, algos(), reader=ArrivingReader(clock))      # bursts come and go: never runnable before a call
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and not e.mean_times and e.provisional
    # where the platform cannot tell whether the neighbour stayed, blocks of calls decide: b's mean is the lower
    t = tuner(clock, algos(), reader=OthersUnseenReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "b" and e.mean_times and e.provisional
    # the evidence, in the table and through a saved file: each one's blocks and the error of its mean
    assert set(e.blocks) == {"a", "b"} and all(n >= 4 and err is not None for n, err in e.blocks.values())
    assert "blocks, mean per call +- twice its standard error: b " in e.report()
    assert Entry.from_dict(json.loads(json.dumps(e.to_dict()))).blocks == e.blocks


def test_runs_that_waited_while_the_others_ran_clean_do_not_settle_a_candidate():
    clock = FakeClock()
    # b's first call touched fresh memory (a warm-up, 1.4 ms); its first round's run and both retakes waited
    # (3 ms, 2.2 of them waiting: a neighbour's burst), then it runs 0.9 ms clean, against a's clean 1 ms. The
    # waited runs say nothing of its speed: it is not settled on them and its warm-up, and it wins
    b = ([1.4e-3] + [3e-3] * 3 + [0.9e-3] * 80, {"waits": [0.0] + [2.2e-3] * 3 + [0.0] * 80, "faults": [100, 0]})
    t = tuner(clock, fakes(clock, a=1e-3, b=b), reader=OthersUnseenReader(clock), pair_below=0.0)
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "b" and e.retaken["b"] == 2 and e.times["b"] == pytest.approx(0.9e-3)


def test_runs_that_waited_settle_a_candidate_on_their_floors():
    clock = FakeClock()
    # b's runs take 2.8 ms, 1.0 of them waiting, a neighbour runnable as each ends (not its own waits: retaken):
    # 1.8 ms less its waits, over settle_ratio x a's 1 ms, whatever the neighbour did. Two such floors settle b,
    # rather than retaking it round after round until its retakes are stuck
    t = tuner(clock, fakes(clock, a=1e-3, b=(2.8e-3, {"waits": 1.0e-3})), reader=ArrivingReader(clock))
    t.conv2d(*arrays())
    (e,) = t.dispatch_table()
    assert e.algo == "a" and e.runs["b"] == 2 and e.calls["b"] <= 4
