"""Layers on NumPy arrays, with PyTorch's names and semantics, whose convolutions go through autotune.

    >>> from autotune import nn, optim, models
    >>> net = models.resnet20(); net.train()
    >>> opt = optim.SGD(net, lr=0.1, momentum=0.9, weight_decay=5e-4)
    >>> loss_fn = nn.CrossEntropyLoss()
    >>> loss = loss_fn(net(x), labels)                       # a float (on "cuda" a DeviceLoss: float(loss) reads it)
    >>> net.zero_grad(); net.backward(loss_fn.backward()); opt.step()
    >>> grads = net.grad_dict()                              # torch parameter name -> gradient array

Every layer computes what its ``torch.nn`` namesake computes, in train mode (batch statistics, dropout) and
eval mode (running statistics, no dropout), forward and backward. Modules start in eval mode (inference);
``model.train()`` switches training on. Only ``Conv2d`` does heavy arithmetic, through the dispatcher for each
of its three passes; the others are whole-array NumPy, never Python loops over pixels. A model takes NumPy
arrays or CPU torch tensors (read in place; a tensor in gives a tensor out).

In eval mode a conv holds its algorithm's prepared weight, and ``model.fuse()`` folds BatchNorm into the convs,
applies ReLU (and ResNet's shortcut) as their epilogue and keeps internal conv outputs (``model.unfuse()``,
``model.prepare_weights(False)`` switch them off; ``repr(model)`` shows them).

One file per kind: ``module`` (the base class: modes, gradients, state dicts), ``conv``, ``inference`` (the
conv's eval-mode path), ``norm``, ``activation``, ``pool``, ``linear``, ``loss``, ``container`` (Sequential,
BasicBlock).
"""
from .activation import Dropout, Identity, ReLU
from .container import BasicBlock, Sequential
from .conv import REFERENCE, Conv2d, conv_layers, use_algorithm
from .linear import Flatten, Linear
from .loss import CrossEntropyLoss
from .module import Module, StateDictError, as_numpy, he_normal
from .norm import BatchNorm2d
from .pool import AdaptiveAvgPool2d, AvgPool2d, MaxPool2d

__all__ = ["Module", "StateDictError", "as_numpy", "he_normal", "Conv2d", "REFERENCE", "conv_layers",
           "use_algorithm", "BatchNorm2d", "ReLU", "Identity", "Dropout", "Flatten", "Linear", "MaxPool2d",
           "AvgPool2d", "AdaptiveAvgPool2d", "Sequential", "BasicBlock", "CrossEntropyLoss"]
