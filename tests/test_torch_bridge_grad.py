"""autotune.torch's autograd Function: torch.autograd.gradcheck in float64 with every algorithm forced in turn
(a Tuner whose registry holds that one algorithm), over layers with stride, dilation, groups, depthwise,
asymmetric and "same" padding, with and without bias; the passes ``needs_input_grad`` skips; double backward
refused with a clear error.

gradcheck runs in fast mode (a random projection of the Jacobian: two forward calls per input, one backward)
over the whole grid, and in full mode (every Jacobian entry) on one layer, to keep this file to a few seconds.
"""
import pytest

import autotune  # before torch: it sets how the OpenMP runtimes wait

torch = pytest.importorskip("torch")

import autotune.torch as at  # noqa: E402
from autotune.torch.fallback import torch_forward, torch_input_grad, torch_weight_grad  # noqa: E402
from autotune.torch.record import LayerRecord  # noqa: E402
from convalgos import ALGORITHMS, PASSES, ConvParams  # noqa: E402
from float32_bounds import ANY_CHOICE, chosen_bound, within  # noqa: E402

#: name -> (x shape, w shape, stride, padding, dilation, groups): tiny, since gradcheck is per element
LAYERS = {
    "3x3 stride 2": ((1, 2, 6, 6), (3, 2, 3, 3), 2, 1, 1, 1),
    "3x3 dilation 2": ((1, 2, 7, 6), (2, 2, 3, 3), 1, 2, 2, 1),
    "grouped": ((1, 4, 5, 5), (4, 2, 3, 3), 1, 1, 1, 2),
    "depthwise": ((1, 3, 6, 6), (3, 1, 3, 3), 1, 1, 1, 3),
    "asymmetric padding": ((1, 2, 5, 6), (2, 2, 3, 3), 1, ((1, 0), (2, 1)), 1, 1),
    "same, even kernel": ((1, 2, 5, 5), (3, 2, 2, 2), 1, "same", 1, 1),
    "same 3x3": ((1, 2, 4, 5), (2, 2, 3, 3), 1, "same", 1, 1),
}


def supported(name, layer) -> set:
    x_shape, w_shape, stride, padding, dilation, groups = layer
    p = ConvParams.from_shapes(x_shape, w_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype="float64")
    return {op for op in PASSES if ALGORITHMS[name].supports(p, op)}


CASES = [(a, layer, bias) for a in ALGORITHMS for layer in LAYERS for bias in (True, False)
         if supported(a, LAYERS[layer])]


def operands(layer, bias, seed=0):
    x_shape, w_shape = layer[:2]
    g = torch.Generator().manual_seed(seed)
    make = (lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64, requires_grad=True))
    return make(*x_shape), make(*w_shape), make(w_shape[0]) if bias else None


@pytest.mark.parametrize("algo, layer, bias", CASES, ids=[f"{a}-{l}-{'bias' if b else 'nobias'}" for a, l, b in CASES])
def test_gradcheck_with_each_algorithm_forced(algo, layer, bias, caplog):
    stride, padding, dilation, groups = LAYERS[layer][2:]
    tuner, record = autotune.Tuner({algo: ALGORITHMS[algo]}), LayerRecord()
    x, w, b = operands(LAYERS[layer], bias)

    def conv(x, w, b=None):
        return at.conv2d(x, w, b, stride, padding, dilation, groups, tuner=tuner, record=record)

    expected = torch_forward(x, w, b, stride, padding, dilation, groups)
    assert torch.allclose(conv(x, w, b), expected, rtol=1e-10, atol=1e-10)
    assert torch.autograd.gradcheck(conv, (x, w) if b is None else (x, w, b), fast_mode=True)
    # the forced algorithm computed every pass it supports; torch computed the others (logged)
    served = supported(algo, LAYERS[layer])
    for op in PASSES:
        assert (record.passes[op].dispatched > 0, record.passes[op].by_torch > 0) == (op in served, op not in served)
    assert {e.key.op for e in tuner.dispatch_table()} == served
    assert all(e.algo == algo for e in tuner.dispatch_table())


def test_full_gradcheck_every_jacobian_entry():
    x, w, b = operands(LAYERS["3x3 stride 2"], True)
    tuner = autotune.Tuner()
    assert torch.autograd.gradcheck(lambda *a: at.conv2d(*a, 2, 1, tuner=tuner), (x, w, b))


class CountingTuner(autotune.Tuner):
    """A Tuner that counts its calls per pass (the public methods: what the bridge calls)."""

    def __init__(self):
        super().__init__()
        self._calls = {"forward": 0, "backward_data": 0, "backward_filter": 0}

    def conv2d(self, *args, **kwargs):
        self._calls["forward"] += 1
        return super().conv2d(*args, **kwargs)

    def conv2d_input(self, *args, **kwargs):
        self._calls["backward_data"] += 1
        return super().conv2d_input(*args, **kwargs)

    def conv2d_weight(self, *args, **kwargs):
        self._calls["backward_filter"] += 1
        return super().conv2d_weight(*args, **kwargs)


@pytest.mark.parametrize("x_grad, w_grad, expected", [
    (False, True, {"forward": 1, "backward_data": 0, "backward_filter": 1}),      # a first layer
    (True, False, {"forward": 1, "backward_data": 1, "backward_filter": 0}),      # a frozen layer
    (True, True, {"forward": 1, "backward_data": 1, "backward_filter": 1})])
def test_needs_input_grad_decides_which_passes_run(x_grad, w_grad, expected):
    tuner = CountingTuner()
    x = torch.randn(2, 3, 6, 6, requires_grad=x_grad)
    w = torch.randn(4, 3, 3, 3, requires_grad=w_grad)
    b = torch.randn(4, requires_grad=True)
    y = at.conv2d(x, w, b, 1, 1, tuner=tuner)
    (y * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
    assert tuner._calls == expected
    assert (x.grad is not None, w.grad is not None) == (x_grad, w_grad)
    xr, wr, br = (t.detach().requires_grad_(t.requires_grad) for t in (x, w, b))
    (torch.nn.functional.conv2d(xr, wr, br, 1, 1) * torch.arange(y.numel()).reshape(y.shape)).sum().backward()
    assert torch.allclose(b.grad, br.grad, rtol=1e-5)
    for ours, theirs in ((x.grad, xr.grad), (w.grad, wr.grad)):      # normwise: whichever algorithm it chose
        assert ours is None or within(ours, theirs, chosen_bound(tuner))


def test_no_pass_runs_for_a_layer_nothing_needs_the_gradient_of():
    tuner = CountingTuner()
    y = at.conv2d(torch.randn(1, 2, 5, 5), torch.randn(2, 2, 3, 3), tuner=tuner)
    assert y.grad_fn is None and tuner._calls == {"forward": 1, "backward_data": 0, "backward_filter": 0}


def test_double_backward_is_refused_with_a_clear_error():
    x = torch.randn(1, 2, 5, 5, dtype=torch.float64, requires_grad=True)
    w = torch.randn(2, 2, 3, 3, dtype=torch.float64, requires_grad=True)
    gx, gw = torch.autograd.grad(at.conv2d(x, w, padding=1).square().sum(), (x, w), create_graph=True)
    expected = torch.autograd.grad(torch.nn.functional.conv2d(x, w, padding=1).square().sum(), (x, w))
    assert torch.allclose(gx, expected[0]) and torch.allclose(gw, expected[1])   # the first backward works
    with pytest.raises(RuntimeError, match="no double backward.*torch.nn.functional.conv2d"):
        (gx.sum() + gw.sum()).backward()


def test_the_weight_gradient_accumulates_like_torchs():
    w = torch.randn(3, 2, 3, 3, requires_grad=True)
    x = torch.randn(2, 2, 6, 6)
    for _ in range(2):
        at.conv2d(x, w, padding=1).sum().backward()
    expected = 2 * torch.nn.grad.conv2d_weight(x, w.shape, torch.ones(2, 3, 6, 6), padding=1)
    assert within(w.grad, expected, ANY_CHOICE)                     # the default tuner's choice, whichever


@pytest.mark.parametrize("padding", [((1, 0), (2, 1)), "same", (1, 2)])
def test_torchs_own_passes_match_its_autograd(padding):
    """The fallback's backward passes (torch.nn.grad, asymmetric padding applied by hand) against autograd."""
    x = torch.randn(2, 2, 6, 7, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 2, 2, 3, dtype=torch.float64, requires_grad=True)
    y = torch_forward(x, w, None, 1, padding, 1, 1)
    dy = torch.randn_like(y)
    dx, dw = torch.autograd.grad(y, (x, w), dy)
    assert torch.allclose(torch_input_grad(x, w, dy, 1, padding, 1, 1), dx)
    assert torch.allclose(torch_weight_grad(x, w, dy, 1, padding, 1, 1), dw)


def test_an_empty_batch_gives_an_empty_result_and_gradients():
    x = torch.randn(0, 3, 5, 5, requires_grad=True)
    w = torch.randn(4, 3, 3, 3, requires_grad=True)
    y = at.conv2d(x, w, padding=1, tuner=autotune.Tuner())
    assert y.shape == (0, 4, 5, 5)
    y.sum().backward()
    assert x.grad.shape == x.shape and torch.equal(w.grad, torch.zeros_like(w))
