"""The properties an algorithm must have on one layer, each a function that raises ``CheckError`` when not.

In the order ``check_layer`` runs them (an earlier failure stops the later ones on that layer):

- ``supports``: ``supports(p, op)`` answers without raising; a refusal is falsy with a non-empty ``.reason``;
  an accepted layer runs without raising.
- ``written``: the result is written into a buffer filled with NaN first; every element must be overwritten.
- ``agreement``: the result is within ``tolerance_of(op, dtype)`` of the float64 reference
  (``assert_conv_close``, the cancellation-safe measure).
- ``adjoint``: the three passes are one triple sum S = sum x[..] w[..] dy[..] read three ways, so
  <forward(x, w), dy> = <x, backward_data(dy, w)> = <w, backward_filter(x, dy)>. ``adjoint.py`` has the bound.
- ``deterministic``: where the algorithm claims ``deterministic = True``, two more runs give the same bits.
- ``workspace``: the peak of what Python and NumPy allocate during one run (``tracemalloc``, after
  ``release()`` where the algorithm keeps buffers) is at most ``workspace_bytes(p, op)`` plus
  ``WORKSPACE_ALLOWANCE`` for small Python objects. tracemalloc sees NumPy's arrays, NumPy's ufunc buffers
  (``out[:, ks] += t`` into a strided view of a small array buffers both operands) and what a Numba kernel
  allocates inside itself (NRT); it does not see GPU memory, nor C libraries' own buffers (BLAS, pocketfft).
"""
from __future__ import annotations

import tracemalloc

import numpy as np

import convalgos
from convalgos import ConvParams, reference

from .adjoint import check_adjoint
from .closeness import assert_conv_close
from .errors import CheckError
from .runs import ask_supports, poisoned_run
from .strategies import operands

#: every check, in the order they run on a layer.
CHECKS = ("supports", "written", "agreement", "adjoint", "deterministic", "workspace")
#: bytes a run may allocate beyond its declared workspace: the Python objects of a call (views, tuples, a
#: dispatcher's argument types). Measured over 150 random layers per pass: at most 4.9 KiB beyond the
#: formula in the built-ins whose formulas hold (direct's backward-data), 4 KiB in the tests' NumPy algorithm.
WORKSPACE_ALLOWANCE = 8 << 10
#: runs compared bitwise with the first by the determinism check.
REPEATS = 2


def check_written(out: np.ndarray, p: ConvParams, op: str) -> None:
    unwritten = np.isnan(out)
    if unwritten.any():
        index = tuple(int(i) for i in np.argwhere(unwritten)[0])
        raise CheckError("written", f"{int(unwritten.sum())} of {out.size} elements of the {op} result of {p} "
                                    f"were never written (still NaN), the first at index {index}")


def check_agreement(algorithm, out, a, b, p: ConvParams, op: str) -> float:
    """The error against the reference, as a share of the tolerance."""
    result = out.astype(p.dtype)                 # what a caller of float16 gets back
    ref = reference.PASS[op](a, b, p)
    tolerance = algorithm.tolerance_of(op, p.dtype)
    try:
        error = assert_conv_close(result, ref, tolerance=tolerance, layer=p, op=op, operands=(a, b),
                                  name=f"{algorithm.name}'s result")
    except AssertionError as failure:
        raise CheckError("agreement", str(failure)) from None
    return error / tolerance


def check_deterministic(algorithm, out, a, b, p: ConvParams, op: str):
    """0.0 when REPEATS more runs give the same bits; "not claimed" when the algorithm does not claim it."""
    if not getattr(algorithm, "deterministic", False):
        return "not claimed"
    for repeat in range(REPEATS):
        again = poisoned_run(algorithm, op, a, b, p)
        if not np.array_equal(out, again, equal_nan=True):
            differ = int(np.sum(out != again))
            raise CheckError("deterministic", f"deterministic is True, but run {repeat + 2} of the {op} pass of "
                                              f"{p} differs from the first in {differ} of {out.size} elements "
                                              f"(max difference {np.nanmax(np.abs(out - again)):.3g})")
    return 0.0


def peak_allocation(algorithm, op: str, a, b, p: ConvParams) -> int:
    """Peak bytes Python and NumPy allocate during one run into a ready result (after ``release()``)."""
    out = np.empty(p.result_shape(op), dtype=p.compute_dtype)
    a, b = (np.ascontiguousarray(v, dtype=p.compute_dtype) for v in (a, b))   # run() casts nothing
    if hasattr(algorithm, "release"):
        algorithm.release()                      # kept buffers are allocated again inside the traced run
    was_tracing = tracemalloc.is_tracing()
    if not was_tracing:
        tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        before = tracemalloc.get_traced_memory()[0]
        convalgos.run(algorithm, op, a, b, p, out)
        return tracemalloc.get_traced_memory()[1] - before
    finally:
        if not was_tracing:
            tracemalloc.stop()


def check_workspace(algorithm, a, b, p: ConvParams, op: str, allowance: int) -> float:
    """The peak allocation as a share of the declared workspace plus the allowance."""
    declared = int(algorithm.workspace_bytes(p, op))
    peak = peak_allocation(algorithm, op, a, b, p)
    if peak > declared + allowance:
        raise CheckError("workspace", f"the {op} pass of {p} allocated {peak} bytes at its peak, more than its "
                                      f"declared workspace_bytes {declared} + {allowance} bytes allowed for "
                                      f"small Python objects")
    return peak / (declared + allowance)


def measure_layer(algorithm, op: str, p: ConvParams, seed: int = 0, checks=CHECKS,
                  allowance: int = WORKSPACE_ALLOWANCE):
    """``checks`` on pass ``op`` of layer ``p``: check -> the share of its bound used (agreement: error over
    tolerance; adjoint: gap over bound; workspace: peak over declared + allowance; 0.0 for the yes-or-no
    checks) or "not claimed". None when ``supports`` refuses the layer. Raises CheckError at the first
    check that fails."""
    unknown = set(checks) - set(CHECKS)
    if unknown:
        raise ValueError(f"checks must be among {CHECKS}, got {sorted(unknown)}")
    support = ask_supports(algorithm, p, op) if "supports" in checks else algorithm.supports(p, op)
    if not support:
        return None
    a, b = operands(p, op, seed)
    out = poisoned_run(algorithm, op, a, b, p)
    shares = {"supports": 0.0}
    if "written" in checks:
        check_written(out, p, op)
        shares["written"] = 0.0
    if "agreement" in checks:
        shares["agreement"] = check_agreement(algorithm, out, a, b, p, op)
    if "adjoint" in checks:
        shares["adjoint"] = check_adjoint(algorithm, p, op, seed)
    if "deterministic" in checks:
        shares["deterministic"] = check_deterministic(algorithm, out, a, b, p, op)
    if "workspace" in checks:
        shares["workspace"] = check_workspace(algorithm, a, b, p, op, allowance)
    return {check: shares[check] for check in CHECKS if check in checks}


def describe_share(check: str, share, worst: bool = False) -> str:
    """An outcome for people: "held", "not claimed", or "held (0.31 of its bound)" ("worst 0.31" over many)."""
    if isinstance(share, str) or check in ("supports", "written", "deterministic"):
        return share if isinstance(share, str) else "held"
    return f"held ({'worst ' if worst else ''}{share:.2g} of its bound)"


def check_layer(algorithm, op: str, p: ConvParams, seed: int = 0, checks=CHECKS,
                allowance: int = WORKSPACE_ALLOWANCE) -> dict[str, str]:
    """Run ``checks`` (names from ``CHECKS``) on pass ``op`` of layer ``p`` with the arrays of ``seed``:
    what ``check_algorithm`` does on each layer it draws, for one layer (a failure's reproducing call).

    Returns check -> outcome ("held", "not claimed", or {"supports": "refused: why"} for a layer the algorithm
    refuses); raises ``CheckError`` (an AssertionError naming the check) at the first that fails.
    """
    shares = measure_layer(algorithm, op, p, seed, checks, allowance)
    if shares is None:
        return {"supports": f"refused: {algorithm.supports(p, op).reason}"}
    return {check: describe_share(check, share) for check, share in shares.items()}
