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
    assert err <= algorithm.tolerance[dtype], f"{name} on {p}: normwise error {err:.3g}"
    return True


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


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_float16_in_float32_out_float16(name):
    layer = dict(x_shape=(2, 4, 9, 9), w_shape=(6, 4, 3, 3), stride=(1, 1), padding=((1, 1), (1, 1)),
                 dilation=(1, 1), groups=1, bias=True)
    assert check_against_reference(name, layer, "float16")


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_non_contiguous_input_and_out(name):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 10, 8, 6)).astype(np.float32).transpose(0, 1, 3, 2)[:, ::2]   # (2, 5, 6, 8)
    w = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    ref = reference.conv2d(x, w, padding=1)
    out = np.empty((2, 4, 6, 8), np.float32)
    y = convalgos.conv2d(x, w, padding=1, algo=name, out=out)
    assert y is out
    assert normwise_error(out, ref) <= ALGORITHMS[name].tolerance["float32"]


@pytest.mark.parametrize("name", list(ALGORITHMS))
def test_repeated_calls_reuse_workspace_and_agree(name):
    rng = np.random.default_rng(2)
    x = rng.standard_normal((3, 8, 20, 20)).astype(np.float32)
    w = rng.standard_normal((8, 8, 3, 3)).astype(np.float32)
    first = convalgos.conv2d(x, w, padding=1, algo=name)
    second = convalgos.conv2d(x, w, padding=1, algo=name)
    np.testing.assert_array_equal(first, second)
    ALGORITHMS[name].release()
    assert ALGORITHMS[name].workspace.nbytes == 0
