"""autotune.nn on the GPU's code paths: every layer but the conv, the loss and SGD, moved to "cuda" (CuPy arrays;
under the simulator NumPy arrays, array-module code instead of the CPU kernels), equal the CPU's, forward and
backward."""
import numpy as np
import pytest

from autotune import nn, optim
from autotune.nn.device import move, to_host

LAYERS = {
    "relu": lambda: nn.ReLU(),
    "batchnorm": lambda: nn.BatchNorm2d(3),
    "maxpool 3 s2 p1": lambda: nn.MaxPool2d(3, 2, 1),
    "maxpool 2 ceil": lambda: nn.MaxPool2d(2, ceil_mode=True),
    "avgpool 3 s2 p1": lambda: nn.AvgPool2d(3, 2, 1),
    "avgpool excl pad": lambda: nn.AvgPool2d(3, 2, 1, count_include_pad=False),
    "adaptive": lambda: nn.AdaptiveAvgPool2d(2),
    "dropout": lambda: nn.Dropout(0.3),
    "flatten-linear": lambda: nn.Sequential(nn.Flatten(), nn.Linear(3 * 7 * 7, 5)),
}


def host_and_gpu(make):
    cpu, gpu = make(), make()
    assert gpu.to("cuda") is gpu and gpu.device == "cuda" and all(m.device == "cuda" for _, m in gpu.named_modules())
    return cpu, gpu


def assert_same(a, b, tol):
    """``a`` (the CPU's) and ``b`` (the GPU's, read back) agree in dtype, shape and values, NaN included."""
    b = to_host(b)
    assert a.dtype == b.dtype and a.shape == b.shape
    np.testing.assert_allclose(a, b, rtol=tol, atol=tol, equal_nan=True)


@pytest.mark.parametrize("name", LAYERS)
@pytest.mark.parametrize("train", [True, False])
def test_layer_on_the_gpu_path_equals_the_cpu_kernels(name, train):
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 3, 7, 7)).astype(np.float32)
    if name.startswith(("maxpool", "relu")):
        x[0, 0, 0, 0], x[1, 2, 3, 3] = np.nan, -np.inf       # the kernels' NaN and first-in-window rules
    cpu, gpu = host_and_gpu(LAYERS[name])
    cpu.train(train), gpu.train(train)
    y = cpu(x)
    assert_same(y, gpu(move(x, "cuda")), 1e-6)
    if name == "batchnorm":
        assert_same(cpu.running_var, gpu.running_var, 1e-6)
    if train:
        dy = rng.standard_normal(y.shape).astype(np.float32)
        assert_same(cpu.backward(dy, input_grad=True), gpu.backward(move(dy, "cuda"), input_grad=True), 1e-5)
        for key, grad in cpu.grad_dict().items():
            assert_same(grad, gpu.grad_dict()[key], 1e-5)


def test_loss_and_sgd_on_the_gpu_path():
    rng = np.random.default_rng(1)
    logits, labels = rng.standard_normal((4, 5)).astype(np.float32), np.array([0, 4, 2, 2])
    assert nn.CrossEntropyLoss()(move(logits, "cuda"), labels) == pytest.approx(
        nn.CrossEntropyLoss()(logits, labels), rel=1e-6)
    cpu, gpu = host_and_gpu(lambda: nn.Linear(5, 3))
    x = rng.standard_normal((4, 5)).astype(np.float32)
    steps = [optim.SGD(m, lr=0.1, momentum=0.9, weight_decay=1e-2, nesterov=True) for m in (cpu, gpu)]
    for _ in range(2):
        for m, opt in zip((cpu, gpu), steps):
            m.train()
            m.zero_grad()
            m.backward(m(move(x, m.device)), input_grad=False)
            opt.step()
    assert_same(cpu.weight, gpu.weight, 1e-6)


def test_to_checks_the_device_and_back_to_cpu_keeps_the_arrays():
    m = nn.BatchNorm2d(2)
    with pytest.raises(ValueError, match="device must be one of \\['cpu', 'cuda'\\], got 'tpu'"):
        m.to("tpu")
    assert m.to("cuda:0").device == "cuda" and m.to("cpu").device == "cpu"
    assert type(m.running_var) is np.ndarray


def test_a_cupy_input_to_a_cpu_layer_says_how_to_fix_it():
    fake_cupy = type("ndarray", (), {"__module__": "cupy._core.core"})()
    with pytest.raises(TypeError, match=r"Linear is on cpu but its input is a CuPy array: move the model "
                                        r"\(model.to\('cuda'\)\)"):
        nn.Linear(2, 2)(fake_cupy)
