"""Every layer's backward pass against float64 central finite differences (no torch needed).

For a layer f, a random output weighting g and a random direction v, the analytic directional derivative
<df/dx, v> (from ``backward``) must equal (L(x + eps v) - L(x - eps v)) / (2 eps) with L = sum(f(x) * g); the
same for every parameter. One direction checks every coordinate at once; inputs are random, so no max-pool
tie or ReLU kink sits within eps of the point.
"""
from collections import OrderedDict

import numpy as np
import pytest

import autotune
from autotune import nn

EPS = 1e-6
#: |finite difference - analytic| <= TOL * |gradient| * |direction| (float64: truncation ~eps^2, rounding ~1e-10)
TOL = 1e-7


def rand(*shape, seed=0):
    return np.random.default_rng(seed).standard_normal(shape)


def directional_errors(module, x, seed=0, before_forward=lambda: None):
    """(name, relative error) for the input and every parameter of ``module`` (in float64, train mode)."""
    rng = np.random.default_rng(seed)
    module.astype(np.float64).train()
    before_forward()
    y = module(x)
    g = rng.standard_normal(y.shape)
    module.zero_grad()
    analytic = OrderedDict(input=module.backward(g, input_grad=True))
    analytic.update(module.grad_dict())
    assert list(analytic)[1:] == [name for name, _ in module.named_parameters()]

    def loss():
        before_forward()
        return float(np.sum(module(x) * g))

    errors = []
    for name, grad in analytic.items():
        target = x if name == "input" else dict(module.named_parameters())[name]
        v = rng.standard_normal(target.shape)
        target += EPS * v
        up = loss()
        target -= 2 * EPS * v
        down = loss()
        target += EPS * v
        fd = (up - down) / (2 * EPS)
        errors.append((name, abs(fd - np.sum(grad * v)) / (np.linalg.norm(grad) * np.linalg.norm(v))))
    return errors


def assert_gradients(module, x, **kwargs):
    errors = directional_errors(module, x, **kwargs)
    assert all(e <= TOL for _, e in errors), errors


CONVS = [  # in, out, kernel, stride, padding, dilation, groups, bias, input H x W
    (3, 4, 3, 1, 1, 1, 1, True, (6, 7)),
    (4, 6, 3, 2, 1, 1, 2, False, (7, 6)),            # stride 2 with a row no output reads, groups
    (4, 4, 3, 2, 1, 1, 4, False, (8, 8)),            # depthwise, strided
    (2, 3, (3, 2), 1, ((0, 2), (1, 0)), 2, 1, True, (7, 6)),   # asymmetric padding, dilation
    (2, 3, 5, 1, "same", 1, 1, True, (5, 6)),
    (3, 5, 1, 2, 0, 1, 1, False, (5, 5)),            # a 1x1 strided shortcut
]


@pytest.mark.parametrize("c, k, kernel, stride, padding, dilation, groups, bias, hw", CONVS)
@pytest.mark.parametrize("algo", ["reference", "autotuned"])
def test_conv2d(algo, c, k, kernel, stride, padding, dilation, groups, bias, hw):
    conv = nn.Conv2d(c, k, kernel, stride, padding, dilation, groups, bias)
    if algo == "autotuned":
        conv.tuner = autotune.Tuner(benchmark=False)      # the heuristic's choice for each pass
    else:
        conv.algo = nn.REFERENCE
    conv.bias = None if conv.bias is None else rand(k, seed=2)
    assert_gradients(conv, rand(2, c, *hw, seed=1))


def test_batchnorm_train_mode():
    bn = nn.BatchNorm2d(4)
    bn.weight, bn.bias = rand(4, seed=2), rand(4, seed=3)
    assert_gradients(bn, rand(3, 4, 5, 2, seed=1) * 3 + 1)


@pytest.mark.parametrize("k, s, p, ceil, hw", [(2, None, 0, False, (6, 6)), (3, 2, 1, False, (7, 8)),
                                              (3, 2, 1, True, (8, 9)), ((2, 3), (1, 2), (1, 1), False, (5, 6))])
def test_pools(k, s, p, ceil, hw):
    x = rand(2, 3, *hw, seed=4)
    assert_gradients(nn.MaxPool2d(k, s, p, ceil_mode=ceil), x)
    for include_pad in (True, False):
        assert_gradients(nn.AvgPool2d(k, s, p, ceil_mode=ceil, count_include_pad=include_pad), x)


@pytest.mark.parametrize("hw, out", [((7, 7), 1), ((10, 7), (3, 4)), ((2, 3), 7)])
def test_adaptive_avg_pool(hw, out):
    assert_gradients(nn.AdaptiveAvgPool2d(out), rand(2, 3, *hw, seed=5))


def test_linear_relu_flatten():
    lin = nn.Linear(12, 5)
    lin.bias = rand(5, seed=2)
    assert_gradients(lin, rand(3, 12, seed=6))
    assert_gradients(nn.ReLU(), rand(2, 3, 4, 4, seed=7))
    assert_gradients(nn.Flatten(), rand(2, 3, 2, 2, seed=8))
    assert_gradients(nn.Identity(), rand(2, 3, seed=8))


def test_dropout_with_its_mask_replayed():
    drop = nn.Dropout(0.3, seed=4)
    assert_gradients(drop, rand(4, 10, seed=9), before_forward=lambda: setattr(drop, "rng",
                                                                                np.random.default_rng(4)))


@pytest.mark.parametrize("stride, c, k", [(1, 4, 4), (2, 3, 5)])
def test_basic_block(stride, c, k):
    block = nn.BasicBlock(c, k, stride)
    with nn.use_algorithm(block, nn.REFERENCE):
        for name, m in block.named_modules():
            if isinstance(m, nn.BatchNorm2d):
                m.bias[:] = rand(k, seed=len(name))
        assert_gradients(block, rand(2, c, 6, 6, seed=10))


def test_sequential_model():
    net = nn.Sequential(OrderedDict(conv=nn.Conv2d(2, 4, 3, padding=1, bias=False), bn=nn.BatchNorm2d(4),
                                    relu=nn.ReLU(), pool=nn.MaxPool2d(2), flat=nn.Flatten(), fc=nn.Linear(36, 3)))
    with nn.use_algorithm(net, nn.REFERENCE):
        assert_gradients(net, rand(3, 2, 6, 6, seed=11))


def test_cross_entropy_gradient():
    logits, labels = rand(4, 6, seed=12) * 3, np.array([0, 5, 2, 2])
    loss_fn = nn.CrossEntropyLoss()
    loss_fn(logits, labels)
    grad = loss_fn.backward()
    v = rand(4, 6, seed=13)
    fd = (loss_fn(logits + EPS * v, labels) - loss_fn(logits - EPS * v, labels)) / (2 * EPS)
    assert abs(fd - np.sum(grad * v)) <= TOL * np.linalg.norm(grad) * np.linalg.norm(v)
