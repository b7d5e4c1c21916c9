"""The tuner's sampled check (``autotune.measure.ReferenceCheck``) computes on its sample exactly what the float64
reference computes there: the whole reference of a layer passes it with no error, and a result wrong only inside
the sample fails it, for every pass and the geometries whose borders the sample must hold (padding on one side,
strides that skip input rows, dilation, groups)."""
import numpy as np
import pytest

from autotune.measure import ReferenceCheck
from convalgos import ConvParams, reference

GEOMETRIES = [
    dict(x=(2, 3, 40, 23), w=(4, 3, 3, 3), padding=1),
    dict(x=(1, 3, 67, 30), w=(5, 3, 11, 11), stride=4, padding=2),                 # the 11x11 stem's rows
    dict(x=(2, 4, 37, 19), w=(6, 2, 5, 3), stride=(2, 1), padding=((2, 0), (1, 1)), groups=2),
    dict(x=(3, 2, 33, 17), w=(2, 2, 3, 3), dilation=2, padding=((0, 3), (2, 0))),
    dict(x=(1, 4, 29, 29), w=(4, 1, 3, 3), padding=1, groups=4),                   # depthwise
    dict(x=(2, 2, 9, 9), w=(3, 2, 3, 3)),                                          # small: its own sample
]


def layer(g, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(g["x"]), rng.standard_normal(g["w"])
    p = ConvParams.from_shapes(x.shape, w.shape, **{k: v for k, v in g.items() if k not in ("x", "w")})
    return x, w, p, rng.standard_normal(p.out_shape)


@pytest.mark.parametrize("op", ["forward", "backward_data", "backward_filter"])
@pytest.mark.parametrize("g", GEOMETRIES, ids=[str(g["w"]) for g in GEOMETRIES])
def test_the_sample_is_the_reference_and_a_wrong_sampled_entry_fails(g, op):
    x, w, p, dy = layer(g)
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    check = ReferenceCheck(op, a, b, p)
    whole = reference.PASS[op](a, b, p)
    assert check.error(whole) < 1e-12
    wrong = whole.copy()
    if op == "forward":                                  # the last output row of the first strip
        lo, hi = check.strips[0]
        wrong[0, 0, hi - 1, -1] += 1.0
    else:                                                # a corner of the first image's or filter's plane
        wrong[0, 0, -1, -1] += 1.0
    assert check.error(wrong) > 1e-3
