"""``Module``: named parameters, buffers and children in order, train/eval modes, gradients, state dicts.

A layer keeps what its backward pass needs only while it is in train mode (``model.train()``), so inference
holds no activations. Parameter gradients accumulate, as in torch, until ``zero_grad()`` drops them.

Eval mode's fast path (``inference.py``): ``prepare_weights(enabled)``, ``fuse(batchnorm, relu, buffers)`` and
``unfuse()`` switch it for a module and its descendants; ``drop_prepared()`` drops what it derived from the
weights (and makes them writeable again): every method here that changes weights or modes calls it.

``to("cuda")`` / ``to("cpu")`` move every array (``device.py``): on "cuda" a layer runs its GPU kernels
(``gpu_*kernels.py``) instead of its CPU kernels (``gpu_path``), and with an optimizer the parameters and their
gradients live in flat arrays (``gpu_flat.py``).
"""
from __future__ import annotations

import abc
import math
from collections import OrderedDict

import numpy as np

from convalgos.arrays import is_cupy_array
from convalgos.interop import from_arrays, to_arrays

from .device import check_device, mismatch, move
from .gpu_flat import drop_flat, into_kept_grad


class StateDictError(KeyError):
    """A state dict that does not fit the module: missing, unexpected or mis-shaped entries, all listed."""

    def __str__(self) -> str:
        return self.args[0]


def as_numpy(value) -> np.ndarray:
    """A NumPy array from a NumPy or CuPy array or a torch tensor (without importing torch)."""
    if is_cupy_array(value):
        return value.get()
    if hasattr(value, "detach") and hasattr(value, "cpu"):
        value = value.detach().cpu().numpy()
    return np.asarray(value)


def pair(value) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else tuple(value)


def he_normal(rng, shape, fan_in: int, dtype) -> np.ndarray:
    """He (Kaiming) normal initialisation: N(0, 2 / fan_in), suited to ReLU networks."""
    w = rng.standard_normal(shape, dtype=np.float32)
    w *= np.float32(math.sqrt(2.0 / fan_in))
    return w.astype(dtype, copy=False)


def channel_sum(a: np.ndarray) -> np.ndarray:
    """Sum of an (N, C, ...) array over every axis but C: contiguous rows first (pairwise summation), then N."""
    return a.reshape(a.shape[0], a.shape[1], -1).sum(axis=2).sum(axis=0)


class Module(abc.ABC):
    """A layer: named arrays (``param_names`` then ``buffer_names``) and named child modules, in order.

    Subclasses list their array attributes in ``param_names``/``buffer_names`` (an attribute set to None, such
    as a conv without bias, is left out of the state dict) and assign child modules as attributes.
    ``ignored_keys`` are names accepted by ``load_state_dict`` and dropped (BatchNorm's num_batches_tracked).

    A subclass writes ``forward(x)``, calling ``self.save_for_backward(...)`` with what its gradient needs,
    and ``backward_from(saved, grad_output, input_grad)``. Unlike torch, a module starts in eval mode: this
    library began as inference only, and training is opt-in (``model.train()``).
    """

    param_names: tuple[str, ...] = ()
    buffer_names: tuple[str, ...] = ()
    ignored_keys: tuple[str, ...] = ()
    training = False
    device = "cpu"
    _saved = None

    def __setattr__(self, name, value):
        if isinstance(value, Module):
            self.__dict__.setdefault("_children", OrderedDict())[name] = value
        object.__setattr__(self, name, value)

    def __call__(self, x):
        """The layer's output; a CPU torch tensor is read in place (DLPack) and the output is a tensor."""
        (x,), torch_in = to_arrays(x)
        if self.param_names and self.gpu_path(x):
            problem = mismatch(self, x)
            if problem:
                raise TypeError(problem)
        return from_arrays(self.forward(x), torch_in)

    def gpu_path(self, x) -> bool:
        """True when this layer computes with array-module code (on "cuda", or given a CuPy array), False when
        with its CPU kernels (``device.py``)."""
        return self.device != "cpu" or (type(x) is not np.ndarray and is_cupy_array(x))

    @abc.abstractmethod
    def forward(self, x):
        """The layer's output for input ``x``."""

    # ---- training -------------------------------------------------------------------------------------------
    def train(self, mode: bool = True) -> "Module":
        """Train mode (batch statistics, dropout, saving for backward) for this module and its descendants."""
        for _, module in self.named_modules():
            module.training = bool(mode)
            module._saved = None
        if mode:
            self.drop_prepared()        # train mode keeps no derived weights (each step changes the weights)
        return self

    def eval(self) -> "Module":
        return self.train(False)

    def save_for_backward(self, *arrays) -> None:
        """Keep ``arrays`` for the backward pass in train mode; in eval mode keep nothing."""
        self._saved = arrays if self.training else None

    def backward(self, grad_output, input_grad: bool = False):
        """Accumulate the parameters' gradients of the last forward pass, given the output's gradient.

        Returns the input's gradient when ``input_grad`` is true, else None: like torch, which computes no
        gradient for an input that does not require one (a model's first layer skips that work).
        """
        if self._saved is None:
            raise RuntimeError(f"{type(self).__name__}.backward needs a forward pass in train mode first "
                               "(call model.train() before the forward pass)")
        (grad_output,), torch_in = to_arrays(grad_output)
        grad_input = self.backward_from(self._saved, grad_output, input_grad)
        return None if grad_input is None else from_arrays(grad_input, torch_in)

    def backward_from(self, saved, grad_output, input_grad: bool):
        """The gradient step of this layer (``saved`` is what forward kept); a parameterless identity here."""
        return grad_output if input_grad else None

    def accumulate_grad(self, name: str, grad: np.ndarray) -> None:
        """Add ``grad`` to parameter ``name``'s gradient (cast to the parameter's dtype); on the GPU with flat
        parameters, into its kept buffer (``gpu_flat.py``)."""
        if into_kept_grad(self, name, grad):
            return
        grads = self.__dict__.setdefault("_grads", {})
        grad = (grad if is_cupy_array(grad) else np.asarray(grad)).astype(getattr(self, name).dtype, copy=False)
        grads[name] = grad if name not in grads else grads[name] + grad

    def zero_grad(self) -> None:
        """Drop every gradient (torch's ``set_to_none=True``, its default). On the GPU with flat parameters
        the gradient buffers stay (the next backward pass overwrites them) and no device work is issued."""
        for _, module in self.named_modules():
            module.__dict__.pop("_grads", None)

    def named_parameters(self):
        """(dotted name, array) for every parameter (not buffers), in state-dict order."""
        for prefix, module in self.named_modules():
            for name in module.param_names:
                value = getattr(module, name)
                if value is not None:
                    yield (f"{prefix}.{name}" if prefix else name), value

    def parameters(self) -> list:
        return [value for _, value in self.named_parameters()]

    def grad_dict(self) -> "OrderedDict[str, np.ndarray]":
        """Dotted torch parameter name -> gradient, for every parameter that has one (like state_dict())."""
        return OrderedDict((f"{prefix}.{name}" if prefix else name, module._grads[name])
                           for prefix, module in self.named_modules() for name in module.param_names
                           if name in module.__dict__.get("_grads", {}))

    # ---- structure and state ---------------------------------------------------------------------------------
    def named_children(self):
        return iter(self.__dict__.get("_children", {}).items())

    def named_modules(self, prefix: str = ""):
        """(dotted name, module) for this module and every descendant, depth first, in order."""
        yield prefix, self
        for name, child in self.named_children():
            yield from child.named_modules(f"{prefix}.{name}" if prefix else name)

    def _own_arrays(self):
        for name in self.param_names + self.buffer_names:
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
        self.drop_prepared()
        for prefix, module in self.named_modules():
            for name, value in list(module._own_arrays()):
                key = f"{prefix}.{name}" if prefix else name
                setattr(module, name, move(np.array(given[key], dtype=value.dtype), module.device))

    def to(self, device) -> "Module":
        """Move every parameter, buffer and gradient of this module and its descendants to ``device`` ("cpu" or
        "cuda"; ``device.py``), dropping prepared forms; returns self. Build an optimizer after moving (its
        momentum buffers follow the parameters' device at its next step)."""
        device = check_device(device)
        self.drop_prepared()
        drop_flat(self)
        for _, module in self.named_modules():
            for name, value in list(module._own_arrays()):
                setattr(module, name, move(value, device))
            grads = module.__dict__.get("_grads", {})
            for name in grads:
                grads[name] = move(grads[name], device)
            module.device, module._saved = device, None
        return self

    def astype(self, dtype) -> "Module":
        """Cast every array of every module to ``dtype`` in place; returns self."""
        self.drop_prepared()
        drop_flat(self)
        for _, module in self.named_modules():
            for name, value in list(module._own_arrays()):
                setattr(module, name, value.astype(dtype))
        return self

    # ---- eval mode's fast path (inference.py) -------------------------------------------------------------
    def prepare_weights(self, enabled: bool = True) -> "Module":
        """Let every conv hold its chosen algorithm's prepared weight in eval mode (on by default); returns self."""
        self.drop_prepared()
        for _, module in self.named_modules():
            module._set_prepare(bool(enabled))
        return self

    def fuse(self, batchnorm: bool = True, relu: bool = True, buffers: bool = True) -> "Module":
        """Eval-mode fusion for this module and its descendants: fold each BatchNorm into the conv before it,
        apply a ReLU (and ResNet's shortcut) as that conv's epilogue, and let convs whose output stays inside
        the model write into a kept buffer. Train mode runs unfused. Returns self."""
        self.unfuse()
        self._fuse(bool(batchnorm), bool(relu), bool(buffers), final=True)
        return self

    def unfuse(self) -> "Module":
        """Undo ``fuse``: every layer runs on its own again (prepared weights stay as set); returns self."""
        self.drop_prepared()
        for _, module in self.named_modules():
            module._unfuse_own()
        return self

    def drop_prepared(self) -> None:
        """Drop every prepared form, folded weight and kept buffer below this module, and make the weights
        writeable again; the next eval pass derives them anew."""
        for _, module in self.named_modules():
            module.drop_derived()

    def absorb(self, name: str, conv, note: str) -> None:
        """Mark child ``name`` as computed by ``conv``'s fused path (``note`` says how, in ``repr``)."""
        self.__dict__.setdefault("_absorbed", {})[name] = (conv, note)

    def absorbed(self, name: str) -> bool:
        """True when child ``name`` is skipped: it was absorbed by a conv whose fused path runs now."""
        conv, _ = self.__dict__.get("_absorbed", {}).get(name, (None, ""))
        return conv is not None and conv.fused()

    def _fuse(self, batchnorm: bool, relu: bool, buffers: bool, final: bool) -> None:
        """Hook: fuse within this module, whose output is the model's when ``final``. Here: a module that does
        not know its children's data flow fuses each child on its own, as if its output were the model's."""
        for _, child in self.named_children():
            child._fuse(batchnorm, relu, buffers, True)

    def _unfuse_own(self) -> None:
        """Hook: undo this module's own part of ``fuse``."""
        self.__dict__.pop("_absorbed", None)

    def _set_prepare(self, enabled: bool) -> None:
        """Hook: a layer that prepares weights takes the switch."""

    def drop_derived(self) -> None:
        """Hook: drop what this module derived from its weights for eval mode (nothing here)."""

    def __repr__(self) -> str:
        notes = {name: f"  <- {note}" for name, (_, note) in self.__dict__.get("_absorbed", {}).items()}
        children = "".join(f"\n  ({name}): " + repr(child).replace("\n", "\n  ") + notes.get(name, "")
                           for name, child in self.named_children())
        return f"{type(self).__name__}({self.extra_repr()}{children}{chr(10) if children else ''})"

    def extra_repr(self) -> str:
        return ""
