"""Running an algorithm under the kit's eye: ``supports`` held to its contract, and a run into a result
poisoned with NaN, so that an element the algorithm never writes stays NaN and is seen."""
from __future__ import annotations

import numpy as np

import convalgos
from convalgos import ConvParams

from .errors import CheckError


def ask_supports(algorithm, p: ConvParams, op: str):
    """``algorithm.supports(p, op)``, held to its contract (a refusal carries a reason) or CheckError."""
    try:
        support = algorithm.supports(p, op)
    except Exception as error:                   # noqa: BLE001 (any exception is the finding)
        raise CheckError("supports", f"supports({p}, {op!r}) raised {type(error).__name__}: {error}") from error
    if not support:
        reason = getattr(support, "reason", None)
        if not isinstance(reason, str) or not reason.strip():
            raise CheckError("supports", f"supports({p}, {op!r}) refused the layer without a reason "
                                         f"(got {support!r}; return convalgos.Support(False, 'why'))")
    return support


def poisoned_run(algorithm, op: str, a, b, p: ConvParams) -> np.ndarray:
    """Pass ``op`` into a fresh NaN-filled result in the compute dtype (so the algorithm writes it directly);
    an exception from an accepted layer is a ``supports`` finding."""
    out = np.full(p.result_shape(op), np.nan, dtype=p.compute_dtype)
    try:
        convalgos.run(algorithm, op, a, b, p, out)
    except Exception as error:                   # noqa: BLE001
        raise CheckError("supports", f"supports accepted the {op} pass of {p}, but it raised "
                                     f"{type(error).__name__}: {error}") from error
    return out
