"""The adjoint identities that tie the three passes together.

Forward, backward-data and backward-filter are one triple sum read three ways:

    S = sum over (n, k, c, i, j, r, s) of  x[n, c, i*sh + r*dh - top, j*sw + s*dw - left] w[k, c, r, s] dy[n, k, i, j]

(c running over the input channels of k's group)

    <forward(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)> = S

(each pass sums the terms over the indices its result does not keep). So an algorithm's passes can be checked
against each other with no reference at all: a backward pass that is not the transpose of its forward breaks
an identity, whatever the data.

The bound is what the passes' own tolerances allow. A pass that meets its tolerance errs in no element by
more than tol * scale, where scale is the one its agreement check uses (``closeness.py``: max|ref|, or the
cancellation-safe scale, or 1 where every term is zero and the check is absolute), so its inner product with
the partner operand moves by at most tol * scale * sum|partner|. Two passes then agree within the sum of their
two such bounds. Each ``tol`` is the algorithm's own ``tolerance_of(pass, dtype)``, or 1e-12 for a pass the
algorithm does not implement or support (computed by the float64 reference).

So an algorithm whose passes all agree with the reference always satisfies the identities: with the agreement
check on, this one adds the name of the pair of passes that disagree; alone (``checks=["adjoint"]``) it needs
no reference for the algorithm's own passes. A wrong transpose moves S by a fraction of order one of
sum |x| |w| |dy|, thousands of times the bound; an honest algorithm's gap stays far below it, since rounding
errors of different elements have random signs (measured on the built-ins, 150 random layers per pass in
float16, 32 and 64: at most 0.0043 of the bound, winograd_fused_4x4's forward). An earlier bound,
(tol_a + tol_b) * sum |x| |w| |dy|, failed FFT on layers whose every term is zero (a 1x1 image whose taps all
fall in the padding): FFT's errors scale with the whole image, not with each element's own terms.

It runs in float64 where the algorithm supports float64 for the pass checked, else in the layer's dtype.
"""
from __future__ import annotations

import dataclasses

import numpy as np

from convalgos import PASSES, ConvParams, reference

from .closeness import cancellation_safe_scale
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


def inner_products(algorithm, p: ConvParams, op: str, seed: int) -> dict:
    """pass -> (S as that pass computes it, the bound on its error, who computed it)."""
    arrays = layer_arrays(p, seed)
    products = {}
    for other in PASSES:
        a, b = (arrays[name] for name in OPERANDS[other])
        ref = reference.PASS[other](a, b, p)
        if other == op or (algorithm.implements(other) and algorithm.supports(p, other)):
            result = poisoned_run(algorithm, other, a, b, p)
            tol, by = algorithm.tolerance_of(other, p.dtype), algorithm.name
        else:
            result, tol, by = ref, REFERENCE_TOLERANCE, "the reference"
        partner = np.asarray(arrays[PARTNER[other]], dtype=np.float64)
        scale = cancellation_safe_scale(ref, p, other, (a, b)) or 1.0
        products[other] = (float(np.vdot(np.asarray(result, dtype=np.float64), partner)),
                           tol * scale * float(np.sum(np.abs(partner))), by)
    return products


def check_adjoint(algorithm, p: ConvParams, op: str, seed: int = 0) -> float:
    """Raise CheckError unless pass ``op`` satisfies both identities with the other two passes (module
    docstring); returns the larger gap as a share of its bound."""
    q = adjoint_layer(algorithm, p, op)
    products = inner_products(algorithm, q, op, seed)
    mine, my_bound, by = products[op]
    worst = 0.0
    for other, (theirs, their_bound, other_by) in products.items():
        if other == op:
            continue
        bound, gap = my_bound + their_bound, abs(mine - theirs)
        if not gap <= bound:
            raise CheckError("adjoint", f"on {q}: the {op} pass ({by}) gives S = {mine:.9g} but the {other} pass "
                                        f"({other_by}) gives S = {theirs:.9g}; they differ by {gap:.3g}, over "
                                        f"the {bound:.3g} their tolerances allow")
        worst = max(worst, gap / bound if bound > 0 else 0.0)
    return worst
