"""autotune.heuristics: rule matching, ranking, and heuristics.json as written by bench/heuristics.py."""
import numpy as np

import convalgos
from autotune.heuristics import Heuristics, features, matches
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


def test_ranking_is_by_geometric_mean_of_ratio_to_best():
    order, score = script.ranking([{"a": 1.0, "b": 2.0}, {"a": 4.0, "b": 1.0, "c": 1.5}])
    assert order == ["b", "c", "a"] and np.isclose(score["a"], 2.0) and np.isclose(score["b"], 2 ** 0.5)


def test_heuristics_json_is_the_scripts_output():
    rules = Heuristics.from_file().rules
    assert [(r["name"], r["when"]) for r in rules] == [(n, w) for n, w, _ in script.CLASSES] + [("default", {})]
    for r in rules:
        assert r["order"] == script.rule(r["name"], r["when"], [r["score"]])["order"]  # sorted by its scores
    for name, when, layers in script.CLASSES:      # every class's layers fire their own rule
        for p in layers:
            assert Heuristics({"rules": rules}).rank(p, list(convalgos.ALGORITHMS))[1] == name, (name, p)
