"""Training on the GPU: a model moved to "cuda" trains through the tuner's GPU device (under the simulator, the
simulated one), every conv pass by the GPU registry, and one step equals the CPU's step: loss, every gradient,
every parameter and running statistic after SGD, within float32's own error (``step_bounds.py``: normwise, at
bounds that hold on every CPU).

The GPU's tuner is given one rule, im2col first: the simulator runs a kernel thread by thread in Python,
and im2col (its work in NumPy's matmul, as cuBLAS's on hardware) is the one that keeps a LeNet-5 step under a
second there; the direct kernel took minutes. The CPU's peer runs direct (``pin_cpu_convs``). The other
algorithms' passes are checked in test_gpu_algorithms.py and its siblings."""
import numpy as np
import pytest

import autotune
from autotune import models, nn, optim, train
from autotune.nn.device import move, to_host
from convalgos.arrays import simulator_enabled
from step_bounds import (LOSS_BOUND, assert_first_sgd_step, assert_grads_close, assert_state_close,
                         pin_cpu_convs)

LR, WEIGHT_DECAY = 0.1, 5e-4


def one_step(model, x, labels):
    opt = optim.SGD(model, lr=LR, momentum=0.9, weight_decay=WEIGHT_DECAY)
    loss_fn = nn.CrossEntropyLoss()
    model.train()
    loss = loss_fn(model(move(x, model.device)), labels)
    model.zero_grad()
    model.backward(loss_fn.backward())
    grads = {k: to_host(v).copy() for k, v in model.grad_dict().items()}
    opt.step()
    return loss, grads


def assert_steps_equal(make, x, labels):
    cpu, gpu = pin_cpu_convs(make()), make().to("cuda")
    before = {k: v.copy() for k, v in cpu.state_dict().items()}
    loss_cpu, grads_cpu = one_step(cpu, x, labels)
    loss_gpu, grads_gpu = one_step(gpu, x, labels)
    assert loss_gpu == pytest.approx(loss_cpu, rel=LOSS_BOUND)
    assert len(grads_cpu) == len(cpu.parameters())
    assert_grads_close(grads_gpu, grads_cpu)
    state_cpu, state_gpu = cpu.state_dict(), {k: to_host(v) for k, v in gpu.state_dict().items()}
    assert_state_close(state_gpu, state_cpu, grads_cpu, LR)
    for device, grads, state in (("cpu", grads_cpu, state_cpu), ("cuda", grads_gpu, state_gpu)):
        assert_first_sgd_step(before, grads, state, LR, WEIGHT_DECAY, device)
    return gpu


def test_one_lenet5_step_on_the_simulated_gpu_equals_the_cpu_step(gpu_tuner):
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((2, 1, 32, 32)).astype(np.float32), np.array([3, 7])
    gpu = assert_steps_equal(lambda: models.lenet5(seed=0), x, labels)
    table = list(gpu_tuner.dispatch_table())
    entries = [e for e in table if e.key.device.startswith("cuda:")]
    # the CPU step's convs ran on their own pinned tuner (pin_cpu_convs), so this one holds the GPU step's keys only
    assert entries == table
    # two convs forward and backward-filter; conv1 needs no input gradient (as in torch)
    assert sorted(e.key.op for e in entries) == ["backward_data", "backward_filter", "backward_filter", "forward",
                                                 "forward"]
    assert {e.algo for e in entries} == {"im2col"}
    if simulator_enabled():                  # the simulated GPU's keys stay out of the module-level table
        assert not any(e.key.device == "cuda:simulator" for e in autotune.dispatch_table())
    gpu.to("cpu")
    assert gpu.device == "cpu" and all(type(a) is np.ndarray for a in gpu.state_dict().values())


def test_a_resnet_block_step_on_the_simulated_gpu_equals_the_cpu_step(gpu_tuner):
    """BatchNorm's statistics and gradients, the ReLU gradient through the residual sum, the 1x1 shortcut."""
    def block():
        rng = np.random.default_rng(1)
        return nn.Sequential(nn.BasicBlock(2, 4, stride=2, rng=rng), nn.AdaptiveAvgPool2d(1), nn.Flatten(),
                             nn.Linear(4, 3, rng=rng))
    rng = np.random.default_rng(2)
    x, labels = rng.standard_normal((2, 2, 4, 4)).astype(np.float32), np.array([0, 2])
    assert_steps_equal(block, x, labels)


def test_fit_on_the_simulated_gpu(gpu_tuner, monkeypatch):
    """``python -m autotune train --device cuda``'s loop: batches moved, logits read back, the right table."""
    rng = np.random.default_rng(3)
    images = rng.standard_normal((6, 1, 32, 32)).astype(np.float32)
    classes = np.array([0, 1, 2, 0, 1, 2])
    monkeypatch.setitem(train.DATASETS, "tiny", (lambda seed: (images[:4], classes[:4], images[4:], classes[4:]),
                                                 ("lenet5",)))
    result = train.fit("lenet5", "tiny", epochs=1, batch_size=4, device="cuda", progress=False,
                       deterministic=True)                      # heuristic choices: the simulator times nothing
    assert result["device"] == "cuda" and 0 <= result["test_accuracy"] <= 1
    # five keys of the training batch of 4, two forward keys of the held-out batch of 2
    assert {c["algo"] for c in result["choices"]} == {"im2col"} and len(result["choices"]) == 7
