"""The adjoint identities that tie the three passes together.

Forward, backward-data and backward-filter are one triple sum read three ways:

    S = sum over (n, g, k, c, i, j, r, s) of  x[n, c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s] * dy[n, k, i, j]

    <forward(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)> = S

(each pass sums the terms over the indices its result does not keep). So an algorithm's passes can be checked
against each other with no reference at all: a backward pass that is not the transpose of its forward breaks
an identity, whatever the data.

The bound. Let M = sum |x| |w| |dy| over the same terms (<forward(|x|, |w|), |dy|>). A pass whose every result
element errs by at most ``tol`` times the summed magnitude of its own terms moves its inner product by at most
tol * M, so two passes agree within (tol_a + tol_b) * M. Each pass's ``tol`` is the algorithm's own
``tolerance_of(pass, dtype)``, or 1e-12 for a pass computed by the float64 reference (where the algorithm does
not implement or support it). The tolerances are written for the worst element against max|ref|, and
rounding errors of different elements have random signs, so this bound is loose for honest algorithms
(measured on the built-ins: the gap stays under 1% of it) and far too tight for a wrong transpose, which
moves S by a fraction of M of order one.

It runs in float64 where the algorithm supports float64 for the pass checked, else in the layer's dtype.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from convalgos import PASSES, ConvParams, reference

from .errors import CheckError
from .runs import poisoned_run
from .strategies import OPERANDS, layer_arrays

#: the tolerance of a pass computed by the float64 reference.
REFERENCE_TOLERANCE = 1e-12
#: the operand each pass's result is paired with: <y, dy>, <dx, x>, <dw, w>.
PARTNER = {"forward": "dy", "backward_data": "x", "backward_filter": "w"}


def adjoint_layer(algorithm, p: ConvParams, op: str) -> ConvParams:
    """``p`` in float64 where the algorithm supports that for pass ``op``, else ``p`` itself."""
    if p.dtype == "float64":
        return p
    p64 = dataclasses.replace(p, dtype="float64")
    return p64 if algorithm.supports(p64, op) else p


def inner_products(algorithm, p: ConvParams, op: str, seed: int):
    """pass -> (S as that pass computes it, its tolerance, who computed it), and M."""
    arrays = layer_arrays(p, seed)
    products = {}
    for other in PASSES:
        a, b = (arrays[name] for name in OPERANDS[other])
        if other == op or (algorithm.implements(other) and algorithm.supports(p, other)):
            result = poisoned_run(algorithm, other, a, b, p)
            tol, by = algorithm.tolerance_of(other, p.dtype), algorithm.name
        else:
            result, tol, by = reference.PASS[other](a, b, p), REFERENCE_TOLERANCE, "the reference"
        partner = np.asarray(arrays[PARTNER[other]], dtype=np.float64)
        products[other] = (float(np.vdot(np.asarray(result, dtype=np.float64), partner)), tol, by)
    x, w, dy = (np.abs(np.asarray(arrays[name], dtype=np.float64)) for name in ("x", "w", "dy"))
    magnitude = float(np.vdot(reference.forward(x, w, p), dy))
    return products, magnitude


def check_adjoint(algorithm, p: ConvParams, op: str, seed: int = 0) -> float:
    """Raise CheckError unless pass ``op`` satisfies both identities with the other two passes (module
    docstring); returns the larger gap as a share of its bound."""
    q = adjoint_layer(algorithm, p, op)
    products, magnitude = inner_products(algorithm, q, op, seed)
    mine, tol, by = products[op]
    worst = 0.0
    for other, (theirs, other_tol, other_by) in products.items():
        if other == op:
            continue
        bound = (tol + other_tol) * magnitude
        gap = abs(mine - theirs)
        if not gap <= bound:
            raise CheckError("adjoint", f"on {q}: the {op} pass ({by}) gives S = {mine:.9g} but the {other} pass "
                                        f"({other_by}) gives S = {theirs:.9g}; they differ by {gap:.3g}, over "
                                        f"the bound {bound:.3g} = ({tol:.2g} + {other_tol:.2g}) * M, "
                                        f"M = {magnitude:.4g}")
        worst = max(worst, gap / bound if bound > 0 else 0.0)
    return worst
