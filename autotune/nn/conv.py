"""``Conv2d``: all three passes of a convolution go through the dispatcher (or a forced algorithm).

Forward ``y = conv(x, w) + b``; backward, given dy (``torch.nn.grad``'s names):

- input gradient   dx = conv2d_input(x.shape, w, dy)   (backward-data; skipped where no one needs it)
- weight gradient  dw = conv2d_weight(x, w.shape, dy)  (backward-filter)
- bias gradient    db = dy summed over N, H and W      (a plain sum: no algorithm to choose)

``Conv2d.algo`` picks who computes each pass (``passes()``, an object with the three methods): ``None`` (the
default) asks the autotuner (``autotune.default_tuner()``, or the layer's ``tuner``), which tunes each pass
under its own key; an algorithm name forces ``convalgos.conv2d / conv2d_input / conv2d_weight(...,
algo=name)`` (``Forced``); ``"reference"`` forces the float64 reference (``ReferencePasses``: its outputs are
float64, and so is everything downstream); a callable with ``conv2d``'s signature (e.g. a wrapper of torch's)
computes the forward pass only (``ForwardOnly``). ``use_algorithm`` sets it on every conv of a model for the
length of a ``with`` block.

In eval mode a conv may prepare its weights, fold the following BatchNorm in, apply its epilogue (bias,
shortcut, ReLU) in place and keep its output buffer: ``inference.py`` says how and when, and how the weights
are frozen while forms derived from them exist.
"""
from __future__ import annotations

import contextlib

import numpy as np

import convalgos
from convalgos import ConvParams, reference
from convalgos.arrays import simulator_enabled

import autotune

from .inference import EvalWeights, epilogue
from .module import Module, channel_sum, he_normal, pair

#: The pseudo-algorithm name that sends a conv to the float64 reference.
REFERENCE = "reference"


class ReferencePasses:
    """The three passes by the float64 reference (``Conv2d.algo = "reference"``)."""

    @staticmethod
    def conv2d(x, weight, bias, stride, padding, dilation, groups, out=None):
        as64 = (lambda a: None if a is None else a.astype(np.float64))
        return reference.conv2d(as64(x), as64(weight), as64(bias), stride, padding, dilation, groups)

    @staticmethod
    def conv2d_input(input_shape, weight, grad_output, stride, padding, dilation, groups):
        p = ConvParams.from_shapes(input_shape, weight.shape, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups, dtype=np.float64)
        return reference.backward_data(grad_output, weight, p)

    @staticmethod
    def conv2d_weight(input, weight_shape, grad_output, stride, padding, dilation, groups):
        p = ConvParams.from_shapes(input.shape, weight_shape, stride=stride, padding=padding, dilation=dilation,
                                   groups=groups, dtype=np.float64)
        return reference.backward_filter(input, grad_output, p)


class Forced:
    """The three passes by one named algorithm of convalgos (``Conv2d.algo = name``), of the registry of
    ``backend`` (None: the operands' own; "cuda" for a conv on the GPU, simulated GPU included)."""

    def __init__(self, name: str, backend=None):
        self.name, self.backend = name, backend

    def conv2d(self, x, weight, bias, stride, padding, dilation, groups, out=None):
        return convalgos.conv2d(x, weight, bias, stride, padding, dilation, groups, algo=self.name, out=out,
                                backend=self.backend)

    def conv2d_input(self, input_shape, weight, grad_output, stride, padding, dilation, groups):
        return convalgos.conv2d_input(input_shape, weight, grad_output, stride, padding, dilation, groups,
                                      algo=self.name, backend=self.backend)

    def conv2d_weight(self, input, weight_shape, grad_output, stride, padding, dilation, groups):
        return convalgos.conv2d_weight(input, weight_shape, grad_output, stride, padding, dilation, groups,
                                       algo=self.name, backend=self.backend)


class ForwardOnly:
    """A callable with ``conv2d``'s signature as the forward pass (``Conv2d.algo = fn``); no backward."""

    def __init__(self, fn):
        self.fn = fn

    def conv2d(self, x, weight, bias, stride, padding, dilation, groups, out=None):
        return self.fn(x, weight, bias, stride, padding, dilation, groups)

    def conv2d_input(self, *args):
        raise TypeError(f"Conv2d.algo={self.fn!r} is a callable, which computes the forward pass only; the "
                        "backward passes need algo=None, an algorithm name or 'reference'")

    conv2d_weight = conv2d_input


class Conv2d(Module):
    """``torch.nn.Conv2d``: weight (K, C/groups, R, S), optional bias (K,).

    ``tuner``: an ``autotune.Tuner`` to dispatch through instead of the module-level one. ``algo``: see the
    module docstring (None: autotuned). Eval-mode switches (``inference.py``): ``prepare`` (hold the
    dispatcher's chosen algorithm's prepared weight, with ``algo=None``; on), and those the containers'
    ``fuse`` sets: ``folded_bn`` (a BatchNorm2d folded in, or None), ``relu_epilogue``, ``reuse_output``.
    """

    param_names = ("weight", "bias")
    prepare, folded_bn, relu_epilogue, reuse_output = True, None, False, False

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1, groups=1,
                 bias=True, *, dtype="float32", rng=None, tuner=None):
        R, S = pair(kernel_size)
        rng = np.random.default_rng(0) if rng is None else rng
        fan_in = in_channels // groups * R * S
        self.weight = he_normal(rng, (out_channels, in_channels // groups, R, S), fan_in, dtype)
        self.bias = np.zeros(out_channels, dtype) if bias else None
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.tuner, self.algo = tuner, None
        self._eval, self._output = None, None

    def _layer(self):
        return self.stride, self.padding, self.dilation, self.groups

    def dispatcher(self):
        """The Tuner this layer's passes go through when ``algo`` is None: the layer's own, else the module-level
        one (on "cuda" under the simulator, the simulated GPU's: ``device.py``)."""
        if self.tuner is not None:
            return self.tuner
        if self.device == "cuda" and simulator_enabled():
            return autotune.simulated_gpu_tuner()
        return autotune.default_tuner()

    def passes(self):
        """Who computes this layer's passes, as ``algo`` says: an object with ``conv2d``, ``conv2d_input`` and
        ``conv2d_weight`` (module docstring)."""
        if self.algo is None:
            return self.dispatcher()
        if isinstance(self.algo, str):
            return ReferencePasses if self.algo == REFERENCE else Forced(self.algo, "cuda" if self.device == "cuda"
                                                                            else None)
        return ForwardOnly(self.algo)

    def forward(self, x, residual=None):
        """conv(x) + bias; in eval mode through the fused path, which adds ``residual`` (a BasicBlock's
        shortcut) before its ReLU epilogue."""
        self.save_for_backward(x)
        if self.fused():
            return self._eval_forward(x, residual)
        if self._eval is not None:          # a folded BatchNorm put in train mode alone: unfreeze its arrays
            self.drop_derived()
        return self.passes().conv2d(x, self.weight, self.bias, *self._layer())

    def fold(self, bn) -> None:
        """Fold ``bn`` (the BatchNorm2d that follows this conv, or None) into it in eval mode."""
        object.__setattr__(self, "folded_bn", bn)   # a reference, not a child: bn stays its container's child
        self.drop_derived()

    def fused(self) -> bool:
        """True when this call takes the eval path: eval mode, and a folded BatchNorm (if any) in eval mode, on
        the CPU (on the GPU eval mode runs unfused: the freeze that keeps derived weights current is NumPy's)."""
        return (self.device == "cpu" and not self.training
                and (self.folded_bn is None or not self.folded_bn.training))

    def relu_runs(self) -> bool:
        """True when this call applies the ReLU epilogue (the container then skips its ReLU)."""
        return self.relu_epilogue and self.fused()

    def _eval_forward(self, x, residual):
        tail = self.relu_epilogue or residual is not None
        state = self._eval_weights() if self.folded_bn is not None or self._eval is not None else None
        weight, bias = (self.weight, self.bias) if state is None else (state.weight, state.bias)
        out = self._output_for(x, weight) if self.reuse_output and self._takes_out() else None
        choice = self._choice(x, weight, bias, out)
        if choice is None:
            into = {} if out is None else {"out": out}      # a stand-in dispatcher need not take out=
            y = self.passes().conv2d(x, weight, None if tail else bias, *self._layer(), **into)
        else:
            if state is None and choice.algorithm.prepares("forward"):
                state = self._eval_weights()                # freezes the arrays: from now on, use its views
                weight, bias = state.weight, state.bias
            form = self._form(state, choice, x)
            y = self.dispatcher().run_choice(choice, x, weight, None if tail else bias, out=out, prepared=form)
        if tail:
            epilogue(y, bias, residual, self.relu_epilogue)
        return y

    @staticmethod
    def _form(state, choice, x):
        """The chosen algorithm's prepared weight, when it prepares one (None: it runs on the plain weight). A
        form that cannot be made marks the algorithm failed for this layer, which then runs it plain."""
        algorithm = choice.algorithm
        if state is None or not algorithm.prepares("forward") or algorithm.name in state.failed:
            return None
        try:
            return state.form(algorithm, choice.params, x)
        except Exception:  # noqa: BLE001 - a fault here never fails a call the plain weight can serve
            state.fail(algorithm)
            return None

    def _choice(self, x, weight, bias, out):
        """The dispatcher's ``forward_choice`` for this call, when weights are prepared and the dispatcher is a
        Tuner that says what it runs (a stand-in dispatcher without ``forward_choice`` gets the plain call)."""
        if not self.prepare or self.algo is not None or type(x) is not np.ndarray:
            return None
        choose = getattr(self.dispatcher(), "forward_choice", None)
        return None if choose is None else choose(x, weight, bias, *self._layer(), out=out, prepared=True)

    def _takes_out(self) -> bool:
        return self.algo is None or (isinstance(self.algo, str) and self.algo != REFERENCE)

    def _eval_weights(self) -> EvalWeights:
        """The eval weights, rebuilt (and the arrays frozen) when missing or no longer current."""
        if self._eval is None or not self._eval.current(self, self.folded_bn):
            if self._eval is not None:
                self._eval.release()
            self._eval = EvalWeights(self, self.folded_bn)
        return self._eval

    def _output_for(self, x, weight):
        """The kept output buffer for ``x``'s shape and dtype (a new one when either changed)."""
        if self._output is None or self._output[0] != (x.shape, x.dtype):
            p = ConvParams.from_arrays(x, weight, stride=self.stride, padding=self.padding,
                                       dilation=self.dilation, groups=self.groups)
            self._output = ((x.shape, x.dtype), np.empty(p.out_shape, x.dtype))
        return self._output[1]

    def _fuse(self, batchnorm, relu, buffers, final) -> None:
        self.reuse_output = buffers and not final      # the model's own output is never a kept buffer

    def _unfuse_own(self) -> None:
        self.fold(None)
        self.relu_epilogue = self.reuse_output = False

    def _set_prepare(self, enabled: bool) -> None:
        self.prepare = enabled

    def drop_derived(self) -> None:
        """Drop the prepared forms, the folded weights and the kept output; unfreeze the arrays."""
        if self._eval is not None:
            self._eval.release()
        self._eval, self._output = None, None

    def backward_from(self, saved, dy, input_grad):
        (x,) = saved
        passes = self.passes()
        self.accumulate_grad("weight", passes.conv2d_weight(x, self.weight.shape, dy, *self._layer()))
        if self.bias is not None:
            self.accumulate_grad("bias", channel_sum(dy))
        if input_grad:
            return passes.conv2d_input(x.shape, self.weight, dy, *self._layer())
        return None

    def extra_repr(self) -> str:
        K, Cg, R, S = self.weight.shape
        eval_path = [name for name, on in (("batchnorm folded", self.folded_bn is not None),
                                           ("relu epilogue", self.relu_epilogue),
                                           ("output reused", self.reuse_output)) if on]
        held = self._eval.describe() if self._eval is not None else ""
        eval_path.append(f"prepared: {held}" if held else ("prepares weights" if self.prepare else "prepare off"))
        return (f"{Cg * self.groups}, {K}, kernel_size=({R}, {S}), stride={self.stride}, padding={self.padding}"
                + (f", dilation={self.dilation}" if self.dilation != 1 else "")
                + (f", groups={self.groups}" if self.groups != 1 else "")
                + (", bias=False" if self.bias is None else "") + f"; eval: {', '.join(eval_path)}")


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
