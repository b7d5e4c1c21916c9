"""What torch users do, through autotune.torch, one test each: padding modes, channels_last, views, float16,
float64 and ``model.to(dtype)``, bfloat16 and autocast (torch's conv, logged once, counted), no_grad and
inference_mode, deterministic algorithms, state dicts, deepcopy, unbatched inputs, zero-copy DLPack, CUDA
passes without a GPU algorithm (the answer faked: no GPU here), a failing dispatcher, and the report."""
import copy
import io
import logging

import pytest

import autotune  # before torch: it sets how the OpenMP runtimes wait

torch = pytest.importorskip("torch")

import autotune.torch as at  # noqa: E402
from autotune.torch import fallback, function  # noqa: E402
from autotune.torch.record import Call  # noqa: E402
from convalgos import ALGORITHMS, ConvParams  # noqa: E402
from float32_bounds import ANY_CHOICE, within  # noqa: E402

nn, F = torch.nn, torch.nn.functional


def twins(*args, tuner=None, **kwargs):
    """(a torch.nn.Conv2d, an autotune.torch.Conv2d with the same weights), seeded."""
    torch.manual_seed(0)
    theirs = nn.Conv2d(*args, **kwargs)
    ours = at.convert(copy.deepcopy(theirs), tuner=autotune.Tuner() if tuner is None else tuner)
    return theirs, ours


def both(theirs, ours, x):
    """Forward and backward through each: (outputs, x gradients, weight gradients)."""
    xs = [x.detach().clone().requires_grad_() for _ in range(2)]
    ys = [m(xi) for m, xi in zip((theirs, ours), xs)]
    for y in ys:
        (y * torch.linspace(-1, 1, y.numel(), dtype=y.dtype).reshape(y.shape)).sum().backward()
    return ys, [xi.grad for xi in xs], [theirs.weight.grad, ours.weight.grad]


def close(a, b, tol=None):
    """float32: normwise within the tolerance of any algorithm the tuner may choose (``float32_bounds``: the choice
    is the machine's); with ``tol`` (float16, float64), element by element."""
    if tol is None:
        return within(a, b, ANY_CHOICE)
    return torch.allclose(a.float(), b.float(), rtol=tol, atol=tol)


@pytest.mark.parametrize("mode", ["reflect", "replicate", "circular"])
@pytest.mark.parametrize("padding", [1, (2, 1), "same"])
def test_padding_modes_pad_with_torch_then_convolve(mode, padding):
    theirs, ours = twins(3, 4, 3, padding=padding, padding_mode=mode)
    ys, dxs, dws = both(theirs, ours, torch.randn(2, 3, 7, 6))
    assert close(*ys) and close(*dxs) and close(*dws)
    assert at.report(ours).to_dict()["by_torch"] == 0


def test_channels_last_in_channels_last_out_as_torch():
    theirs, ours = twins(4, 8, 3, padding=1)
    x = torch.randn(2, 4, 9, 9).to(memory_format=torch.channels_last)
    ys, dxs, dws = both(theirs, ours, x)
    assert close(*ys) and close(*dxs) and close(*dws)
    for a, b in (ys, dxs):
        assert a.is_contiguous(memory_format=torch.channels_last) == b.is_contiguous(
            memory_format=torch.channels_last) == (not b.is_contiguous())
    layouts = {e.key.layout for e in ours.tuner.dispatch_table() if e.key.op != "backward_data"}
    assert layouts == {"channels_last"}          # read in place, keyed by its layout


def test_a_channels_last_model_gives_channels_last_outputs():
    theirs, ours = twins(4, 8, 3, padding=1)
    theirs, ours = (m.to(memory_format=torch.channels_last) for m in (theirs, ours))
    ys, dxs, dws = both(theirs, ours, torch.randn(2, 4, 6, 6))
    assert close(*ys) and close(*dxs) and close(*dws)
    assert ys[1].is_contiguous(memory_format=torch.channels_last) == ys[0].is_contiguous(
        memory_format=torch.channels_last)
    assert ours.weight.grad.stride() == theirs.weight.grad.stride()


@pytest.mark.parametrize("view", [lambda x: x[:, :, ::2, 1:], lambda x: x.transpose(2, 3), lambda x: x[1:]])
def test_non_contiguous_views(view):
    theirs, ours = twins(3, 5, 3, stride=2, padding=1)
    ys, dxs, dws = both(theirs, ours, view(torch.randn(3, 3, 12, 11)))
    assert close(*ys) and close(*dxs) and close(*dws)


def test_model_to_float64_computes_in_float64():
    theirs, ours = twins(3, 4, 3, padding=1)
    theirs, ours = theirs.double(), ours.to(torch.float64)
    ys, dxs, dws = both(theirs, ours, torch.randn(2, 3, 6, 6, dtype=torch.float64))
    assert ys[1].dtype == torch.float64 and dws[1].dtype == torch.float64
    assert all(close(a, b, 1e-12) for a, b in (ys, dxs, dws))
    assert {e.key.params.dtype for e in ours.tuner.dispatch_table()} == {"float64"}


def test_float16_is_computed_as_the_dispatcher_does():
    theirs, ours = twins(3, 4, 3, padding=1)
    ours = ours.half()
    x = torch.randn(2, 3, 6, 6)
    y = ours(x.half())
    assert y.dtype == torch.float16
    expected = F.conv2d(x.half().float(), ours.weight.float(), ours.bias.float(), padding=1)
    assert close(y, expected, 2e-3)              # computed in float32, rounded once to float16
    assert {e.key.params.dtype for e in ours.tuner.dispatch_table()} == {"float16"}


def warnings_of(caplog):
    return [r for r in caplog.records if r.name == "autotune.torch" and r.levelno == logging.WARNING]


def test_bfloat16_falls_back_to_torch_logged_once_and_counted(caplog):
    theirs, ours = twins(3, 4, 3, padding=1)
    theirs, ours = theirs.bfloat16(), ours.bfloat16()
    x = torch.randn(2, 3, 6, 6, dtype=torch.bfloat16)
    with caplog.at_level(logging.WARNING, logger="autotune.torch"):
        for _ in range(2):
            ys, dxs, dws = both(theirs, ours, x)
            assert all(torch.equal(a, b) for a, b in (ys, dxs, dws))   # torch's own conv computed it
    (line,) = warnings_of(caplog)
    assert "Conv2d" in line.getMessage() and "bfloat16" in line.getMessage()
    passes = at.report(ours).to_dict()["layers"]["Conv2d"]
    assert {op: r["by_torch"] for op, r in passes.items()} == {"forward": 2, "backward_data": 2, "backward_filter": 2}
    assert all(r["dispatched"] == 0 for r in passes.values())
    assert "bfloat16" in str(at.report(ours))


def test_autocast_falls_back_to_torch_logged_once(caplog):
    model = at.convert(nn.Sequential(nn.Conv2d(3, 4, 3), nn.ReLU(), nn.Conv2d(4, 2, 1)), tuner=autotune.Tuner())
    twin = revert_copy(model)
    x = torch.randn(1, 3, 6, 6)
    with caplog.at_level(logging.WARNING, logger="autotune.torch"):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            y, expected = model(x), twin(x)
            model(x)
    assert y.dtype == expected.dtype == torch.bfloat16 and torch.equal(y, expected)
    assert sorted(r.getMessage().split(":")[0] for r in warnings_of(caplog)) == ["0", "2"]    # one per layer
    assert at.report(model).to_dict()["by_torch"] == 4          # forward passes only: no backward ran
    assert close(model(x), twin(x))              # outside autocast: the dispatcher again
    assert at.report(model).to_dict()["dispatched"] == 2


def revert_copy(model):
    return at.revert(copy.deepcopy(model))


@pytest.mark.parametrize("context", [torch.no_grad, torch.inference_mode])
def test_no_grad_and_inference_mode(context):
    theirs, ours = twins(3, 4, 3, padding=1)
    x = torch.randn(2, 3, 6, 6)
    with context():
        y, expected = ours(x), theirs(x)
    assert close(y, expected) and not y.requires_grad and y.grad_fn is None
    assert y.is_inference() == expected.is_inference()
    assert at.report(ours).to_dict()["layers"]["Conv2d"]["forward"]["dispatched"] == 1


def test_deterministic_algorithms_turn_the_dispatchers_flag_on():
    theirs, ours = twins(8, 8, 3, padding=1)
    before = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        ys, dxs, dws = both(theirs, ours, torch.randn(2, 8, 8, 8))
    finally:
        torch.use_deterministic_algorithms(before)
    assert close(*ys) and close(*dxs) and close(*dws)
    table = list(ours.tuner.dispatch_table())
    assert len(table) == 3 and all(e.key.deterministic and ALGORITHMS[e.algo].deterministic for e in table)
    assert not ours.tuner.deterministic          # the flag was on for those calls only
    ours(torch.randn(2, 8, 8, 8))
    assert sum(not e.key.deterministic for e in ours.tuner.dispatch_table()) == 1


def test_state_dict_saves_and_loads_either_way():
    theirs, ours = twins(3, 4, 3, padding=1, padding_mode="reflect")
    assert repr(ours) == repr(theirs) and list(ours.state_dict()) == list(theirs.state_dict())
    buffer = io.BytesIO()
    torch.save(ours.state_dict(), buffer)
    fresh = nn.Conv2d(3, 4, 3, padding=1, padding_mode="reflect")
    fresh.load_state_dict(torch.load(io.BytesIO(buffer.getvalue())))
    x = torch.randn(1, 3, 5, 5)
    assert close(fresh(x), ours(x))
    made = at.Conv2d(3, 4, 3, padding=1, padding_mode="reflect", tuner=autotune.Tuner())
    made.load_state_dict(theirs.state_dict())
    assert close(made(x), theirs(x)) and repr(made) == repr(theirs)


def test_deepcopy_copies_the_parameters_and_shares_the_tuner():
    _, ours = twins(3, 4, 3, padding=1)
    ours(torch.randn(1, 3, 5, 5))
    other = copy.deepcopy(ours)
    assert type(other) is at.Conv2d and other.tuner is ours.tuner
    assert other.weight is not ours.weight and torch.equal(other.weight, ours.weight)
    assert other.record is not ours.record
    x = torch.randn(1, 3, 5, 5)
    assert torch.equal(other(x), ours(x))


def test_unbatched_inputs_as_torch():
    theirs, ours = twins(3, 4, 3, stride=2, padding=1)
    ys, dxs, dws = both(theirs, ours, torch.randn(3, 7, 8))
    assert ys[1].shape == ys[0].shape == (4, 4, 4) and dxs[1].shape == (3, 7, 8)
    assert close(*ys) and close(*dxs) and close(*dws)


class Spy(autotune.Tuner):
    """A Tuner that keeps the arrays it was given and returned (the public methods: what the bridge calls)."""

    def __init__(self):
        super().__init__()
        self._seen = {}

    def conv2d(self, x, w, *args, **kwargs):
        y = super().conv2d(x, w, *args, **kwargs)
        self._seen["forward"] = (x, y)
        return y

    def conv2d_input(self, shape, w, dy, *args, **kwargs):
        dx = super().conv2d_input(shape, w, dy, *args, **kwargs)
        self._seen["backward_data"] = (dy, dx)
        return dx

    def conv2d_weight(self, x, shape, dy, *args, **kwargs):
        dw = super().conv2d_weight(x, shape, dy, *args, **kwargs)
        self._seen["backward_filter"] = (dy, dw)
        return dw


def test_tensors_cross_zero_copy_both_ways():
    spy = Spy()
    x = torch.randn(2, 3, 6, 6, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    y = at.conv2d(x, w, padding=1, tuner=spy)
    dy = torch.randn(2, 4, 6, 6)
    y.backward(dy)
    pointer = (lambda a: a.__array_interface__["data"][0])
    assert pointer(spy._seen["forward"][0]) == x.data_ptr() and pointer(spy._seen["forward"][1]) == y.data_ptr()
    for op, grad in (("backward_data", x.grad), ("backward_filter", w.grad)):
        assert pointer(spy._seen[op][0]) == dy.data_ptr() and pointer(spy._seen[op][1]) == grad.data_ptr()


def test_a_cuda_pass_without_a_gpu_algorithm_goes_to_torch(monkeypatch):
    call = Call((2, 3, 8, 8), (4, 3, 3, 3), 1, 1, 1, 1, "float32", False, "cuda")
    monkeypatch.setattr(fallback, "gpu_ready", lambda: False)
    assert "CuPy" in fallback.pass_reason("cuda", "forward", call)
    assert fallback.pass_reason("cpu", "forward", call) is None
    monkeypatch.setattr(fallback, "gpu_ready", lambda: True)       # faked: a GPU with forward algorithms only
    monkeypatch.setattr(fallback, "gpu_serves", lambda op, p: isinstance(p, ConvParams) and op == "forward")
    assert fallback.pass_reason("cuda", "forward", call) is None
    assert "no GPU algorithm has the backward_data pass" in fallback.pass_reason("cuda", "backward_data", call)


def test_a_pass_routed_to_torch_is_computed_by_torch_logged_once_and_counted(monkeypatch, caplog):
    theirs, ours = twins(3, 4, 3, stride=2, padding=(1, 0))
    reasons = {"backward_data": "faked: no GPU algorithm", "backward_filter": "faked: no GPU algorithm"}
    monkeypatch.setattr(function, "pass_reason", lambda device, op, call: reasons.get(op))
    with caplog.at_level(logging.WARNING, logger="autotune.torch"):
        for _ in range(2):
            theirs.zero_grad(), ours.zero_grad()
            ys, dxs, dws = both(theirs, ours, torch.randn(2, 3, 9, 8))
            assert close(*ys) and close(*dxs) and close(*dws)
    (line,) = warnings_of(caplog)                # once per layer and reason
    assert "backward_data pass" in line.getMessage() and "faked" in line.getMessage()
    counts = {op: (r["dispatched"], r["by_torch"]) for op, r in at.report(ours).to_dict()["layers"]["Conv2d"].items()}
    assert counts == {"forward": (2, 0), "backward_data": (0, 2), "backward_filter": (0, 2)}


def test_a_failing_dispatcher_never_fails_the_call(caplog):
    tuner = autotune.Tuner({"im2col": ALGORITHMS["im2col"]}, workspace_limit=0)    # nothing fits: it raises
    theirs, ours = twins(3, 4, 3, padding=1, tuner=tuner)
    with caplog.at_level(logging.WARNING, logger="autotune.torch"):
        ys, dxs, dws = both(theirs, ours, torch.randn(2, 3, 6, 6))
    assert close(*ys) and close(*dxs) and close(*dws)
    lines = warnings_of(caplog)          # one reason per pass: the dispatcher's error names the pass
    assert len(lines) == 3 and all("workspace_limit" in r.getMessage() for r in lines)


def test_the_report_shows_choice_time_and_runner_up_per_pass():
    model = at.convert(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1)),
                       tuner=autotune.Tuner(benchmark=True, time_budget=0.05))
    model(torch.randn(2, 3, 8, 8)).sum().backward()
    report = at.report(model)
    rows = report.to_dict()["layers"]
    assert list(rows) == ["0", "2"] and rows["0"]["backward_data"]["dispatched"] == 0
    for name, op in (("0", "forward"), ("2", "backward_data"), ("2", "backward_filter")):
        row = rows[name][op]
        entry = next(e for e in model[int(name)].tuner.dispatch_table() if e.key.op == op
                     and e.key.params.C == model[int(name)].in_channels)
        assert (row["algorithm"], row["source"], row["seconds"]) == (entry.algo, "benchmark", entry.times[entry.algo])
        assert row["runner_up"] == entry.ranked[1] and row["runner_up_seconds"] == entry.times[entry.ranked[1]]
    text = str(report)
    assert text.splitlines()[0].split() == ["layer", "pass", "dispatched", "by", "torch", "chosen", "ms",
                                            "runner-up", "ms"]
    assert f"{rows['2']['forward']['algorithm']} (benchmark)" in text
    assert "5 calls served by the dispatcher, 0 by torch's conv" in text


def test_the_functional_form_takes_lists_and_asymmetric_padding():
    x, w, b = torch.randn(1, 2, 5, 6), torch.randn(3, 2, 3, 3), torch.randn(3)
    y = at.conv2d(x, w, b, stride=[1, 2], padding=((1, 0), (2, 1)), dilation=[1, 1], tuner=autotune.Tuner())
    assert close(y, F.conv2d(F.pad(x, (2, 1, 1, 0)), w, b, stride=(1, 2)))
