"""Bounds for a float32 convolution result whose algorithm a tuner chose: they hold whichever it chose.

Which algorithm serves a pass depends on the machine (a race on its timings, a heuristic measured on another
one), and so does each sum's rounding (the CPU's vector width). A result compared element by element at a fixed
tolerance holds only for the choice the machine that wrote the test made (issue 40; ``AUTOTUNE_TEST_SHUFFLE``
in conftest.py draws the choices at random to find such tests). Compared instead normwise
(``normwise_error``: max|a - b| / max|b|), against a peer (torch's conv, or the float64 reference) at

    the chosen algorithm's tolerance for its pass (``Algorithm.tolerance_of``) + PEER_ERROR

where ``chosen_bound`` reads the choices from a tuner's table and ANY_CHOICE is the largest tolerance any
algorithm has, for a result that did not keep its tuner at hand. Two paths through the same choices (a model
fused and unfused) differ by their own extra roundings only: PLAIN_SUM per layer.
"""
from convalgos import ALGORITHMS, PASSES
from convalgos.reference import normwise_error

#: a plain float32 sum's own error (``direct``'s tolerance): a peer's (torch's conv sums so), or what one more
#: rounding of a layer's operands (a BatchNorm folded into its weights) may move its output
PLAIN_SUM = PEER_ERROR = ALGORITHMS["direct"].tolerance_of("forward", "float32")
#: the largest float32 tolerance of any registered algorithm and pass: a bound for every choice
ANY_CHOICE = max(a.tolerance_of(op, "float32") for a in ALGORITHMS.values() for op in PASSES if a.implements(op))


def chosen_bound(tuner, dtype: str = "float32", registry=ALGORITHMS) -> float:
    """The largest tolerance among the algorithms ``tuner`` chose for the keys of ``dtype`` it holds
    (``registry``: the GPU's, ``convalgos.cuda.ALGORITHMS``, for a GPU tuner's choices)."""
    tolerances = [registry[e.algo].tolerance_of(e.key.op, dtype) for e in tuner.dispatch_table()
                  if e.key.params.dtype == dtype]
    assert tolerances, f"the tuner holds no {dtype} choice"
    return max(tolerances)


def within(result, expected, bound: float) -> bool:
    """``result`` normwise within ``bound`` + PEER_ERROR of ``expected`` (arrays or tensors)."""
    as_array = (lambda t: t.detach().cpu().double().numpy() if hasattr(t, "detach") else t)
    return normwise_error(as_array(result), as_array(expected)) <= bound + PEER_ERROR
