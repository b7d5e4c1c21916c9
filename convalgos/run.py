"""One run for every backend and pass: array module in, array module out.

``run(algorithm, op, a, b, p)`` takes the pass's two operands, (x, w) for "forward", (dy, w) for
"backward_data" and (x, dy) for "backward_filter", already validated as layer ``p``, casts them to the compute
dtype (float16 is computed in float32), and writes the result into ``out`` (allocated by the operands' array
module, NumPy or CuPy, when not given). A result of another dtype or layout goes through a kept buffer.

``prepared`` (``algorithm.prepare(w, p, op)``, forward and backward_data): the pass reads the weight in that
form instead of transforming ``w`` again; ``w`` may then be None. A form made for another algorithm, pass or
layer is refused with a ValueError.

The operands reach a CPU algorithm read-only (NumPy views with ``writeable`` off): a
pass that wrote into its input fails at once (Numba refuses to compile a store into a read-only array, NumPy
raises) instead of corrupting the caller's data, and each kernel has one signature per dtype. Numba compiles a
kernel anew for each argument type, and a read-only array is a type of its own: when the operands came as the
caller had them, writable (most) or read-only (a prepared form, an eval-mode weight, ``np.broadcast_to``, a
memory-mapped file), the test suite compiled many kernels two to four times over (``convalgos.warm``).
"""
from __future__ import annotations

import numpy as np

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
    a, b = (None if v is None else xp.ascontiguousarray(v, dtype=cdt) for v in (a, b))
    if algorithm.backend == "cpu":
        a, b = read_only(a), read_only(b)
    getattr(algorithm, op)(a, b, p, result, **extra)
    if bias is not None:
        result += xp.asarray(bias, dtype=cdt)[None, :, None, None]
    if not direct_out:
        out[...] = result
    return out


def read_only(a):
    """``a`` as a read-only view when it is a writable NumPy array (~1 us); anything else as it is."""
    if isinstance(a, np.ndarray) and a.flags.writeable:
        a = a.view()
        a.flags.writeable = False
    return a
