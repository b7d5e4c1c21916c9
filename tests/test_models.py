"""autotune.models: autotuned output against the float64 reference, and logits against plain-torch rebuilds.

Sizes are kept small (batch 1, 32x32 or 64x64) so the whole file runs in well under a minute; every
architecture accepts them (ResNet-18, VGG-16 and MobileNet end in adaptive pooling).
"""
import functools

import numpy as np
import pytest

import autotune
from autotune import models, nn
from convalgos import ALGORITHMS
from convalgos.reference import normwise_error
from float32_bounds import chosen_bound, within

#: model -> the (C, H, W) input the tests use.
TEST_INPUT = {"lenet5": (1, 32, 32), "resnet20": (3, 32, 32), "resnet18": (3, 64, 64), "vgg16": (3, 32, 32),
              "mobilenet_v1": (3, 64, 64)}


@functools.lru_cache(maxsize=None)
def built(name):
    """One instance per architecture for the whole file (VGG-16's 138M weights take seconds to draw)."""
    return models.get_model(name, seed=3)


@functools.lru_cache(maxsize=None)
def tuner_for(name):
    """One benchmark-mode Tuner per architecture (3 best-ranked candidates, 0.1 s of timing per key, to keep
    the file fast; tests/test_agreement.py checks every algorithm on every kind of layer); the torch
    test reuses what the reference test tuned."""
    return autotune.Tuner(benchmark=True, benchmark_limit=3, time_budget=0.1)


def with_tuner(model, tuner):
    for _, conv in nn.conv_layers(model):
        conv.tuner = tuner
    return model


def seeded_input(model_name, batch=1, seed=0):
    return np.random.default_rng(seed).standard_normal((batch,) + TEST_INPUT[model_name]).astype(np.float32)


def randomise_batchnorm(model, seed=1):
    """Non-trivial inference statistics, so BatchNorm is really tested (init gives the identity)."""
    rng = np.random.default_rng(seed)
    for _, m in model.named_modules():
        if isinstance(m, nn.BatchNorm2d):
            c = m.weight.shape[0]
            m.weight[:] = rng.uniform(0.5, 1.5, c)
            m.bias[:] = rng.uniform(-0.2, 0.2, c)
            m.running_mean[:] = rng.uniform(-0.2, 0.2, c)
            m.running_var[:] = rng.uniform(0.5, 2.0, c)


@pytest.mark.parametrize("name", list(models.MODELS))
def test_autotuned_model_equals_reference_model(name):
    tuner = tuner_for(name)
    model = with_tuner(built(name), tuner)
    randomise_batchnorm(model)
    x = seeded_input(name)
    y = model(x)
    with nn.use_algorithm(model, nn.REFERENCE):
        ref = model(x)
    chosen = {entry.algo for entry in tuner.dispatch_table()}
    assert chosen and chosen <= set(ALGORITHMS)
    # First order, each conv adds at most its algorithm's tolerance (normwise) to the output's error.
    bound = len(nn.conv_layers(model)) * max(ALGORITHMS[a].tolerance["float32"] for a in chosen) + 1e-5
    assert y.dtype == np.float32 and ref.dtype == np.float64
    assert normwise_error(y, ref) <= bound, (chosen, normwise_error(y, ref), bound)


def test_seeded_init_is_reproducible_and_he_scaled():
    a, b, c = models.resnet20(seed=5), models.resnet20(seed=5), models.resnet20(seed=6)
    for k, v in a.state_dict().items():
        np.testing.assert_array_equal(v, b.state_dict()[k])
    assert not np.array_equal(a.state_dict()["conv1.weight"], c.state_dict()["conv1.weight"])
    w = models.resnet18().state_dict()["layer4.0.conv2.weight"]   # fan_in 512*9
    assert w.std() == pytest.approx(np.sqrt(2 / (512 * 9)), rel=0.02)


def test_dtype_and_num_classes():
    model = models.lenet5(num_classes=3, dtype="float64")
    assert all(v.dtype == np.float64 for v in model.state_dict().values())
    with nn.use_algorithm(model, nn.REFERENCE):
        assert model(np.zeros((2, 1, 32, 32))).shape == (2, 3)


def test_unknown_model_lists_the_known_ones():
    with pytest.raises(ValueError, match="unknown model 'alexnet'; known models: lenet5, resnet20, resnet18"):
        models.get_model("alexnet")


def test_torchvision_names():
    r18 = models.resnet18().state_dict()
    for key in ["conv1.weight", "bn1.running_var", "layer1.0.conv1.weight", "layer2.0.downsample.0.weight",
                "layer2.0.downsample.1.running_mean", "layer4.1.bn2.bias", "fc.weight", "fc.bias"]:
        assert key in r18
    assert len(r18) == 102          # torchvision's resnet18 state_dict has 122 with 20 num_batches_tracked
    vgg = built("vgg16").state_dict()
    assert [k for k in vgg if k.endswith("weight")] == [f"features.{i}.weight" for i in
                                                        (0, 2, 5, 7, 10, 12, 14, 17, 19, 21, 24, 26, 28)] + \
        ["classifier.0.weight", "classifier.3.weight", "classifier.6.weight"]


# ---- plain torch rebuilds (no torchvision), written from the papers / torchvision's layout -----------------
def torch_models():
    torch = pytest.importorskip("torch")
    tnn = torch.nn

    class Block(tnn.Module):
        def __init__(self, c, k, stride):
            super().__init__()
            self.conv1 = tnn.Conv2d(c, k, 3, stride, 1, bias=False)
            self.bn1 = tnn.BatchNorm2d(k)
            self.relu = tnn.ReLU()
            self.conv2 = tnn.Conv2d(k, k, 3, 1, 1, bias=False)
            self.bn2 = tnn.BatchNorm2d(k)
            self.downsample = None
            if stride != 1 or c != k:
                self.downsample = tnn.Sequential(tnn.Conv2d(c, k, 1, stride, bias=False), tnn.BatchNorm2d(k))

        def forward(self, x):
            identity = x if self.downsample is None else self.downsample(x)
            out = self.relu(self.bn1(self.conv1(x)))
            return self.relu(self.bn2(self.conv2(out)) + identity)

    class ResNet(tnn.Module):
        def __init__(self, widths, blocks, stem, num_classes):
            super().__init__()
            if stem == "imagenet":
                self.conv1 = tnn.Conv2d(3, widths[0], 7, 2, 3, bias=False)
                self.maxpool = tnn.MaxPool2d(3, 2, 1)
            else:
                self.conv1 = tnn.Conv2d(3, widths[0], 3, 1, 1, bias=False)
                self.maxpool = tnn.Identity()
            self.bn1 = tnn.BatchNorm2d(widths[0])
            self.relu = tnn.ReLU()
            c = widths[0]
            for i, k in enumerate(widths):
                stride = 1 if i == 0 else 2
                layer = [Block(c, k, stride)] + [Block(k, k, 1) for _ in range(blocks - 1)]
                setattr(self, f"layer{i + 1}", tnn.Sequential(*layer))
                c = k
            self.layers = len(widths)
            self.avgpool = tnn.AdaptiveAvgPool2d(1)
            self.fc = tnn.Linear(c, num_classes)

        def forward(self, x):
            x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
            for i in range(self.layers):
                x = getattr(self, f"layer{i + 1}")(x)
            return self.fc(torch.flatten(self.avgpool(x), 1))

    class VGG16(tnn.Module):
        def __init__(self):
            super().__init__()
            layers, c = [], 3
            for v in [64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"]:
                if v == "M":
                    layers.append(tnn.MaxPool2d(2, 2))
                else:
                    layers += [tnn.Conv2d(c, v, 3, padding=1), tnn.ReLU(inplace=True)]
                    c = v
            self.features = tnn.Sequential(*layers)
            self.avgpool = tnn.AdaptiveAvgPool2d((7, 7))
            self.classifier = tnn.Sequential(tnn.Linear(512 * 49, 4096), tnn.ReLU(True), tnn.Dropout(),
                                             tnn.Linear(4096, 4096), tnn.ReLU(True), tnn.Dropout(),
                                             tnn.Linear(4096, 1000))

        def forward(self, x):
            return self.classifier(torch.flatten(self.avgpool(self.features(x)), 1))

    class MobileNetV1(tnn.Module):
        def __init__(self):
            super().__init__()

            def conv_bn(c, k, stride):
                return tnn.Sequential(tnn.Conv2d(c, k, 3, stride, 1, bias=False), tnn.BatchNorm2d(k), tnn.ReLU())

            def conv_dw(c, k, stride):
                return tnn.Sequential(tnn.Conv2d(c, c, 3, stride, 1, groups=c, bias=False), tnn.BatchNorm2d(c),
                                      tnn.ReLU(), tnn.Conv2d(c, k, 1, bias=False), tnn.BatchNorm2d(k), tnn.ReLU())

            self.features = tnn.Sequential(
                conv_bn(3, 32, 2), conv_dw(32, 64, 1), conv_dw(64, 128, 2), conv_dw(128, 128, 1),
                conv_dw(128, 256, 2), conv_dw(256, 256, 1), conv_dw(256, 512, 2),
                *[conv_dw(512, 512, 1) for _ in range(5)], conv_dw(512, 1024, 2), conv_dw(1024, 1024, 1))
            self.avgpool = tnn.AdaptiveAvgPool2d(1)
            self.fc = tnn.Linear(1024, 1000)

        def forward(self, x):
            return self.fc(torch.flatten(self.avgpool(self.features(x)), 1))

    class LeNet5(tnn.Module):
        def __init__(self):
            super().__init__()
            self.conv1, self.pool1 = tnn.Conv2d(1, 6, 5), tnn.MaxPool2d(2)
            self.conv2, self.pool2 = tnn.Conv2d(6, 16, 5), tnn.MaxPool2d(2)
            self.fc1, self.fc2, self.fc3 = tnn.Linear(400, 120), tnn.Linear(120, 84), tnn.Linear(84, 10)

        def forward(self, x):
            x = self.pool2(torch.relu(self.conv2(self.pool1(torch.relu(self.conv1(x))))))
            x = torch.relu(self.fc1(torch.flatten(x, 1)))
            return self.fc3(torch.relu(self.fc2(x)))

    return torch, {"lenet5": LeNet5, "resnet20": lambda: ResNet((16, 32, 64), 3, "cifar", 10),
                   "resnet18": lambda: ResNet((64, 128, 256, 512), 2, "imagenet", 1000), "vgg16": VGG16,
                   "mobilenet_v1": MobileNetV1}


@pytest.mark.parametrize("name", list(models.MODELS))
def test_torch_state_dict_loads_and_gives_the_same_logits(name):
    torch, builders = torch_models()
    torch.manual_seed(0)
    theirs = builders[name]().eval()
    with torch.no_grad():                      # non-trivial BatchNorm statistics
        for m in theirs.modules():
            if isinstance(m, torch.nn.BatchNorm2d):
                m.weight.uniform_(0.5, 1.5), m.bias.uniform_(-0.2, 0.2)
                m.running_mean.uniform_(-0.2, 0.2), m.running_var.uniform_(0.5, 2.0)
    ours = with_tuner(built(name), tuner_for(name))
    ours.load_state_dict(theirs.state_dict())  # torch tensors, num_batches_tracked included
    x = seeded_input(name)
    with torch.no_grad():
        expected = theirs(torch.from_numpy(x)).numpy()
    got = ours(x)
    assert got.shape == expected.shape and got.dtype == np.float32
    # the race's choices are the machine's: each conv adds at most its algorithm's tolerance, torch's a plain sum's
    tuner = nn.conv_layers(ours)[0][1].tuner
    assert within(got, expected, len(nn.conv_layers(ours)) * chosen_bound(tuner)), normwise_error(got, expected)
    # and back: our state dict loads into torch with strict names
    missing = theirs.load_state_dict({k: torch.from_numpy(v) for k, v in ours.state_dict().items()},
                                     strict=False)
    assert not missing.unexpected_keys and all(k.endswith("num_batches_tracked") for k in missing.missing_keys)


# ---- torch tensors in, torch tensors out ---------------------------------------------------------------------
def test_models_take_torch_tensors_zero_copy():
    torch = pytest.importorskip("torch")
    net = models.lenet5(tuner=autotune.Tuner())
    x = torch.randn(2, 1, 32, 32)
    y = net(x)
    assert isinstance(y, torch.Tensor) and y.dtype == torch.float32 and y.shape == (2, 10)
    np.testing.assert_array_equal(y.numpy(), net(x.numpy()))
    assert nn.Flatten()(x).data_ptr() == x.data_ptr()                  # read in place, handed back in place
    net.train()
    loss_fn = nn.CrossEntropyLoss()
    loss = loss_fn(net(x), torch.tensor([1, 2]))
    grad = loss_fn.backward()
    assert isinstance(loss, float) and isinstance(grad, torch.Tensor)
    dx = net.backward(grad, input_grad=True)
    assert isinstance(dx, torch.Tensor) and dx.shape == x.shape
    net.load_state_dict({k: torch.from_numpy(v) for k, v in net.state_dict().items()})
