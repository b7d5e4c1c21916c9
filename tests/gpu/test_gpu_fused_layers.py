"""The fused GPU layers (autotune/nn/gpu_*kernels.py) agree with the CPU's kernels they twin, forward and
backward, in float32 and float16, on odd sizes (N=3, C=5, 7x5 images): BatchNorm with its fused ReLU and
residual, in train and eval mode; the poolings; ReLU; the loss with its label check on the device; and the
multi-tensor SGD over flat parameters, step for step with the CPU's SGD."""
import numpy as np
import pytest

from autotune import nn, optim
from autotune.nn.activation import relu_backward
from gpu_arrays import device, host

SHAPE = (3, 5, 7, 5)
TOL = {np.float32: 2e-5, np.float16: 5e-3}


def assert_close(gpu_array, cpu_array, dtype, name=""):
    got = host(gpu_array)
    assert got.dtype == cpu_array.dtype and got.shape == cpu_array.shape, name
    np.testing.assert_allclose(got.astype(np.float64), cpu_array.astype(np.float64), rtol=TOL[dtype],
                               atol=TOL[dtype], equal_nan=True, err_msg=name)


def pair_of(make, train=True):
    cpu, gpu = make(), make().to("cuda")
    return cpu.train(train), gpu.train(train)


def randn(rng, shape, dtype):
    return rng.standard_normal(shape).astype(dtype)


def batchnorm(dtype):
    bn = nn.BatchNorm2d(SHAPE[1], momentum=0.3, dtype=dtype.__name__)
    rng = np.random.default_rng(7)        # running statistics and affine parameters away from the identity
    bn.weight[...], bn.bias[...] = rng.uniform(0.5, 2, SHAPE[1]), rng.standard_normal(SHAPE[1])
    bn.running_mean[...], bn.running_var[...] = rng.standard_normal(SHAPE[1]), rng.uniform(0.5, 2, SHAPE[1])
    return bn


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("relu", [False, True])
def test_batchnorm_train_with_its_fused_relu_equals_the_cpu_kernels(dtype, relu):
    rng = np.random.default_rng(0)
    x, dy = randn(rng, SHAPE, dtype), randn(rng, SHAPE, dtype)
    cpu, gpu = pair_of(lambda: batchnorm(dtype))
    y_cpu = cpu(x)
    y_cpu = np.maximum(y_cpu, 0) if relu else y_cpu
    y_gpu = gpu.forward(device(x), relu=relu)
    assert_close(y_gpu, y_cpu, dtype, "y")
    assert_close(gpu.running_mean, cpu.running_mean, dtype, "running_mean")
    assert_close(gpu.running_var, cpu.running_var, dtype, "running_var")
    dx_cpu = cpu.backward(relu_backward(y_cpu, dy) if relu else dy, input_grad=True)
    assert_close(gpu.backward(device(dy), input_grad=True), dx_cpu, dtype, "dx")
    for name, grad in cpu.grad_dict().items():
        assert_close(gpu.grad_dict()[name], grad, dtype, name)


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("train", [True, False])
def test_batchnorm_with_the_residual_and_relu_fused_equals_the_cpu_sum(dtype, train):
    """ResNet's bn2: relu(bn(x) + shortcut) in one launch; its backward takes the sum's gradient (the block
    applies the ReLU's mask, since the shortcut needs it too)."""
    rng = np.random.default_rng(1)
    x, shortcut, dsum = randn(rng, SHAPE, dtype), randn(rng, SHAPE, dtype), randn(rng, SHAPE, dtype)
    cpu, gpu = pair_of(lambda: batchnorm(dtype), train)
    y_cpu = np.maximum(cpu(x) + shortcut, 0)
    assert_close(gpu.forward(device(x), residual=device(shortcut), relu=True), y_cpu, dtype, "y")
    if train:
        assert_close(gpu.backward(device(dsum), input_grad=True), cpu.backward(dsum, input_grad=True), dtype, "dx")


POOLS = {
    "maxpool 3 s2 p1": lambda: nn.MaxPool2d(3, 2, 1),
    "maxpool 2 ceil": lambda: nn.MaxPool2d(2, ceil_mode=True),
    "avgpool 3 s2 p1": lambda: nn.AvgPool2d(3, 2, 1),
    "avgpool excl pad ceil": lambda: nn.AvgPool2d(3, 2, 1, ceil_mode=True, count_include_pad=False),
    "adaptive 2x3": lambda: nn.AdaptiveAvgPool2d((2, 3)),
    "relu": lambda: nn.ReLU(),
}


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize("name", POOLS)
def test_pooling_and_relu_equal_the_cpu_kernels(name, dtype):
    rng = np.random.default_rng(2)
    x = randn(rng, SHAPE, dtype)
    x[0, 0, 0, 0], x[1, 2, 3, 3], x[2, 4, 1, 1] = np.nan, -np.inf, x[2, 4, 1, 2]   # NaN, -inf and a tie
    if name.startswith(("avg", "adaptive")):               # the CPU's GEMM form spreads a NaN over every bin
        x = np.nan_to_num(x, neginf=0)
    cpu, gpu = pair_of(POOLS[name])
    y_cpu = cpu(x)
    assert_close(gpu(device(x)), y_cpu, dtype, "y")
    dy = randn(rng, y_cpu.shape, dtype)
    assert_close(gpu.backward(device(dy), input_grad=True), cpu.backward(dy, input_grad=True), dtype, "dx")


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_the_loss_and_its_gradient_equal_the_cpu_and_stay_on_the_device(dtype):
    rng = np.random.default_rng(3)
    logits, labels = randn(rng, (3, 5), dtype) * 4, np.array([0, 4, 2])
    cpu, gpu = nn.CrossEntropyLoss(), nn.CrossEntropyLoss().to("cuda")
    expected = cpu(logits, labels)
    loss = gpu(device(logits), device(labels))
    assert isinstance(loss, nn.loss.DeviceLoss) and float(loss) == pytest.approx(expected, rel=TOL[dtype])
    assert f"{loss:.3f}" == f"{float(loss):.3f}" and loss * 2 == pytest.approx(2 * expected, rel=TOL[dtype])
    assert_close(gpu.backward(), cpu.backward(), dtype, "dlogits")


def test_a_bad_label_is_found_on_the_device_and_raised_when_the_loss_is_read():
    loss_fn = nn.CrossEntropyLoss().to("cuda")
    loss = loss_fn(device(np.zeros((3, 4), np.float32)), device(np.array([1, 4, 0])))   # no error yet: no sync
    with pytest.raises(ValueError, match=r"labels must be class indices in \[0, 4\), got 4"):
        float(loss)
    assert np.isnan(host(loss_fn.backward())[1]).all()
    assert float(loss_fn(device(np.zeros((3, 4), np.float32)), device(np.array([1, 3, 0])))) == pytest.approx(
        np.log(4))


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_sgd_is_one_launch_over_flat_parameters_and_equals_the_cpu_step(dtype):
    """momentum, weight decay and nesterov as optim.SGD on the CPU; a parameter without a gradient is skipped
    (its neighbours then take two launches); buffers made once: the same arrays every step."""
    from convalgos.cuda import count_ops

    def make():
        rngs = np.random.default_rng(0), np.random.default_rng(1)
        return nn.Sequential(nn.Linear(4, 3, dtype=dtype.__name__, rng=rngs[0]),
                             nn.Linear(3, 2, dtype=dtype.__name__, rng=rngs[1]))
    cpu, gpu = make(), make().to("cuda")
    opts = [optim.SGD(m, lr=0.1, momentum=0.9, weight_decay=0.01, nesterov=True) for m in (cpu, gpu)]
    rng = np.random.default_rng(4)
    grads = [{name: randn(rng, p.shape, dtype) for name, p in cpu.named_parameters()} for _ in range(3)]
    flat = gpu[0].weight.base
    for step, given in enumerate(grads):
        for model, opt in zip((cpu, gpu), opts):
            model.zero_grad()
            for name, g in given.items():
                if step == 0 and name == "0.bias":
                    continue                                     # no gradient: skipped, momentum starts later
                layer, attribute = name.split(".")
                model[int(layer)].accumulate_grad(attribute, device(g) if model is gpu else g)
            with count_ops() as ops:
                opt.step()
        # step 0: two runs around the bias without a gradient; step 1: the bias's momentum starts alone
        assert ops.by_name == {"nn.sgd_kernel": (2, 3, 1)[step]}
        for name, value in cpu.state_dict().items():
            assert_close(gpu.state_dict()[name], value, dtype, name)
    assert all(p.base is flat for p in gpu.parameters())
    assert all(b.base is opts[1]._flat_momentum[dtype.__name__] for b in opts[1].momentum_buffers.values())


def test_plain_sgd_without_momentum_is_one_launch_too():
    from convalgos.cuda import count_ops
    cpu, gpu = nn.Linear(3, 2), nn.Linear(3, 2).to("cuda")
    opts = [optim.SGD(m, lr=0.5, weight_decay=0.1) for m in (cpu, gpu)]
    g = np.random.default_rng(5).standard_normal((2, 3)).astype(np.float32)
    for model, opt in zip((cpu, gpu), opts):
        model.accumulate_grad("weight", device(g) if model is gpu else g)
        with count_ops() as ops:
            opt.step()
    assert ops.by_name == {"nn.sgd_kernel": 1} and not opts[1].momentum_buffers
    assert_close(gpu.weight, cpu.weight, np.float32, "weight")
    assert_close(gpu.bias, cpu.bias, np.float32, "bias (no gradient: unchanged)")


def test_sgd_follows_a_load_state_dict_with_its_momentum_kept_by_name():
    """load_state_dict replaces the model's arrays: the next step lays them out flat anew (one copy each, once)
    and carries the momentum buffers over by name, as the CPU's SGD keeps them."""
    cpu, gpu = nn.Linear(3, 2), nn.Linear(3, 2).to("cuda")
    opts = [optim.SGD(m, lr=0.1, momentum=0.9) for m in (cpu, gpu)]
    rng = np.random.default_rng(6)
    state = {k: rng.standard_normal(v.shape).astype(np.float32) for k, v in cpu.state_dict().items()}
    for step in range(3):
        g = rng.standard_normal((2, 3)).astype(np.float32)
        for model, opt in zip((cpu, gpu), opts):
            if step == 1:
                model.load_state_dict(state)
            model.zero_grad()
            model.accumulate_grad("weight", device(g) if model is gpu else g)
            opt.step()
        assert_close(gpu.weight, cpu.weight, np.float32, f"weight after step {step}")
    assert gpu.weight.base is opts[1]._flat.groups["float32"].params
