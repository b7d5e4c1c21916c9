"""bench.regret's record computes its regrets and costs from the judge's numbers beside them (a synthetic run:
no timing), and the neighbours it starts end when their block does."""
import argparse
import json
import time

from autotune_fakes import FakeClock, fakes, tuned
from bench.neighbours import neighbour
from bench.regret_misses import evidence, traced
from bench.regret_report import costs, judge_against_itself, regrets, render


def synthetic_run():
    quiet = [{"a": 1.0e-3, "b": 1.5e-3}, {"a": 2.0e-3, "b": 1.0e-3}]
    under = [{"a": 3.0e-3, "b": 2.0e-3}, {"a": 4.0e-3, "b": 2.0e-3}]

    def chose(*algos, **extra):
        return [dict({"algo": a, "seconds": 0.02, "jit": 0.01, "provisional": False}, **extra) for a in algos]
    return {"layers": ["one", "two"], "ops": ["forward", "forward"], "quiet": {"first": 0.01},
            "first": chose("a", "a"), "warm": chose("a", "b"), "steady": chose("b", "b", provisional=True),
            "after": [{"algo": "a", "reraced": 1, "provisional": False}, {"algo": "b", "reraced": 0,
                                                                          "provisional": True}],
            "bursty": chose("b", "b"), "judge_quiet": quiet, "judge_steady": under,
            "judge_quiet_1": [{"a": 1.0e-3, "b": 1.2e-3}, {"a": 2.0e-3, "b": 1.0e-3}],
            "judge_quiet_2": quiet}


def test_the_record_computes_regret_and_cost_from_the_judges_times():
    run = synthetic_run()
    assert regrets(run, "first", "judge_quiet") == [0.0, 1.0]              # two's "a": 2.0 ms against b's 1.0
    assert regrets(run, "steady", "judge_steady") == [0.0, 0.0]
    assert regrets(run, "steady", "judge_quiet") == [0.5, 0.0]
    assert costs(run, "warm") == [10.0, 10.0]                             # (20 ms - 10 ms JIT) / 1 ms
    text = render({"numpy": run}, 0.5, argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0))
    assert "| quiet, first tunings in a process | 50% / 100% (median / worst)" in text
    assert "| steady neighbour: choices marked provisional | 2 of 2 | all |" in text
    assert "1 re-raced, 1 still provisional" in text and "a +100%" in text


def test_a_bursty_choice_is_judged_as_chosen_and_once_the_neighbours_have_gone():
    """Layer two's "a" (2x the best quietly), chosen beside the bursty neighbours and marked provisional, was
    re-raced once they had gone: "b" then, 0%. A record from before that phase has neither row."""
    run = synthetic_run()
    run["bursty"] = [{"algo": "a", "seconds": 0.02, "jit": 0.0, "provisional": False},
                     {"algo": "a", "seconds": 0.02, "jit": 0.0, "provisional": True}]
    run["after_bursty"] = [{"algo": "a", "reraced": 0, "provisional": False},
                           {"algo": "b", "reraced": 1, "provisional": False}]
    args = argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0)
    text = render({"numpy": run}, 0.5, args)
    assert "| beside a neighbour that comes and goes (against the quiet race) | 50% / 100% (median / worst)" in text
    assert ("| the same, once it has gone, after a second of calls (against the quiet race) | 0% / 0% (median / "
            "worst)") in text
    assert "| neighbour that comes and goes: choices marked provisional | 1 of 2 |" in text
    assert "| a P +100% -> b +0% (re-raced) |" in text
    del run["after_bursty"]
    assert "the same, once it has gone" not in render({"numpy": run}, 0.5, args)


def test_the_judge_judges_itself_for_the_noise_floor():
    run = synthetic_run()
    run["judge_quiet_1"][1] = {"a": 0.9e-3, "b": 1.0e-3}          # its first pass found "a" fastest on layer two
    assert judge_against_itself(run) == [0.0, 1.0]                 # the second pass times "a" at 2.0 ms against 1.0
    text = render({"numpy": run}, 0.5, argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0))
    assert "| the quiet judge against itself: its first pass's fastest, timed by its second | 50% / 100%" in text
    assert "steady neighbour's judge against itself" not in text   # a record without its two passes: no row
    # under the steady neighbour: two passes, the first's fastest "b" timed 1.5x the second's best on layer one
    run["judge_steady_1"] = [{"a": 3.0e-3, "b": 2.0e-3}, {"a": 4.0e-3, "b": 2.0e-3}]
    run["judge_steady_2"] = [{"a": 2.0e-3, "b": 3.0e-3}, {"a": 4.0e-3, "b": 2.0e-3}]
    assert judge_against_itself(run, "judge_steady") == [0.5, 0.0]
    text = render({"numpy": run}, 0.5, argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0))
    assert "| the steady neighbour's judge against itself: its first pass's fastest, timed by its second | 25% / 50%" \
        in text


def test_a_neighbour_ends_with_its_block():
    with neighbour("steady") as processes:
        assert all(p.poll() is None for p in processes)
    assert all(p.poll() is not None for p in processes)
    start = time.monotonic()
    with neighbour("bursty", limit=5) as processes:
        assert len(processes) >= 1
    assert all(p.poll() is not None for p in processes) and time.monotonic() - start < 5


def test_speed_states_records_each_moment_and_the_ratios_range_from_them(tmp_path):
    import re

    from bench import speed_states
    out = tmp_path / "states.md"
    speed_states.main(["--seconds", "0.3", "--every", "0.05", "--orders", "convalgos", "--out", str(out)])
    text = out.read_text()
    assert "## convalgos first" in text
    rows = [line.split("|") for line in text.splitlines() if re.match(r"\| \d\d:\d\d:\d\d \|", line)]
    ratios = [float(r[4]) for r in rows]
    assert rows and all(abs(float(r[2]) / float(r[3]) - float(r[4])) < 0.02 for r in rows)
    low, high = re.search(r"from (\d+\.\d+) to (\d+\.\d+)", text).groups()
    assert abs(float(low) - min(ratios)) < 0.011 and abs(float(high) - max(ratios)) < 0.011


def test_a_choice_is_also_judged_on_the_rounds_in_the_vcpu_placement_it_raced_in():
    from bench.regret_placement import judge_in, regrets_in_place
    run = synthetic_run()
    # layer two: "b" is faster in the near placement (fork/join 1.5 us), "a" in the far one (2.8 us)
    near, far = {"a": 2.0e-3, "b": 1.0e-3}, {"a": 1.0e-3, "b": 1.3e-3}
    rounds = [near] * 6 + [far] * 6
    layer_two = {"placements": [1.5] * 6 + [2.8] * 6, "samples": {n: [r[n] for r in rounds] for n in "ab"}}
    layer_one = {"placements": [1.5] * 12, "samples": {"a": [1.0e-3] * 12, "b": [1.5e-3] * 12}}
    run["judge_quiet_rounds_1"] = run["judge_quiet_rounds_2"] = [layer_one, layer_two]
    for phase in ("first", "warm", "steady", "after", "bursty"):
        for e in run[phase]:
            e["placement_us"] = 1.5
    run["first"][1]["placement_us"] = 2.8                      # layer two's first race ran far: "a" was right
    assert judge_in(run, 1, "far") == {"a": 1.0e-3, "b": 1.3e-3}
    assert regrets(run, "first", "judge_quiet") == [0.0, 1.0] and regrets_in_place(run, "first") == [0.0, 0.0]
    assert regrets_in_place(run, "bursty") == [0.5, 0.0]        # "b" raced near, where it is the faster
    text = render({"numpy": run}, 0.5, argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0))
    assert "| quiet, first tunings in a process, judged in its race's vCPU placement | 0% / 0% (2 of 2 layers)" in text
    assert "FNNN (12 / 12)" in text                            # layer two: first far, then near; rounds both passes


def test_a_choice_is_also_judged_against_a_race_right_after_it():
    """Layer two's warm "b" is 100% slower in the quiet judge a minute later, but the fastest in the race of its
    layer taken right after it: the row says 0%, and the layer's cell shows both. A record without those races
    has neither."""
    run = synthetic_run()
    args = argparse.Namespace(layers=2, rounds=3, steady_rounds=9, after=1.0)
    assert "against a race right after" not in render({"numpy": run}, 0.5, args)
    run["judge_quiet"] = [{"a": 1.0e-3, "b": 1.5e-3}, {"a": 1.0e-3, "b": 2.0e-3}]
    run["judge_moment_warm"] = [{"a": 1.0e-3, "b": 1.4e-3}, {"a": 2.1e-3, "b": 2.0e-3}]
    run["judge_moment_after"] = [{"a": 1.0e-3, "b": 1.1e-3}, {"a": 1.0e-3, "b": 1.25e-3}]
    assert regrets(run, "warm", "judge_moment_warm") == [0.0, 0.0]
    text = render({"numpy": run}, 0.5, args)
    assert "| quiet, second tunings (warm), against a race right after each | 0% / 0% (median / worst)" in text
    assert ("| once the steady neighbour has gone, after a second of calls, against a race right after | 12% / 25% "
            "(median / worst)") in text
    assert "| b +100% (now +0%) |" in text
    run["judge_moment_steady"] = [{"a": 3.0e-3, "b": 2.0e-3}, {"a": 2.0e-3, "b": 3.0e-3}]
    text = render({"numpy": run}, 0.5, args)
    assert "| beside the steady neighbour, against a race under it right after each | 25% / 50% (median / " in text
    assert "| b P +0% / +100% (now +50%) |" in text


def test_a_miss_over_its_target_is_traced_with_the_races_evidence():
    """The record traces each choice over its row's target from the evidence stored with the tuning: a's runs
    waited half their time with no other process runnable (its own threads': kept, waits and all), and it won
    the race though the judge times it 2x b on layer two. A record without evidence has no such section."""
    clock = FakeClock()
    entry = tuned(clock, fakes(clock, a=(1e-3, {"waits": 0.5e-3}), b=2e-3))
    ev = json.loads(json.dumps(evidence(entry)))                     # stored as JSON in the run
    assert entry.algo == "a" and ev["waits_kept"] == {"a": "its own threads' waits"}
    assert ev["times_ms"] == {"a": 1.0, "b": 2.0} and ev["neighbours"] == 0.0 and ev["provisional"] == ""
    run = synthetic_run()
    assert traced({"numpy": run}) == []
    for e in run["first"]:
        e["evidence"] = ev
    lines = traced({"numpy": run})
    assert len(lines) == 6 and lines[-1].startswith("- numpy first, **two**, first: kept `a`, +100% against the "
                                                    "quiet judge (best `b`). The race: `a` 1.000 ms in the race (")
    assert "waited 50% of its time; judged waits and all: its own threads' waits), 2.000 ms in the judge" in lines[-1]
    assert "`b` 2.000 ms in the race" in lines[-1] and "1.000 ms in the judge" in lines[-1]
    assert "another process runnable before 0% of its samples" in lines[-1] and "not provisional" in lines[-1]
