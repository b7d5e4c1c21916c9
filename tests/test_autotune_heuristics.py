"""autotune.heuristics: rule matching, ranking per device and pass, FLOP ranking where nothing was measured,
and heuristics.json as written by bench/heuristics.py."""
import numpy as np

import convalgos
from autotune.heuristics import NEAR_OCTAVES, Heuristics, features, gemm_sizes, matches, octaves
from bench import heuristics as script
from bench.layers import layer


def test_features_and_conditions():
    f = features(layer(2, 64, 28, 128, 3, stride=2))
    assert f["kernel"] == [3, 3] and f["stride_size"] == 2 and f["channels"] == 64 and f["pixels"] == 14 * 14
    assert matches({"kernel": [3, 3], "min_channels": 64, "max_channels": 64}, f)
    assert not matches({"kernel": [3, 3], "min_channels": 65}, f)
    assert matches({}, f)


def test_first_matching_rule_wins_and_unnamed_rank_last():
    h = Heuristics({"rules": [{"name": "1x1", "when": {"kernel": [1, 1]}, "order": ["b", "a"]},
                              {"name": "any", "when": {}, "order": ["a"]}]})
    assert h.rank(layer(1, 4, 8, 4, 1), ["a", "c", "b"]) == (["b", "a", "c"], "1x1")
    assert h.rank(layer(1, 4, 8, 4, 3), ["c", "b", "a"]) == (["a", "c", "b"], "any")
    assert Heuristics({"rules": []}).rank(layer(1, 4, 8, 4, 3), ["c", "a"]) == (["c", "a"], "registration order")


def test_rules_are_per_device_and_pass_and_flops_rank_where_none_were_measured():
    h = Heuristics({"devices": {"cpu": {"forward": [{"name": "f", "when": {}, "order": ["b", "a"]}],
                                        "backward_data": [{"name": "d", "when": {"kernel": [1, 1]}, "order": ["a"]}]}}})
    p, flops = layer(1, 4, 8, 4, 3), {"a": 30, "b": 20, "c": 10}
    assert h.rank(p, ["a", "b"], op="forward", device="cpu", flops=flops) == (["b", "a"], "f")
    ranked, rule = h.rank(p, ["a", "b", "c"], op="backward_filter", device="cpu", flops=flops)
    assert ranked == ["c", "b", "a"] and "FLOPs" in rule and "no measured rules for cpu backward_filter" in rule
    ranked, rule = h.rank(p, ["a", "b", "c"], op="forward", device="cuda", flops=flops)
    assert ranked == ["c", "b", "a"] and "cuda" in rule
    ranked, rule = h.rank(p, ["a", "b", "c"], op="backward_data", device="cpu", flops=flops)   # 3x3: no match
    assert ranked == ["c", "b", "a"] and "no rule matched" in rule
    assert h.slowdowns("f", ["a"], op="backward_data") == {}


def test_an_algorithm_the_rule_did_not_measure_ranks_after_it_by_flops_and_the_rule_says_so():
    """A registered algorithm the data never timed ("mine", "yours") follows the measured order, fewest FLOPs
    first, named in the rule text; the rule's scores still prune what they measured."""
    h = Heuristics({"devices": {"cpu": {"forward": [{"name": "f", "when": {}, "order": ["b", "a"],
                                                      "score": {"b": 1.0, "a": 8.0}}]}}})
    p, flops = layer(1, 4, 8, 4, 3), {"a": 30, "b": 20, "yours": 25, "mine": 5}
    ranked, rule = h.rank(p, ["yours", "a", "mine", "b"], op="forward", device="cpu", flops=flops)
    assert ranked == ["b", "a", "mine", "yours"]
    assert rule == "f; not in its measurements, after them by fewest FLOPs: mine, yours"
    assert h.slowdowns(rule, ranked, op="forward") == {"b": 1.0, "a": 8.0}


def test_ranking_is_by_geometric_mean_of_ratio_to_best_and_records_the_closest():
    order, score, closest = script.ranking([{"a": 1.0, "b": 2.0}, {"a": 4.0, "b": 1.0, "c": 1.5}])
    assert order == ["b", "c", "a"] and np.isclose(score["a"], 2.0) and np.isclose(score["b"], 2 ** 0.5)
    assert closest == {"a": 1.0, "b": 1.0, "c": 1.5}


def test_slowdowns_are_the_closest_approach_where_the_rule_records_it():
    """Pruning goes by how near the best an algorithm ever came on the class's layers: "a" won one layer and
    lost another 16x (geometric mean 4x), so it is never pruned at 2.5x; "c" never came within 3x."""
    rule = {"name": "f", "when": {}, "order": ["b", "a", "c"], "score": {"b": 1.0, "a": 4.0, "c": 5.0},
            "closest": {"b": 1.0, "a": 1.0, "c": 3.0}}
    h = Heuristics({"devices": {"cpu": {"forward": [rule]}}})
    assert h.slowdowns("f", ["a", "b", "c"], op="forward") == {"a": 1.0, "b": 1.0, "c": 3.0}
    assert h.slowdowns("f", ["c"], op="forward") == {"c": 1.0}       # all a workspace limit left: never pruned
    del rule["closest"]                    # an older file: the scores over the best score among the names
    assert h.slowdowns("f", ["a", "c"], op="forward") == {"a": 1.0, "c": 1.25}


def test_near_the_layer_the_closest_is_taken_over_the_class_layers_near_it():
    """A class spans unlike layers: "c" came within 1.2x of the best on its 112 px layer and ran 6x behind on its
    6 px batch-64 layer. A layer near the second (same channels, 2048 against 2304 output pixels) prunes "c" by
    that layer's 6x; one near neither keeps the class's closest (1.2x), and so does an algorithm the near layer
    did not run ("d": it did not support it)."""
    near, far = layer(32, 64, 8, 64, 3, padding=1), layer(1, 512, 7, 512, 3, padding=1)
    rule = {"name": "f", "when": {}, "order": ["a", "b", "c", "d"], "score": {"a": 1.0, "b": 1.5, "c": 2.7, "d": 3.0},
            "closest": {"a": 1.0, "b": 1.5, "c": 1.2, "d": 3.0},
            "layers": [{"at": [12544, 64, 64], "ratios": {"a": 1.0, "b": 1.5, "c": 1.2, "d": 3.0}},
                       {"at": [2304, 64, 64], "ratios": {"a": 1.0, "b": 1.5, "c": 6.0}}]}
    h = Heuristics({"devices": {"cpu": {"forward": [rule]}}})
    assert gemm_sizes(near) == (2048, 64, 64) and octaves((2048, 64, 64), (2304, 64, 64)) < NEAR_OCTAVES
    assert [one["at"] for one in h.near_layers("f", near)] == [[2304, 64, 64]]
    assert h.slowdowns("f", ["a", "b", "c", "d"], p=near) == {"a": 1.0, "b": 1.5, "c": 6.0, "d": 3.0}
    assert h.near_layers("f", far) == []
    assert h.slowdowns("f", ["a", "b", "c", "d"], p=far) == {"a": 1.0, "b": 1.5, "c": 1.2, "d": 3.0}
    assert h.slowdowns("f", ["a", "b", "c", "d"]) == h.slowdowns("f", ["a", "b", "c", "d"], p=far)


def test_the_script_records_each_layer_s_sizes_and_ratios():
    p, q = layer(1, 64, 56, 64, 3, padding=1), layer(32, 64, 8, 64, 3, padding=1)
    r = script.rule("r", {}, [{"a": 1.0, "b": 2.0}, {"a": 3.0, "b": 1.0}], [p, q])
    assert r["layers"] == [{"at": [3136, 64, 64], "ratios": {"a": 1.0, "b": 2.0}},
                           {"at": [2048, 64, 64], "ratios": {"a": 3.0, "b": 1.0}}]
    assert r["closest"] == {"a": 1.0, "b": 1.0}


def test_prepared_keys_use_their_own_rules_where_measured():
    h = Heuristics({"devices": {"cpu": {"forward": [{"name": "plain", "when": {}, "order": ["a", "b"]}],
                                        "forward prepared": [{"name": "prep", "when": {}, "order": ["b", "a"]}]}}})
    p = layer(1, 4, 8, 4, 3)
    assert h.rank(p, ["a", "b"], op="forward") == (["a", "b"], "plain")
    assert h.rank(p, ["a", "b"], op="forward", prepared=True) == (["b", "a"], "prep")
    assert h.rank(p, ["a", "b"], op="backward_data", prepared=True)[1] == "registration order"
    h.devices["cpu"].pop("forward prepared")                  # none measured: the plain pass's rules apply
    assert h.rank(p, ["a", "b"], op="forward", prepared=True) == (["a", "b"], "plain")


def test_heuristics_json_is_the_scripts_output():
    h = Heuristics.from_file()
    assert set(h.devices) == {"cpu"} and set(h.devices["cpu"]) == set(script.MEASURED)
    assert h.rules("forward", "cpu") and h.rules("forward", "cpu", prepared=True), "forward is measured"
    for measured in script.MEASURED:
        op, prepared = measured.removesuffix(" prepared"), measured.endswith(" prepared")
        suffix = " (prepared weight)" if prepared else ""
        rules = h.devices["cpu"][measured]
        if not rules:                      # a pass not measured yet ranks by FLOPs
            continue
        assert [(r["name"], r["when"]) for r in rules] == ([(n + suffix, w) for n, w, _ in script.CLASSES]
                                                           + [("default" + suffix, {})])
        for r in rules:
            scores = [r["score"][n] for n in r["order"]]          # best first, by its (rounded) scores
            assert scores == sorted(scores) and set(r["order"]) == set(r["score"]) == set(r["closest"])
            assert min(r["closest"].values()) == 1.0            # some algorithm was the best of a layer
            assert all(1.0 <= r["closest"][n] <= r["score"][n] + 1e-3 for n in r["order"])   # a min <= a mean
            assert all(min(one["ratios"].values()) == 1.0 and set(one["ratios"]) <= set(r["order"])
                       for one in r["layers"]) and r["layers"]                 # each layer's own best is 1
            assert all(min(one["ratios"].get(n, 1e9) for one in r["layers"]) == r["closest"][n] for n in r["order"])
        for name, when, layers in script.CLASSES:      # every class's layers fire their own rule
            for p in layers:
                assert h.rank(p, list(convalgos.ALGORITHMS), op=op, prepared=prepared)[1] == name + suffix
