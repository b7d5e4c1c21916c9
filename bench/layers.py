"""The benchmark layer set: named layers of real CNNs, as ConvParams, shared by every CPU benchmark."""
from __future__ import annotations

from convalgos import ConvParams


def layer(N, C, H, K, R, stride=1, padding=None, dilation=1, groups=1, W=None):
    pad = (R // 2) * dilation if padding is None else padding
    return ConvParams.from_shapes((N, C, H, W or H), (K, C // groups, R, R), stride=stride, padding=pad,
                                  dilation=dilation, groups=groups, dtype="float32")


VGG16 = {  # batch 1, 224x224, every distinct 3x3 layer
    "vgg16.conv1_1": layer(1, 3, 224, 64, 3),
    "vgg16.conv1_2": layer(1, 64, 224, 64, 3),
    "vgg16.conv2_1": layer(1, 64, 112, 128, 3),
    "vgg16.conv2_2": layer(1, 128, 112, 128, 3),
    "vgg16.conv3_1": layer(1, 128, 56, 256, 3),
    "vgg16.conv3_2": layer(1, 256, 56, 256, 3),
    "vgg16.conv4_1": layer(1, 256, 28, 512, 3),
    "vgg16.conv4_2": layer(1, 512, 28, 512, 3),
    "vgg16.conv5_1": layer(1, 512, 14, 512, 3),
}

RESNET18 = {  # batch 1, 224x224
    "resnet18.conv1": layer(1, 3, 224, 64, 7, stride=2, padding=3),
    "resnet18.layer1.conv": layer(1, 64, 56, 64, 3),
    "resnet18.layer2.0.conv1": layer(1, 64, 56, 128, 3, stride=2),
    "resnet18.layer2.0.downsample": layer(1, 64, 56, 128, 1, stride=2, padding=0),
    "resnet18.layer2.conv": layer(1, 128, 28, 128, 3),
    "resnet18.layer3.0.conv1": layer(1, 128, 28, 256, 3, stride=2),
    "resnet18.layer3.conv": layer(1, 256, 14, 256, 3),
    "resnet18.layer4.0.conv1": layer(1, 256, 14, 512, 3, stride=2),
    "resnet18.layer4.conv": layer(1, 512, 7, 512, 3),
}

RESNET20 = {  # CIFAR, batch 32, 32x32
    "resnet20.conv1": layer(32, 3, 32, 16, 3),
    "resnet20.stage1.conv": layer(32, 16, 32, 16, 3),
    "resnet20.stage2.0.conv1": layer(32, 16, 32, 32, 3, stride=2),
    "resnet20.stage2.conv": layer(32, 32, 16, 32, 3),
    "resnet20.stage3.0.conv1": layer(32, 32, 16, 64, 3, stride=2),
    "resnet20.stage3.conv": layer(32, 64, 8, 64, 3),
}

MOBILENET = {  # batch 1, 224x224: depthwise 3x3 and pointwise 1x1
    "mobilenet.dw1": layer(1, 32, 112, 32, 3, groups=32),
    "mobilenet.dw2.s2": layer(1, 64, 112, 64, 3, stride=2, groups=64),
    "mobilenet.dw3": layer(1, 128, 56, 128, 3, groups=128),
    "mobilenet.dw5": layer(1, 256, 28, 256, 3, groups=256),
    "mobilenet.dw7": layer(1, 512, 14, 512, 3, groups=512),
    "mobilenet.dw13": layer(1, 1024, 7, 1024, 3, groups=1024),
    "mobilenet.pw1": layer(1, 32, 112, 64, 1),
    "mobilenet.pw3": layer(1, 128, 56, 128, 1),
    "mobilenet.pw7": layer(1, 512, 14, 512, 1),
    "mobilenet.pw13": layer(1, 1024, 7, 1024, 1),
}

LARGE_KERNELS = {
    "5x5.c64.56": layer(1, 64, 56, 64, 5),
    "7x7.c64.56": layer(1, 64, 56, 64, 7),
    "11x11.c64.56": layer(1, 64, 56, 64, 11),
    "alexnet.conv1.11x11s4": layer(1, 3, 224, 64, 11, stride=4, padding=2),
    "dilated3x3.d2.c128.56": layer(1, 128, 56, 128, 3, dilation=2),
}

SEED = {  # the layer of the articles this project started from
    "seed.n64.c3.256": layer(64, 3, 256, 64, 3),
}

LAYER_SETS = {"vgg16": VGG16, "resnet18": RESNET18, "resnet20": RESNET20, "mobilenet": MOBILENET,
              "large_kernels": LARGE_KERNELS, "seed": SEED}
ALL_LAYERS = {name: p for layers in LAYER_SETS.values() for name, p in layers.items()}
