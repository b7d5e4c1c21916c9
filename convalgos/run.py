"""One run for every backend and pass: array module in, array module out.

``run(algorithm, op, a, b, p)`` takes the pass's two operands, (x, w) for "forward", (dy, w) for
"backward_data" and (x, dy) for "backward_filter", already validated as layer ``p``, casts them to the compute
dtype (float16 is computed in float32), and writes the result into ``out`` (allocated by the operands' array
module, NumPy or CuPy, when not given). A result of another dtype or layout goes through a kept buffer.

``prepared`` (``algorithm.prepare(w, p, op)``, forward and backward_data): the pass reads the weight in that
form instead of transforming ``w`` again; ``w`` may then be None. A form made for another algorithm, pass or
layer is refused with a ValueError.
"""
from __future__ import annotations

from .arrays import array_module
from .params import ConvParams
from .passes import result_array
from .registry import check_pass


def run(algorithm, op: str, a, b, p: ConvParams, out=None, bias=None, prepared=None, xp=None):
    """Pass ``op`` of the validated layer ``p`` through ``algorithm`` (no checks but the pass name and the
    prepared form's fit). ``bias`` (forward only) is added to the result. ``xp``: the operands' array module,
    when the caller knows it (the dispatcher's device does)."""
    check_pass(op)
    extra = {}
    if prepared is not None:
        prepared.check(algorithm, p, op)
        extra = {"prepared": prepared.data}
    elif b is None:
        raise ValueError(f"the second operand of {op} is None, and no prepared form was given")
    xp, cdt = array_module(a) if xp is None else xp, p.compute_dtype
    if out is None or p.N == 0:
        out = result_array(xp, p, op, a.dtype, out)
        if p.N == 0:
            return out
    direct_out = out.dtype == cdt and out.flags.c_contiguous
    result = out if direct_out else algorithm.workspace.get(f"run.{op}", out.shape, cdt, xp=xp)
    b = None if b is None else xp.ascontiguousarray(b, dtype=cdt)
    getattr(algorithm, op)(xp.ascontiguousarray(a, dtype=cdt), b, p, result, **extra)
    if bias is not None:
        result += xp.asarray(bias, dtype=cdt)[None, :, None, None]
    if not direct_out:
        out[...] = result
    return out
