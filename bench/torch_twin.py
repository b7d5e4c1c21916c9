"""``torch_twin(model)``: a torch.nn module computing what an autotune.nn model computes, with the same
parameter names, so the model's state dict loads into it (the benchmarks' torch peer, same weights)."""
from __future__ import annotations

from collections import OrderedDict

from autotune import nn


def torch_twin(model):
    """A torch.nn module computing what ``model`` (an autotune.nn model) computes, with the same parameter
    names, so the model's state dict loads into it."""
    import torch
    tnn = torch.nn

    class Block(tnn.Module):
        """torchvision's BasicBlock, built from the twins of our block's children."""

        def __init__(self, children):
            super().__init__()
            for name, child in children.items():
                self.add_module(name, child)
            if "downsample" not in children:
                self.downsample = None

        def forward(self, x):
            shortcut = x if self.downsample is None else self.downsample(x)
            hidden = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(hidden)) + shortcut)

    def twin(m):
        children = OrderedDict((name, twin(child)) for name, child in m.named_children())
        if isinstance(m, nn.BasicBlock):
            return Block(children)
        if isinstance(m, nn.Sequential):
            return tnn.Sequential(children)
        if isinstance(m, nn.Conv2d):
            K, Cg, R, S = m.weight.shape
            return tnn.Conv2d(Cg * m.groups, K, (R, S), m.stride, m.padding, m.dilation, m.groups,
                              bias=m.bias is not None)
        if isinstance(m, nn.BatchNorm2d):
            return tnn.BatchNorm2d(len(m.weight), m.eps, m.momentum)
        if isinstance(m, nn.Linear):
            return tnn.Linear(m.weight.shape[1], m.weight.shape[0], bias=m.bias is not None)
        if isinstance(m, nn.MaxPool2d):
            return tnn.MaxPool2d(m.kernel_size, m.stride, m.padding, ceil_mode=m.ceil_mode)
        if isinstance(m, nn.AvgPool2d):
            return tnn.AvgPool2d(m.kernel_size, m.stride, m.padding, m.ceil_mode, m.count_include_pad)
        if isinstance(m, nn.AdaptiveAvgPool2d):
            return tnn.AdaptiveAvgPool2d(m.output_size)
        if isinstance(m, nn.Dropout):
            return tnn.Dropout(m.p)             # its masks differ from ours: compare the two in eval mode only
        simple = {nn.ReLU: tnn.ReLU, nn.Flatten: tnn.Flatten, nn.Identity: tnn.Identity}
        if type(m) in simple:
            return simple[type(m)]()
        raise TypeError(f"torch_twin knows the layers of autotune.models, not {type(m).__name__}")
    return twin(model)
