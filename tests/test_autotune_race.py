"""The tuner's race against noise, with fake algorithms, a fake clock and fake contention readings (no timing
asserted): a first call that compiled or touched fresh memory is a warm-up apart, one that did neither is the
race's first run; a candidate abandoned on one undisturbed run, else on two; runs that waited retaken, spikes
recognised, a leader on few runs timed again, slow candidates out early, the cost cap, pruning."""
import pytest

from autotune.heuristics import Heuristics
from autotune_fakes import FakeClock, FakeReader, OthersUnseenReader, fakes, tuned

#: page faults of a first call that touches fresh memory (a workspace's first pages), then none
FIRST_TOUCH = {"faults": [100, 0]}


class BlindReader(FakeReader):
    """A reader that counts no page faults (Windows): no checked call is evidence, no run undisturbed."""

    sees_faults = False


def test_a_first_call_that_compiled_or_touched_fresh_memory_is_a_warmup_reported_apart():
    clock = FakeClock()
    # a's first call took 5 ms touching fresh memory (page faults), its later calls 1 ms
    entry = tuned(clock, fakes(clock, a=([5e-3, 1e-3], FIRST_TOUCH), b=2e-3))
    assert entry.algo == "a" and entry.warmup["a"] == pytest.approx(5e-3) and entry.times["a"] == pytest.approx(1e-3)
    assert 5e-3 not in entry.samples["a"]
    # a first call that compiled: the compilation apart (``jit``), the call warmed up again, compiled
    compiled = tuned(clock, fakes(clock, a=(1e-3, {"jit": 5.0}), b=2e-3))
    assert compiled.algo == "a" and compiled.jit["a"] == pytest.approx(5.0)
    assert compiled.warmup["a"] == pytest.approx(1e-3) and max(compiled.samples["a"]) == pytest.approx(1e-3)


def test_a_first_call_with_nothing_seen_adding_time_is_the_first_run():
    clock = FakeClock()
    # no compiling, no page fault, no wait in b's checked call: its time is a sample (round 0), paired with a's
    entry = tuned(clock, fakes(clock, a=1e-3, b=[1.2e-3, 1.5e-3]))
    assert entry.samples["b"] == pytest.approx([1.2e-3, 1.5e-3]) and entry.samples["a"][0] == pytest.approx(1e-3)
    blind = tuned(clock, fakes(clock, a=1e-3, b=[1.2e-3, 1.5e-3]), reader=BlindReader(clock))
    assert blind.warmup["b"] == pytest.approx(1.2e-3) and 1.2e-3 not in blind.samples["b"]   # faults unseen: warm-up


def test_round_0_screens_a_candidate_whose_checked_call_less_its_waits_is_2x_the_fastest_checked_call():
    clock = FakeClock()
    algos = fakes(clock, fast=1e-3, slow=2.2e-3)
    entry = tuned(clock, algos)                 # slow's checked call, undisturbed, was 2.2x: that call was all it cost
    assert entry.runs["slow"] == 1 and algos["slow"].calls == 1
    assert entry.abandoned["slow"].startswith("its checked call took 2.2x the fastest checked call")
    assert entry.runs["fast"] >= 3
    # 2.2 ms with 0.5 ms of waits: 1.7 ms without them could be under 2x; raced on (and let go as slower later)
    algos = fakes(clock, fast=1e-3, slow=(2.2e-3, {"waits": 0.5e-3}))
    entry = tuned(clock, algos)
    assert algos["slow"].calls > 1 and not entry.abandoned.get("slow", "").startswith("its checked call")
    # a warm-up only (it touched fresh memory) screens nothing: the 2.2x candidate runs round 1
    algos = fakes(clock, fast=1e-3, slow=(2.2e-3, FIRST_TOUCH))
    tuned(clock, algos)
    assert algos["slow"].calls > 1


def test_slow_candidate_is_abandoned_on_one_run_whose_time_less_its_waits_is_3x_else_on_two():
    clock = FakeClock()
    algos = fakes(clock, fast=1e-3, slow=([6e-3, 5e-3], FIRST_TOUCH))   # a warm-up, then one undisturbed run
    entry = tuned(clock, algos)
    assert entry.runs["slow"] == 1 and algos["slow"].calls == 2 and "slow" in entry.abandoned
    # its threads waited 1 ms of its 5 (its own BLAS pool beside Numba's): 4 ms without them, still over 2x
    algos = fakes(clock, fast=1e-3, slow=(5e-3, {"waits": 1e-3}))
    assert "took 4.0x" in tuned(clock, algos).abandoned["slow"] and algos["slow"].calls == 1
    # 3 ms of waits: 2 ms without them could be under 3x; two runs, all of them 5x, abandon it
    algos = fakes(clock, fast=1e-3, slow=(5e-3, {"waits": 3e-3}))
    entry = tuned(clock, algos)
    assert entry.runs["slow"] == 2 and entry.abandoned["slow"].startswith("all 2 of its runs took at least 5.0x")
    # where page faults are not counted, no run is undisturbed: a warm-up that agrees and one run, or two runs
    entry = tuned(clock, fakes(clock, fast=1e-3, slow=5e-3), reader=BlindReader(clock))
    assert entry.runs["slow"] == 1 and "slow" in entry.abandoned
    compiled = tuned(clock, fakes(clock, fast=1e-3, slow=[1.0, 5e-3]), reader=BlindReader(clock))
    assert compiled.runs["slow"] == 2 and "slow" in compiled.abandoned     # its 1 s warm-up is no evidence


def test_a_spike_is_recognised_and_does_not_decide():
    clock = FakeClock()
    # fast's first timed run is a 5x spike (a neighbour took the core): it is not abandoned on it
    entry = tuned(clock, fakes(clock, fast=[1e-3, 5e-3, 1e-3], other=1.5e-3))
    assert entry.algo == "fast" and entry.spikes == {"fast": 1} and not entry.abandoned
    assert entry.times["fast"] == pytest.approx(1e-3)


def test_a_run_far_over_a_clean_warmup_is_a_spike_and_does_not_decide():
    clock = FakeClock()
    # fast's checked call (1 ms, touching fresh memory: a warm-up) is clean; its first race run is a 5x spike
    entry = tuned(clock, fakes(clock, fast=([1e-3, 5e-3, 1e-3], {"faults": [100, 0]}), other=2e-3))
    assert entry.algo == "fast" and entry.spikes["fast"] == 1 and entry.times["fast"] == pytest.approx(1e-3)
    assert entry.samples["fast"][0] == pytest.approx(5e-3)


def test_most_runs_over_the_fastest_are_a_slower_moment_not_spikes():
    clock = FakeClock()
    # fast ran 2.37 ms once, then 3.9 ms in every round after (the machine slowed: a speed phase), while other
    # ran 2.7 ms in the same rounds. Until 2026-12-06 the 3.9s were spikes over the one 2.37, and fast was kept
    # on that one run (measured so: 13% regret)
    entry = tuned(clock, fakes(clock, fast=[2.37e-3, 3.9e-3], other=2.7e-3))
    assert entry.algo == "other" and entry.times["fast"] == pytest.approx(3.9e-3) and not entry.spikes.get("fast")


def test_a_run_that_waited_for_a_cpu_is_retaken_and_does_not_decide():
    clock = FakeClock()
    # b's first timed run waited 0.4 ms for a CPU (a busy neighbour): set aside and retaken, it is the faster
    entry = tuned(clock, fakes(clock, a=1e-3, b=([0.8e-3, 1.2e-3, 0.8e-3], {"waits": [0.0, 0.4e-3, 0.0]})),
                  reader=OthersUnseenReader(clock))
    assert entry.algo == "b" and entry.retaken == {"b": 1} and entry.runs["b"] >= 3
    assert 1.2e-3 not in entry.samples["b"] and not entry.provisional
    assert entry.waited["b"] > 0 and entry.waited["a"] == 0


class ScriptedReader(FakeReader):
    """Other processes' runnable tasks read from a script, one value a reading (then 0), and every reading kept."""

    def __init__(self, clock, script):
        super().__init__(clock)
        self.script, self.readings = list(script), []

    def runnable_others(self) -> int:
        self.readings.append(self.script.pop(0) if self.script else 0)
        return self.readings[-1]


def test_a_retake_waits_for_a_neighbour_that_comes_and_goes_to_yield_but_not_for_one_that_stays():
    clock = FakeClock()
    # a reading before each call, and after it where the call waited. Before a's and b's checked calls and a's
    # first sample: nobody; before and after b's first sample (which waits 0.4 ms) a neighbour: it came and went,
    # so before the retake the count is polled until it reads 0
    algos = fakes(clock, a=1e-3, b=([0.8e-3, 1.2e-3, 0.8e-3], {"waits": [0.0, 0.4e-3, 0.0]}))
    script = [0, 0, 0] + [1, 1] + [1, 1, 0] + [0]
    reader = ScriptedReader(clock, script)
    entry = tuned(clock, algos, reader=reader)
    assert entry.algo == "b" and entry.retaken == {"b": 1} and reader.readings[:len(script)] == script
    # a neighbour seen before every sample stays: no polling, one reading per sample, two for the one that waited
    algos = fakes(clock, a=1e-3, b=([0.8e-3, 1.2e-3, 0.8e-3], {"waits": [0.0, 0.4e-3, 0.0]}))
    reader = ScriptedReader(clock, [1] * 1000)
    entry = tuned(clock, algos, reader=reader)
    taken = sum(entry.runs.values()) + sum(entry.retaken.values())
    assert len(reader.readings) == taken + 1 and entry.provisional


def test_a_winner_left_with_few_runs_is_retimed():
    clock = FakeClock()
    # b leads after one round, so a stops early; then b slows down and a, timed once, has the best median
    entry = tuned(clock, fakes(clock, a=1e-3, b=[0.9e-3, 0.9e-3, 1.3e-3]))
    assert entry.algo == "a" and entry.runs["a"] >= 3


def test_clearly_slower_candidate_stops_early_the_best_refines():
    clock = FakeClock()
    algos = fakes(clock, best=[1e-3, 1e-3, 1.1e-3, 0.9e-3], second=1.5e-3)   # best's runs are noisy
    entry = tuned(clock, algos)
    # second leaves after two runs (its checked call and one more): 1.5x is beyond a tie and the judge's reach
    assert entry.algo == "best" and entry.runs["second"] == 2 and algos["second"].calls == 2
    assert entry.runs["best"] >= 3 and not entry.verdict


def test_cost_cap_ends_the_race_of_near_ties():
    clock = FakeClock()
    noisy = [1e-3, 1.3e-3, 0.7e-3] * 40
    entry = tuned(clock, fakes(clock, a=noisy, b=noisy), cost_cap=20.0)
    assert 3 <= entry.runs["a"] <= 12 and set(entry.tied) == {"a", "b"}


def test_prune_ratio_skips_what_the_heuristic_measured_far_slower():
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=2e-3, c=1e-4)
    rules = Heuristics({"rules": [{"name": "r", "when": {}, "order": ["a", "b", "c"],
                                   "score": {"a": 1.0, "b": 2.0, "c": 12.0}}]})
    entry = tuned(clock, algos, heuristics=rules)
    assert entry.algo == "a" and algos["c"].calls == 0 and entry.skipped["c"].startswith("pruned: rule 'r' measured")
    assert tuned(clock, algos, heuristics=rules, prune_ratio=None).algo == "c"


def test_what_a_workspace_limit_leaves_is_pruned_against_itself():
    """The rule's nearest candidate ("a", closest 1.0) is over the workspace limit: "b" and "c" (closest 3x and
    9x, the best of them 3x) are measured against each other, so "b" runs and serves the call."""
    clock = FakeClock()
    algos = fakes(clock, a=(1e-3, {"workspace": 1 << 20}), b=2e-3, c=3e-3)
    rules = Heuristics({"rules": [{"name": "r", "when": {}, "order": ["a", "b", "c"],
                                   "score": {"a": 1.0, "b": 4.0, "c": 12.0},
                                   "closest": {"a": 1.0, "b": 3.0, "c": 9.0}}]})
    entry = tuned(clock, algos, heuristics=rules, workspace_limit=1 << 10)
    assert entry.algo == "b" and algos["c"].calls == 0 and entry.skipped["c"].startswith("pruned: rule 'r' measured")


def test_a_class_layer_near_the_key_prunes_by_its_own_measurement_and_the_reason_says_so():
    """The class's closest keeps "c" (1.1x on a far layer); the layer near the key (50 output pixels, 3 -> 4
    channels, against 64, 3, 4) measured it 5x behind: it is not called, and its reason names the near layer."""
    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=1.5e-3, c=1.2e-3)
    rules = Heuristics({"rules": [{"name": "r", "when": {}, "order": ["a", "b", "c"],
                                   "score": {"a": 1.0, "b": 1.5, "c": 2.3}, "closest": {"a": 1.0, "b": 1.5, "c": 1.1},
                                   "layers": [{"at": [64, 3, 4], "ratios": {"a": 1.0, "b": 1.5, "c": 5.0}},
                                              {"at": [50000, 3, 4], "ratios": {"a": 1.2, "c": 1.0}}]}]})
    entry = tuned(clock, algos, heuristics=rules)
    assert algos["c"].calls == 0 and algos["b"].calls > 0 and entry.algo == "a"
    assert entry.skipped["c"] == ("pruned: rule 'r' measured it at least 5.0x slower than the best on the 1 "
                                  "layer(s) of its class near this one (prune_ratio=2.0)")


def test_a_seed_estimate_prunes_only_three_times_further_behind():
    """A datasheet's estimate is no measurement: at prune_ratio 2 it prunes what it puts 6x behind, not 4x."""
    class Seeded(Heuristics):
        def estimated(self, rule_name):
            return True

    clock = FakeClock()
    algos = fakes(clock, a=1e-3, b=2e-3, c=1e-4)
    rules = Seeded({"rules": [{"name": "r", "when": {}, "order": ["a", "b", "c"],
                               "score": {"a": 1.0, "b": 4.0, "c": 8.0}}]})
    entry = tuned(clock, algos, heuristics=rules, prune_ratio=2.0)
    assert "b" not in entry.skipped and algos["c"].calls == 0
    assert entry.skipped["c"].startswith("pruned: the seed's estimate puts it 8.0x behind")


def test_a_short_call_is_timed_right_after_a_call_of_its_own_and_a_long_one_alone():
    clock = FakeClock()
    # a call right after another fake's costs 0.5 ms more (cold caches): a's and b's race samples never pay it
    algos = fakes(clock, a=(1e-3, {"cold": 0.5e-3}), b=(1.05e-3, {"cold": 0.5e-3}))
    entry = tuned(clock, algos, pair_below=2e-3)
    assert entry.algo == "a" and entry.verdict["ratio"] == pytest.approx(1.05)
    assert entry.samples["a"][1:] == pytest.approx([1e-3] * (entry.runs["a"] - 1))
    assert entry.samples["b"][1:] == pytest.approx([1.05e-3] * (entry.runs["b"] - 1))
    # each pair round starts with the candidate that ran last (AB, BA, ...): one untimed lead a round, not two
    samples = entry.runs["a"] + entry.runs["b"] - 2                    # race samples (round 0 was the checked calls)
    rounds = min(entry.runs["a"], entry.runs["b"]) - 1
    assert entry.calls["a"] + entry.calls["b"] == 2 + samples + rounds + 1   # round 1 had no sample of its own before
    # the entry counts every call each made while tuned, and their seconds (an untimed call counted as the timed)
    assert entry.calls == {"a": algos["a"].calls - 1, "b": algos["b"].calls}
    assert entry.spent["b"] == pytest.approx(1.55e-3 + 1.05e-3 * (algos["b"].calls - 1))
    # b's 2.5 ms calls (over pair_below) are timed alone, with no untimed call
    algos = fakes(clock, a=1e-3, b=(2.5e-3, {"faults": [100, 0]}))
    entry = tuned(clock, algos, pair_below=2e-3)
    assert algos["b"].calls == entry.runs["b"] + 1                     # its warm-up, then its runs


def test_a_short_calls_checked_call_screens_but_does_not_settle_it():
    clock = FakeClock()
    # every call short (under pair_below). far: 1.8x on its checked call and on one race sample, over what one
    # disturbed run could add (spike_ratio x settle_ratio, 1.65x): settled after the first round, three calls
    algos = fakes(clock, best=1e-3, near=1.05e-3, far=1.8e-3)
    entry = tuned(clock, algos, pair_below=4e-3)
    assert entry.runs["far"] == 2 and algos["far"].calls == 3
    assert entry.runs["near"] >= 3 and algos["near"].calls <= 1 + 2 * (entry.runs["near"] - 1)  # a lead at most
    # near's checked call came 1.3x (after another candidate's call: a cold cache), its race samples 1.05x: not
    # settled on the checked call; it races on, paired with best on race samples only
    algos = fakes(clock, best=1e-3, near=[1.3e-3] + [1.05e-3] * 80)
    entry = tuned(clock, algos, pair_below=4e-3)
    assert entry.runs["near"] >= 3 and entry.times["near"] == pytest.approx(1.05e-3)
    assert entry.verdict["ratio"] == pytest.approx(1.05)
    # where its checked call took page faults it was a warm-up, no evidence: two race samples settle it
    algos = fakes(clock, best=1e-3, near=1.05e-3, far=([2e-3, 1.8e-3], {"faults": [100, 0]}))
    entry = tuned(clock, algos, pair_below=4e-3)
    assert entry.runs["far"] == 2
    # fast's checked call and its first race sample came slow (1.3 ms: the first after the checks), its later
    # ones 1.0 against other's 1.1: 1.3 is within what one disturbed run adds, not settled on the two; it races
    # on and is chosen
    algos = fakes(clock, other=1.1e-3, fast=[1.3e-3] * 3 + [1.0e-3] * 80)
    entry = tuned(clock, algos, pair_below=4e-3)
    assert entry.algo == "fast" and entry.runs["fast"] >= 3


def test_a_warm_up_that_took_page_faults_does_not_settle_a_candidate():
    """ResNet-18's C256 layer in a first tuning (measured 2026-12-06): the fused Winograd's checked call touched
    its workspace (2.3 ms, page faults), its first race run came slow (1.6 ms), later ones 1.2 ms against direct's
    1.32. Its warm-up and one run used to settle it behind direct; now it races on and is chosen."""
    clock = FakeClock()
    algos = fakes(clock, direct=1.32e-3, fused=([2.3e-3, 1.6e-3] + [1.2e-3] * 80, {"faults": [893, 0]}))
    entry = tuned(clock, algos)
    assert entry.algo == "fused" and entry.runs["fused"] >= 3
    assert entry.times["fused"] == pytest.approx(1.2e-3)
