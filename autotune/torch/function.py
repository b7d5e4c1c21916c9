"""``conv2d``: the functional form, and the ``torch.autograd.Function`` under it, as ``autotune.nn.Conv2d``
runs a layer's three passes (``torch.nn.grad``'s names):

- forward          y  = conv2d(x, w) + b               (``Tuner.conv2d``)
- input gradient   dx = conv2d_input(x.shape, w, dy)   (``Tuner.conv2d_input``; only where
  ``ctx.needs_input_grad`` asks for it: a first layer's input needs none)
- weight gradient  dw = conv2d_weight(x, w.shape, dy)  (``Tuner.conv2d_weight``; likewise)
- bias gradient    db = dy summed over N, H and W      (a plain sum: no algorithm to choose)

Each pass is tuned under its own key. Tensors cross zero-copy (``tensors.py``); a pass the dispatcher cannot
serve is computed by torch (``fallback.py``). Under ``torch.use_deterministic_algorithms(True)`` the calls run
with the dispatcher's ``deterministic`` flag on. Without autograd (``torch.no_grad()``, ``inference_mode()``,
or no operand requiring a gradient) the forward pass runs without the Function's bookkeeping.

Double backward (``create_graph=True``, then differentiating a gradient) is not offered: the dispatcher's
passes are not themselves differentiable, and the gradients say so when differentiated.
"""
from __future__ import annotations

import contextlib
from typing import NamedTuple

import torch

import autotune

from .fallback import (DTYPES, layer_reason, note, pass_reason, torch_forward, torch_input_grad,
                       torch_weight_grad)
from .record import Call, LayerRecord
from .tensors import as_array, as_tensor, on_torch_stream, result_format

DOUBLE_BACKWARD = ("autotune.torch offers no double backward: the gradients of a dispatched convolution are not "
                   "differentiable themselves (create_graph=True, then a second backward through them). For that "
                   "computation use torch.nn.functional.conv2d, or autotune.torch.revert(model).")


class Layer(NamedTuple):
    """A call's layer arguments, the dispatcher (None: the default Tuner) and the record (or None)."""

    stride: object
    padding: object
    dilation: object
    groups: int
    tuner: object
    record: LayerRecord | None

    @property
    def args(self) -> tuple:
        return self.stride, self.padding, self.dilation, self.groups

    def dispatcher(self):
        return autotune.default_tuner() if self.tuner is None else self.tuner


def _hashable(value):
    """Lists as tuples (the dispatcher's memo hashes the layer's arguments)."""
    return tuple(_hashable(v) for v in value) if type(value) is list else value


def conv2d(input, weight, bias=None, stride=1, padding=0, dilation=1, groups=1, *, tuner=None, record=None):
    """``torch.nn.functional.conv2d`` with its three passes through the dispatcher.

    ``padding`` also takes ((top, bottom), (left, right)). ``tuner``: an ``autotune.Tuner`` (default: the
    module-level one); ``record``: a ``LayerRecord`` that counts the calls (``autotune.torch.Conv2d`` keeps
    one per layer for ``report``). Returns a tensor on the input's device."""
    # unbatched (C, H, W), as torch accepts: the dispatcher takes it too, but autograd's saved tensors and
    # gradients stay 4-D when the Function sees a batch of one (views, no copies)
    if input.dim() == 3:
        return conv2d(input.unsqueeze(0), weight, bias, stride, padding, dilation, groups, tuner=tuner,
                      record=record).squeeze(0)
    layer = Layer(_hashable(stride), _hashable(padding), _hashable(dilation), groups, tuner, record)
    reason = layer_reason(input, weight, bias)
    grad = torch.is_grad_enabled() and (input.requires_grad or weight.requires_grad
                                        or (bias is not None and bias.requires_grad))
    if reason is not None:
        return _by_torch(input, weight, bias, layer, reason, grad)
    tuner = layer.dispatcher()
    call = Call(input.shape, weight.shape, *layer.args, DTYPES[input.dtype],
                tuner.deterministic or torch.are_deterministic_algorithms_enabled(), "cpu" if input.is_cpu else "cuda")
    if grad:
        return DispatchedConv2d.apply(input, weight, bias, layer, call)
    return forward_pass(input, weight, bias, layer, call)


def _by_torch(x, weight, bias, layer: Layer, reason: str, grad: bool):
    """Every pass of the call by torch's autograd; the backward passes are counted when they run."""
    label = _label(x.shape, weight.shape)
    note(layer.record, label, ("forward",), reason, every_pass=True)
    y = torch_forward(x, weight, bias, *layer.args)
    ops = (("backward_data",) if x.requires_grad else ()) + (("backward_filter",) if weight.requires_grad else ())
    if grad and ops and y.requires_grad:
        y.register_hook(lambda dy: note(layer.record, label, ops, reason, every_pass=True))
    return y


def _label(x_shape, w_shape) -> str:
    return f"conv2d(input {tuple(x_shape)}, weight {tuple(w_shape)})"


def _setting(tuner, call: Call, tensor):
    """What a dispatched pass runs under: torch's CUDA stream for a CUDA tensor, and the dispatcher's
    deterministic flag where torch asks for deterministic algorithms (on the CPU by default: nothing)."""
    cuda, flag = call.device == "cuda", call.deterministic and not tuner.deterministic
    if not (cuda or flag):
        return _NOTHING
    stack = contextlib.ExitStack()
    if cuda:
        stack.enter_context(on_torch_stream(tensor))
    if flag:
        stack.enter_context(tuner.flags(deterministic=True))
    return stack


_NOTHING = contextlib.nullcontext()


def _serve(op: str, layer: Layer, call: Call, tensor, dispatch, by_torch):
    """Pass ``op`` by the dispatcher (``dispatch(tuner)``), or by torch (``by_torch()``) where it cannot;
    ``tensor``: an operand, on the call's device."""
    reason = pass_reason(call.device, op, call)
    if reason is None:
        tuner = layer.dispatcher()
        try:
            with _setting(tuner, call, tensor):
                result = dispatch(tuner)
        except Exception as error:  # noqa: BLE001 - torch's conv serves a call the dispatcher could not
            reason = f"the dispatcher raised {type(error).__name__}: {error}"
        else:
            if layer.record is not None:
                layer.record.served(op, call)
            return result
    note(layer.record, _label(call.x_shape, call.w_shape), (op,), reason)
    return by_torch()


def forward_pass(x, weight, bias, layer: Layer, call: Call):
    def dispatch(tuner):
        b = None if bias is None else as_array(bias)
        return as_tensor(tuner.conv2d(as_array(x), as_array(weight), b, *layer.args), result_format(x, weight))
    return _serve("forward", layer, call, x, dispatch, lambda: torch_forward(x, weight, bias, *layer.args))


def input_grad_pass(x, weight, dy, layer: Layer, call: Call):
    def dispatch(tuner):
        return as_tensor(tuner.conv2d_input(tuple(x.shape), as_array(weight), as_array(dy), *layer.args),
                         result_format(x))
    return _serve("backward_data", layer, call, x, dispatch,
                  lambda: torch_input_grad(x, weight, dy, *layer.args))


def weight_grad_pass(x, weight, dy, layer: Layer, call: Call):
    def dispatch(tuner):
        return as_tensor(tuner.conv2d_weight(as_array(x), tuple(weight.shape), as_array(dy), *layer.args),
                         result_format(weight))
    return _serve("backward_filter", layer, call, x, dispatch,
                  lambda: torch_weight_grad(x, weight, dy, *layer.args))


class DispatchedConv2d(torch.autograd.Function):
    """The three passes of one call under torch's autograd (the module docstring says which runs when)."""

    @staticmethod
    def forward(ctx, x, weight, bias, layer: Layer, call: Call):
        ctx.layer, ctx.call, ctx.has_bias = layer, call, bias is not None
        ctx.save_for_backward(x, weight)
        return forward_pass(x, weight, bias, layer, call)

    @staticmethod
    def backward(ctx, dy):
        x, weight = ctx.saved_tensors
        need_x, need_w, need_b = ctx.needs_input_grad[:3]
        dx = input_grad_pass(x, weight, dy, ctx.layer, ctx.call) if need_x else None
        dw = weight_grad_pass(x, weight, dy, ctx.layer, ctx.call) if need_w else None
        db = dy.sum((0, 2, 3)) if ctx.has_bias and need_b else None
        if torch.is_grad_enabled():           # create_graph=True: a second backward through dx, dw is refused
            dx, dw = (None if g is None else NoDoubleBackward.apply(g, x, weight) for g in (dx, dw))
        return dx, dw, db, None, None


class NoDoubleBackward(torch.autograd.Function):
    """Hands a gradient on unchanged, tied to the layer's operands; differentiating it raises
    ``DOUBLE_BACKWARD``."""

    @staticmethod
    def forward(ctx, grad, *operands):
        return grad.view_as(grad)

    @staticmethod
    def backward(ctx, *_):
        raise RuntimeError(DOUBLE_BACKWARD)
