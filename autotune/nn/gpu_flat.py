"""Flat parameters on the GPU: every parameter of a model (per dtype) a view of one flat array, its gradient a
view of another of the same layout, so that one kernel launch updates them all (``optim.SGD`` through
``gpu_kernels.sgd_kernel``), as torch's foreach/fused optimizers do with ``multi_tensor_apply``.

    >>> flat = flat_parameters(model)          # made on first need, kept on the model while it is current
    >>> flat.groups["float32"].params          # the flat array the model's float32 parameters are views of

Making it copies each parameter into the flat array once and points the module's attribute at its view; each
module then holds ``_grad_views`` (name -> view of the flat gradients), where ``Module.accumulate_grad`` and
BatchNorm's backward kernel write, so a backward pass makes no gradient arrays and ``zero_grad`` (which drops
the host's record of which parameters have a gradient) issues no device work. The store is current while each
parameter attribute is still its view: ``load_state_dict``, ``astype`` or ``to`` replace the arrays, and the
next ``flat_parameters`` call makes it anew from the new arrays.
"""
from __future__ import annotations

from collections import OrderedDict

from convalgos.arrays import array_module


class Segment:
    """One parameter's place in its dtype's flat arrays: [lo, hi), the module and attribute it belongs to."""

    def __init__(self, name: str, module, attribute: str, lo: int, hi: int, param, grad):
        self.name, self.module, self.attribute, self.lo, self.hi = name, module, attribute, lo, hi
        #: the views of the flat arrays the module holds: its parameter, and its gradient's buffer
        self.param, self.grad = param, grad

    def has_grad(self) -> bool:
        """True when the parameter's gradient (in its flat view) holds this step's value."""
        return self.attribute in self.module.__dict__.get("_grads", {})


class FlatGroup:
    """The flat parameters and gradients of one dtype, and their segments in model order."""

    def __init__(self, segments, params, grads):
        self.segments, self.params, self.grads = segments, params, grads


class FlatParameters:
    """Every parameter of ``model`` as a view of its dtype's flat array (module docstring)."""

    def __init__(self, model):
        from convalgos.cuda import record
        by_dtype: "OrderedDict[str, list]" = OrderedDict()
        for prefix, module in model.named_modules():
            for attribute in module.param_names:
                value = getattr(module, attribute)
                if value is not None:
                    by_dtype.setdefault(value.dtype.name, []).append((prefix, module, attribute, value))
        self.groups: "OrderedDict[str, FlatGroup]" = OrderedDict()
        for dtype, members in by_dtype.items():
            xp, total = array_module(members[0][3]), sum(v.size for *_, v in members)
            params, grads = xp.empty(total, dtype), xp.zeros(total, dtype)
            segments, lo = [], 0
            for prefix, module, attribute, value in members:
                hi = lo + value.size
                segment = Segment(f"{prefix}.{attribute}" if prefix else attribute, module, attribute, lo, hi,
                                  params[lo:hi].reshape(value.shape), grads[lo:hi].reshape(value.shape))
                params[lo:hi] = value.reshape(-1)
                record("cupy.copy")
                object.__setattr__(module, attribute, segment.param)
                module.__dict__.setdefault("_grad_views", {})[attribute] = segment.grad
                old_grad = module.__dict__.get("_grads", {}).get(attribute)
                if old_grad is not None:                 # a gradient made before the store: moved in
                    segment.grad[...] = old_grad
                    record("cupy.copy")
                    module._grads[attribute] = segment.grad
                segments.append(segment)
                lo = hi
            self.groups[dtype] = FlatGroup(segments, params, grads)

    def current(self) -> bool:
        """True while every parameter attribute is still its flat view, and its gradient buffer in place."""
        return all(getattr(s.module, s.attribute) is s.param
                   and s.module.__dict__.get("_grad_views", {}).get(s.attribute) is s.grad
                   for g in self.groups.values() for s in g.segments)


def flat_parameters(model) -> FlatParameters:
    """``model``'s flat parameters, made (or made anew, when the model's arrays were replaced) on need."""
    flat = model.__dict__.get("_flat")
    if flat is None or not flat.current():
        drop_flat(model)
        flat = model.__dict__["_flat"] = FlatParameters(model)
    return flat


def drop_flat(model) -> None:
    """Forget ``model``'s flat store: parameters stay as they are (views, still valid), gradients made afresh."""
    for _, module in model.named_modules():
        module.__dict__.pop("_grad_views", None)
        module.__dict__.pop("_flat", None)


def into_kept_grad(module, name: str, grad) -> bool:
    """Put ``grad`` into parameter ``name``'s kept buffer (a device copy, or an add when it already holds this
    step's gradient); False when the module keeps none (the caller makes its own array)."""
    view = module.__dict__.get("_grad_views", {}).get(name)
    if view is None:
        return False
    from convalgos.cuda import record
    grads = module.__dict__.setdefault("_grads", {})
    if name in grads:
        view += grad
        record("cupy.add")
    else:
        view[...] = grad
        record("cupy.copy")
    grads[name] = view
    return True


def grad_buffer(module, name: str):
    """(buffer, add) for a kernel that writes parameter ``name``'s gradient itself (BatchNorm's): its kept
    buffer and whether to add to what it holds; None where the module keeps none. Then ``grad_written``."""
    view = module.__dict__.get("_grad_views", {}).get(name)
    return None if view is None else (view, name in module.__dict__.get("_grads", {}))


def grad_written(module, name: str) -> None:
    """Parameter ``name``'s kept buffer now holds its gradient (``grad_buffer``)."""
    module.__dict__.setdefault("_grads", {})[name] = module._grad_views[name]
