"""How close a convolution result is to the float64 reference: the measure every tolerance is written in.

The normwise error is max|y - ref| / max|ref| (``convalgos.reference.normwise_error``). It fails honest
algorithms on layers whose few outputs cancel: a single output of -0.036 made of 150 terms of size ~1 (found by
hypothesis) is off by a few units in the last place of the terms in every float32 algorithm, and max|ref|
turns that into a relative error of 2e-5. So, when the plain measure is over the tolerance, the scale becomes

    max(max|ref|, max(M) / sqrt(terms)),    M = the same pass of |a| and |b| (every term's magnitude summed)

where ``terms`` is how many terms make one element of the result. max(M) / sqrt(terms) is the size a random
output of those terms would have, so where nothing cancels (max|ref| is at least that) the measure is
unchanged. Terms per element: forward C/g*R*S, backward-data K/g*R*S (at most: stride skips some),
backward-filter N*Ho*Wo.
"""
from __future__ import annotations

import numpy as np

from convalgos import ConvParams, reference


def terms_per_element(p: ConvParams, op: str) -> int:
    """How many products are summed into one element of pass ``op``'s result (at most)."""
    return {"forward": p.Cg * p.R * p.S, "backward_data": p.Kg * p.R * p.S,
            "backward_filter": p.N * p.out_hw[0] * p.out_hw[1]}[op]


def cancellation_safe_scale(ref, p: ConvParams, op: str, operands, bias=None) -> float:
    """max(max|ref|, max(M) / sqrt(terms)) (module docstring); ``operands``: the pass's two inputs."""
    a, b = (np.abs(np.asarray(v, dtype=np.float64)) for v in operands)
    magnitude = reference.PASS[op](a, b, p)
    if bias is not None:
        magnitude += np.abs(np.asarray(bias, dtype=np.float64))[None, :, None, None]
    peak = float(np.max(magnitude)) if magnitude.size else 0.0
    return max(float(np.max(np.abs(ref))) if ref.size else 0.0, peak / np.sqrt(max(terms_per_element(p, op), 1)))


def conv_error(result, ref, *, layer: ConvParams | None = None, op: str = "forward", operands=None,
               bias=None, tolerance: float | None = None) -> float:
    """The normwise error of ``result`` against ``ref``; with ``layer`` and ``operands`` (the pass's two
    inputs) the cancellation-safe scale is used where the plain error is over ``tolerance`` (or always, when
    no tolerance is given). NaN when the result holds a NaN or an infinity."""
    result, ref = np.asarray(result, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    if result.shape != ref.shape:
        raise ValueError(f"result shape {result.shape} differs from the reference's {ref.shape}")
    if ref.size == 0:
        return 0.0
    if not np.all(np.isfinite(result)):
        return float("nan")
    error = reference.normwise_error(result, ref)
    if layer is None or operands is None or (tolerance is not None and error <= tolerance):
        return error
    scale = cancellation_safe_scale(ref, layer, op, operands, bias)
    diff = float(np.max(np.abs(result - ref)))
    return diff / scale if scale > 0 else diff


def assert_conv_close(result, ref, *, tolerance: float, layer: ConvParams | None = None, op: str = "forward",
                      operands=None, bias=None, name: str = "result") -> float:
    """Raise AssertionError unless ``conv_error`` (same arguments) is within ``tolerance``; return the error.

    The message names the layer, the pass, the error against the tolerance, and the worst element: its
    index, its value and the reference's.
    """
    error = conv_error(result, ref, layer=layer, op=op, operands=operands, bias=bias, tolerance=tolerance)
    if error <= tolerance:                       # False for NaN
        return error
    result64, ref64 = np.asarray(result, dtype=np.float64), np.asarray(ref, dtype=np.float64)
    where = f"{op} of {layer}" if layer is not None else op
    bad = ~np.isfinite(result64)
    if bad.any():
        index = tuple(int(i) for i in np.argwhere(bad)[0])
        raise AssertionError(f"{name} of the {where} holds {int(bad.sum())} non-finite values of "
                             f"{result64.size}, first {result64[index]} at index {index}")
    index = tuple(int(i) for i in np.unravel_index(np.argmax(np.abs(result64 - ref64)), ref64.shape))
    raise AssertionError(f"{name} of the {where}: error {error:.3g} over the tolerance {tolerance:.3g}; worst "
                         f"element at index {index}: {result64[index]:.7g}, reference {ref64[index]:.7g}")
