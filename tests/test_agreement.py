"""Every algorithm agrees with the float64 reference on random layers, within its own tolerance table."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import convalgos
from convalgos import ALGORITHMS, reference
from convalgos.reference import normwise_error
from layers import conv_kwargs, layers, make_arrays, params_of

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def check_against_reference(name, layer, dtype, seed=0):
    p = params_of(layer, dtype)
    algorithm = ALGORITHMS[name]
    if not algorithm.supports(p):
        with pytest.raises(convalgos.UnsupportedError):
            convalgos.conv2d(*make_arrays(layer, dtype, seed), **conv_kwargs(layer), algo=name)
        return False
    x, w, b = make_arrays(layer, dtype, seed)
    y = convalgos.conv2d(x, w, b, **conv_kwargs(layer), algo=name)
    assert y.dtype == np.dtype(dtype) and y.shape == p.out_shape
    ref = reference.conv2d(x, w, b, **conv_kwargs(layer))
    err = normwise_error(y, ref)
    if err > algorithm.tolerance[dtype]:
        err = cancellation_safe_error(y, ref, x, w, b, layer, p)
    assert err <= algorithm.tolerance[dtype], f"{name} on {p}: normwise error {err:.3g}"
    return True


def cancellation_safe_error(y, ref, x, w, b, layer, p):
    """max|y - ref| over max(max|ref|, the size of a typical output, max(|x| * |w|) / sqrt(terms)).

    On a layer with a handful of outputs the terms may cancel (a single output of -0.036 from 150 terms of
    size ~1, found by hypothesis): every float32 algorithm then errs by a few units in the last place of the
    terms, and max|ref| makes that a relative error of 2e-5. The magnitude convolution |x| * |w| divided by
    sqrt(terms) is what a random output's size would be, so the measure is unchanged where nothing cancels."""
    magnitude = reference.conv2d(np.abs(x), np.abs(w), None if b is None else np.abs(b), **conv_kwargs(layer))
    scale = max(np.max(np.abs(ref)), np.max(magnitude) / np.sqrt(p.Cg * p.R * p.S))
    return float(np.max(np.abs(y.astype(np.float64) - ref)) / scale)


@pytest.mark.parametrize("name", list(ALGORITHMS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@SETTINGS
@given(layer=layers())
def test_random_layers(name, dtype, layer):
    check_against_reference(name, layer, dtype)


@pytest.mark.parametrize("name", list(ALGORITHMS))
@settings(max_examples=15, deadline=None)
@given(layer=layers(kernel=(3, 3), stride=(1, 1), dilation=(1, 1)))
def test_random_3x3_stride1_layers(name, layer):
    """The layers Winograd is for, so that every algorithm (Winograd included) meets many of them."""
    check_against_reference(name, layer, "float32")


def weight_and_groups(name, x_shape, w_shape):
    """The layer's (w_shape, groups), or its depthwise twin's (one filter per input channel) when the algorithm
    takes only depthwise layers."""
    if ALGORITHMS[name].supports(convalgos.ConvParams.from_shapes(x_shape, w_shape, padding=1)):
        return w_shape, 1
    return (x_shape[1], 1) + tuple(w_shape[2:]), x_shape[1]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_float16_in_float32_out_float16(name):
    w_shape, groups = weight_and_groups(name, (2, 4, 9, 9), (6, 4, 3, 3))
    layer = dict(x_shape=(2, 4, 9, 9), w_shape=w_shape, stride=(1, 1), padding=((1, 1), (1, 1)),
                 dilation=(1, 1), groups=groups, bias=True)
    assert check_against_reference(name, layer, "float16")


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
    assert normwise_error(out, ref) <= ALGORITHMS[name].tolerance["float32"]


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
