"""``Conv2d``, a ``torch.nn.Conv2d`` whose passes go through the dispatcher, and ``convert`` / ``revert``.

``convert(model)`` changes the class of every plain ``torch.nn.Conv2d`` inside ``model`` to ``Conv2d``, in
place, as ``torch.nn.utils.parametrize`` does for its parametrised modules: each layer stays the same object
with the same parameter tensors, buffers and hooks, so an optimizer built before, a reference to a layer and
a hook handle keep working, and the state dict's keys are unchanged. ``revert`` changes them back. A subclass
of ``torch.nn.Conv2d`` (its own forward, a parametrisation, a lazy conv) is left as it is.
"""
from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from .function import conv2d
from .record import LayerRecord


class Conv2d(torch.nn.Conv2d):
    """``torch.nn.Conv2d`` (the same constructor, parameters, state dict keys and repr) whose forward pass and
    both gradients go through the dispatcher: ``tuner`` (an ``autotune.Tuner``; None, the default, is the
    module-level one). ``record`` counts its calls per pass for ``autotune.torch.report``."""

    def __init__(self, *args, tuner=None, **kwargs):
        super().__init__(*args, **kwargs)
        self._adopt(tuner, "")

    def _adopt(self, tuner, name: str) -> None:
        self.tuner, self.record = tuner, LayerRecord(name)

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        padding = self.padding
        if self.padding_mode != "zeros":           # as torch: pad by the mode, then convolve unpadded
            input = F.pad(input, self._reversed_padding_repeated_twice, mode=self.padding_mode)
            padding = 0
        return conv2d(input, self.weight, self.bias, self.stride, padding, self.dilation, self.groups,
                      tuner=self.tuner, record=self.record)

    def __deepcopy__(self, memo):
        """A copy with its own parameters and record, dispatching through the same tuner (a Tuner holds locks
        and a table that copies need not duplicate)."""
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        for name, value in self.__dict__.items():
            new.__dict__[name] = value if name == "tuner" else copy.deepcopy(value, memo)
        return new


def convert(module: torch.nn.Module, *, tuner=None) -> torch.nn.Module:
    """Make every plain ``torch.nn.Conv2d`` in ``module`` (itself included, nested at any depth) an
    ``autotune.torch.Conv2d`` dispatching through ``tuner``, in place; returns ``module``. Layers already
    converted keep their tuner."""
    for name, m in module.named_modules():
        if type(m) is torch.nn.Conv2d:
            m.__class__ = Conv2d
            m._adopt(tuner, name or type(module).__name__)
    return module


def revert(module: torch.nn.Module) -> torch.nn.Module:
    """Make every ``autotune.torch.Conv2d`` in ``module`` a plain ``torch.nn.Conv2d`` again, in place; returns
    ``module``."""
    for m in module.modules():
        if type(m) is Conv2d:
            m.__class__ = torch.nn.Conv2d
            del m.tuner, m.record
    return module
