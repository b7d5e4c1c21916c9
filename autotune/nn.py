"""Inference layers on NumPy arrays, with PyTorch's parameter names, whose convolutions go through autotune.

    >>> from autotune import nn
    >>> net = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
    >>> y = net(np.zeros((1, 3, 32, 32), np.float32))        # the conv is dispatched by autotune.conv2d

Every layer computes exactly what its ``torch.nn`` namesake computes in ``eval()`` mode. Only ``Conv2d``
does heavy arithmetic; the others are whole-array NumPy (one strided view per kernel tap for pooling, an integral
image for adaptive pooling), never Python loops over pixels.

``Conv2d.algo`` picks who computes a convolution: ``None`` (the default) asks the autotuner (the module-level
one, or the layer's ``tuner``); an algorithm name forces ``convalgos.conv2d(..., algo=name)``; ``"reference"``
forces the float64 reference (its output is float64, and so is everything downstream); a callable with
``conv2d``'s signature (e.g. a wrapper of torch's) is called instead. ``use_algorithm``
sets it on every conv of a model for the length of a ``with`` block.
"""
from __future__ import annotations

import abc
import contextlib
import math
from collections import OrderedDict

import numpy as np

import convalgos
from convalgos import reference

import autotune

#: The pseudo-algorithm name that sends a conv to the float64 reference.
REFERENCE = "reference"


class StateDictError(KeyError):
    """A state dict that does not fit the module: missing, unexpected or mis-shaped entries, all listed."""

    def __str__(self) -> str:
        return self.args[0]


def as_numpy(value) -> np.ndarray:
    """A NumPy array from a NumPy array or a torch tensor (without importing torch)."""
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def _pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


class Module(abc.ABC):
    """A layer: named arrays (``parameters`` then ``buffers``) and named child modules, in order.

    Subclasses list their array attributes in ``parameters``/``buffers`` (an attribute set to None, such as
    a conv without bias, is left out of the state dict) and assign child modules as attributes.
    ``ignored_keys`` are names accepted by ``load_state_dict`` and dropped (BatchNorm's num_batches_tracked).
    """

    parameters: tuple[str, ...] = ()
    buffers: tuple[str, ...] = ()
    ignored_keys: tuple[str, ...] = ()

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.__dict__.setdefault("_children", OrderedDict())[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, x):
        return self.forward(x)

    @abc.abstractmethod
    def forward(self, x):
        """The layer's output for input ``x``."""

    def named_children(self):
        return iter(self.__dict__.get("_children", {}).items())

    def named_modules(self, prefix: str = ""):
        """(dotted name, module) for this module and every descendant, depth first, in order."""
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _own_arrays(self):
        for name in self.parameters + self.buffers:
            value = getattr(self, name)
            if value is not None:
                yield name, value

    def state_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Dotted PyTorch-style name -> array (the arrays themselves, not copies)."""
        return OrderedDict((f"{prefix}.{name}" if prefix else name, value)
                           for prefix, module in self.named_modules() for name, value in module._own_arrays())

    def load_state_dict(self, mapping) -> None:
        """Copy arrays (NumPy or torch tensors) into this module, cast to each array's current dtype.

        Raises StateDictError naming every missing, unexpected or mis-shaped key (and its shapes); nothing
        is copied unless everything fits.
        """
        own = self.state_dict()
        ignored = {f"{prefix}.{name}" if prefix else name
                   for prefix, module in self.named_modules() for name in module.ignored_keys}
        given = {key: as_numpy(value) for key, value in mapping.items()}
        problems = [f"missing key {k!r} (expected shape {own[k].shape})" for k in own if k not in given]
        problems += [f"unexpected key {k!r} (shape {v.shape})" for k, v in given.items()
                     if k not in own and k not in ignored]
        problems += [f"size mismatch for {k!r}: expected shape {own[k].shape}, got {given[k].shape}"
                     for k in own if k in given and given[k].shape != own[k].shape]
        if problems:
            raise StateDictError(f"load_state_dict into {type(self).__name__} failed:\n  " + "\n  ".join(problems))
        for prefix, module in self.named_modules():
            for name, value in list(module._own_arrays()):
                key = f"{prefix}.{name}" if prefix else name
                setattr(module, name, np.array(given[key], dtype=value.dtype))

    def astype(self, dtype) -> "Module":
        """Cast every array of every module to ``dtype`` in place; returns self."""
        for _, module in self.named_modules():
            for name, value in list(module._own_arrays()):
                setattr(module, name, value.astype(dtype))
        return self

    def __repr__(self) -> str:
        children = "".join(f"\n  ({name}): " + repr(child).replace("\n", "\n  ")
                           for name, child in self.named_children())
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self) -> str:
        return ""


def he_normal(rng, shape, fan_in: int, dtype) -> np.ndarray:
    """He (Kaiming) normal initialisation: N(0, 2 / fan_in), suited to ReLU networks."""
    w = rng.standard_normal(shape, dtype=np.float32)
    w *= np.float32(math.sqrt(2.0 / fan_in))
    return w.astype(dtype, copy=False)


class Conv2d(Module):
    """``torch.nn.Conv2d`` in inference: weight (K, C/groups, R, S), optional bias (K,).

    ``tuner``: an ``autotune.Tuner`` to dispatch through instead of the module-level one. ``algo``: see the
    module docstring (None: autotuned).
    """

    parameters = ("weight", "bias")

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, *, dtype="float32", rng=None, tuner=None):
        R, S = _pair(kernel_size)
        rng = np.random.default_rng(0) if rng is None else rng
        fan_in = in_channels // groups * R * S
        self.weight = he_normal(rng, (out_channels, in_channels // groups, R, S), fan_in, dtype)
        self.bias = np.zeros(out_channels, dtype) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.tuner, self.algo = tuner, None

    def forward(self, x):
        args = (self.weight, self.bias, self.stride, self.padding, self.dilation, self.groups)
        if self.algo is None:
            return (autotune if self.tuner is None else self.tuner).conv2d(x, *args)
        if callable(self.algo):
            return self.algo(x, *args)
        if self.algo == REFERENCE:
            return reference.conv2d(x.astype(np.float64), *(_float64(a) for a in args[:2]), *args[2:])
        return convalgos.conv2d(x, *args, algo=self.algo)

    def extra_repr(self) -> str:
        K, Cg, R, S = self.weight.shape
        return (f"{Cg * self.groups}, {K}, kernel_size=({R}, {S}), stride={self.stride}, padding={self.padding}"
                + (f", dilation={self.dilation}" if self.dilation != 1 else "")
                + (f", groups={self.groups}" if self.groups != 1 else "")
                + (", bias=False" if self.bias is None else ""))


def _float64(a):
    return None if a is None else a.astype(np.float64)


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


class BatchNorm2d(Module):
    """``torch.nn.BatchNorm2d`` in eval mode: y = (x - running_mean) / sqrt(running_var + eps) * weight + bias,
    applied as one fused per-channel scale and shift."""

    parameters = ("weight", "bias")
    buffers = ("running_mean", "running_var")
    ignored_keys = ("num_batches_tracked",)

    def __init__(self, num_features, eps=1e-5, *, dtype="float32"):
        self.weight = np.ones(num_features, dtype)
        self.bias = np.zeros(num_features, dtype)
        self.running_mean = np.zeros(num_features, dtype)
        self.running_var = np.ones(num_features, dtype)
        self.eps = eps

    def forward(self, x):
        scale = self.weight / np.sqrt(self.running_var + self.eps)
        shift = self.bias - self.running_mean * scale
        dt = np.result_type(x, scale)
        return x * scale.astype(dt)[:, None, None] + shift.astype(dt)[:, None, None]

    def extra_repr(self) -> str:
        return f"{self.weight.shape[0]}, eps={self.eps}"


class ReLU(Module):
    def forward(self, x):
        return np.maximum(x, 0)


class Identity(Module):
    def forward(self, x):
        return x


class Dropout(Identity):
    """``torch.nn.Dropout`` in eval mode: the identity (kept so layer indices match torchvision's)."""


class Flatten(Module):
    """``torch.nn.Flatten()``: (N, ...) -> (N, prod(...))."""

    def forward(self, x):
        return x.reshape(x.shape[0], -1)


class Linear(Module):
    """``torch.nn.Linear``: y = x @ weight.T + bias; weight (out, in)."""

    parameters = ("weight", "bias")

    def __init__(self, in_features, out_features, bias=True, *, dtype="float32", rng=None):
        rng = np.random.default_rng(0) if rng is None else rng
        self.weight = he_normal(rng, (out_features, in_features), in_features, dtype)
        self.bias = np.zeros(out_features, dtype) if bias else None

    def forward(self, x):
        y = x @ self.weight.T.astype(x.dtype, copy=False)
        return y if self.bias is None else y + self.bias.astype(x.dtype, copy=False)

    def extra_repr(self) -> str:
        return f"in_features={self.weight.shape[1]}, out_features={self.weight.shape[0]}"


def _pool_out(size: int, k: int, s: int, p: int, ceil_mode: bool) -> int:
    """PyTorch's pooling output size; in ceil mode the last window must start inside the input or left pad."""
    span = size + 2 * p - k
    out = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (out - 1) * s >= size + p:
        out -= 1
    return out


class _Pool2d(Module):
    """Shared window arithmetic: pad (plus the ceil-mode overhang), then fold the kernel taps' strided views."""

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False):
        self.kernel_size = _pair(kernel_size)
        self.stride = _pair(self.kernel_size if stride is None else stride)
        self.padding = _pair(padding)
        self.ceil_mode = ceil_mode
        for k, p in zip(self.kernel_size, self.padding):
            if p > k // 2:
                raise ValueError(f"padding should be at most half the kernel size, got padding={padding}, "
                                 f"kernel_size={kernel_size}")

    def _geometry(self, H, W):
        """Output size and the (before, after) padding per spatial axis, overhang included."""
        out, pads = [], []
        for size, k, s, p in zip((H, W), self.kernel_size, self.stride, self.padding):
            o = _pool_out(size, k, s, p, self.ceil_mode)
            if o < 1:
                raise ValueError(f"{type(self).__name__}: output size below 1 for input {H}x{W}")
            out.append(o)
            pads.append((p, max(p, (o - 1) * s + k - size - p)))
        return out, pads

    def _reduce(self, x, pads, out, fill, ufunc):
        """``ufunc`` (np.maximum or np.add) folded over every pooling window of x padded with ``fill``.

        One whole-array operation per kernel tap (i, j): the strided view of the padded input that tap sees.
        """
        xp = np.pad(x, ((0, 0), (0, 0)) + tuple(pads), constant_values=fill)
        (sh, sw), (Ho, Wo), (kh, kw) = self.stride, out, self.kernel_size
        taps = (xp[:, :, i:i + sh * (Ho - 1) + 1:sh, j:j + sw * (Wo - 1) + 1:sw] for i in range(kh) for j in range(kw))
        acc = next(taps).copy()
        for tap in taps:
            ufunc(acc, tap, out=acc)
        return acc

    def extra_repr(self) -> str:
        return (f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"
                + (", ceil_mode=True" if self.ceil_mode else ""))


class MaxPool2d(_Pool2d):
    """``torch.nn.MaxPool2d`` (dilation 1): the max over each window, padding counting as -inf."""

    def forward(self, x):
        out, pads = self._geometry(*x.shape[2:])
        return self._reduce(x, pads, out, -np.inf, np.maximum)


class AvgPool2d(_Pool2d):
    """``torch.nn.AvgPool2d``: the mean over each window.

    ``count_include_pad=True`` (PyTorch's default) divides by the part of the window inside the padded
    input; False divides by the part inside the unpadded input. Either divisor is the same window sum over a
    0/1 mask, so ceil mode's overhang (never counted) comes out right without special cases.
    """

    def __init__(self, kernel_size, stride=None, padding=0, ceil_mode=False, count_include_pad=True):
        super().__init__(kernel_size, stride, padding, ceil_mode)
        self.count_include_pad = count_include_pad

    def forward(self, x):
        (H, W), dt = x.shape[2:], x.dtype
        out, pads = self._geometry(H, W)
        sums = self._reduce(x.astype(np.float64), pads, out, 0, np.add)
        (ph, pw), counted = self.padding, np.ones((1, 1, H, W))
        if self.count_include_pad:
            counted = np.pad(counted, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=1)
            pads = [(0, a - p) for (_, a), p in zip(pads, (ph, pw))]
        divisor = self._reduce(counted, pads, out, 0, np.add)
        return (sums / divisor).astype(dt)


class AdaptiveAvgPool2d(Module):
    """``torch.nn.AdaptiveAvgPool2d``: output bin i averages rows floor(i*H/out) to ceil((i+1)*H/out) - 1
    (likewise columns). Each bin sum is four lookups in an integral image (computed in float64)."""

    def __init__(self, output_size):
        self.output_size = _pair(output_size)

    def forward(self, x):
        N, C, H, W = x.shape
        (rs, re), (cs, ce) = (_bins(size, out) for size, out in zip((H, W), self.output_size))
        integral = np.zeros((N, C, H + 1, W + 1))
        np.cumsum(np.cumsum(x, axis=2, dtype=np.float64), axis=3, out=integral[:, :, 1:, 1:])
        I = lambda r, c: integral[:, :, r[:, None], c[None, :]]   # noqa: E731
        sums = I(re, ce) - I(rs, ce) - I(re, cs) + I(rs, cs)
        area = (re - rs)[:, None] * (ce - cs)[None, :]
        return (sums / area).astype(x.dtype)

    def extra_repr(self) -> str:
        return f"output_size={self.output_size}"


def _bins(size: int, out: int):
    i = np.arange(out)
    return (i * size) // out, -((-(i + 1) * size) // out)


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
        for _, module in self.named_children():
            x = module(x)
        return x


class BasicBlock(Module):
    """ResNet's basic block (torchvision's names): relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)).

    ``downsample`` (a 1x1 strided conv and a BatchNorm, or None for the identity) matches the shortcut's
    shape to the residual's when the stride or the channel count changes.
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
        y = self.relu(self.bn1(self.conv1(x)))
        return self.relu(self.bn2(self.conv2(y)) + shortcut)
