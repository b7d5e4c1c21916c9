"""The GPU's heuristic seed: with no measured rule, candidates rank by an estimate from FLOPs and workspace, and
the rule's name says it is a seed, not a measurement."""
from autotune.heuristics import Heuristics
from convalgos import ConvParams

P = ConvParams.from_shapes((32, 64, 28, 28), (64, 64, 3, 3), padding=1)
SEEDED = Heuristics({"devices": {"cpu": {}}, "seeds": {"cuda": {"flops_per_second": 1e13, "bytes_per_second": 1e12}}})


def test_the_seed_ranks_by_flops_plus_workspace_traffic_and_says_so():
    flops = {"direct": 3e9, "im2col": 3e9, "winograd": 1.5e9}
    workspace = {"direct": 0, "im2col": 100e6, "winograd": 400e6}
    # estimates: direct 0.3 ms, im2col 0.3 + 0.2 = 0.5 ms, winograd 0.15 + 0.8 = 0.95 ms
    ranked, rule = SEEDED.rank(P, list(flops), device="cuda", flops=flops, workspace=workspace)
    assert ranked == ["direct", "im2col", "winograd"]
    assert rule.startswith("seeded by FLOPs and workspace, not measured")
    assert "no measured rules for cuda forward" in rule
    small = {n: b / 100 for n, b in workspace.items()}              # small workspaces: FLOPs decide
    assert SEEDED.rank(P, list(flops), device="cuda", flops=flops, workspace=small)[0][0] == "winograd"


def test_a_device_without_a_seed_ranks_by_flops_alone():
    flops = {"a": 2.0, "b": 1.0}
    ranked, rule = SEEDED.rank(P, ["a", "b"], op="backward_data", device="cpu", flops=flops, workspace={"b": 1 << 40})
    assert ranked == ["b", "a"] and rule == "fewest FLOPs first (no measured rules for cpu backward_data)"


def test_the_shipped_file_seeds_the_gpu_only():
    shipped = Heuristics.from_file()
    assert shipped.seed("cuda")["flops_per_second"] > 0 and shipped.seed("cpu") is None
    assert "not a measurement" in shipped.seed("cuda")["source"]
