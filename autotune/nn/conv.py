"""``Conv2d``: all three passes of a convolution go through the dispatcher (or a forced algorithm).

Forward ``y = conv(x, w) + b``; backward, given dy (``torch.nn.grad``'s names):

- input gradient   dx = conv2d_input(x.shape, w, dy)   (backward-data; skipped where no one needs it)
- weight gradient  dw = conv2d_weight(x, w.shape, dy)  (backward-filter)
- bias gradient    db = dy summed over N, H and W      (a plain sum: no algorithm to choose)

``Conv2d.algo`` picks who computes each pass: ``None`` (the default) asks the autotuner (the module-level
one, or the layer's ``tuner``), which tunes each pass under its own key; an algorithm name forces
``convalgos.conv2d / conv2d_input / conv2d_weight(..., algo=name)``; ``"reference"`` forces the float64
reference (its outputs are float64, and so is everything downstream); a callable with ``conv2d``'s signature
(e.g. a wrapper of torch's) computes the forward pass only. ``use_algorithm`` sets it on every conv of a model
for the length of a ``with`` block.
"""
from __future__ import annotations

import contextlib

import numpy as np

import convalgos
from convalgos import ConvParams, reference

import autotune

from .module import Module, channel_sum, he_normal, pair

#: The pseudo-algorithm name that sends a conv to the float64 reference.
REFERENCE = "reference"


def _reference_input(input_shape, weight, grad_output, stride, padding, dilation, groups):
    p = ConvParams.from_shapes(input_shape, weight.shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype=np.float64)
    return reference.backward_data(grad_output, weight, p)


def _reference_weight(input, weight_shape, grad_output, stride, padding, dilation, groups):
    p = ConvParams.from_shapes(input.shape, weight_shape, stride=stride, padding=padding, dilation=dilation,
                               groups=groups, dtype=np.float64)
    return reference.backward_filter(input, grad_output, p)


def _reference_forward(x, weight, bias, stride, padding, dilation, groups):
    as64 = (lambda a: None if a is None else a.astype(np.float64))
    return reference.conv2d(as64(x), as64(weight), as64(bias), stride, padding, dilation, groups)


#: pass function name (convalgos' and autotune's) -> the float64 reference with the same signature.
_REFERENCE_PASSES = {"conv2d": _reference_forward, "conv2d_input": _reference_input,
                     "conv2d_weight": _reference_weight}


class Conv2d(Module):
    """``torch.nn.Conv2d``: weight (K, C/groups, R, S), optional bias (K,).

    ``tuner``: an ``autotune.Tuner`` to dispatch through instead of the module-level one. ``algo``: see the
    module docstring (None: autotuned).
    """

    param_names = ("weight", "bias")

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, *, dtype="float32", rng=None, tuner=None):
        R, S = pair(kernel_size)
        rng = np.random.default_rng(0) if rng is None else rng
        fan_in = in_channels // groups * R * S
        self.weight = he_normal(rng, (out_channels, in_channels // groups, R, S), fan_in, dtype)
        self.bias = np.zeros(out_channels, dtype) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.tuner, self.algo = tuner, None

    def _layer(self):
        return self.stride, self.padding, self.dilation, self.groups

    def _pass(self, name: str, *args):
        """Run pass ``name`` ("conv2d", "conv2d_input" or "conv2d_weight") by whoever ``algo`` names."""
        if self.algo is None:
            return getattr(autotune if self.tuner is None else self.tuner, name)(*args)
        if isinstance(self.algo, str):
            if self.algo == REFERENCE:
                return _REFERENCE_PASSES[name](*args)
            return getattr(convalgos, name)(*args, algo=self.algo)
        if name != "conv2d":
            raise TypeError(f"Conv2d.algo={self.algo!r} is a callable, which computes the forward pass only; "
                            "the backward passes need algo=None, an algorithm name or 'reference'")
        return self.algo(*args)

    def forward(self, x):
        self.save_for_backward(x)
        return self._pass("conv2d", x, self.weight, self.bias, *self._layer())

    def backward_from(self, saved, dy, input_grad):
        (x,) = saved
        self.accumulate_grad("weight", self._pass("conv2d_weight", x, self.weight.shape, dy, *self._layer()))
        if self.bias is not None:
            self.accumulate_grad("bias", channel_sum(dy))
        if input_grad:
            return self._pass("conv2d_input", x.shape, self.weight, dy, *self._layer())
        return None

    def extra_repr(self) -> str:
        K, Cg, R, S = self.weight.shape
        return (f"{Cg * self.groups}, {K}, kernel_size=({R}, {S}), stride={self.stride}, padding={self.padding}"
                + (f", dilation={self.dilation}" if self.dilation != 1 else "")
                + (f", groups={self.groups}" if self.groups != 1 else "")
                + (", bias=False" if self.bias is None else ""))


def conv_layers(model: Module):
    """(dotted name, Conv2d) for every convolution of ``model``, in execution order of a plain forward."""
    return [(name, m) for name, m in model.named_modules() if isinstance(m, Conv2d)]


@contextlib.contextmanager
def use_algorithm(model: Module, algo):
    """Within the block, every conv of ``model`` runs ``algo`` (a name, "reference", a callable, or None)."""
    convs = [m for _, m in conv_layers(model)]
    saved = [m.algo for m in convs]
    for m in convs:
        m.algo = algo
    try:
        yield model
    finally:
        for m, old in zip(convs, saved):
            m.algo = old
