"""python -m bench.heuristics --device cuda, its parts under the simulator: the GPU algorithms timed per pass,
the file's "cuda" rules written beside the CPU's and the seed, and the tuner then ranking by them."""
import pytest

from autotune.heuristics import Heuristics
from bench import heuristics as bench_heuristics
from bench.layers import layer
from convalgos import PASSES
from convalgos.arrays import simulator_enabled

pytestmark = pytest.mark.skipif(not simulator_enabled(), reason="the GPU path without a GPU runs only here")


def test_measured_gpu_rules_join_the_file_and_replace_the_seed(monkeypatch):
    tiny = layer(1, 1, 2, 1, 1)                         # 1x1: the simulator's cost grows with the threads
    monkeypatch.setattr(bench_heuristics, "CLASSES", [("pointwise 1x1", {"kernel": [1, 1]}, [tiny])])
    monkeypatch.setattr(bench_heuristics, "GPU_BATCH", 1)
    old = {"seeds": {"cuda": {"flops_per_second": 1e13, "bytes_per_second": 1e12}},
           "devices": {"cpu": {"forward": [{"name": "kept", "when": {}, "order": ["direct"]}]}}}
    data = bench_heuristics.measure(1, quick=True, passes=PASSES, old=old, device="cuda")
    assert data["devices"]["cpu"] == old["devices"]["cpu"] and data["seeds"] == old["seeds"]
    assert data["produced_by"] == "python -m bench.heuristics --quick --device cuda"
    rules = data["devices"]["cuda"]
    assert list(rules) == list(PASSES)
    for op in PASSES:
        assert [r["name"] for r in rules[op]] == ["pointwise 1x1", "default"]
        assert {"direct", "implicit_gemm", "im2col"} <= set(rules[op][0]["order"]), op
    order, rule = Heuristics(data).rank(tiny, rules["forward"][0]["order"][::-1], device="cuda",
                                        flops={n: 1 for n in rules["forward"][0]["order"]}, workspace={})
    assert rule == "pointwise 1x1" and order == rules["forward"][0]["order"]
