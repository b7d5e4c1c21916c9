"""Small CNNs built from ``autotune.nn``, with PyTorch's parameter names and seeded He initialisation.

    >>> from autotune import models
    >>> net = models.resnet18(seed=0)
    >>> logits = net(np.zeros((1,) + net.input_shape, np.float32))

Each builder takes ``num_classes``, ``seed`` (the initialisation is a pure function of it), ``dtype``
(float32 by default; float16 and float64 too) and ``tuner`` (an ``autotune.Tuner`` for every conv, or None
for the module-level one). Convolutions get He-normal weights N(0, 2/fan_in), BatchNorm the identity
statistics (weight 1, bias 0, mean 0, variance 1), Linear layers He-normal weights and zero bias. Every
model is a ``Sequential`` of named children in execution order and carries ``input_shape`` (C, H, W), the
size it was designed for. Models start in eval mode (inference); ``model.train()`` before training steps.

Architectures and names:

- ``lenet5``: 1x32x32 -> conv1 (6, 5x5) relu pool1 -> conv2 (16, 5x5) relu pool2 -> fc1 120 -> fc2 84 -> fc3.
  ReLU and 2x2 max pooling (the modern variant of LeCun 1998's tanh and subsampling). scikit-learn's 8x8
  digits meet its 32x32 input through ``autotune.data.load_digits``, which upsamples them 4x (bilinear).
- ``resnet20``: CIFAR ResNet (He et al. 2016, section 4.2), 3x32x32: conv1 3x3 16, then layer1..layer3 of
  3 BasicBlocks with 16/32/64 channels (the first block of layer2, layer3 with stride 2), global average
  pool, fc. The shortcut where the shape changes is option B (a 1x1 strided conv and BatchNorm, named
  ``downsample`` as in torchvision) rather than the paper's option A (zero-padding), so every shortcut is a
  convolution the autotuner sees.
- ``resnet18``: torchvision's exactly (``conv1``, ``bn1``, ``layer1.0.conv1``, ``layer2.0.downsample.0``,
  ``fc``), 3x224x224.
- ``vgg16``: torchvision's ``vgg16`` (no BatchNorm): ``features.0`` ... ``features.28`` convs, 5 max pools,
  ``avgpool`` to 7x7, ``classifier.0/3/6`` Linear layers, Dropout(0.5) at 2 and 5 (seeded masks in train mode).
- ``mobilenet_v1``: Howard et al. 2017, 3x224x224, width 1. Naming (ours; it follows the common PyTorch
  port): ``features.0`` is Sequential(conv 3x3 s2 32, bn, relu) so ``features.0.0.weight``,
  ``features.0.1.*``; ``features.1`` to ``features.13`` are depthwise-separable blocks Sequential(depthwise
  3x3 conv, bn, relu, pointwise 1x1 conv, bn, relu): ``features.i.0.weight`` (depthwise),
  ``features.i.3.weight`` (pointwise); then ``avgpool`` and ``fc``. Convs have no bias.
"""
from __future__ import annotations

from collections import OrderedDict

import numpy as np

from . import nn


class _Builder:
    """One seeded generator and the shared layer options, handed to every layer of a model in order."""

    def __init__(self, seed, dtype, tuner):
        self.rng, self.dtype, self.tuner = np.random.default_rng(seed), np.dtype(dtype).name, tuner
        self.seed, self.dropouts = seed, 0

    def conv(self, c, k, kernel, stride=1, padding=0, groups=1, bias=False):
        return nn.Conv2d(c, k, kernel, stride, padding, groups=groups, bias=bias, dtype=self.dtype,
                         rng=self.rng, tuner=self.tuner)

    def bn(self, c):
        return nn.BatchNorm2d(c, dtype=self.dtype)

    def linear(self, i, o):
        return nn.Linear(i, o, dtype=self.dtype, rng=self.rng)

    def dropout(self):
        """A Dropout whose mask generator is seeded by (model seed, its index): distinct, reproducible."""
        self.dropouts += 1
        return nn.Dropout(seed=[self.seed, self.dropouts])

    def block(self, c, k, stride):
        return nn.BasicBlock(c, k, stride, dtype=self.dtype, rng=self.rng, tuner=self.tuner)

    def stage(self, c, k, blocks, stride):
        return nn.Sequential(self.block(c, k, stride), *(self.block(k, k, 1) for _ in range(blocks - 1)))


def _model(layers: OrderedDict, input_shape) -> nn.Sequential:
    model = nn.Sequential(layers)
    model.input_shape = tuple(input_shape)
    return model


def lenet5(num_classes=10, *, seed=0, dtype="float32", tuner=None) -> nn.Sequential:
    b = _Builder(seed, dtype, tuner)
    return _model(OrderedDict(
        conv1=b.conv(1, 6, 5, bias=True), relu1=nn.ReLU(), pool1=nn.MaxPool2d(2),
        conv2=b.conv(6, 16, 5, bias=True), relu2=nn.ReLU(), pool2=nn.MaxPool2d(2),
        flatten=nn.Flatten(), fc1=b.linear(16 * 5 * 5, 120), relu3=nn.ReLU(),
        fc2=b.linear(120, 84), relu4=nn.ReLU(), fc3=b.linear(84, num_classes)), (1, 32, 32))


def resnet20(num_classes=10, *, seed=0, dtype="float32", tuner=None) -> nn.Sequential:
    b = _Builder(seed, dtype, tuner)
    return _model(OrderedDict(
        conv1=b.conv(3, 16, 3, padding=1), bn1=b.bn(16), relu=nn.ReLU(),
        layer1=b.stage(16, 16, 3, 1), layer2=b.stage(16, 32, 3, 2), layer3=b.stage(32, 64, 3, 2),
        avgpool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), fc=b.linear(64, num_classes)), (3, 32, 32))


def resnet18(num_classes=1000, *, seed=0, dtype="float32", tuner=None) -> nn.Sequential:
    b = _Builder(seed, dtype, tuner)
    return _model(OrderedDict(
        conv1=b.conv(3, 64, 7, stride=2, padding=3), bn1=b.bn(64), relu=nn.ReLU(),
        maxpool=nn.MaxPool2d(3, stride=2, padding=1),
        layer1=b.stage(64, 64, 2, 1), layer2=b.stage(64, 128, 2, 2),
        layer3=b.stage(128, 256, 2, 2), layer4=b.stage(256, 512, 2, 2),
        avgpool=nn.AdaptiveAvgPool2d(1), flatten=nn.Flatten(), fc=b.linear(512, num_classes)), (3, 224, 224))


#: VGG-16's feature extractor (torchvision's configuration "D"): channel counts, "M" for a 2x2 max pool.
VGG16_CONFIG = (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M")


def vgg16(num_classes=1000, *, seed=0, dtype="float32", tuner=None) -> nn.Sequential:
    b = _Builder(seed, dtype, tuner)
    features, c = [], 3
    for v in VGG16_CONFIG:
        if v == "M":
            features.append(nn.MaxPool2d(2))
        else:
            features += [b.conv(c, v, 3, padding=1, bias=True), nn.ReLU()]
            c = v
    classifier = nn.Sequential(b.linear(512 * 7 * 7, 4096), nn.ReLU(), b.dropout(),
                               b.linear(4096, 4096), nn.ReLU(), b.dropout(), b.linear(4096, num_classes))
    return _model(OrderedDict(features=nn.Sequential(*features), avgpool=nn.AdaptiveAvgPool2d(7),
                              flatten=nn.Flatten(), classifier=classifier), (3, 224, 224))


#: MobileNet-v1's depthwise-separable blocks: (output channels, stride of the depthwise conv).
MOBILENET_V1_BLOCKS = ((64, 1), (128, 2), (128, 1), (256, 2), (256, 1), (512, 2),
                       (512, 1), (512, 1), (512, 1), (512, 1), (512, 1), (1024, 2), (1024, 1))


def mobilenet_v1(num_classes=1000, *, seed=0, dtype="float32", tuner=None) -> nn.Sequential:
    b = _Builder(seed, dtype, tuner)
    features, c = [nn.Sequential(b.conv(3, 32, 3, stride=2, padding=1), b.bn(32), nn.ReLU())], 32
    for k, stride in MOBILENET_V1_BLOCKS:
        features.append(nn.Sequential(b.conv(c, c, 3, stride, 1, groups=c), b.bn(c), nn.ReLU(),
                                      b.conv(c, k, 1), b.bn(k), nn.ReLU()))
        c = k
    return _model(OrderedDict(features=nn.Sequential(*features), avgpool=nn.AdaptiveAvgPool2d(1),
                              flatten=nn.Flatten(), fc=b.linear(1024, num_classes)), (3, 224, 224))


#: name -> builder, the models ``python -m autotune --model`` knows.
MODELS = OrderedDict(lenet5=lenet5, resnet20=resnet20, resnet18=resnet18, vgg16=vgg16,
                     mobilenet_v1=mobilenet_v1)


def get_model(name: str, **kwargs) -> nn.Sequential:
    try:
        builder = MODELS[name]
    except KeyError:
        raise ValueError(f"unknown model {name!r}; known models: {', '.join(MODELS)}") from None
    return builder(**kwargs)
