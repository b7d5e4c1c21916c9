"""autotune.fleet in one process: the plan (who times which key, when), the operands ``prepare`` times on,
and the errors: no process group, no gloo, a bad timeout, a tuner already in a fleet, a key whose every
candidate fails (a fleet of one rank, on a gloo group of one)."""
import warnings

import numpy as np
import pytest

import autotune  # noqa: F401 - before torch: it sets how the OpenMP runtimes wait

torch = pytest.importorskip("torch")
dist = pytest.importorskip("torch.distributed")

import autotune.fleet as fleet  # noqa: E402
from autotune.devices import CpuDevice  # noqa: E402
from autotune.fleet.operands import operands  # noqa: E402
from autotune.fleet.plan import Member, make_plan  # noqa: E402
from autotune.table import Key  # noqa: E402
from autotune_fakes import Fake, FakeClock  # noqa: E402
from convalgos import ConvParams  # noqa: E402


def key(C, H, op="forward", N=2):
    return Key(ConvParams.from_shapes((N, C, H, H), (C, C, 3, 3), padding=1), op=op)


KEYS = [key(8, 16), key(16, 8), key(8, 16, "backward_data"), key(32, 4), key(16, 8, "backward_filter")]


def test_ranks_of_one_node_take_turns_and_every_key_has_one_asker_as_owner():
    members = [Member(0, "a", "g"), Member(1, "a", "g")]
    plan = make_plan(members, [KEYS, KEYS], [0, 0])
    assert all(len(slot) == 1 for slot in plan.slots)                   # one rank of the node per slot
    timed = [k for slot in plan.slots for k in slot.values()]
    assert len(timed) == len(KEYS) and set(timed) == set(KEYS)
    assert set(plan.owners.values()) == {0, 1}                            # both ranks time some


def test_ranks_of_two_nodes_time_at_once_and_split_the_work():
    members = [Member(0, "a", "g"), Member(1, "b", "g")]
    load = [0, 0]
    plan = make_plan(members, [KEYS, KEYS], load)
    assert len(plan.slots[0]) == 2 and len(plan.slots) == 3               # 5 keys in 3 slots, not 5
    total = sum(k.params.flops for k in KEYS)
    assert max(load) <= 0.75 * total                                      # neither node got most of it


def test_a_key_goes_only_to_a_rank_that_asked_for_it_and_each_group_times_its_own():
    members = [Member(0, "a", "g"), Member(1, "b", "g"), Member(2, "c", "other")]
    plan = make_plan(members, [[KEYS[0]], [KEYS[1]], [KEYS[0]]], [0, 0, 0])
    assert plan.owners == {("g", KEYS[0]): 0, ("g", KEYS[1]): 1, ("other", KEYS[0]): 2}


def test_loads_carry_over_rounds_so_single_key_rounds_alternate():
    members, load = [Member(0, "a", "g"), Member(1, "a", "g")], [0, 0]
    owners = [next(iter(make_plan(members, [[k], [k]], load).owners.values())) for k in KEYS[:4]]
    assert set(owners) == {0, 1}


@pytest.mark.parametrize("layout", ["contiguous", "channels_last", "strided"])
@pytest.mark.parametrize("op", ["forward", "backward_data", "backward_filter"])
def test_operands_have_the_keys_shapes_and_layout(layout, op):
    k = Key(ConvParams.from_shapes((2, 3, 7, 6), (4, 3, 3, 3), stride=2, padding=1), layout=layout, op=op)
    a, b = operands(k, CpuDevice())
    p = k.params
    expected = {"forward": (p.in_shape, p.weight_shape), "backward_data": (p.out_shape, p.weight_shape),
                "backward_filter": (p.in_shape, p.out_shape)}[op]
    assert (a.shape, b.shape) == expected and CpuDevice().layout(a) == layout and a.dtype == np.float32
    assert np.isfinite(a).all() and a.std() > 0.5


def test_no_process_group_is_a_clear_error_or_with_fallback_a_warning():
    assert not dist.is_initialized()
    with pytest.raises(fleet.FleetError, match="init_process_group"):
        fleet.Fleet(autotune.Tuner())
    with pytest.warns(fleet.FleetWarning, match="tunes alone"):
        assert fleet.join(autotune.Tuner(), fallback=True) is None


@pytest.fixture
def one_rank(tmp_path):
    dist.init_process_group("gloo", init_method=f"file://{tmp_path}/store", rank=0, world_size=1)
    yield
    dist.destroy_process_group()


def test_a_backend_that_cannot_carry_the_entries_is_a_clear_error(one_rank, monkeypatch):
    monkeypatch.setattr(dist, "is_gloo_available", lambda: False)
    with pytest.raises(fleet.FleetError, match="no gloo backend"):
        fleet.Fleet(autotune.Tuner())


def test_bad_settings_name_the_parameter(one_rank):
    for timeout in (0, -1, "5", True):
        with pytest.raises(ValueError, match="timeout"):
            fleet.Fleet(autotune.Tuner(), timeout=timeout)
    t = autotune.Tuner()
    f = fleet.Fleet(t, timeout=5)
    with pytest.raises(ValueError, match="already in a fleet"):
        fleet.Fleet(t)
    with pytest.raises(TypeError, match="model must be a torch.nn.Module, got list"):
        f.prepare([], lambda: None)
    with pytest.raises(TypeError, match="step must be a callable"):
        f.prepare(torch.nn.Conv2d(1, 1, 1), None)


def test_a_key_whose_every_candidate_fails_raises_the_owners_error_and_the_fleet_stays(one_rank):
    clock = FakeClock()
    boom = Fake("boom", clock, 1e-3, raises=RuntimeError("no luck"))
    t = autotune.Tuner({"boom": boom}, benchmark=True, timer=None)
    f = fleet.Fleet(t, timeout=5)
    x, w = np.ones((1, 2, 5, 5), np.float32), np.ones((3, 2, 3, 3), np.float32)
    with warnings.catch_warnings():
        warnings.simplefilter("error", fleet.FleetWarning)
        with pytest.raises(RuntimeError, match="(?s)rank 0 could not tune .*no luck"):
            t.conv2d(x, w)
    assert f.broken is None and t.fleet is f and len(f.timed) == 1
