"""The short hit path gives what it gave before: a hit of each pass returns the same bits as convalgos' call of the
chosen algorithm, into a fresh output or the caller's ``out=``, unbatched too, and counts as a hit."""
import numpy as np
import pytest

import autotune
import convalgos

FRONT = {"forward": (convalgos.conv2d, "conv2d"), "backward_data": (convalgos.conv2d_input, "conv2d_input"),
         "backward_filter": (convalgos.conv2d_weight, "conv2d_weight")}


def operands(op, rng):
    x, w = rng.standard_normal((2, 3, 6, 6)).astype(np.float32), rng.standard_normal((4, 3, 3, 3)).astype(np.float32)
    dy = rng.standard_normal((2, 4, 6, 6)).astype(np.float32)
    return {"forward": (x, w, None), "backward_data": (x.shape, w, dy), "backward_filter": (x, w.shape, dy)}[op]


@pytest.mark.parametrize("op", list(FRONT))
def test_a_hit_returns_the_chosen_algorithms_bits(op):
    tuner, rng = autotune.Tuner(), np.random.default_rng(0)
    theirs, ours = FRONT[op][0], getattr(tuner, FRONT[op][1])
    args = operands(op, rng)
    first = ours(*args, padding=1)                                   # the miss: the heuristic's choice
    (entry,) = tuner.dispatch_table()
    expected = theirs(*args, padding=1, algo=entry.algo)
    hit = ours(*args, padding=1)
    out = np.empty_like(expected)
    into = ours(*args, padding=1, out=out)
    assert into is out and np.array_equal(hit, expected) and np.array_equal(into, expected)
    assert np.array_equal(first, expected) and tuner.cache_info().hits == 2
    if op == "forward":                      # one unbatched sample: a key of batch 1, with a choice of its own
        one = ours(args[0][0], args[1], padding=1)
        chosen = next(e.algo for e in tuner.dispatch_table() if e.key.params.N == 1)
        assert np.array_equal(one, theirs(args[0][:1], args[1], padding=1, algo=chosen)[0])
