"""ConvParams normalises a layer once, and bad input gets a clear error naming the parameter and its value."""
import re

import numpy as np
import pytest

import convalgos
from convalgos import ConvParams


def arrays(x_shape=(1, 4, 8, 8), w_shape=(6, 4, 3, 3), dtype=np.float32):
    return np.zeros(x_shape, dtype), np.zeros(w_shape, dtype)


def test_normalised_form_and_derived_sizes():
    x, w = arrays((2, 6, 10, 9), (4, 3, 3, 2))
    p = ConvParams.from_arrays(x, w, stride=(2, 1), padding=(1, 2), dilation=2, groups=2)
    assert (p.N, p.C, p.H, p.W, p.K, p.R, p.S) == (2, 6, 10, 9, 4, 3, 2)
    assert p.stride == (2, 1) and p.dilation == (2, 2) and p.groups == 2
    assert p.padding == ((1, 1), (2, 2))
    assert p.out_shape == (2, 4, (10 + 2 - 5) // 2 + 1, (9 + 4 - 3) // 1 + 1)
    assert p.flops == 2 * 2 * 4 * 3 * 3 * 2 * p.out_hw[0] * p.out_hw[1]
    assert (p.Cg, p.Kg, p.dtype, p.compute_dtype) == (3, 2, "float32", "float32")


def test_hashable_and_equal_for_equivalent_spellings():
    x, w = arrays()
    a = ConvParams.from_arrays(x, w, padding=1)
    b = ConvParams.from_arrays(x, w, padding=((1, 1), (1, 1)), stride=(1, 1), dilation=[1, 1])
    c = ConvParams.from_arrays(x, w, padding="same")
    assert a == b == c and len({a, b, c}) == 1


@pytest.mark.parametrize("kernel, dilation, expected", [
    ((3, 3), 1, ((1, 1), (1, 1))),
    ((4, 2), 1, ((1, 2), (0, 1))),      # the odd extra goes at the end, as torch does
    ((2, 2), 3, ((1, 2), (1, 2))),
])
def test_same_padding(kernel, dilation, expected):
    x, w = arrays((1, 1, 9, 9), (1, 1) + kernel)
    p = ConvParams.from_arrays(x, w, padding="same", dilation=dilation)
    assert p.padding == expected and p.out_hw == (9, 9)


def test_valid_and_asymmetric_padding():
    x, w = arrays()
    assert ConvParams.from_arrays(x, w, padding="valid").padding == ((0, 0), (0, 0))
    assert ConvParams.from_arrays(x, w, padding=((0, 2), (1, 0))).out_hw == (8, 7)


def test_float16_computes_in_float32():
    x, w = arrays(dtype=np.float16)
    assert ConvParams.from_arrays(x, w).compute_dtype == "float32"


@pytest.mark.parametrize("kwargs, x_shape, w_shape, match", [
    ({}, (8, 8), (6, 4, 3, 3), r"x must be 3-D \(one sample\) or 4-D \(a batch\), got shape \(8, 8\)"),
    ({}, (1, 1, 4, 8, 8), (6, 4, 3, 3), r"x must be 3-D .* or 4-D .* got shape \(1, 1, 4, 8, 8\)"),
    ({}, (1, 4, 8, 8), (6, 4, 3), r"weight must be 4-D .* got shape \(6, 4, 3\)"),
    ({}, (1, 5, 8, 8), (6, 4, 3, 3), r"channel mismatch: x has C=5"),
    ({"groups": 3}, (1, 4, 8, 8), (6, 2, 3, 3), r"groups=3 does not divide the input channels C=4"),
    ({"groups": 2}, (1, 4, 8, 8), (5, 2, 3, 3), r"groups=2 does not divide the output channels K=5"),
    ({"groups": 0}, (1, 4, 8, 8), (6, 4, 3, 3), r"groups must be a positive int, got 0"),
    ({"padding": -1}, (1, 4, 8, 8), (6, 4, 3, 3), r"padding must be >= 0, got -1"),
    ({"padding": ((0, -1), (0, 0))}, (1, 4, 8, 8), (6, 4, 3, 3), r"padding must be >= 0"),
    ({"padding": "full"}, (1, 4, 8, 8), (6, 4, 3, 3), r"padding must be .* got 'full'"),
    ({"padding": "same", "stride": 2}, (1, 4, 8, 8), (6, 4, 3, 3), r"padding='same' needs stride 1"),
    ({"stride": 0}, (1, 4, 8, 8), (6, 4, 3, 3), r"stride must be >= 1, got 0"),
    ({"stride": (1, -2)}, (1, 4, 8, 8), (6, 4, 3, 3), r"stride must be >= 1, got \(1, -2\)"),
    ({"dilation": 0}, (1, 4, 8, 8), (6, 4, 3, 3), r"dilation must be >= 1, got 0"),
    ({}, (1, 4, 2, 8), (6, 4, 3, 3), r"output size below 1: got 0x6"),
    ({"dilation": 4}, (1, 4, 8, 8), (6, 4, 3, 3), r"output size below 1"),
])
def test_bad_layers_name_the_parameter(kwargs, x_shape, w_shape, match):
    x, w = arrays(x_shape, w_shape)
    with pytest.raises(ValueError, match=match):
        convalgos.conv2d(x, w, **kwargs)


@pytest.mark.parametrize("stride", [1.5, "2", (1, 2, 3), True])
def test_stride_of_the_wrong_type(stride):
    x, w = arrays()
    with pytest.raises(TypeError, match="stride must be an int or a pair of ints"):
        convalgos.conv2d(x, w, stride=stride)


@pytest.mark.parametrize("dtype", [np.int32, np.int64, np.complex64, np.bool_])
def test_unsupported_dtypes(dtype):
    x, w = arrays(dtype=dtype)
    with pytest.raises(TypeError, match=f"x dtype must be one of .* got {np.dtype(dtype)}"):
        convalgos.conv2d(x, w)


def test_mismatched_dtypes_and_bias():
    x, w = arrays()
    with pytest.raises(TypeError, match="same dtype, got x float32 and weight float64"):
        convalgos.conv2d(x, w.astype(np.float64))
    with pytest.raises(ValueError, match=r"bias must have shape \(6,\), got \(5,\)"):
        convalgos.conv2d(x, w, np.zeros(5, np.float32))
    with pytest.raises(TypeError, match="bias dtype must match x"):
        convalgos.conv2d(x, w, np.zeros(6, np.float64))
    with pytest.raises(TypeError, match=r"x must be an array \(NumPy, CuPy, or a torch tensor\), got .*list"):
        convalgos.conv2d([[1.0]], w)


def test_unknown_algorithm_and_bad_out():
    x, w = arrays()
    with pytest.raises(ValueError, match=r"algo must be one of \[.*\], got 'winograd_9x9'"):
        convalgos.conv2d(x, w, algo="winograd_9x9")
    with pytest.raises(ValueError, match=r"out must be a float32 array of shape \(1, 6, 6, 6\)"):
        convalgos.conv2d(x, w, out=np.empty((1, 6, 6, 5), np.float32))


def test_unsupported_error_carries_the_reason():
    x, w = arrays(w_shape=(6, 4, 5, 5))
    for name, algorithm in convalgos.ALGORITHMS.items():
        support = algorithm.supports(ConvParams.from_arrays(x, w))
        if not support:
            assert support.reason
            with pytest.raises(convalgos.UnsupportedError, match=re.escape(support.reason)):
                convalgos.conv2d(x, w, algo=name)


@pytest.mark.parametrize("name", list(convalgos.ALGORITHMS))
def test_empty_batch_gives_empty_output(name):
    x, w = arrays((0, 4, 8, 8))
    groups = 4 if not convalgos.ALGORITHMS[name].supports(ConvParams.from_arrays(x, w, padding=1)) else 1
    x, w = (x, w) if groups == 1 else arrays((0, 4, 8, 8), w_shape=(8, 1, 3, 3))
    y = convalgos.conv2d(x, w, padding=1, groups=groups, algo=name)
    assert y.shape == (0, w.shape[0], 8, 8) and y.dtype == np.float32
