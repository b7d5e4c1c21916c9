"""autotune.nn: each layer against its torch.nn namesake, the conv dispatch, and state dicts."""
from collections import OrderedDict

import numpy as np
import pytest

import autotune
from autotune import nn
from convalgos.reference import normwise_error
from float32_bounds import chosen_bound, within


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


# ---- layers against torch ----------------------------------------------------------------------------------


def torch_apply(layer, x):
    t = pytest.importorskip("torch")
    with t.no_grad():
        return layer(t.from_numpy(x)).numpy()


POOLS = [  # kernel, stride, padding, ceil_mode, input H x W
    (2, None, 0, False, (8, 8)), (3, 2, 1, False, (9, 7)), (3, 2, 1, True, (10, 11)), (3, 3, 0, True, (8, 10)),
    ((2, 3), (1, 2), (1, 1), False, (6, 7)), (5, 2, 2, True, (5, 6)), (3, 1, 1, False, (1, 1)),
]


@pytest.mark.parametrize("k, s, p, ceil, hw", POOLS)
def test_max_pool_matches_torch(k, s, p, ceil, hw):
    t = pytest.importorskip("torch")
    x = rand(2, 3, *hw)
    ours = nn.MaxPool2d(k, s, p, ceil_mode=ceil)(x)
    theirs = torch_apply(t.nn.MaxPool2d(k, s, p, ceil_mode=ceil), x)
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_array_equal(ours, theirs)


@pytest.mark.parametrize("include_pad", [True, False])
@pytest.mark.parametrize("k, s, p, ceil, hw", POOLS)
def test_avg_pool_matches_torch(k, s, p, ceil, hw, include_pad):
    t = pytest.importorskip("torch")
    x = rand(2, 3, *hw)
    ours = nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=include_pad)(x)
    theirs = torch_apply(t.nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=include_pad), x)
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_avg_pool_default_counts_padding():
    y = nn.AvgPool2d(3, 1, 1)(np.ones((1, 1, 3, 3), np.float32))
    assert y[0, 0, 0, 0] == pytest.approx(4 / 9) and y[0, 0, 1, 1] == 1


@pytest.mark.parametrize("hw, out", [((7, 7), 1), ((10, 7), (3, 4)), ((5, 13), (5, 3)), ((2, 3), 7), ((9, 9), 3)])
def test_adaptive_avg_pool_matches_torch(hw, out):
    t = pytest.importorskip("torch")
    x = rand(2, 4, *hw)
    ours = nn.AdaptiveAvgPool2d(out)(x)
    theirs = torch_apply(t.nn.AdaptiveAvgPool2d(out), x)
    assert ours.shape == theirs.shape and ours.dtype == np.float32
    np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_adaptive_avg_pool_bins_by_hand():
    x = np.arange(5, dtype=np.float64).reshape(1, 1, 1, 5)
    # out 3 of 5: bins [0, 2), [1, 4), [3, 5)
    np.testing.assert_allclose(nn.AdaptiveAvgPool2d((1, 3))(x)[0, 0, 0], [0.5, 2.0, 3.5])


def test_batchnorm_linear_flatten_relu_match_torch():
    t = pytest.importorskip("torch")
    rng = np.random.default_rng(1)
    bn, tbn = nn.BatchNorm2d(5, eps=1e-3), t.nn.BatchNorm2d(5, eps=1e-3).eval()
    state = {"weight": rng.standard_normal(5), "bias": rng.standard_normal(5),
             "running_mean": rng.standard_normal(5), "running_var": rng.uniform(0.1, 2, 5)}
    tbn.load_state_dict({k: t.tensor(v, dtype=t.float32) for k, v in state.items()}, strict=False)
    bn.load_state_dict(tbn.state_dict())             # torch tensors, num_batches_tracked included
    x = rand(2, 5, 4, 3)
    np.testing.assert_allclose(bn(x), torch_apply(tbn, x), rtol=1e-5, atol=1e-6)
    assert bn(x).dtype == np.float32

    lin, tlin = nn.Linear(12, 7), t.nn.Linear(12, 7)
    lin.load_state_dict(tlin.state_dict())
    x2 = rand(3, 12)
    np.testing.assert_allclose(lin(x2), torch_apply(tlin, x2), rtol=1e-5, atol=1e-6)

    assert nn.Flatten()(x).shape == (2, 60)
    np.testing.assert_array_equal(nn.ReLU()(x), torch_apply(t.nn.ReLU(), x))


def test_basic_block_matches_torch_definition():
    block = nn.BasicBlock(4, 8, stride=2)
    assert list(block.state_dict()) == [
        "conv1.weight", "bn1.weight", "bn1.bias", "bn1.running_mean", "bn1.running_var",
        "conv2.weight", "bn2.weight", "bn2.bias", "bn2.running_mean", "bn2.running_var",
        "downsample.0.weight", "downsample.1.weight", "downsample.1.bias", "downsample.1.running_mean",
        "downsample.1.running_var"]
    assert nn.BasicBlock(8, 8).downsample is None


# ---- the conv goes through autotune -------------------------------------------------------------------------
class RecordingTuner:
    def __init__(self):
        self.calls = []

    def conv2d(self, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        self.calls.append((x.shape, weight.shape, stride, padding, dilation, groups))
        from convalgos import reference
        return reference.conv2d(x, weight, bias, stride, padding, dilation, groups).astype(x.dtype)


def test_conv_dispatches_through_autotune_or_its_tuner(monkeypatch):
    module_level = RecordingTuner()
    monkeypatch.setattr(autotune, "default_tuner", lambda: module_level)
    x = rand(1, 4, 9, 9)
    conv = nn.Conv2d(4, 6, 3, stride=2, padding=1, dilation=1, groups=2)
    conv(x)
    assert module_level.calls == [((1, 4, 9, 9), (6, 2, 3, 3), 2, 1, 1, 2)]
    own = RecordingTuner()
    nn.Conv2d(4, 6, 3, tuner=own)(x)
    assert len(own.calls) == 1 and len(module_level.calls) == 1


def test_conv_forced_to_reference_is_float64_and_restored():
    conv = nn.Conv2d(3, 5, 3, padding=1)
    conv.bias[:] = np.arange(5)
    net = nn.Sequential(conv, nn.ReLU())
    x = rand(2, 3, 6, 6)
    with nn.use_algorithm(net, "reference"):
        y = net(x)
    assert conv.algo is None and y.dtype == np.float64
    t = pytest.importorskip("torch")
    ref = t.nn.functional.conv2d(t.from_numpy(x).double(), t.from_numpy(conv.weight).double(),
                                 t.from_numpy(conv.bias).double(), padding=1).relu().numpy()
    assert normwise_error(y, ref) < 1e-12


def test_use_algorithm_restores_on_exception():
    net = nn.Sequential(nn.Conv2d(1, 1, 1))
    with pytest.raises(RuntimeError):
        with nn.use_algorithm(net, "reference"):
            raise RuntimeError
    assert net[0].algo is None


# ---- state dicts --------------------------------------------------------------------------------------------
def small_net():
    return nn.Sequential(OrderedDict(conv=nn.Conv2d(2, 3, 3), bn=nn.BatchNorm2d(3), relu=nn.ReLU(),
                                     pool=nn.AdaptiveAvgPool2d(1), flat=nn.Flatten(), fc=nn.Linear(3, 4)))


def test_state_dict_round_trip_and_dtype_kept():
    a, b = small_net(), small_net()
    state = {k: np.full(v.shape, 0.5, np.float64) for k, v in a.state_dict().items()}
    b.load_state_dict(state)
    for k, v in b.state_dict().items():
        assert v.dtype == np.float32 and np.all(v == 0.5), k
    assert list(a.state_dict()) == ["conv.weight", "conv.bias", "bn.weight", "bn.bias", "bn.running_mean",
                                    "bn.running_var", "fc.weight", "fc.bias"]
    state["bn.num_batches_tracked"] = np.array(7)
    b.load_state_dict(state)                        # accepted and ignored


def test_load_state_dict_names_every_problem_and_copies_nothing():
    net = small_net()
    before = {k: v.copy() for k, v in net.state_dict().items()}
    state = {k: np.zeros_like(v) for k, v in net.state_dict().items()}
    del state["fc.bias"]
    state["fc.weight"] = np.zeros((4, 5), np.float32)
    state["head.weight"] = np.zeros(2)
    with pytest.raises(nn.StateDictError) as err:
        net.load_state_dict(state)
    message = str(err.value)
    assert "missing key 'fc.bias' (expected shape (4,))" in message
    assert "unexpected key 'head.weight'" in message
    assert "size mismatch for 'fc.weight': expected shape (4, 3), got (4, 5)" in message
    for k, v in net.state_dict().items():
        np.testing.assert_array_equal(v, before[k])


def test_load_state_dict_rejects_num_batches_tracked_where_no_batchnorm():
    with pytest.raises(nn.StateDictError, match="unexpected key 'num_batches_tracked'"):
        nn.Linear(2, 2).load_state_dict({"weight": np.zeros((2, 2)), "bias": np.zeros(2),
                                         "num_batches_tracked": np.array(0)})


def test_astype_and_named_modules():
    net = small_net().astype(np.float64)
    assert all(v.dtype == np.float64 for v in net.state_dict().values())
    assert [name for name, _ in net.named_modules()] == ["", "conv", "bn", "relu", "pool", "flat", "fc"]
    assert [name for name, _ in nn.conv_layers(net)] == ["conv"]


# ---- backward passes against torch autograd -----------------------------------------------------------------
def torch_grads(torch_layer, x, g, train=True):
    """(output, input gradient, {parameter name: gradient}) of torch_layer at x for output weighting g."""
    t = pytest.importorskip("torch")
    torch_layer.train(train)
    tx = t.from_numpy(x).requires_grad_()
    y = torch_layer(tx)
    y.backward(t.from_numpy(g))
    return y.detach().numpy(), tx.grad.numpy(), {k: p.grad.numpy() for k, p in torch_layer.named_parameters()}


def our_grads(layer, x, g):
    layer.train()
    y = layer(x)
    layer.zero_grad()
    return y, layer.backward(g, input_grad=True), layer.grad_dict()


@pytest.mark.parametrize("k, s, p, ceil, hw", POOLS)
def test_pool_backward_matches_torch(k, s, p, ceil, hw):
    t = pytest.importorskip("torch")
    x = rand(2, 3, *hw)
    for ours, theirs in [(nn.MaxPool2d(k, s, p, ceil_mode=ceil), t.nn.MaxPool2d(k, s, p, ceil_mode=ceil)),
                         (nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=False),
                          t.nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=False)),
                         (nn.AvgPool2d(k, s, p, ceil_mode=ceil), t.nn.AvgPool2d(k, s, p, ceil_mode=ceil))]:
        y = ours(x)
        g = rand(*y.shape, seed=1)
        _, dx, _ = our_grads(ours, x, g)
        _, tdx, _ = torch_grads(theirs, x, g)
        assert dx.shape == x.shape and dx.dtype == np.float32
        np.testing.assert_allclose(dx, tdx, rtol=1e-5, atol=1e-6)


def test_max_pool_ties_and_nan_as_in_torch():
    t = pytest.importorskip("torch")
    x = np.zeros((1, 1, 4, 4), np.float32)          # every window tied (e.g. after a ReLU)
    g = np.arange(1, 5, dtype=np.float32).reshape(1, 1, 2, 2)
    _, dx, _ = our_grads(nn.MaxPool2d(3, 1, 1), x, np.ones((1, 1, 4, 4), np.float32))
    np.testing.assert_array_equal(dx, torch_grads(t.nn.MaxPool2d(3, 1, 1), x, np.ones_like(x))[1])
    _, dx, _ = our_grads(nn.MaxPool2d(2), x, g)
    np.testing.assert_array_equal(dx, torch_grads(t.nn.MaxPool2d(2), x, g)[1])
    x[0, 0, 1, 2], x[0, 0, 3, 0] = np.nan, -np.inf   # NaN wins its window, as in torch
    y, dx, _ = our_grads(nn.MaxPool2d(2), x, g)
    ty, tdx, _ = torch_grads(t.nn.MaxPool2d(2), x, g)
    np.testing.assert_array_equal(y, ty)
    np.testing.assert_array_equal(dx, tdx)
    assert nn.MaxPool2d(2)(x.astype(np.float16)).dtype == np.float16


@pytest.mark.parametrize("hw, out", [((7, 7), 1), ((10, 7), (3, 4)), ((5, 13), (5, 3)), ((2, 3), 7)])
def test_adaptive_avg_pool_backward_matches_torch(hw, out):
    t = pytest.importorskip("torch")
    x = rand(2, 4, *hw)
    g = rand(2, 4, *nn.AdaptiveAvgPool2d(out)(x).shape[2:], seed=1)
    np.testing.assert_allclose(our_grads(nn.AdaptiveAvgPool2d(out), x, g)[1],
                               torch_grads(t.nn.AdaptiveAvgPool2d(out), x, g)[1], rtol=1e-5, atol=1e-6)


def test_batchnorm_train_mode_matches_torch_over_steps():
    """Batch statistics, the backward pass, and running statistics (unbiased variance, momentum) over 3 steps."""
    t = pytest.importorskip("torch")
    bn, tbn = nn.BatchNorm2d(5, eps=1e-3, momentum=0.3), t.nn.BatchNorm2d(5, eps=1e-3, momentum=0.3)
    with t.no_grad():
        tbn.weight.uniform_(0.5, 1.5), tbn.bias.uniform_(-1, 1), tbn.running_var.uniform_(0.5, 2)
    bn.load_state_dict(tbn.state_dict())
    for step in range(3):
        x = rand(3, 5, 4, 6, seed=step) * 2 + 1
        g = rand(3, 5, 4, 6, seed=10 + step)
        y, dx, grads = our_grads(bn, x, g)
        tbn.zero_grad()
        ty, tdx, tgrads = torch_grads(tbn, x, g)
        np.testing.assert_allclose(y, ty, rtol=1e-5, atol=1e-5)
        np.testing.assert_allclose(dx, tdx, rtol=1e-4, atol=1e-5)
        for k in ("weight", "bias"):
            np.testing.assert_allclose(grads[k], tgrads[k], rtol=1e-4, atol=1e-5)
        for k in ("running_mean", "running_var"):
            np.testing.assert_allclose(getattr(bn, k), getattr(tbn, k).numpy(), rtol=1e-5, atol=1e-6)
    bn.eval(), tbn.eval()
    np.testing.assert_allclose(bn(x), torch_apply(tbn, x), rtol=1e-5, atol=1e-5)


def test_batchnorm_without_input_gradient_gives_the_same_parameter_gradients():
    """backward(input_grad=False) (a first layer) skips dx and returns None; dw and db are those of the full
    pass. A float16 input is normalised in float32 (the parameters' dtype)."""
    x, g = rand(4, 3, 5, 5) * 3 - 1, rand(4, 3, 5, 5, seed=1)
    full, skip = nn.BatchNorm2d(3).train(), nn.BatchNorm2d(3).train()
    full(x), skip(x)
    assert full.backward(g, input_grad=True).shape == x.shape
    assert skip.backward(g, input_grad=False) is None
    for k in ("weight", "bias"):
        np.testing.assert_array_equal(full.grad_dict()[k], skip.grad_dict()[k])
    half = nn.BatchNorm2d(3).train()
    y = half(x.astype(np.float16))
    assert y.dtype == np.float32 and half.backward(g.astype(np.float16), input_grad=True).dtype == np.float16
    np.testing.assert_allclose(y, full(x), atol=2e-2)


def test_linear_backward_matches_torch():
    t = pytest.importorskip("torch")
    lin, tlin = nn.Linear(12, 7), t.nn.Linear(12, 7)
    lin.load_state_dict(tlin.state_dict())
    x, g = rand(3, 12), rand(3, 7, seed=1)
    _, dx, grads = our_grads(lin, x, g)
    _, tdx, tgrads = torch_grads(tlin, x, g)
    np.testing.assert_allclose(dx, tdx, rtol=1e-5, atol=1e-6)
    for k in ("weight", "bias"):
        np.testing.assert_allclose(grads[k], tgrads[k], rtol=1e-5, atol=1e-6)


def test_conv_backward_matches_torch_and_skips_input_gradient_when_not_asked():
    t = pytest.importorskip("torch")
    conv, tconv = nn.Conv2d(4, 6, 3, stride=2, padding=1, groups=2), t.nn.Conv2d(4, 6, 3, 2, 1, groups=2)
    conv.load_state_dict(tconv.state_dict())
    conv.tuner = autotune.Tuner()
    x = rand(2, 4, 9, 8)
    g = rand(*conv(x).shape, seed=1)
    _, dx, grads = our_grads(conv, x, g)
    _, tdx, tgrads = torch_grads(tconv, x, g)
    bound = chosen_bound(conv.tuner)                 # normwise, within the tolerance of the tuner's choices
    assert within(dx, tdx, bound)
    for k in ("weight", "bias"):
        assert within(grads[k], tgrads[k], bound)
    passes = [e.key.op for e in conv.tuner.dispatch_table() if not e.key.prepared]   # eval mode's is its own
    conv(x)
    assert conv.backward(g) is None                  # input_grad=False: only the weight and bias gradients
    assert [e.key.op for e in conv.tuner.dispatch_table() if not e.key.prepared] == passes
    assert sorted(passes) == ["backward_data", "backward_filter", "forward"]
    assert within(conv.grad_dict()["weight"], 2 * tgrads["weight"], bound)                     # accumulated


def test_cross_entropy_matches_torch():
    t = pytest.importorskip("torch")
    logits, labels = rand(5, 7) * 30, np.array([0, 6, 3, 3, 1])   # large logits: log-sum-exp must be stable
    loss_fn = nn.CrossEntropyLoss()
    loss = loss_fn(logits, labels)
    tz = t.from_numpy(logits).requires_grad_()
    tloss = t.nn.functional.cross_entropy(tz, t.from_numpy(labels))
    tloss.backward()
    assert isinstance(loss, float) and loss == pytest.approx(tloss.item(), rel=1e-6)
    grad = loss_fn.backward()
    assert grad.dtype == np.float32
    np.testing.assert_allclose(grad, tz.grad.numpy(), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_relu_and_eval_batchnorm_kernels_equal_the_numpy_formulas(dtype):
    """The Numba kernels (float32, float64) and the NumPy route (float16) give NumPy's bits, NaN and strided
    inputs included."""
    x = np.random.default_rng(4).standard_normal((3, 5, 6, 7)).astype(dtype)
    x[0, 0, 0, :2] = [np.nan, -np.inf]
    np.testing.assert_array_equal(nn.ReLU()(x), np.maximum(x, 0))
    bn = nn.BatchNorm2d(5)
    bn.running_mean[:], bn.running_var[:], bn.weight[:], bn.bias[:] = np.arange(5), np.arange(1, 6), 3.0, 0.25
    scale = bn.weight / np.sqrt(bn.running_var + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    for xs in (x, x[:, :, ::2]):
        dt = np.result_type(xs, scale)
        expected = xs * scale.astype(dt)[:, None, None] + shift.astype(dt)[:, None, None]
        np.testing.assert_array_equal(bn(xs), expected)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
def test_residual_gradient_sum_gives_numpys_bits(dtype):
    """A residual block's two gradients summed (the Numba kernel for float32/float64, NumPy otherwise) are
    NumPy's a + b bit for bit, NaN, strided and broadcast operands included, and neither operand is changed."""
    from autotune.nn.container import gradient_sum
    rng = np.random.default_rng(5)
    a, b = (rng.standard_normal((3, 4, 5, 6)).astype(dtype) for _ in range(2))
    a[0, 0, 0, 0], b[1, 1, 1, 1] = np.nan, np.inf
    for x, y in ((a, b), (a[:, :, ::2], b[:, :, ::2]), (a, b[:1])):
        before = x.copy(), y.copy()
        np.testing.assert_array_equal(gradient_sum(x, y), x + y)
        np.testing.assert_array_equal(x, before[0])
        np.testing.assert_array_equal(y, before[1])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_with_what_follows_fused_gives_the_bits_of_the_layers_apart(dtype, train):
    """A BatchNorm with a ReLU fused, and ResNet's bn2 with the shortcut's sum and a ReLU (``container.py``),
    give the same bits as the layers run one after another, NaN included; in train mode the fused ReLU's
    backward (its mask on dy, in the BatchNorm's kernel) gives relu's backward then the BatchNorm's, to the
    rounding of the sums' order (the kernels reassociate them)."""
    rng = np.random.default_rng(5)
    x, shortcut, dy = (rng.standard_normal((3, 4, 5, 6)).astype(dtype) for _ in range(3))
    shortcut[0, 0, 0, 0] = np.nan
    tol = dict(rtol=1e-12, atol=1e-15) if dtype == "float64" else dict(rtol=1e-5, atol=1e-6)

    def layer():
        bn = nn.BatchNorm2d(4)
        bn.weight[:], bn.bias[:], bn.running_var[:] = np.linspace(0.5, 2, 4), np.linspace(-1, 1, 4), 1.5
        return bn.train(train)

    apart, fused = layer(), layer()
    y = nn.ReLU()(apart(x))
    np.testing.assert_array_equal(fused.forward(x, relu=True), y)
    if train:
        np.testing.assert_allclose(fused.backward(dy, input_grad=True),
                                   apart.backward(nn.activation.relu_backward(y, dy), input_grad=True), **tol)
        for k in ("weight", "bias"):
            np.testing.assert_allclose(fused.grad_dict()[k], apart.grad_dict()[k], **tol)
    apart, fused = layer(), layer()
    y_sum = np.maximum(apart(x) + shortcut, 0)
    np.testing.assert_array_equal(fused.forward(x, residual=shortcut, relu=True), y_sum)
    assert np.isnan(y_sum[0, 0, 0, 0])
    if train:                                  # the sum's ReLU is the caller's: the BatchNorm takes its gradient
        np.testing.assert_array_equal(fused.backward(dy, input_grad=True), apart.backward(dy, input_grad=True))
