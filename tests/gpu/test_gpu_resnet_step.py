"""A ResNet-20 training step on the GPU path (under the simulator, the simulated GPU) equals the CPU's step
within float32's own error (``step_bounds.py``: normwise, at bounds that hold on every CPU): the loss, every
gradient, every parameter and running statistic after SGD; and the step's device operations, with the fused
layers, stay within the issue's budget (ResNet-20: 1405 before them, torch 232, target 350).

Tiny batch and image (2 x 3 x 8 x 8: layer3 runs at 2 x 2) keep it cheap. As in test_gpu_training.py, the
GPU's tuner runs im2col (its GEMMs in NumPy's matmul there, as cuBLAS's on hardware) for every pass, the CPU's
direct (``pin_cpu_convs``)."""
import numpy as np
import pytest

from autotune import models, nn, optim
from autotune.nn.device import move, to_host
from convalgos.cuda import count_ops
from step_bounds import (LOSS_BOUND, assert_first_sgd_step, assert_grads_close, assert_state_close,
                         pin_cpu_convs)

LR, WEIGHT_DECAY = 0.1, 5e-4

#: the fused layers' operations in one ResNet-20 step (19 BatchNorms and the shortcuts' 2, 9 blocks), and the
#: array-module copies (the layers' and im2col's)
LAYER_OPS = {
    "nn.bn_stats_kernel": 21, "nn.bn_normalize_kernel": 21, "nn.bn_grad_sums_kernel": 21,
    "nn.bn_grad_input_kernel": 21, "nn.relu_grad_kernel": 9,
    "cupy.add": 9 + 1,                                          # the blocks' sums' gradients, fc's bias
    "nn.adaptive_avg_pool_kernel": 1, "nn.adaptive_avg_pool_grad_kernel": 1, "nn.cross_entropy_kernel": 1,
    "nn.sgd_kernel": 1, "cupy.sum": 1,                                               # fc's db
    "cupy.copy": 23 + 20 + 21,    # the 21 convs' and fc's 2 gradients into place; im2col's W^T (backward_data of
}                                 # 20 convs) and dy regrouped by group (backward_filter, batch 2, of 21)




def test_a_resnet20_step_on_the_gpu_equals_the_cpu_step_within_the_launch_budget(gpu_tuner):
    rng = np.random.default_rng(0)
    x, labels = rng.standard_normal((2, 3, 8, 8)).astype(np.float32), np.array([3, 7])
    results = {}
    for device in ("cpu", "cuda"):
        model = models.resnet20(seed=0)
        model = (pin_cpu_convs(model) if device == "cpu" else model).to(device).train()
        before = {k: to_host(v).copy() for k, v in model.state_dict().items()}
        opt = optim.SGD(model, lr=LR, momentum=0.9, weight_decay=WEIGHT_DECAY)
        loss_fn = nn.CrossEntropyLoss().to(device)
        inputs, targets = move(x, device), move(labels, device)
        with count_ops() as ops:
            loss = loss_fn(model(inputs), targets)
            model.zero_grad()
            model.backward(loss_fn.backward())
            grads = {k: to_host(v).copy() for k, v in model.grad_dict().items()}
            opt.step()
        results[device] = float(loss), grads, before, {k: to_host(v) for k, v in model.state_dict().items()}, ops
    (loss_cpu, grads_cpu, before, state_cpu, _), (loss_gpu, grads_gpu, _, state_gpu, ops) = results.values()
    assert loss_gpu == pytest.approx(loss_cpu, rel=LOSS_BOUND)
    assert len(grads_cpu) == 65
    # layer1.0.conv1's [7, 12, 0, 2]: CPU -0.0068511, GPU -0.0068645, float64 -0.0068620 (a cancelling sum)
    assert_grads_close(grads_gpu, grads_cpu)
    assert_state_close(state_gpu, state_cpu, grads_cpu, LR)
    for device, (_, grads, _, state, _) in results.items():
        assert_first_sgd_step(before, grads, state, LR, WEIGHT_DECAY, device)
    assert {k: v for k, v in ops.by_name.items() if k.startswith(("nn.", "cupy."))} == LAYER_OPS
    assert ops.total <= 350
