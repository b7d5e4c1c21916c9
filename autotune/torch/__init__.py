"""autotune.torch: a torch CNN through the dispatcher, its three passes under torch's autograd.

    >>> import torch, autotune, autotune.torch
    >>> model = autotune.torch.convert(model)     # every torch.nn.Conv2d: forward and both gradients dispatched
    >>> autotune.benchmark = True                 # as torch.backends.cudnn.benchmark = True
    >>> ...                                       # train with your own loop, optimizer and data loader
    >>> print(autotune.torch.report(model))       # per layer and pass: the choice, its time, the runner-up

- ``Conv2d``: ``torch.nn.Conv2d`` with the same constructor, parameters, state dict keys and repr, its passes
  dispatched (``module.py``); ``convert(model, tuner=None)`` / ``revert(model)`` switch a model's convs in
  place, keeping their parameter tensors, so an optimizer built before keeps working;
- ``conv2d(x, w, b, stride, padding, dilation, groups, tuner=None)``: the functional form, and the
  ``torch.autograd.Function`` under it (``function.py``), with tensors crossing zero-copy (``tensors.py``);
- what the dispatcher cannot serve (bfloat16, ``torch.autocast``, a CUDA pass without a GPU algorithm, a
  failure) is computed by torch's own conv, logged once per layer and counted (``fallback.py``);
- ``report(model)``: what each pass of each layer chose, its time and runner-up, and what fell back
  (``report.py``).

Importing this module imports torch; ``import autotune`` alone never does. Inside this package ``import
torch`` is the real torch (imports are absolute); run scripts from outside ``autotune/`` (``python -m``), or a
script's folder on ``sys.path`` may put this package where torch should be.
"""
from .function import conv2d
from .module import Conv2d, convert, revert
from .report import Report, report

__all__ = ["Conv2d", "convert", "revert", "conv2d", "report", "Report"]
