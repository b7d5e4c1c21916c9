"""One run for every backend and pass: array module in, array module out.

``run(algorithm, op, a, b, p)`` takes the pass's two operands, (x, w) for "forward", (dy, w) for
"backward_data" and (x, dy) for "backward_filter", already validated as layer ``p``, casts them to the compute
dtype (float16 is computed in float32), and writes the result into ``out`` (allocated by the operands' array
module, NumPy or CuPy, when not given). A result of another dtype or layout goes through a kept buffer.
"""
from __future__ import annotations

import numpy as np

from .backend import array_module
from .params import ConvParams
from .registry import check_pass


def run(algorithm, op: str, a, b, p: ConvParams, out=None, bias=None):
    """Pass ``op`` of the validated layer ``p`` through ``algorithm`` (no checks but the pass name).
    ``bias`` (forward only) is added to the result."""
    check_pass(op)
    xp, cdt = array_module(a), np.dtype(p.compute_dtype)
    shape = p.result_shape(op)
    if out is None:
        out = xp.empty(shape, dtype=a.dtype)
    if p.N == 0:
        out[...] = 0
        return out
    direct_out = out.dtype == cdt and out.flags.c_contiguous
    result = out if direct_out else algorithm.workspace.get(f"run.{op}", shape, cdt, xp=xp)
    getattr(algorithm, op)(xp.ascontiguousarray(a, dtype=cdt), xp.ascontiguousarray(b, dtype=cdt), p, result)
    if bias is not None:
        result += xp.asarray(bias, dtype=cdt)[None, :, None, None]
    if not direct_out:
        out[...] = result
    return out
