"""``SGD``: stochastic gradient descent with torch's update rule, step for step.

For each parameter p with gradient g (``torch.optim.SGD``, dampening 0):

    g = g + weight_decay * p                                 (L2 weight decay, added to the gradient)
    buf = g  on the first step,  else  buf = momentum * buf + g
    g = g + momentum * buf  if nesterov  else  buf           (only when momentum != 0)
    p = p - lr * g                                           (in place: the model's arrays are updated)

On the CPU the work is done in place in one reused work array (nesterov's update is applied as two
subtractions, equal to torch's within rounding). Momentum buffers are kept by parameter name, so
``load_state_dict`` (which replaces the model's arrays) does not orphan them. Parameters without a gradient
are skipped, as in torch.

On the GPU (a model on "cuda") the update is multi-tensor, as torch's foreach/fused optimizers: the model's
parameters and gradients are views of one flat array per dtype (``nn/gpu_flat.py``, made when the optimizer is
built or at its first step, and made anew if the model's arrays are replaced), the momentum buffers views of a
third, made once, so ONE launch of ``nn.gpu_kernels.sgd_kernel`` per dtype updates every parameter (more only
when some parameters have no gradient this step, or start their momentum later than the others: one launch
per run of neighbours alike). Nothing is allocated or copied per step, so the step can be captured.
"""
from __future__ import annotations

import numbers
from collections import OrderedDict

import numpy as np

from convalgos.arrays import array_module

from .nn.device import like, to_host
from .nn.gpu_flat import flat_parameters


def _number(name: str, value, *, minimum: float = 0.0) -> float:
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value >= minimum:
        raise ValueError(f"{name} must be a number >= {minimum}, got {value!r}")
    return float(value)


class SGD:
    """``torch.optim.SGD(model.parameters(), lr, momentum, dampening, weight_decay, nesterov)`` over
    ``model``'s named parameters and the gradients its ``backward`` accumulated (``model.grad_dict()``)."""

    def __init__(self, model, lr, momentum=0.0, dampening=0.0, weight_decay=0.0, nesterov=False):
        if not hasattr(model, "named_parameters") or not hasattr(model, "grad_dict"):
            raise TypeError(f"model must be an autotune.nn.Module, got {type(model).__name__}")
        self.model = model
        self.lr = _number("lr", lr)
        self.momentum = _number("momentum", momentum)
        self.weight_decay = _number("weight_decay", weight_decay)
        if _number("dampening", dampening) != 0:
            raise ValueError(f"only dampening=0 is supported, got dampening={dampening!r}")
        if not isinstance(nesterov, bool):
            raise ValueError(f"nesterov must be True or False, got {nesterov!r}")
        if nesterov and self.momentum == 0:
            raise ValueError(f"nesterov momentum needs momentum > 0, got momentum={momentum!r}")
        self.nesterov = nesterov
        #: parameter name -> momentum buffer (made from the first gradient, as torch does)
        self.momentum_buffers: "OrderedDict[str, np.ndarray]" = OrderedDict()
        self._buffers: dict = {}
        self._flat, self._flat_momentum = None, {}
        if model.device == "cuda":
            self._adopt(flat_parameters(model))        # the first backward pass then writes into flat views

    def _adopt(self, flat) -> None:
        """Lay the momentum buffers out as ``flat`` (made once; the buffers so far carried over by name)."""
        self._flat, self._flat_momentum = flat, {}
        for dtype, group in flat.groups.items():
            xp = array_module(group.params)
            # without momentum one element stands in, never read (a kernel argument is never an empty array)
            momentum = self._flat_momentum[dtype] = xp.empty(group.params.size if self.momentum else 1, dtype)
            for segment in group.segments if self.momentum else ():
                old = self.momentum_buffers.get(segment.name)
                if old is not None:
                    view = momentum[segment.lo:segment.hi].reshape(segment.param.shape)
                    view[...] = old
                    record_op("cupy.copy")
                    self.momentum_buffers[segment.name] = view

    def step(self) -> None:
        """Update every parameter that has a gradient, in place (the gradients are left as they are)."""
        self.model.drop_prepared()        # eval-mode forms derived from the weights go; the weights unfreeze
        if self.model.device == "cuda":
            self._step_flat()
            return
        grads = self.model.grad_dict()
        for name, p in self.model.named_parameters():
            g = grads.get(name)
            if g is None:
                continue
            xp = array_module(p)
            d = self._scratch(p)                           # g + weight_decay * p, without a fresh array
            xp.multiply(p, self.weight_decay, out=d)
            d += g
            if self.momentum:
                buf = self.momentum_buffers.get(name)
                if buf is None:
                    buf = self.momentum_buffers[name] = d.copy()
                else:
                    if array_module(buf) is not xp:        # the model moved since the last step
                        buf = self.momentum_buffers[name] = like(to_host(buf), p)
                    buf *= self.momentum
                    buf += d
                if self.nesterov:                          # p -= lr * (d + momentum * buf)
                    d *= self.lr
                    p -= d
                    xp.multiply(buf, self.lr * self.momentum, out=d)
                else:                                      # p -= lr * buf
                    xp.multiply(buf, self.lr, out=d)
            else:
                d *= self.lr
            p -= d

    def _step_flat(self) -> None:
        """The multi-tensor step (module docstring): one launch per run of segments alike, per dtype."""
        from convalgos.cuda import launch, launch_1d
        from .nn.gpu_kernels import compute_dtype, sgd_kernel
        flat = flat_parameters(self.model)
        if flat is not self._flat:
            self._adopt(flat)
        for dtype, group in flat.groups.items():
            ct = compute_dtype(dtype).type
            momentum = self._flat_momentum[dtype]
            args = (ct(self.lr), ct(self.weight_decay), ct(self.momentum), ct(self.lr * self.momentum),
                    self.nesterov)
            for lo, hi, first in self._runs(group):
                launch(sgd_kernel(dtype), *launch_1d(hi - lo))(group.params, group.grads, momentum, lo, hi, *args,
                                                               first)
            if self.momentum:
                for segment in group.segments:
                    if segment.has_grad() and segment.name not in self.momentum_buffers:
                        self.momentum_buffers[segment.name] = momentum[segment.lo:segment.hi].reshape(
                            segment.param.shape)

    def _runs(self, group):
        """(lo, hi, first) of each run of neighbouring segments that have a gradient and whose momentum starts
        now (first) or started before; a gradient not in its flat view is copied there first."""
        runs = []
        for segment in group.segments:
            if not segment.has_grad():
                continue
            grad = segment.module._grads[segment.attribute]
            if grad is not segment.grad:
                segment.grad[...] = grad
                record_op("cupy.copy")
            first = bool(self.momentum) and segment.name not in self.momentum_buffers
            if runs and runs[-1][1] == segment.lo and runs[-1][2] == first:
                runs[-1][1] = segment.hi
            else:
                runs.append([segment.lo, segment.hi, first])
        return runs

    def _scratch(self, p: np.ndarray) -> np.ndarray:
        """A work array of p's shape and dtype: a view of one buffer per dtype, kept across steps (a fresh
        array per parameter per step would pay the page faults of VGG-16's 400 MB layer every step)."""
        xp = array_module(p)
        key = (xp.__name__, p.dtype)
        buf = self._buffers.get(key)
        if buf is None or buf.size < p.size:
            buf = self._buffers[key] = xp.empty(max(p.size, 0 if buf is None else buf.size), p.dtype)
        return buf[:p.size].reshape(p.shape)

    def zero_grad(self) -> None:
        """Drop the model's gradients (torch's ``set_to_none=True``)."""
        self.model.zero_grad()

    def __repr__(self) -> str:
        return (f"SGD(lr={self.lr}, momentum={self.momentum}, weight_decay={self.weight_decay}, "
                f"nesterov={self.nesterov})")


def record_op(name: str) -> None:
    """Count an array-module operation of the GPU step (``convalgos.cuda.record``)."""
    from convalgos.cuda import record
    record(name)
