"""A convolution's eval-mode path: prepared weights, BatchNorm folded in, the epilogue, a kept output buffer.

Inference runs the same weights pass after pass, so what training pays on every step can be paid once.
``Conv2d`` does each of these in eval mode only (in train mode it runs the plain path), and each is switchable
and shown in the model's ``repr``:

- **Prepared weights** (``model.prepare_weights(True)``, on by default): when the algorithm the dispatcher
  chose for the layer's forward key prepares (``algorithm.prepares("forward")``: Winograd's U, FFT's kernel
  spectra), the layer keeps ``algorithm.prepare(w, p, "forward")`` and runs ``convalgos.run(..., prepared=)``,
  which skips the weight transform (the algorithms' docstrings give its measured share). The dispatcher is
  asked on every call (``Tuner.forward_choice``), so a re-tuned or fallen-back choice is followed.
- **BatchNorm folded** (``model.fuse(batchnorm=True)``): a conv followed by an eval BatchNorm is one conv with
  ``W'[k] = W[k] * s[k]`` and ``b'[k] = (b[k] - mean[k]) * s[k] + beta[k]``, ``s = gamma / sqrt(var + eps)``
  (computed in float64, cast to the weight's dtype); the prepared form is made from W'.
- **The epilogue** (``model.fuse(relu=True)``): a ReLU right after the conv (or after its folded BatchNorm),
  and in ResNet's block the shortcut added before it, are applied in place on the conv's output in one pass
  together with the bias (``kernels.epilogue``), instead of three passes and two fresh arrays.
- **A kept output** (``model.fuse(buffers=True)``): the conv writes into one buffer it keeps for its latest
  input shape (``out=``), so a pass allocates no fresh activation there. The rule that keeps this safe: the
  containers (``Sequential``, ``BasicBlock``) turn it on only for convs whose output their own later layers
  consume within the pass; a conv whose output is (or is a view of) the model's output never reuses, so what a
  caller holds is never overwritten by the next pass. It assumes one pass at a time, and each conv called once
  per pass (true of every model in ``autotune.models``).

When the weights change, the derived forms must go. NumPy has no write hook, so the layer freezes what they
derive from: while a folded weight or a prepared form exists, the conv's weight and bias (and the folded
BatchNorm's four arrays) are read-only (``flags.writeable = False``). A user writing into one gets NumPy's
"assignment destination is read-only" instead of a silently stale result; ``model.drop_prepared()`` drops the
forms and makes the arrays writeable again, and the next eval pass prepares anew. The library's own writers do
that themselves: ``train()``, ``load_state_dict``, ``astype``, ``fuse``/``unfuse``, ``prepare_weights`` and
``optim.SGD.step``. Replacing an array (``conv.weight = new``) is noticed too (the frozen arrays are compared
by identity on every call), as is an array made writeable again by someone else. Not caught: writes through a
view taken before the freeze (``w = conv.weight[0]`` kept from earlier), or through memory shared with a torch
tensor: call ``model.drop_prepared()`` after such a write. A version counter alone would miss every write that
does not bump it; a copy compared on every call would cost a read of all weights per pass.
"""
from __future__ import annotations

import numpy as np

from . import kernels

#: output dtypes the one-pass epilogue kernel takes (float16 and mixed dtypes go through NumPy).
_KERNEL_DTYPES = (np.dtype(np.float32), np.dtype(np.float64))


def fold_batchnorm(weight, bias, bn):
    """(W', b'): the conv (``weight``, ``bias`` or None) followed by ``bn`` in eval mode, as one conv."""
    scale = bn.weight.astype(np.float64) / np.sqrt(bn.running_var.astype(np.float64) + bn.eps)
    shift = bn.bias - bn.running_mean * scale
    if bias is not None:
        shift += bias * scale
    return (weight * scale[:, None, None, None]).astype(weight.dtype), shift.astype(weight.dtype)


def epilogue(y, bias, residual, relu: bool) -> None:
    """In place on a conv output ``y`` (N, K, Ho, Wo): ``y += bias[k]`` (bias None: nothing), ``+= residual``
    (None: nothing), then ReLU when ``relu`` (NaN kept, as ``np.maximum``); one pass when it can."""
    K = y.shape[1]
    if (y.dtype in _KERNEL_DTYPES and y.flags.c_contiguous and y.size
            and (residual is None or residual.dtype == y.dtype)):
        planes = y.reshape(y.shape[0], K, -1)
        b = np.zeros(K, y.dtype) if bias is None else np.ascontiguousarray(bias, dtype=y.dtype)
        r = planes[:0] if residual is None else np.ascontiguousarray(residual).reshape(planes.shape)
        kernels.epilogue(planes, b, r, relu)
        return
    if bias is not None:
        y += bias.astype(y.dtype, copy=False)[:, None, None]
    if residual is not None:
        y += residual
    if relu:
        np.maximum(y, 0, out=y)


class EvalWeights:
    """What one conv computes with in eval mode, derived from its arrays (and a folded BatchNorm's): ``weight``
    and ``bias`` (folded, or writeable views of the conv's own taken before freezing them), the prepared forms
    (``form``), and the arrays it froze (module docstring). ``release()`` unfreezes them."""

    def __init__(self, conv, bn):
        self.sources, self.eps = _sources(conv, bn), None if bn is None else bn.eps
        if bn is None:
            self.weight = conv.weight.view()
            self.bias = None if conv.bias is None else conv.bias.view()
        else:
            self.weight, self.bias = fold_batchnorm(conv.weight, conv.bias, bn)
        self.frozen = [a for a in self.sources if a is not None and a.flags.writeable]
        for a in self.frozen:
            a.flags.writeable = False
        self.forms = {}       # (algorithm name, input shape, dtype) -> Prepared (one form serves every shape it fits)
        self.failed = set()   # algorithms whose prepared run raised here: this layer runs them plain

    def current(self, conv, bn) -> bool:
        """Still derived from the layer's arrays: the same arrays, all still read-only, the same eps."""
        sources = _sources(conv, bn)
        return (len(sources) == len(self.sources) and (bn is None or bn.eps == self.eps)
                and all(a is b and (a is None or not a.flags.writeable) for a, b in zip(sources, self.sources)))

    def form(self, algorithm, p, x):
        """The prepared forward weight of ``algorithm`` for layer ``p`` (made on first need, then kept)."""
        key = (algorithm.name, x.shape, x.dtype)
        form = self.forms.get(key)
        if form is None:
            form = next((f for f in self.forms.values() if f.fits(algorithm, p, "forward")), None)
            self.forms[key] = form or algorithm.prepare(self.weight, p, "forward")
        return self.forms[key]

    def fail(self, algorithm) -> None:
        """``algorithm``'s prepared run raised: drop its forms, and run it plain from now on."""
        self.failed.add(algorithm.name)
        self.forms = {k: f for k, f in self.forms.items() if k[0] != algorithm.name}

    def describe(self) -> str:
        """The prepared forms held, for ``repr`` (empty when none)."""
        forms = {id(f): f for f in self.forms.values()}.values()
        return ", ".join(f"{f.made_for['algorithm']} {f.nbytes / 2 ** 20:.2f} MiB" for f in forms)

    def release(self) -> None:
        for a in self.frozen:
            a.flags.writeable = True
        self.frozen, self.forms = [], {}


def _sources(conv, bn) -> tuple:
    own = (conv.weight, conv.bias)
    return own if bn is None else own + (bn.weight, bn.bias, bn.running_mean, bn.running_var)
