"""How close a training step on the GPU path must come to the CPU's: float32's own error, on every machine.

Which CPU kernels and algorithms run, and so how each sum rounds, depends on the machine (its vector width,
its tuner's choices), so an element compared at a fixed tolerance is a coin toss on the CPU it was not written
on (issue 40: atol 1e-6 on a parameter after SGD, which is the gradients' drift times the learning rate). The CPU
peer's convolutions are pinned to ``direct`` (``pin_cpu_convs``: the plainest sums, as the GPU's are pinned to
im2col), since a Winograd the CPU's heuristic may pick elsewhere is allowed 1e-4 per forward pass: with the
choices drawn at random (conftest.py), the CPU's loss moved 2.1e-6 from the float64 run's. Every bound here is
normwise (``normwise_error``: max|a - b| / max|b|, per tensor):

- the loss: LOSS_BOUND relative, a few times the two devices' drifts summed (each within 3e-7 of the float64
  run's, ResNet-20; 4.7e-7 apart);
- gradients: GRAD_BOUND, a few times float32's drift from a float64 run (ResNet-20 at 2 x 3 x 8 x 8: CPU 7.4e-6,
  GPU path 8.1e-6, 5.2e-6 apart): an element that is a sum of terms ~100x its size carries that noise;
- parameters after SGD: p - lr * (g + wd * p) (the first step: momentum's buffer is that gradient) moves by lr
  times the gradients' difference, so each tensor's bound follows from GRAD_BOUND,
  lr * GRAD_BOUND * max|g| / max|p| + UPDATE_ROUNDING; and each device's update is checked against its own
  gradients' update computed in float64, to UPDATE_ROUNDING elementwise (the optimizer's roundings alone);
- running statistics: sums over the forward's activations, the gradients' inputs: GRAD_BOUND (measured 1.3e-6
  from a float64 run on either device).
"""
import numpy as np

import autotune
from autotune.heuristics import Heuristics
from autotune.nn import conv_layers
from convalgos.reference import normwise_error

LOSS_BOUND = 2e-6
GRAD_BOUND = 5e-5
#: the SGD update's own roundings (a product and two sums in float32), in units of |p| + lr * |g|
UPDATE_ROUNDING = 4 * float(np.finfo(np.float32).eps)


def pin_cpu_convs(model):
    """``model`` (on the CPU) with every conv through a Tuner that runs ``direct``; returns it."""
    tuner = autotune.Tuner(heuristics=Heuristics({"rules": [{"name": "direct (pinned)", "when": {},
                                                             "order": ["direct"]}]}))
    for _, conv in conv_layers(model):
        conv.tuner = tuner
    return model


def assert_grads_close(grads_gpu: dict, grads_cpu: dict) -> None:
    assert grads_gpu.keys() == grads_cpu.keys()
    errors = {name: normwise_error(grads_gpu[name], grad) for name, grad in grads_cpu.items()}
    assert max(errors.values()) < GRAD_BOUND, errors


def assert_state_close(state_gpu: dict, state_cpu: dict, grads_cpu: dict, lr: float) -> None:
    """Every parameter (a key of ``grads_cpu``) and running statistic after the step, normwise."""
    assert state_gpu.keys() == state_cpu.keys()
    for name, value in state_cpu.items():
        error = normwise_error(state_gpu[name], value)
        if name in grads_cpu:
            bound = lr * GRAD_BOUND * np.max(np.abs(grads_cpu[name])) / np.max(np.abs(value)) + UPDATE_ROUNDING
        else:
            bound = GRAD_BOUND
        assert error <= bound, f"{name}: normwise {error:.3g} over {bound:.3g}"


def assert_first_sgd_step(before: dict, grads: dict, after: dict, lr: float, weight_decay: float, device="") -> None:
    """``after`` is SGD's first step from ``before`` with ``grads``, computed in float64, to UPDATE_ROUNDING."""
    for name, grad in grads.items():
        p, g = before[name].astype(np.float64), grad.astype(np.float64)
        expected = p - lr * (g + weight_decay * p)
        scale = np.abs(p) + lr * np.abs(g) + np.finfo(np.float32).tiny
        worst = np.max(np.abs(after[name] - expected) / scale)
        assert worst <= UPDATE_ROUNDING, f"{device} {name}: {worst:.3g} against {UPDATE_ROUNDING:.3g}"
