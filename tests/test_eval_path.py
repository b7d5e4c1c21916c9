"""Eval mode's fast path (autotune/nn/inference.py): prepared weights bitwise equal to the plain path, the fused
model (BatchNorm folded, ReLU and shortcut as epilogues, kept buffers) equal to the unfused one for every model,
and the prepared forms dropped when the weights change (load_state_dict, an optimiser step, train mode, a
replaced array), a user's write into a frozen weight refused."""
import functools
from collections import OrderedDict

import numpy as np
import pytest

import autotune
from autotune import models, nn, optim
from autotune.heuristics import Heuristics
from autotune.nn.inference import epilogue
from convalgos import ALGORITHMS
from convalgos.reference import normwise_error
from float32_bounds import PLAIN_SUM, within

#: model -> the (C, H, W) input used here (small; every model ends in adaptive pooling but LeNet-5).
TEST_INPUT = {"lenet5": (1, 32, 32), "resnet20": (3, 32, 32), "resnet18": (3, 64, 64), "vgg16": (3, 32, 32),
              "mobilenet_v1": (3, 64, 64)}
PREPARING = ["winograd_2x2", "winograd_4x4", "winograd_6x6", "fft", "fft_tiled"]


def rand(*shape, seed=0, dtype=np.float32):
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


def only(*names):
    """A Tuner (heuristic, nothing timed) whose registry holds only ``names``."""
    return autotune.Tuner(algorithms=OrderedDict((n, ALGORITHMS[n]) for n in names))


def randomise(model, seed=1):
    """Non-trivial BatchNorm statistics and conv biases, so folding is really tested."""
    rng = np.random.default_rng(seed)
    for _, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.weight.shape[0]
            m.weight[:], m.bias[:] = rng.uniform(0.5, 1.5, c), rng.uniform(-0.2, 0.2, c)
            m.running_mean[:], m.running_var[:] = rng.uniform(-0.2, 0.2, c), rng.uniform(0.5, 2.0, c)
        elif isinstance(m, nn.Conv2d) and m.bias is not None:
            m.bias[:] = rng.uniform(-0.2, 0.2, m.bias.shape)
    return model


@functools.lru_cache(maxsize=None)
def built(name):
    """One instance per architecture (VGG-16's weights take seconds to draw); each test sets its own modes."""
    return randomise(models.get_model(name, seed=3, tuner=autotune.Tuner()))


def forms_held(model):
    return [c for _, c in nn.conv_layers(model) if c._eval is not None and c._eval.forms]


# ---- prepared weights: bitwise the plain path -------------------------------------------------------------
@pytest.mark.parametrize("name", PREPARING)
def test_prepared_conv_is_bitwise_the_plain_one(name):
    conv = nn.Conv2d(4, 6, 3, padding=1, tuner=only(name))
    conv.bias[:] = np.arange(6)
    x = rand(2, 4, 10, 10)
    plain, plain_one = conv.prepare_weights(False)(x), conv(x[:1])
    prepared = conv.prepare_weights(True)(x)
    assert forms_held(conv) and f"prepared: {name}" in repr(conv)
    np.testing.assert_array_equal(prepared, plain)
    np.testing.assert_array_equal(conv(x), plain)                   # the kept form, reused
    np.testing.assert_array_equal(conv(x[:1]), plain_one)           # another batch: the form fits or is made anew


def test_a_form_is_made_once_and_serves_every_batch_size():
    conv = nn.Conv2d(4, 6, 3, padding=1, tuner=only("winograd_4x4"))
    conv(rand(2, 4, 8, 8))
    conv(rand(3, 4, 8, 8))
    assert len({id(f) for f in conv._eval.forms.values()}) == 1


def test_non_preparing_choice_freezes_nothing():
    conv = nn.Conv2d(4, 6, 3, padding=1, tuner=only("im2col"))
    conv(rand(1, 4, 8, 8))
    assert conv._eval is None and conv.weight.flags.writeable


def test_a_failing_prepared_run_falls_back_to_the_plain_call(monkeypatch):
    conv = nn.Conv2d(4, 6, 3, padding=1, tuner=only("winograd_4x4"))
    x = rand(1, 4, 8, 8)
    expected = conv.prepare_weights(False)(x)
    conv.prepare_weights(True)
    monkeypatch.setattr(ALGORITHMS["winograd_4x4"], "prepare", lambda *a: 1 / 0)
    np.testing.assert_array_equal(conv(x), expected)
    assert conv._eval.failed == {"winograd_4x4"}


# ---- invalidation -------------------------------------------------------------------------------------------
def small_net(tuner, seed=0):
    return randomise(nn.Sequential(nn.Conv2d(3, 8, 3, padding=1, tuner=tuner, rng=np.random.default_rng(seed)),
                                   nn.BatchNorm2d(8), nn.ReLU(),
                                   nn.Conv2d(8, 8, 3, padding=1, tuner=tuner, rng=np.random.default_rng(seed + 1)),
                                   nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten()), seed)


def plain_output(net, x):
    """The unfused, unprepared output, leaving the net as it was found otherwise prepared."""
    net.prepare_weights(False)
    try:
        return net(x)
    finally:
        net.prepare_weights(True)


@pytest.mark.parametrize("fused", [False, True])
def test_a_user_write_raises_until_drop_prepared(fused):
    net = small_net(only("winograd_4x4"))
    net = net.fuse() if fused else net
    x = rand(2, 3, 8, 8)
    net(x)
    conv, bn = net[0], net[1]
    with pytest.raises(ValueError, match="read-only"):
        conv.weight[0] = 0
    if fused:
        with pytest.raises(ValueError, match="read-only"):
            bn.running_mean[:] = 1
    net.drop_prepared()
    conv.weight[0] = 0
    bn.running_mean[:] = 0.5
    got = net(x)
    net.unfuse()
    np.testing.assert_allclose(got, plain_output(net, x), rtol=1e-5, atol=1e-5)


def test_load_state_dict_drops_the_forms():
    tuner = only("winograd_4x4")
    net, other = small_net(tuner), small_net(tuner, seed=5)
    x = rand(2, 3, 8, 8)
    before = net(x)
    old_weight = net[0].weight
    net.load_state_dict(other.state_dict())
    assert old_weight.flags.writeable                      # the replaced array is the user's again
    got = net(x)
    np.testing.assert_array_equal(got, plain_output(other, x))
    assert not np.array_equal(got, before)


def test_a_replaced_weight_is_noticed():
    net = small_net(only("winograd_4x4"))
    x = rand(1, 3, 8, 8)
    net(x)
    net[3].weight = net[3].weight * 2
    np.testing.assert_array_equal(net(x), plain_output(net, x))


def test_an_optimiser_step_in_eval_mode_drops_the_forms():
    net = small_net(only("winograd_4x4"))
    x, labels = rand(4, 3, 8, 8), np.array([0, 1, 2, 3])
    loss_fn = nn.CrossEntropyLoss()
    net.train()
    loss_fn(net(x), labels)
    net.backward(loss_fn.backward())
    assert not forms_held(net)                             # train mode keeps none
    net.eval()
    before = net(x)
    assert forms_held(net)
    optim.SGD(net, lr=0.5).step()
    assert net[0].weight.flags.writeable
    after = net(x)
    np.testing.assert_array_equal(after, plain_output(net, x))
    assert not np.array_equal(after, before)


def test_train_mode_unfreezes_and_runs_unfused():
    net = small_net(only("winograd_4x4")).fuse()
    x = rand(2, 3, 8, 8)
    net(x)
    net.train()
    assert not forms_held(net) and all(a.flags.writeable for a in net.parameters())
    assert not net.absorbed("1")                           # BatchNorm runs on its own, with batch statistics
    y = net(x)
    net.unfuse().train()
    np.testing.assert_array_equal(net(x), y)


def test_a_folded_batchnorm_put_in_train_mode_alone_is_not_folded():
    net = small_net(only("winograd_4x4")).fuse()
    x = rand(2, 3, 8, 8)
    net(x)
    net[1].train()                                         # its conv runs plain, and unfreezes the arrays
    y = net(x)
    assert not net.absorbed("1") and not net.absorbed("2") and net[1].running_mean.flags.writeable
    net.unfuse()
    np.testing.assert_allclose(net(x), y, rtol=1e-6, atol=1e-6)


# ---- fusion -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("ranking", ["heuristic", "fewest FLOPs"])
@pytest.mark.parametrize("name", list(models.MODELS))
def test_fused_model_equals_the_unfused_one(name, ranking):
    """With the measured heuristics (mostly im2col and direct at these sizes) and with the fewest FLOPs first
    (Winograd and FFT, which prepare, wherever they can run)."""
    model = built(name).eval()
    tuner = autotune.Tuner(heuristics=Heuristics({"rules": []}) if ranking == "fewest FLOPs" else None)
    for _, conv in nn.conv_layers(model):
        conv.tuner = tuner
    x = np.random.default_rng(0).standard_normal((2,) + TEST_INPUT[name]).astype(np.float32)
    plain = model.unfuse().prepare_weights(False)(x)
    model.prepare_weights(True).fuse()
    fused = model(x)
    again = model(x)
    convs = nn.conv_layers(model)
    chosen = {e.algo for e in tuner.dispatch_table()}
    # MobileNet's convs (depthwise, 1x1, one strided 3x3) have no preparing algorithm among their fewest FLOPs
    assert forms_held(model) or ranking == "heuristic" or name == "mobilenet_v1", chosen
    bound = len(convs) * max(ALGORITHMS[a].tolerance["float32"] for a in chosen) + 1e-5
    assert normwise_error(fused, plain) <= bound, (normwise_error(fused, plain), bound)
    np.testing.assert_array_equal(again, fused)            # kept buffers, same numbers, and the output is fresh
    assert not np.shares_memory(again, fused)
    text = repr(model)
    assert "relu epilogue" in text and "output reused" in text
    assert ("folded into" in text) == any(isinstance(m, nn.BatchNorm2d) for _, m in model.named_modules())
    model.unfuse()
    assert "folded into" not in repr(model) and "output reused" not in repr(model)


def test_each_switch_alone_matches_the_unfused_model():
    tuner = autotune.Tuner()
    net = nn.Sequential(nn.Conv2d(3, 6, 3, tuner=tuner), nn.ReLU(),
                        nn.Conv2d(6, 6, 3, padding=1, tuner=tuner), nn.BatchNorm2d(6), nn.ReLU(),
                        nn.BasicBlock(6, 8, 2, tuner=tuner), nn.BasicBlock(8, 8, 1, tuner=tuner),
                        nn.AdaptiveAvgPool2d(1), nn.Flatten())
    randomise(net)
    x = rand(2, 3, 12, 12)
    plain = net(x)
    for switches in ({"batchnorm": True, "relu": False, "buffers": False},
                     {"batchnorm": False, "relu": True, "buffers": False},
                     {"batchnorm": False, "relu": False, "buffers": True}):
        net.fuse(**switches)
        assert within(net(x), plain, len(nn.conv_layers(net)) * PLAIN_SUM), switches   # the same choices


def test_a_final_conv_never_reuses_its_output():
    tuner = autotune.Tuner()
    net = nn.Sequential(nn.Conv2d(2, 4, 3, tuner=tuner), nn.Conv2d(4, 4, 3, tuner=tuner), nn.ReLU(), nn.Flatten(),
                        nn.Identity()).fuse()
    assert net[0].reuse_output and not net[1].reuse_output and net.absorbed("2")
    x = rand(1, 2, 8, 8)
    first = net(x)
    kept = first.copy()
    net(rand(1, 2, 8, 8, seed=1))
    np.testing.assert_array_equal(first, kept)
    block = nn.BasicBlock(4, 4, tuner=tuner).fuse()
    assert block.conv1.reuse_output and not block.conv2.reuse_output


def test_the_epilogue_kernel_matches_numpy():
    y, r, b = rand(2, 3, 4, 5), rand(2, 3, 4, 5, seed=1), rand(3, seed=2)
    y[0, 0, 0, 0] = np.nan
    for residual in (None, r):
        for relu in (False, True):
            expected = y + b[:, None, None] + (0 if residual is None else residual)
            expected = np.maximum(expected, 0) if relu else expected
            got = y.copy()
            epilogue(got, b, residual, relu)
            np.testing.assert_array_equal(got, expected)
            half = y.astype(np.float16)                     # the NumPy route
            epilogue(half, b, None if residual is None else residual.astype(np.float16), relu)
            np.testing.assert_allclose(half, expected, rtol=2e-2, atol=2e-2)


# ---- the tuner times what eval mode runs -------------------------------------------------------------------
def test_a_prepared_key_is_tuned_on_the_prepared_path_with_the_prepare_cost_apart():
    """Both candidates race (``prune_ratio=None``: whether the measured rules prune one is this machine's file's
    business, not this test's)."""
    tuner = autotune.Tuner(algorithms=OrderedDict((n, ALGORITHMS[n]) for n in ("im2col", "winograd_4x4")),
                           benchmark=True, time_budget=0.05, prune_ratio=None)
    x, w = rand(1, 4, 10, 10), rand(6, 4, 3, 3, seed=1)
    choice = tuner.forward_choice(x, w, None, 1, 1, prepared=True)
    tuner.conv2d(x, w, padding=1)                                   # the plain call: a key of its own
    prepared_entry, plain_entry = sorted(tuner.dispatch_table(), key=lambda e: not e.key.prepared)
    assert prepared_entry is choice.entry and prepared_entry.key.prepared and not plain_entry.key.prepared
    assert set(prepared_entry.prepare_seconds) == {"winograd_4x4"} and not plain_entry.prepare_seconds
    assert prepared_entry.prepare_bytes == {"winograd_4x4": ALGORITHMS["winograd_4x4"].prepare_bytes(choice.params)}
    assert set(prepared_entry.errors) == {"im2col", "winograd_4x4"}     # the prepared runs were checked too
    assert "prepared once per weight" in prepared_entry.report() and "(prepared weight)" in str(prepared_entry.key)
    restored = autotune.Entry.from_dict(prepared_entry.to_dict())
    assert restored.key == prepared_entry.key and restored.prepare_seconds == prepared_entry.prepare_seconds
    assert "prepared" not in plain_entry.key.to_dict()              # plain keys are written as before
    assert autotune.Key.from_dict(plain_entry.key.to_dict()) == plain_entry.key


def test_benchmark_off_ranks_a_prepared_key_by_the_prepared_rules():
    rules = {"forward": [{"name": "plain", "when": {}, "order": ["im2col", "winograd_4x4"]}],
             "forward prepared": [{"name": "on prepared weights", "when": {}, "order": ["winograd_4x4", "im2col"]}]}
    tuner = autotune.Tuner(algorithms=OrderedDict((n, ALGORITHMS[n]) for n in ("im2col", "winograd_4x4")),
                           benchmark=False, heuristics=Heuristics({"devices": {"cpu": rules}}))
    x, w = rand(1, 4, 10, 10), rand(6, 4, 3, 3, seed=1)
    assert tuner.forward_choice(x, w, None, 1, 1, prepared=True).entry.algo == "winograd_4x4"
    assert tuner.forward_choice(x, w, None, 1, 1).entry.algo == "im2col"
    assert {e.rule for e in tuner.dispatch_table()} == {"plain", "on prepared weights"}
