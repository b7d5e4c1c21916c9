"""What is specific to ``direct_channels`` (output channels in the vector lanes): both of its passes against the
float64 reference and torch, on the layers it exists for (strided, small planes, channels that are not whole
vectors, rows that are not whole tiles; the property kit's checks are in test_agreement.py); the pass it does not
have; its prepared weights; workspace and FLOPs."""
import numpy as np
import pytest

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.direct.channel_kernels import PIXELS
from convalgos.kernels.lane_tiles import tile_lanes
from convalgos.kernels.simd import REGISTER_BYTES, REGISTERS
from convalgos.reference import normwise_error

CHANNELS = ALGORITHMS["direct_channels"]

LAYERS = [  # x shape, w shape, keywords
    ((2, 16, 16, 16), (32, 16, 3, 3), dict(stride=2, padding=1)),          # ResNet's downsampling 3x3
    ((3, 8, 8, 8), (40, 8, 3, 3), dict(padding=1)),                        # 40 channels: a block and a part
    ((1, 5, 13, 11), (7, 5, 3, 2), dict(stride=(2, 3), padding=((2, 0), (1, 1)), dilation=(1, 2))),
    ((2, 6, 9, 10), (12, 6, 1, 1), dict(stride=2)),                        # a strided pointwise shortcut
    ((1, 4, 7, 7), (9, 4, 5, 5), dict(padding=2, dilation=1)),             # a row of 7: one tile, one junk pixel
    ((2, 6, 9, 9), (9, 2, 3, 3), dict(padding=((0, 2), (1, 0)), groups=3)),  # groups of 3 channels
    ((2, 5, 7, 9), (11, 5, 2, 1), dict(padding=((1, 0), (0, 0)))),         # S = 1, no column padding: one row
    ((1, 20, 7, 7), (36, 20, 1, 1), {}),                                    # MobileNet's pointwise, 7 px
]


def operands(x_shape, w_shape, dtype, kw, seed=0):
    rng = np.random.default_rng(seed)
    x, w = rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)
    p = ConvParams.from_shapes(x_shape, w_shape, dtype=dtype, **kw)
    return x, w, rng.standard_normal(p.out_shape).astype(dtype), p


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("x_shape, w_shape, kw", LAYERS)
def test_forward_and_backward_data_against_the_float64_reference(x_shape, w_shape, kw, dtype):
    x, w, dy, p = operands(x_shape, w_shape, dtype, kw)
    y = convalgos.conv2d(x, w, **kw, algo="direct_channels")
    assert normwise_error(y, reference.conv2d(x, w, **kw)) <= CHANNELS.tolerance_of("forward", dtype)
    if CHANNELS.supports(p, "backward_data"):
        dx = convalgos.conv2d_input(x_shape, w, dy, **kw, algo="direct_channels")
        assert normwise_error(dx, reference.backward_data(dy, w, p)) <= CHANNELS.tolerance_of("backward_data", dtype)


def test_forward_and_backward_data_equal_torch():
    torch = pytest.importorskip("torch")
    x, w, dy, p = operands((2, 6, 11, 9), (20, 6, 3, 3), "float64", dict(padding=(1, 2), dilation=(2, 1)))
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    kw = dict(padding=(1, 2), dilation=(2, 1))
    assert normwise_error(convalgos.conv2d(x, w, **kw, algo="direct_channels"),
                          torch.nn.functional.conv2d(tx, tw, None, 1, **kw).numpy()) <= 1e-12
    assert normwise_error(convalgos.conv2d_input(x.shape, w, dy, **kw, algo="direct_channels"),
                          torch.nn.grad.conv2d_input(x.shape, tw, tdy, **kw).numpy()) <= 1e-12


def test_it_has_no_backward_filter_and_says_so():
    p = ConvParams.from_shapes((1, 4, 9, 9), (8, 4, 3, 3), padding=1)
    support = CHANNELS.supports(p, "backward_filter")
    assert not support and support.reason == "direct_channels has no backward_filter pass"
    with pytest.raises(convalgos.UnsupportedError, match="direct_channels"):
        convalgos.conv2d_weight(np.ones(p.in_shape, np.float32), p.weight_shape, np.ones(p.out_shape, np.float32),
                                padding=1, algo="direct_channels")


def test_a_strided_backward_data_zeroes_the_inputs_no_output_reads():
    """1x1 at stride 2: three phases of dx of four have no tap and are zero; the fourth is dy through w."""
    x, w, dy, p = operands((1, 3, 6, 6), (5, 3, 1, 1), "float64", dict(stride=2))
    dx = convalgos.conv2d_input(x.shape, w, dy, stride=2, algo="direct_channels")
    assert (dx[:, :, 1::2, :] == 0).all() and (dx[:, :, :, 1::2] == 0).all()
    np.testing.assert_allclose(dx[:, :, ::2, ::2], np.einsum("nkhw,kc->nchw", dy, w[:, :, 0, 0]), rtol=1e-12)


@pytest.mark.parametrize("op", ["forward", "backward_data"])
def test_prepared_weights_give_the_same_bits(op):
    x, w, dy, p = operands((2, 8, 10, 10), (24, 8, 3, 3), "float32", dict(padding=1))
    a = x if op == "forward" else dy
    prepared = CHANNELS.prepare(w, p, op)
    assert prepared.nbytes == CHANNELS.prepare_bytes(p, op)
    plain = convalgos.run(CHANNELS, op, a, w, p)
    np.testing.assert_array_equal(convalgos.run(CHANNELS, op, a, w, p, prepared=prepared), plain)


def test_the_last_tile_writes_no_pixel_past_the_row():
    """Wo = 7 computes a tile of 8; the eighth is never stored: the output's neighbours keep their values."""
    x, w, _, p = operands((1, 3, 7, 7), (5, 3, 3, 3), "float32", dict(padding=1))
    big = np.full((1, 5, 7, 9), 7.0, np.float32)
    out = big[:, :, :, :7]
    CHANNELS.forward(x, w, p, out)
    assert (big[:, :, :, 7:] == 7.0).all()
    assert normwise_error(out, reference.conv2d(x, w, padding=1)) <= CHANNELS.tolerance_of("forward", "float32")


@pytest.mark.parametrize("op", ["forward", "backward_data"])
def test_workspace_bytes_is_what_each_pass_keeps(op):
    x, w, dy, p = operands((2, 8, 10, 10), (24, 8, 3, 3), "float32", dict(padding=1))
    CHANNELS.release()
    convalgos.run(CHANNELS, op, x if op == "forward" else dy, w, p)
    assert CHANNELS.workspace.nbytes == CHANNELS.workspace_bytes(p, op)      # the packed weight included
    CHANNELS.release()
    convalgos.run(CHANNELS, op, x if op == "forward" else dy, w, p, prepared=CHANNELS.prepare(w, p, op))
    assert CHANNELS.workspace.nbytes == CHANNELS.workspace_bytes(p, op) - CHANNELS.prepare_bytes(p, op)
    CHANNELS.release()


def test_flops_count_whole_channel_blocks_and_whole_tiles():
    """24 output channels take one block of V (a wide block of 2L lanes with AVX-512's 32 registers, or one
    vector: whichever ``tile_lanes`` says); a row of 10 pixels computes two tiles of 8. Backward-data at stride 2
    (3x3, padding 1, 10 x 10 input): four phases of 5 x 5 inputs, their taps 2x2, 2x1, 1x2 and 1x1."""
    p = ConvParams.from_shapes((2, 8, 10, 10), (24, 8, 3, 3), padding=1)
    wide, V = tile_lanes(24, 4)
    L = REGISTER_BYTES // 4
    assert V == (2 * L if REGISTERS >= 32 and 24 > L else L) and wide == (V == 2 * L)
    assert CHANNELS.flops(p) == 2 * 2 * (-(-24 // V) * V) * 8 * 9 * 10 * 2 * PIXELS
    V8 = tile_lanes(8, 4)[1]
    assert CHANNELS.flops(p, "backward_data") == 2 * 2 * V8 * 24 * 9 * 10 * 2 * PIXELS
    p2 = ConvParams.from_shapes((2, 8, 10, 10), (24, 8, 3, 3), padding=1, stride=2)
    assert CHANNELS.flops(p2, "backward_data") == 2 * 2 * V8 * 24 * (4 + 2 + 2 + 1) * 5 * PIXELS
    assert CHANNELS.flops(p) > p.flops
