"""What is specific to ``direct``: the depthwise layers it is for, the polyphase split, its workspace."""
import numpy as np
import pytest

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.direct import CHANNELS_LAST_MIN_C, channels_last, phase_plane, rows_per_item
from convalgos.reference import normwise_error

DIRECT = ALGORITHMS["direct"]


def check(x_shape, w_shape, dtype="float32", seed=0, **kw):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    y = convalgos.conv2d(x, w, **kw, algo="direct")
    err = normwise_error(y, reference.conv2d(x, w, **kw))
    assert err <= DIRECT.tolerance[dtype], f"normwise error {err:.3g}"


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("size", [7, 13, 28, 31])
def test_depthwise_3x3_like_mobilenet(dtype, stride, size):
    check((2, 12, size, size), (12, 1, 3, 3), dtype, stride=stride, padding=1, groups=12)


@pytest.mark.parametrize("kw", [
    dict(stride=(2, 3), padding=((0, 2), (1, 0))),        # unequal strides, asymmetric padding
    dict(stride=3, dilation=2, padding=2),                 # sh*sw phases with dilated taps
    dict(stride=(1, 2), dilation=(3, 1), padding=((3, 0), (0, 3))),
    dict(padding=5),                                       # padding wider than the kernel: all-zero rows
])
def test_polyphase_split_strides_dilations_paddings(kw):
    check((1, 3, 11, 10), (4, 3, 3, 2), **kw)
    check((1, 6, 11, 10), (6, 1, 3, 3), **kw, groups=6)   # the depthwise path with the same geometry


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=1),
                                dict(stride=(2, 1), padding=((0, 2), (1, 0))), dict(dilation=2, padding=(2, 1))])
def test_depthwise_channels_last_path(dtype, kw):
    C = CHANNELS_LAST_MIN_C + 3
    p = ConvParams.from_shapes((2, C, 7, 9), (C, 1, 3, 3), groups=C, **kw)
    assert channels_last(p)
    check((2, C, 7, 9), (C, 1, 3, 3), dtype, groups=C, **kw)


@pytest.mark.parametrize("kw", [dict(padding=((1, 1), (2, 0))), dict(padding=((0, 2), (0, 2))),
                                dict(dilation=2, padding=2), dict(dilation=(1, 2), padding=(0, 2))])
def test_depthwise_flat_rows_with_wrapped_borders(kw):
    """Wo = W: the inner rows are one flat pass whose wrapped border columns are recomputed."""
    check((1, 3, 10, 9), (3, 1, 3, 3), groups=3, **kw)
    check((1, 3, 10, 9), (3, 1, 3, 3), "float64", groups=3, **kw)


def test_depthwise_channel_multiplier():
    check((1, 5, 9, 9), (10, 1, 3, 3), padding=1, groups=5)


def test_deep_reduction_float32_within_tolerance():
    check((1, 512, 7, 7), (8, 512, 3, 3), padding=1)


def test_long_planes_span_several_items():
    """A 112 x 112 plane is cut into blocks of rows_per_item rows; the last block is short."""
    p = ConvParams.from_shapes((1, 2, 112, 112), (2, 1, 3, 3), padding=1, groups=2)
    assert 112 % rows_per_item(p) != 0
    check((1, 2, 112, 112), (2, 1, 3, 3), padding=1, groups=2)


@pytest.mark.parametrize("x_shape, w_shape, kw", [
    ((2, 4, 15, 12), (8, 4, 3, 3), dict(padding=1)),
    ((2, 4, 15, 12), (8, 4, 3, 3), dict(stride=2, padding=(0, 1))),
    ((2, 4, 15, 12), (8, 2, 3, 3), dict(dilation=2, groups=2)),
    ((2, 4, 15, 12), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4)),        # depthwise, column phases
    ((2, 4, 15, 12), (4, 1, 3, 3), dict(padding=1, groups=4)),                  # depthwise, partial sums only
    ((2, 64, 15, 12), (64, 1, 3, 3), dict(stride=2, padding=1, groups=64)),    # depthwise, channels-last
])
def test_workspace_bytes_is_what_forward_keeps(x_shape, w_shape, kw):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    p = ConvParams.from_arrays(x, w, **kw)
    assert channels_last(p) == (x_shape[1] == 64)
    DIRECT.release()
    convalgos.conv2d(x, w, **kw, algo="direct", out=np.empty(p.out_shape, np.float32))
    assert DIRECT.workspace.nbytes == DIRECT.workspace_bytes(p) > 0
    DIRECT.release()


def test_phase_plane_sizes():
    p = ConvParams.from_shapes((1, 1, 112, 112), (1, 1, 3, 3), stride=2, padding=1)
    assert p.out_hw == (56, 56) and phase_plane(p) == (58, 57)


def test_flops_are_the_direct_count():
    p = ConvParams.from_shapes((2, 6, 9, 9), (4, 3, 3, 3), groups=2, padding=1)
    assert DIRECT.flops(p) == p.flops == 2 * 2 * 4 * 3 * 3 * 3 * 9 * 9
