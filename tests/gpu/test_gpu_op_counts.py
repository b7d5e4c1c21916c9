"""The device-operation counter pins what each layer issues on the GPU path, forward and backward (under the
simulator the same calls are counted as on a GPU): the fused layers' one or two launches, a conv with a forced
algorithm ("direct"), the loss (its backward issues nothing), SGD's one launch for every parameter, and one
whole small-model step."""
import numpy as np
import pytest

from autotune import nn, optim
from convalgos.cuda import count_ops
from gpu_arrays import device

BN_FORWARD = {"nn.bn_stats_kernel": 1, "nn.bn_normalize_kernel": 1}
BN_BACKWARD = {"nn.bn_grad_sums_kernel": 1, "nn.bn_grad_input_kernel": 1}
DIRECT_BACKWARD = {"direct.filter_kernel": 1, "direct.phase_weights_kernel": 1, "direct.direct_kernel": 1}

#: layer -> (its ops per forward, per backward with the input's gradient), train mode
LAYERS = {
    "batchnorm": (lambda: nn.BatchNorm2d(2), BN_FORWARD, BN_BACKWARD),
    "batchnorm+relu (fused)": (lambda: nn.Sequential(nn.BatchNorm2d(2), nn.ReLU()), BN_FORWARD, BN_BACKWARD),
    "relu": (lambda: nn.ReLU(), {"nn.relu_kernel": 1}, {"nn.relu_grad_kernel": 1}),
    "maxpool": (lambda: nn.MaxPool2d(3, 2, 1), {"nn.max_pool_kernel": 1}, {"nn.max_pool_grad_kernel": 1}),
    "avgpool": (lambda: nn.AvgPool2d(2), {"nn.avg_pool_kernel": 1}, {"nn.avg_pool_grad_kernel": 1}),
    "adaptive avgpool": (lambda: nn.AdaptiveAvgPool2d(1), {"nn.adaptive_avg_pool_kernel": 1},
                         {"nn.adaptive_avg_pool_grad_kernel": 1}),
    "conv direct": (lambda: nn.Conv2d(2, 2, 3, padding=1, bias=False), {"direct.direct_kernel": 1},
                    DIRECT_BACKWARD),
    "basic block, convs direct": (
        lambda: nn.BasicBlock(2, 4, stride=2),
        {"direct.direct_kernel": 3, "nn.bn_stats_kernel": 3, "nn.bn_normalize_kernel": 3},
        {"direct.filter_kernel": 3, "direct.phase_weights_kernel": 6, "direct.direct_kernel": 6,
         "nn.bn_grad_sums_kernel": 3, "nn.bn_grad_input_kernel": 3, "nn.relu_grad_kernel": 1, "cupy.add": 1,
         "cupy.fill": 3}),                   # the 1x1 stride-2 shortcut's dx: 3 of 4 phases read by no output
}


def on_gpu(make, train=True):
    layer = make().to("cuda").train(train)
    for _, conv in nn.conv_layers(layer):
        conv.algo = "direct"
    return layer


@pytest.mark.parametrize("name", LAYERS)
def test_each_layer_issues_its_pinned_operations(name):
    make, forward, backward = LAYERS[name]
    layer, x = on_gpu(make), device(np.random.default_rng(0).standard_normal((2, 2, 4, 4)).astype(np.float32))
    with count_ops() as ops:
        y = layer(x)
    assert ops.by_name == forward and ops.total == sum(forward.values())
    with count_ops() as ops:
        layer.backward(y, input_grad=True)
    assert ops.by_name == backward and ops.total == sum(backward.values())


def test_eval_batchnorm_with_residual_and_relu_is_one_launch():
    layer = on_gpu(lambda: nn.BasicBlock(2, 2), train=False)
    with count_ops() as ops:
        layer(device(np.ones((2, 2, 3, 3), np.float32)))
    assert ops.by_name == {"direct.direct_kernel": 2, "nn.bn_normalize_kernel": 2}


def test_the_loss_is_one_launch_and_its_backward_none():
    loss_fn = nn.CrossEntropyLoss().to("cuda")
    with count_ops() as ops:
        loss_fn(device(np.zeros((3, 4), np.float32)), device(np.array([0, 1, 2])))
    assert ops.by_name == {"nn.cross_entropy_kernel": 1}
    with count_ops() as ops:
        loss_fn.backward()
    assert ops.total == 0


def step(model, opt, loss_fn, x, labels):
    loss = loss_fn(model(x), labels)
    model.zero_grad()
    model.backward(loss_fn.backward())
    opt.step()
    return loss


def test_one_small_model_step_issues_its_pinned_operations():
    """conv (direct), BatchNorm+ReLU fused, max pool, flatten, linear: the step's count, by name, from the
    second step on (the first also copies the parameters into their flat arrays, once)."""
    rng = np.random.default_rng(1)
    model = on_gpu(lambda: nn.Sequential(nn.Conv2d(1, 2, 3, bias=False, rng=rng), nn.BatchNorm2d(2), nn.ReLU(),
                                         nn.MaxPool2d(2), nn.Flatten(), nn.Linear(2 * 2 * 2, 3, rng=rng)))
    opt, loss_fn = optim.SGD(model, lr=0.1, momentum=0.9, weight_decay=1e-4), nn.CrossEntropyLoss().to("cuda")
    x, labels = device(rng.standard_normal((2, 1, 6, 6)).astype(np.float32)), device(np.array([0, 2]))
    for _ in range(2):
        with count_ops() as ops:
            step(model, opt, loss_fn, x, labels)
    assert ops.by_name == {
        "direct.direct_kernel": 1, "direct.filter_kernel": 1,          # forward; backward-filter (no input grad)
        "nn.bn_stats_kernel": 1, "nn.bn_normalize_kernel": 1, "nn.bn_grad_sums_kernel": 1,
        "nn.bn_grad_input_kernel": 1, "nn.max_pool_kernel": 1, "nn.max_pool_grad_kernel": 1,
        "nn.cross_entropy_kernel": 1, "nn.sgd_kernel": 1,
        "cublas.gemm": 3, "cupy.add": 1, "cupy.sum": 1,                # linear: y, dW, dx; its bias and db
        "cupy.copy": 3}                                                # conv's and linear's gradients into place
