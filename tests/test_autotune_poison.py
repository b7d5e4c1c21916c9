"""The tuner's check poisons the shared output before every candidate's checked run, so a candidate that leaves
part of it unwritten (outside the sampled reference check) cannot inherit the previous candidate's answer."""
import numpy as np

from autotune.measure import ReferenceCheck, poison
from convalgos import ConvParams, reference
from tests.autotune_fakes import FakeClock, fakes, tuner


def test_a_candidate_leaving_a_channel_unwritten_is_rejected_not_passed_the_previous_answer():
    clock = FakeClock()
    algos = fakes(clock, good=2e-3, lazy=(1e-3, {"wrong": "skips_channel_1"}))
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 20, 20)).astype(np.float32)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    t = tuner(clock, algos)             # good runs first (registration order), lazy second and faster
    y = t.conv2d(x, w)
    (entry,) = t.dispatch_table()
    assert entry.algo == "good"
    assert entry.skipped["lazy"].startswith("rejected: ") and "left unwritten" in entry.skipped["lazy"]
    assert f"{2 * 18 * 18} of {y.size} output elements" in entry.skipped["lazy"]     # channel 1 of both images
    assert np.isfinite(y).all()


def test_the_sampled_check_alone_would_not_see_channel_1():
    """Why the whole output is counted: the forward sample holds the first and last output channel only."""
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 2, 20, 20)), rng.standard_normal((4, 2, 3, 3))
    p = ConvParams.from_arrays(x, w)
    check = ReferenceCheck("forward", x, w, p)
    out = np.empty(p.out_shape)
    poison(out)
    out[:, [0, 2, 3]] = reference.conv2d(x, w)[:, [0, 2, 3]]
    assert check.error(out) < 1e-12 and check.unwritten(out) == 18 * 18


def test_poison_leaves_integer_outputs_and_nan_operands_are_not_counted():
    ints = np.arange(4)
    poison(ints)
    assert list(ints) == [0, 1, 2, 3]
    x, w = np.full((1, 1, 3, 3), np.nan), np.ones((1, 1, 1, 1))
    check = ReferenceCheck("forward", x, w, ConvParams.from_arrays(x, w))
    assert check.unwritten(np.full((1, 1, 3, 3), np.nan)) == 0
