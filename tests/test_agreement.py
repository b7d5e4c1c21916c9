"""Every built-in algorithm passes ``convalgos.testing``'s checks, pass by pass, on the layers it supports: the
kit is tested by use. Then what the kit does not draw: the public ``conv2d`` with bias in float16,
non-contiguous arrays and ``out=``, a refusal as ``UnsupportedError``, an empty batch, repeated calls."""
import re

import numpy as np
import pytest

import convalgos
from convalgos import ALGORITHMS, PASSES, ConvParams, reference
from convalgos.testing import CHECKS, assert_conv_close, check_algorithm

#: layers per pass: the kit's quick profile (the user's default is 100).
PROFILE = "convalgos-quick"
DTYPES = ("float32", "float64", "float16")

CASES = [(name, op) for name, algorithm in ALGORITHMS.items() for op in PASSES if algorithm.implements(op)]


@pytest.mark.parametrize("name, op", CASES)
def test_every_check_holds(name, op):
    result = check_algorithm(ALGORITHMS[name], passes=[op], dtypes=DTYPES, settings=PROFILE)
    checked = result.passes[op]
    assert checked.examples >= 10 and checked.refused <= checked.examples      # steering reached the algorithm
    assert list(checked.outcomes) == list(CHECKS)                                # every check, none exempted
    assert all(outcome.startswith(("held", "not claimed")) for outcome in checked.outcomes.values())


def weight_and_groups(name, x_shape, w_shape):
    """The layer's (w_shape, groups), or its depthwise twin's (one filter per input channel) when the algorithm
    takes only depthwise layers."""
    if ALGORITHMS[name].supports(ConvParams.from_shapes(x_shape, w_shape, padding=1)):
        return w_shape, 1
    return (x_shape[1], 1) + tuple(w_shape[2:]), x_shape[1]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_float16_in_float32_out_float16_with_bias(name):
    rng = np.random.default_rng(0)
    w_shape, groups = weight_and_groups(name, (2, 4, 9, 9), (6, 4, 3, 3))
    x = rng.standard_normal((2, 4, 9, 9)).astype(np.float16)
    w, b = rng.standard_normal(w_shape).astype(np.float16), rng.standard_normal(w_shape[0]).astype(np.float16)
    y = convalgos.conv2d(x, w, b, padding=1, groups=groups, algo=name)
    p = ConvParams.from_arrays(x, w, b, padding=1, groups=groups)
    assert y.dtype == np.float16 and y.shape == p.out_shape
    assert_conv_close(y, reference.conv2d(x, w, b, padding=1, groups=groups), layer=p, operands=(x, w), bias=b,
                      tolerance=ALGORITHMS[name].tolerance_of("forward", "float16"))


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_non_contiguous_input_and_out(name):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 10, 8, 6)).astype(np.float32).transpose(0, 1, 3, 2)[:, ::2]   # (2, 5, 6, 8)
    w_shape, groups = weight_and_groups(name, x.shape, (4, 5, 3, 3))
    w = rng.standard_normal(w_shape).astype(np.float32)
    ref = reference.conv2d(x, w, padding=1, groups=groups)
    out = np.empty((2, w_shape[0], 6, 8), np.float32)
    y = convalgos.conv2d(x, w, padding=1, groups=groups, algo=name, out=out)
    assert y is out
    assert_conv_close(out, ref, tolerance=ALGORITHMS[name].tolerance["float32"])


#: layers some algorithm refuses: 5x5 (Winograd), stride 2 (Winograd), groups < C (depthwise)
REFUSABLE = [ConvParams.from_shapes((1, 4, 9, 9), (4, 4, 5, 5), padding=2),
             ConvParams.from_shapes((1, 4, 9, 9), (4, 2, 3, 3), stride=2, groups=2)]


REFUSALS = [(name, p) for name in ALGORITHMS for p in REFUSABLE if not ALGORITHMS[name].supports(p)]


@pytest.mark.parametrize("name, p", REFUSALS, ids=[f"{name}-{p}" for name, p in REFUSALS])
def test_a_refused_layer_raises_unsupported_error_with_the_reason(name, p):
    rng = np.random.default_rng(2)
    x, w = rng.standard_normal(p.in_shape), rng.standard_normal(p.weight_shape)
    with pytest.raises(convalgos.UnsupportedError, match=re.escape(ALGORITHMS[name].supports(p).reason)):
        convalgos.conv2d(x, w, stride=p.stride, padding=p.padding, groups=p.groups, algo=name)


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_an_empty_batch_gives_an_empty_result(name):
    w_shape, groups = weight_and_groups(name, (0, 4, 6, 6), (4, 4, 3, 3))
    y = convalgos.conv2d(np.zeros((0, 4, 6, 6), np.float32), np.ones(w_shape, np.float32), padding=1,
                         groups=groups, algo=name)
    assert y.shape == (0, 4, 6, 6) and y.dtype == np.float32


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_repeated_calls_reuse_workspace_and_agree(name):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8, 20, 20)).astype(np.float32)
    w_shape, groups = weight_and_groups(name, x.shape, (8, 8, 3, 3))
    w = rng.standard_normal(w_shape).astype(np.float32)
    first = convalgos.conv2d(x, w, padding=1, groups=groups, algo=name)
    second = convalgos.conv2d(x, w, padding=1, groups=groups, algo=name)
    np.testing.assert_array_equal(first, second)
    ALGORITHMS[name].release()
    assert ALGORITHMS[name].workspace.nbytes == 0
