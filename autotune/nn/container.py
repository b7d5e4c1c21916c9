"""Containers: ``Sequential`` and ResNet's ``BasicBlock``.

Their backward passes run the children's in reverse order. Every child but the first is asked for its input
gradient (the previous child needs it); the first is asked only when the container's caller asks, so a
model's first layer skips its backward-data pass, as torch does for an input that does not require a
gradient. A residual sum passes its gradient unchanged to both branches, which add up at the input.

Fusion (``model.fuse``, ``inference.py``) is decided here, where the data flow is known: a container folds a
BatchNorm into the conv before it and makes a ReLU that follows the conv's epilogue; the absorbed children are
skipped in eval mode (``Module.absorbed``). It lets a conv keep its output buffer only when a later layer of
the model consumes that output within the pass (``final``: this container's output is the model's).

A BatchNorm that runs (one ``fuse`` did not fold) takes what follows it, on either device, in train and eval
mode alike: a ReLU runs in its kernel (and its backward applies the ReLU's mask), and ResNet's block adds the
shortcut and applies the ReLU in bn2's (``kernels.batch_norm``, ``gpu_norm_kernels.py``): no pass of their
own, no fresh arrays. On ResNet-20 b32's CPU training step the rest of the step (all but the convs) went
from 7.9-9.1 to 7.1-7.9 ms (three pairs of fresh processes, 2026-12-05). torch's modules (the bridge) are
not touched.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import gpu_layers, kernels
from .activation import Dropout, Identity, ReLU, relu_backward
from .conv import Conv2d
from .linear import Flatten
from .module import Module
from .norm import BatchNorm2d

#: layers whose eval output is their input or a view of it: a conv before them is as final as they are.
PASS_THROUGH = (Identity, Dropout, Flatten)


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
        children = [module for name, module in self.named_children() if not self.absorbed(name)]
        ran, i = [], 0
        while i < len(children):
            module, fuse = children[i], fuses_relu(children, i)
            x = module.forward(x, relu=True) if fuse else module(x)
            ran.append(module)
            i += 2 if fuse else 1
        self.save_for_backward(*ran)
        return x

    def _fuse(self, batchnorm, relu, buffers, final):
        children = list(self.named_children())
        for i, (name, conv) in enumerate(children):
            if not isinstance(conv, Conv2d):
                continue
            after = children[i + 1:]
            if batchnorm and after and isinstance(after[0][1], BatchNorm2d):
                conv.fold(after[0][1])
                self.absorb(after[0][0], conv, f"folded into {name}")
                after = after[1:]
            if relu and after and isinstance(after[0][1], ReLU):
                conv.relu_epilogue = True
                self.absorb(after[0][0], conv, f"{name}'s epilogue")
        absorbed = self.__dict__.get("_absorbed", {})
        live = [module for name, module in children if name not in absorbed]
        for i, module in enumerate(live):
            module._fuse(batchnorm, relu, buffers, final and all(isinstance(m, PASS_THROUGH) for m in live[i + 1:]))

    def backward_from(self, saved, grad, input_grad):
        for i in range(len(saved) - 1, -1, -1):          # the modules the forward pass ran, fused ones as one
            grad = saved[i].backward(grad, input_grad=input_grad or i > 0)
        return grad


class BasicBlock(Module):
    """ResNet's basic block (torchvision's names): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).

    ``downsample`` (a 1x1 strided conv and a BatchNorm, or None for the identity) matches the shortcut's
    shape to the residual's when the stride or the channel count changes. The one ``relu`` child is applied
    twice, as in torchvision; the block keeps its output for the backward pass itself (the second ReLU's
    gradient goes to the shortcut too).
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
        """The block on either device. A BatchNorm that runs takes what follows it (on the GPU, in train mode, two
        launches each, in eval mode one); on the CPU in eval mode ``fuse`` may have folded it into its conv."""
        shortcut = x if self.downsample is None else self.downsample(x)
        hidden = self.conv1(x)
        if not self.absorbed("bn1"):                  # bn1 with the ReLU fused
            hidden = self.bn1.forward(hidden, relu=True)
        elif not self.conv1.relu_runs():              # bn1 folded into conv1 (model.fuse), the ReLU apart
            hidden = self.relu(hidden)
        if self.conv2.relu_runs():                    # folded: conv2's epilogue adds the shortcut, then ReLU
            y = self.conv2.forward(hidden, residual=shortcut)
        elif self.absorbed("bn2"):
            y = self.relu(self.conv2(hidden) + shortcut)
        else:                                         # bn2 with the shortcut's sum and the ReLU fused
            y = self.bn2.forward(self.conv2(hidden), residual=shortcut, relu=True)
        self.save_for_backward(y)
        return y

    def _fuse(self, batchnorm, relu, buffers, final):
        """bn1 and bn2 fold into conv1 and conv2; with both switches, ReLU becomes conv1's epilogue and, after
        the shortcut is added, conv2's (whose output is then the block's)."""
        if batchnorm:
            for conv, bn in (("conv1", "bn1"), ("conv2", "bn2")):
                getattr(self, conv).fold(getattr(self, bn))
                self.absorb(bn, getattr(self, conv), f"folded into {conv}")
            if relu:
                self.conv1.relu_epilogue = self.conv2.relu_epilogue = True
                self.absorb("relu", self.conv2, "conv1's epilogue, and conv2's after the shortcut")
        self.conv1._fuse(batchnorm, relu, buffers, False)
        self.conv2._fuse(batchnorm, relu, buffers, final and self.conv2.relu_epilogue)
        if self.downsample is not None:
            self.downsample._fuse(batchnorm, relu, buffers, False)

    def backward_from(self, saved, dy, input_grad):
        (y,) = saved
        gpu = self.gpu_path(dy)
        dsum = relu_backward(y, dy, gpu)
        dhidden = self.conv2.backward(self.bn2.backward(dsum, input_grad=True), input_grad=True)
        # train mode folds nothing: bn1 ran with its ReLU fused, and its backward applies the ReLU's mask
        dx = self.conv1.backward(self.bn1.backward(dhidden, input_grad=True), input_grad=input_grad)
        if self.downsample is not None:
            dshort = self.downsample.backward(dsum, input_grad=input_grad)
        else:
            dshort = dsum if input_grad else None
        if not input_grad:
            return None
        return gpu_layers.add(dx, dshort) if gpu else gradient_sum(dx, dshort)


def gradient_sum(a, b):
    """a + b, the gradients of a residual block's two branches: in one Numba pass on both cores where both are
    contiguous float32 or float64 arrays of one shape and dtype (the CPU training path), else NumPy's sum."""
    if a.shape != b.shape or a.dtype != b.dtype or a.dtype not in (np.float32, np.float64) \
            or not (a.flags.c_contiguous and b.flags.c_contiguous):
        return a + b
    out = np.empty_like(a)
    kernels.add(a.reshape(-1), b.reshape(-1), out.reshape(-1))
    return out


def fuses_relu(children, i: int) -> bool:
    """True when child ``i`` is a BatchNorm2d followed by a ReLU, which its kernel then applies (its backward
    masks the gradient by its output)."""
    return isinstance(children[i], BatchNorm2d) and i + 1 < len(children) and isinstance(children[i + 1], ReLU)
