"""autotune.fleet under torch.distributed: 2 gloo processes on localhost, 1 thread each (``fleet_ranks.py``
says what each rank runs). A converted CNN trains 3 steps under DistributedDataParallel, converted before
wrapping (tuned at its misses) and after (tuned ahead by ``Fleet.prepare``); the parameters are equal on both
ranks and within float32's drift of the unconverted DDP run; the dispatch tables are identical; each key was
timed by exactly one rank, and no two timings overlapped (the ranks share one machine); a last batch of
another size on each rank is tuned for both; past ``patience`` no rank times; a provisional entry is raced
again by one rank for both (``Fleet.rerace``). A candidate raising
on one rank hangs nothing; a rank that stays out of a round is waited for ``timeout`` seconds, no longer.
Ranks of different machine fingerprints keep apart tables, written into one file by ``Fleet.save``, which a
later fleet's save merges with.
"""
import json

import numpy as np
import pytest

import autotune  # noqa: F401 - before torch: it sets how the OpenMP runtimes wait

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")
if not dist.is_available() or not dist.is_gloo_available():
    pytest.skip("torch.distributed with gloo is needed", allow_module_level=True)

import fleet_ranks  # noqa: E402


@pytest.fixture(scope="module")
def training(tmp_path_factory):
    return fleet_ranks.run_ranks(fleet_ranks.training, tmp_path_factory.mktemp("training"))


def keys_of(table) -> set:
    return {json.dumps(e["key"], sort_keys=True) for e in table}


def test_a_converted_cnn_trains_as_the_unconverted_one_under_ddp(training):
    for run in ("before", "after"):
        ranks = [np.array(r[run]) for r in training]
        assert np.array_equal(ranks[0], ranks[1]), f"converted {run} wrapping: the ranks' parameters differ"
        reference = np.array(training[0]["reference"])
        assert np.allclose(ranks[0], reference, rtol=1e-4, atol=1e-6), (
            f"converted {run} wrapping: {np.abs(ranks[0] - reference).max():.2e} from the unconverted DDP run")
        assert not np.array_equal(ranks[0], np.array(training[0]["initial"])), "the parameters did not move"
    assert [r["by_torch"] for r in training] == [0, 0]           # every pass served by the dispatcher


def test_the_ranks_dispatch_tables_are_identical(training):
    for name, entries, source in (("misses", 15, {"benchmark"}), ("ahead", 10, {"benchmark", "patience"})):
        tables = [r["tables"][name] for r in training]
        assert len(tables[0]) == entries and {e["source"] for e in tables[0]} == source
        assert tables[0] == tables[1], f"{name}: the ranks' tables differ"


def test_a_last_batch_of_another_size_on_each_rank_is_tuned_for_both_and_patience_holds(training):
    batches = {e["key"]["params"]["N"] for e in training[0]["tables"]["misses"]}
    assert batches == {4, 3, 2}                 # rank 0's 3 images and rank 1's 2, both in both tables
    patience = [e for e in training[0]["tables"]["ahead"] if e["source"] == "patience"]
    assert len(patience) == 5 and {e["key"]["params"]["N"] for e in patience} == {2}
    assert [r["timed_past_patience"] for r in training] == [0, 0]


def test_each_key_was_timed_by_exactly_one_rank_and_the_keys_were_split(training):
    for name in ("misses", "ahead"):
        timed = [[k for n, k, _ in r["tunings"] if n == name] for r in training]
        for keys in timed:
            assert len(keys) == len(set(keys)), f"{name}: a rank timed a key twice"
        assert not set(timed[0]) & set(timed[1]), f"{name}: a key was timed by both ranks"
        assert set(timed[0]) | set(timed[1]) == keys_of(e for e in training[0]["tables"][name]
                                                         if e["source"] == "benchmark")
        assert timed[0] and timed[1], f"{name}: one rank timed every key"
    assert sorted(training[0]["prepared"]) == sorted(keys_of(e for e in training[0]["tables"]["ahead"]
                                                             if e["source"] == "benchmark"))
    assert [r["timed_after_prepare"] for r in training] == [0, 0]   # prepare left no miss to the steps


def test_provisional_entries_are_raced_again_each_by_one_rank_for_every_rank(training):
    keys = training[0]["reraced"]
    assert keys and keys == training[0]["provisional"] == training[1]["reraced"] == training[1]["provisional"]
    raced = [{k: samples for n, k, samples in r["tunings"] if n == "rerace"} for r in training]
    assert not set(raced[0]) & set(raced[1]) and set(raced[0]) | set(raced[1]) == set(keys), (
        "a provisional entry was not raced again by exactly one rank")
    for r in training:
        for entry in r["tables"]["misses"]:
            key = json.dumps(entry["key"], sort_keys=True)
            if key in keys:
                assert entry["reraced"] == 1 and entry["samples"] == {**raced[0], **raced[1]}[key]


def test_ranks_of_one_machine_never_time_at_the_same_moment(training):
    intervals = sorted(i for r in training for i in r["intervals"])
    assert len(intervals) == 20 + len(training[0]["reraced"])       # 15 at the misses, 5 prepared, the re-races
    for (_, ended), (started, _) in zip(intervals, intervals[1:]):
        assert ended <= started, "two ranks of one machine were timing at once"


@pytest.fixture(scope="module")
def faults(tmp_path_factory):
    return fleet_ranks.run_ranks(fleet_ranks.faults, tmp_path_factory.mktemp("faults"))


def test_a_candidate_raising_on_one_rank_hangs_nothing(faults):
    failing = [r["failing"] for r in faults]
    assert np.array_equal(failing[0]["params"], failing[1]["params"])
    # the keys rank 1 timed chose direct, on both ranks (a key rank 0 timed may choose im2col, which rank 1 then
    # replaces at its call by the next ranked, as one process does: that rank's entry then says so)
    owned_by_1 = [e for e in failing[0]["table"] if "injected failure on rank 1" in e["skipped"].get("im2col", "")]
    assert owned_by_1 and all(e["algo"] == "direct" for e in owned_by_1), "the failure was not exercised"
    assert all(e in failing[1]["table"] for e in owned_by_1)
    # every candidate raising on rank 1: the keys it owned failed on both ranks, so torch served those passes on
    # rank 0 too, whose own candidate runs (rank 0 has it from the round's error, not from a failure of its own)
    doomed = [r["doomed"] for r in faults]
    assert np.array_equal(doomed[0]["params"], doomed[1]["params"])
    assert doomed[0]["table"] and doomed[0]["by_torch"] > 0


def test_a_rank_that_stays_out_is_waited_for_timeout_seconds_then_each_tunes_alone(faults):
    rank0 = faults[0]
    assert rank0["broken"] and "timeout=2.0 s" in rank0["broken"]
    assert rank0["left"] and len(rank0["warnings"]) == 1 and "tunes alone" in rank0["warnings"][0]
    assert rank0["y"] == pytest.approx(3 * 4 * 4 * 18.0)     # the call was served: 3x4x4 outputs of 2x3x3 ones
    assert rank0["waited"] < 30, "the fleet's collective outlived its timeout"


def test_ranks_of_different_machines_keep_apart_tables_saved_into_one_file(faults):
    for r in faults:
        machines = r["machines"]
        assert len(machines["tunings"]) == 3 and keys_of(machines["table"]) == {k for k, _ in machines["tunings"]}
        assert all(e["samples"] in [s for _, s in machines["tunings"]] for e in machines["table"]), (
            "a rank's table holds an entry another machine's rank measured")
        assert machines["written"] is True
        assert machines["loaded"] == machines["table"], "a rank loaded entries other than its own machine's"
    file = faults[0]["machines"]["file"]
    assert len(file["machines"]) == 2 and len(file["entries"]) == 6      # the second save kept the first's
    assert "another CPU" in {m["cpu"] for m in file["machines"].values()}
