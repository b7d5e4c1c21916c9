"""NaN and Inf operands: the reference check judges a result's NaN/Inf entries by where they are
(``autotune.measure.judge``), so benchmark mode never fails a call on them and returns what benchmark-off
returns; a candidate that hides a NaN is rejected, with a short message."""
import numpy as np
import pytest

from convalgos import ALGORITHMS, PASSES, ConvParams, reference

from autotune import Tuner
from autotune.measure import ReferenceCheck, judge
from autotune_fakes import FakeClock, fakes, tuner

nan, inf = float("nan"), float("inf")
LOCAL = ("direct", "implicit_gemm", "im2col")           # the same sums as the reference: the same NaN/Inf entries


def test_judge_same_spread_and_wrong():
    ref = np.array([1.0, nan, inf, -inf, 2.0])
    assert judge(np.array([1.0, nan, inf, -inf, 2.0], np.float32), ref, False) == (0.0, "same")
    assert judge(np.array([1.0, nan, nan, nan, nan], np.float32), ref, False) == (0.0, "spread")   # a tile of NaN
    assert judge(np.array([1.5, nan, inf, -inf, 2.0]), ref, False).error == 0.25       # the finite part's error
    hidden = judge(np.array([1.0, 0.0, inf, -inf, 2.0]), ref, False)
    assert hidden == (inf, "wrong: 1 NaN/Inf of the reference made finite")
    assert judge(np.array([1.0, nan, -inf, -inf, 2.0]), ref, False).nonfinite == "wrong: 1 Inf of the other sign"
    finite = np.array([1.0, 2.0, 3.0])
    assert judge(np.array([1.0, nan, 3.0]), finite, True) == (
        inf, "wrong: 1 NaN/Inf where the reference has none, from finite operands")
    assert judge(np.array([1.0, 2.0, 3.0], np.float32), finite, True) == (0.0, "")
    # a float16 sum past 65504 is Inf in the result and in the reference rounded to float16: the same
    assert judge(np.array([1.0, inf], np.float16), np.array([1.0, 70000.0]), True) == (0.0, "same")


def ref_of(op, a, b, p):
    with np.errstate(invalid="ignore"):           # Inf * 0 in the reference: NaN, as intended
        return reference.PASS[op](a, b, p)


def operands(op, case, seed=0):
    """(a, b, p) of ``op`` on N2 C4 12x12 -> K5 3x3 p1 (small enough to be its own sample), with ``case``
    written into the first operand: every entry NaN, one NaN, or one +Inf."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((2, 4, 12, 12)).astype(np.float32)
    w = rng.standard_normal((5, 4, 3, 3)).astype(np.float32)
    p = ConvParams.from_arrays(x, w, padding=1)
    dy = rng.standard_normal(p.out_shape).astype(np.float32)
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    a = a.copy()
    if case == "all NaN":
        a[...] = nan
    else:
        a[0, 0, 5, 6] = nan if case == "one NaN" else inf
    return a, b, p


def call(t, op, a, b, p):
    if op == "forward":
        return t.conv2d(a, b, padding=1)
    if op == "backward_data":
        return t.conv2d_input(p.in_shape, b, a, padding=1)
    return t.conv2d_weight(a, p.weight_shape, b, padding=1)


@pytest.mark.parametrize("case", ["all NaN", "one NaN", "one Inf"])
@pytest.mark.parametrize("op", PASSES)
def test_nan_and_inf_operands_never_fail_a_call_in_either_mode(op, case):
    a, b, p = operands(op, case)
    ref = ref_of(op, a, b, p)
    results = {}
    for benchmark in (False, True):
        t = Tuner(benchmark=benchmark)
        results[benchmark] = y = call(t, op, a, b, p)
        assert judge(y, ref, False).nonfinite in ("same", "spread")          # every NaN/Inf of the reference kept
        (entry,) = t.dispatch_table()
        if benchmark:
            assert not any(why.startswith("rejected") for why in entry.skipped.values()), entry.skipped
            assert set(entry.nonfinite) == set(entry.errors) and entry.algo in entry.times
            local = [n for n in LOCAL if n in entry.nonfinite]
            assert local and all(entry.nonfinite[n] == "same" for n in local)
            assert "NaN/Inf at the reference's entries" in entry.report()
    if case == "all NaN":
        assert np.isnan(results[True]).all() and np.isnan(results[False]).all()


@pytest.mark.parametrize("case", ["one NaN", "one Inf"])
@pytest.mark.parametrize("op", PASSES)
def test_benchmark_on_returns_what_benchmark_off_returns(op, case):
    """Among algorithms that compute the reference's sums, either mode gives NaN and Inf at the reference's
    entries, and the same numbers elsewhere (within float32 tolerance)."""
    a, b, p = operands(op, case, seed=1)
    local = {name: ALGORITHMS[name] for name in LOCAL}
    off, on = (call(Tuner(local, benchmark=mode), op, a, b, p) for mode in (False, True))
    assert reference.normwise_error(on, off) <= 1e-5
    assert reference.normwise_error(on, ref_of(op, a, b, p)) <= 1e-5


def test_a_candidate_that_hides_a_nan_is_rejected_and_another_serves():
    clock = FakeClock()
    algos = fakes(clock, hides=1e-3, keeps=2e-3)
    compute = algos["hides"]._compute

    def hide(op, a, b, p, out):
        compute(op, a, b, p, out)
        np.nan_to_num(out, copy=False)
    algos["hides"]._compute = hide
    x, w, _ = operands("forward", "one NaN")
    t = tuner(clock, algos)
    y = t.conv2d(x, w, padding=1)
    (entry,) = t.dispatch_table()
    assert entry.algo == "keeps" and np.isnan(y).any()
    assert entry.skipped["hides"].startswith("rejected: NaN/Inf wrong: ") and "made finite" in entry.skipped["hides"]


def test_when_every_candidate_is_rejected_the_message_is_short():
    clock = FakeClock()
    algos = fakes(clock, **{f"wrong{i}": (1e-3, {"wrong": "everywhere"}) for i in range(4)},
                  only3=(1e-3, {"only_3x3": True}))
    x, w, _ = operands("forward", "one NaN")
    with pytest.raises(RuntimeError) as caught:
        tuner(clock, algos).conv2d(x[:, :, :, :], w[:, :, :1, :1])          # a 1x1 layer: only3 not eligible
    message = str(caught.value)
    assert len(message) < 600 and message.count("\n") == 5, message
    assert "wrong3: rejected: normwise error" in message and "1 other algorithm(s) not tried" in message


def test_reference_check_samples_a_nan_it_reaches():
    """A big layer's check is a sample: a NaN inside it is judged by position, not by a NaN norm."""
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8, 40, 40)).astype(np.float32)
    w = rng.standard_normal((6, 8, 3, 3)).astype(np.float32)
    x[0, 3, 0, 7] = nan                                          # image 0, top rows: inside the sample
    p = ConvParams.from_arrays(x, w, padding=1)
    check = ReferenceCheck("forward", x, w, p)
    y = reference.forward(x, w, p).astype(np.float32)
    assert check.judge(y) == (check.judge(y).error, "same") and check.judge(y).error <= 1e-6
    assert check.judge(np.nan_to_num(y)).nonfinite.startswith("wrong")
