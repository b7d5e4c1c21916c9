"""Containers: ``Sequential`` and ResNet's ``BasicBlock``.

Their backward passes run the children's in reverse order. Every child but the first is asked for its input
gradient (the previous child needs it); the first is asked only when the container's caller asks, so a
model's first layer skips its backward-data pass, as torch does for an input that does not require a
gradient. A residual sum passes its gradient unchanged to both branches, which add up at the input.
"""
from __future__ import annotations

from collections import OrderedDict

from .activation import ReLU, relu_backward
from .conv import Conv2d
from .module import Module
from .norm import BatchNorm2d


class Sequential(Module):
    """``torch.nn.Sequential``: children named "0", "1", ... or by an OrderedDict; applied in order."""

    def __init__(self, *modules):
        named = modules[0].items() if len(modules) == 1 and isinstance(modules[0], OrderedDict) else \
            ((str(i), m) for i, m in enumerate(modules))
        for name, module in named:
            setattr(self, name, module)

    def __getitem__(self, index):
        return list(self.__dict__["_children"].values())[index]

    def __len__(self):
        return len(self.__dict__.get("_children", {}))

    def forward(self, x):
        self.save_for_backward()
        for _, module in self.named_children():
            x = module(x)
        return x

    def backward_from(self, saved, grad, input_grad):
        children = [module for _, module in self.named_children()]
        for i in range(len(children) - 1, -1, -1):
            grad = children[i].backward(grad, input_grad=input_grad or i > 0)
        return grad


class BasicBlock(Module):
    """ResNet's basic block (torchvision's names): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).

    ``downsample`` (a 1x1 strided conv and a BatchNorm, or None for the identity) matches the shortcut's
    shape to the residual's when the stride or the channel count changes. The one ``relu`` child is applied
    twice, as in torchvision; the block keeps both of its outputs for the backward pass itself.
    """

    def __init__(self, in_channels, channels, stride=1, *, dtype="float32", rng=None, tuner=None):
        conv = dict(bias=False, dtype=dtype, rng=rng, tuner=tuner)
        self.conv1 = Conv2d(in_channels, channels, 3, stride, 1, **conv)
        self.bn1 = BatchNorm2d(channels, dtype=dtype)
        self.relu = ReLU()
        self.conv2 = Conv2d(channels, channels, 3, 1, 1, **conv)
        self.bn2 = BatchNorm2d(channels, dtype=dtype)
        self.downsample = None
        if stride != 1 or in_channels != channels:
            self.downsample = Sequential(Conv2d(in_channels, channels, 1, stride, **conv),
                                         BatchNorm2d(channels, dtype=dtype))

    def forward(self, x):
        shortcut = x if self.downsample is None else self.downsample(x)
        hidden = self.relu(self.bn1(self.conv1(x)))
        y = self.relu(self.bn2(self.conv2(hidden)) + shortcut)
        self.save_for_backward(hidden, y)
        return y

    def backward_from(self, saved, dy, input_grad):
        hidden, y = saved
        dsum = relu_backward(y, dy)
        dhidden = self.conv2.backward(self.bn2.backward(dsum, input_grad=True), input_grad=True)
        dx = self.conv1.backward(self.bn1.backward(relu_backward(hidden, dhidden), input_grad=True),
                                 input_grad=input_grad)
        if self.downsample is not None:
            dshort = self.downsample.backward(dsum, input_grad=input_grad)
        else:
            dshort = dsum if input_grad else None
        return dx + dshort if input_grad else None
