"""The three passes through the dispatcher: each pass its own key, tuning, counts and heuristic (fake
algorithms and a fake clock; real algorithms only where torch is the definition)."""
import numpy as np
import pytest

import autotune
from autotune import Tuner
from autotune.heuristics import UNMEASURED, Heuristics
from autotune_fakes import NO_RULES, FakeClock, FakeReader, fake_timer, fakes
from convalgos import PASSES, reference
from float32_bounds import chosen_bound, within


def layer(N=2, C=3, H=7, K=4, R=3, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, H)).astype(np.float32)
    w = rng.standard_normal((K, C, R, R)).astype(np.float32)
    dy = rng.standard_normal((N, K, H - R + 3, H - R + 3)).astype(np.float32)     # padding=1
    return x, w, dy


def three_passes(t, x, w, dy, **kw):
    return (t.conv2d(x, w, padding=1, **kw.get("forward", {})),
            t.conv2d_input(x.shape, w, dy, padding=1, **kw.get("backward_data", {})),
            t.conv2d_weight(x, w.shape, dy, padding=1, **kw.get("backward_filter", {})))


def by_op(t) -> dict:
    return {e.key.op: e for e in t.dispatch_table()}


def test_each_pass_is_tuned_on_its_own_key_and_gives_the_reference():
    clock = FakeClock()
    algos = fakes(clock, a=(1e-3, {"pass_cost": {"backward_data": 3e-3}}),
                  b=(2e-3, {"pass_cost": {"backward_data": 1e-3}}))
    t = Tuner(algos, benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=NO_RULES)
    x, w, dy = layer()
    y, dx, dw = three_passes(t, x, w, dy)
    p = by_op(t)["forward"].key.params
    for op, result in zip(PASSES, (y, dx, dw)):
        a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
        assert reference.normwise_error(result, reference.PASS[op](a, b, p)) <= 1e-6, op
    entries = by_op(t)
    assert {op: e.algo for op, e in entries.items()} == {"forward": "a", "backward_data": "b", "backward_filter": "a"}
    assert len({e.key for e in entries.values()}) == 3 and all(e.source == "benchmark" for e in entries.values())
    assert all(op in e.report() and e.errors for op, e in entries.items())
    three_passes(t, x, w, dy)
    info = t.cache_info()
    assert all(info.passes[op][:3] == (1, 1, 1) for op in PASSES) and info[:3] == (3, 3, 3)
    assert "backward_filter 1 entries" in str(t.dispatch_table())


def test_a_pass_an_algorithm_lacks_is_skipped_with_its_reason():
    clock = FakeClock()
    algos = fakes(clock, forward_only=(1e-4, {"passes": ("forward",)}), every=1e-3)
    t = Tuner(algos, benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=NO_RULES)
    three_passes(t, *layer())
    entries = by_op(t)
    assert entries["forward"].algo == "forward_only"
    for op in ("backward_data", "backward_filter"):
        assert entries[op].algo == "every" and op in entries[op].skipped["forward_only"]
        assert algos["forward_only"].supports(entries[op].key.params, op).reason == entries[op].skipped["forward_only"]


@pytest.mark.parametrize("wrong", ["everywhere", "last_row"])
def test_a_wrong_backward_result_is_rejected_by_the_sampled_check(wrong):
    clock = FakeClock()
    algos = fakes(clock, broken=(1e-4, {"wrong": wrong}), good=1e-3)
    t = Tuner(algos, benchmark=True, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=NO_RULES)
    three_passes(t, *layer(N=3, C=4, H=12, K=6))
    for op, entry in by_op(t).items():
        assert entry.algo == "good" and entry.skipped["broken"].startswith("rejected: normwise error"), op


def test_the_heuristic_chooses_per_pass_and_by_flops_where_nothing_was_measured():
    clock = FakeClock()
    algos = fakes(clock, a=(1e-3, {"flops": 10}), b=(1e-3, {"flops": 5}))
    rules = Heuristics({"devices": {"cpu": {"forward": [{"name": "fwd", "when": {}, "order": ["a", "b"]}],
                                            "backward_data": [{"name": "bwd", "when": {}, "order": ["a"]}]}}})
    t = Tuner(algos, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0, heuristics=rules)
    three_passes(t, *layer())
    entries = by_op(t)
    assert {op: (e.algo, e.source) for op, e in entries.items()} == {
        "forward": ("a", "heuristic"), "backward_data": ("a", "heuristic"), "backward_filter": ("b", "heuristic")}
    assert entries["backward_data"].rule == "bwd" + UNMEASURED + "b"        # b: not measured, ranked after a
    assert "FLOPs" in entries["backward_filter"].rule
    assert all(e.times == {} for e in entries.values())


def test_deterministic_workspace_limit_and_out_apply_to_every_pass():
    clock = FakeClock()
    algos = fakes(clock, racy=(1e-4, {"deterministic": False}), big=(1e-4, {"workspace": 1 << 20}), steady=1e-3)
    t = Tuner(algos, benchmark=True, deterministic=True, workspace_limit=1 << 10, timer=fake_timer(clock), reader=FakeReader(clock), pair_below=0.0,
              heuristics=NO_RULES)
    x, w, dy = layer()
    outs = {op: np.full(shape, np.nan, np.float32) for op, shape in
            zip(PASSES, (dy.shape, x.shape, w.shape))}
    results = three_passes(t, x, w, dy, **{op: {"out": o} for op, o in outs.items()})
    for op, entry in by_op(t).items():
        assert entry.algo == "steady" and entry.key.deterministic and not entry.fresh_output
        assert "not deterministic" in entry.skipped["racy"] and "limit" in entry.skipped["big"]
    assert all(r is outs[op] and np.isfinite(r).all() for op, r in zip(PASSES, results))


def test_bad_backward_arguments_name_the_parameter():
    t = Tuner(heuristics=NO_RULES)
    x, w, dy = layer()
    with pytest.raises(ValueError, match="grad_output"):
        t.conv2d_input(x.shape, w, dy[:, :, :-1], padding=1)
    with pytest.raises(ValueError, match="weight_shape"):
        t.conv2d_weight(x, (4, 3, 3), dy, padding=1)
    with pytest.raises(ValueError, match="out must be"):
        t.conv2d_weight(x, w.shape, dy, padding=1, out=np.empty((1, 1, 1, 1), np.float32))


def test_module_level_passes_take_torch_tensors_and_match_torch():
    torch = pytest.importorskip("torch")
    x, w, dy = (torch.from_numpy(a) for a in layer())
    with autotune.flags(benchmark=False):
        dx = autotune.conv2d_input(tuple(x.shape), w, dy, padding=1)
        dw = autotune.conv2d_weight(x, tuple(w.shape), dy, padding=1)
    assert isinstance(dx, torch.Tensor) and isinstance(dw, torch.Tensor)
    bound = chosen_bound(autotune.default_tuner())           # normwise: whichever algorithms it chose
    assert within(dx, torch.nn.grad.conv2d_input(x.shape, w, dy, padding=1), bound)
    assert within(dw, torch.nn.grad.conv2d_weight(x, w.shape, dy, padding=1), bound)


def test_workspace_limit_zero_runs_every_pass_with_the_real_algorithms():
    x, w, dy = layer()
    t = Tuner(workspace_limit=0)
    results = three_passes(t, x, w, dy)
    p = by_op(t)["forward"].key.params
    for (op, entry), result in zip(by_op(t).items(), results):
        assert entry.workspace[entry.algo] == 0, op
        a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
        assert reference.normwise_error(result, reference.PASS[op](a, b, p)) <= 1e-5, op
