"""``depthwise``: the layers it takes (and the reason it gives for the others), its forward pass (rows of vectors
from a buffered plane: strides 1, 2 and past 2, masked last vectors, blocks of rows past Ho), its per-plane
backward passes (reference, identities, torch), workspace and FLOPs per pass."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.depthwise.cpu import data_tables
from convalgos.kernels.simd import REGISTER_BYTES
from convalgos.reference import normwise_error
from test_direct import check_backward

DEPTHWISE = ALGORITHMS["depthwise"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def depthwise_layers(draw):
    """(x_shape, w_shape, kw) of a random depthwise layer: channel multiplier, stride, dilation, padding."""
    C, m = draw(st.integers(1, 5)), draw(st.sampled_from([1, 1, 2, 3]))
    R, S = draw(st.integers(1, 4)), draw(st.integers(1, 4))
    stride = (draw(st.sampled_from([1, 1, 2, 3])), draw(st.sampled_from([1, 1, 2])))
    dilation = (draw(st.sampled_from([1, 1, 2])), draw(st.sampled_from([1, 1, 2])))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(2))
    eh, ew = dilation[0] * (R - 1) + 1, dilation[1] * (S - 1) + 1
    H = draw(st.integers(max(1, eh - sum(pads[0])), 13))
    W = draw(st.integers(max(1, ew - sum(pads[1])), 13))
    return (draw(st.integers(1, 3)), C, H, W), (m * C, 1, R, S), dict(stride=stride, padding=pads,
                                                                       dilation=dilation, groups=C)


def check(x_shape, w_shape, dtype="float32", seed=0, **kw):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape).astype(dtype)
    w = rng.standard_normal(w_shape).astype(dtype)
    y = convalgos.conv2d(x, w, **kw, algo="depthwise")
    err = normwise_error(y, reference.conv2d(x, w, **kw))
    assert err <= DEPTHWISE.tolerance[dtype], f"normwise error {err:.3g}"


def test_refuses_other_layers_with_a_reason():
    support = DEPTHWISE.supports(ConvParams.from_shapes((1, 64, 8, 8), (128, 64, 3, 3)))
    assert not support
    assert support.reason == "depthwise needs groups == C (one filter per input channel, K = m*C), got groups=1, " \
                             "C=64, K=128"
    assert not DEPTHWISE.supports(ConvParams.from_shapes((1, 8, 8, 8), (8, 2, 3, 3), groups=4), "backward_data")
    for op in convalgos.PASSES:
        assert DEPTHWISE.supports(ConvParams.from_shapes((1, 8, 8, 8), (24, 1, 3, 3), groups=8), op)
    with pytest.raises(convalgos.UnsupportedError, match="groups == C"):
        convalgos.conv2d(np.ones((1, 4, 5, 5)), np.ones((4, 4, 3, 3)), algo="depthwise")


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@SETTINGS
@given(layer=depthwise_layers())
def test_every_pass_on_random_depthwise_layers(dtype, layer):
    x_shape, w_shape, kw = layer
    check(x_shape, w_shape, dtype, **kw)
    check_backward("depthwise", x_shape, w_shape, dtype, **kw)


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@pytest.mark.parametrize("kw", [dict(padding="same"), dict(stride=2, padding=1), dict(stride=(2, 3), dilation=2)])
def test_backward_passes_fixed_layers(dtype, kw):
    check_backward("depthwise", (2, 4, 12, 11), (4, 1, 3, 3), dtype, groups=4, **kw)
    check_backward("depthwise", (2, 3, 12, 11), (6, 1, 3, 3), dtype, groups=3, **kw)     # multiplier 2


def test_inputs_no_output_reads_get_zero_gradient():
    _, _, _, dx, _ = check_backward("depthwise", (1, 2, 11, 11), (2, 1, 1, 1), stride=3, groups=2)
    unread = np.ones((11, 11), bool)
    unread[::3, ::3] = False
    assert (dx[:, :, unread] == 0).all() and (dx[:, :, ~unread] != 0).all()


@SETTINGS
@given(layer=depthwise_layers(), seed=st.integers(0, 3))
def test_backward_data_at_stride_1_is_the_forward_pass_with_flipped_filters(layer, seed):
    x_shape, w_shape, kw = layer
    p = ConvParams.from_shapes(x_shape, w_shape, **{**kw, "stride": 1}, dtype="float64")
    (t, b), (l, r) = p.padding
    eh, ew = p.kernel_extent
    if p.K != p.C or max(t, b) > eh - 1 or max(l, r) > ew - 1:
        return                                  # a multiplier sums planes; larger pads would be negative
    rng = np.random.default_rng(seed)
    w, dy = rng.standard_normal(p.weight_shape), rng.standard_normal(p.out_shape)
    pad = ((eh - 1 - t, eh - 1 - b), (ew - 1 - l, ew - 1 - r))
    expected = convalgos.conv2d(dy, np.ascontiguousarray(w[:, :, ::-1, ::-1]), padding=pad, dilation=p.dilation,
                                groups=p.C, algo="depthwise")
    got = convalgos.conv2d_input(p.in_shape, w, dy, **{**kw, "stride": 1}, algo="depthwise")
    assert normwise_error(got, expected) <= 1e-12


@SETTINGS
@given(layer=depthwise_layers(), seed=st.integers(0, 3))
def test_backward_filter_is_a_correlation_of_each_x_plane_with_its_dy_plane(layer, seed):
    """Channel k of dw is the diagonal (k, k // m) entry of a forward conv of x's channels as a batch with dy's
    channels as kernels, stride and dilation swapped."""
    x_shape, w_shape, kw = layer
    p = ConvParams.from_shapes(x_shape, w_shape, **kw, dtype="float64")
    rng = np.random.default_rng(seed)
    x, dy = rng.standard_normal(p.in_shape), rng.standard_normal(p.out_shape)
    y = convalgos.conv2d(np.ascontiguousarray(x.transpose(1, 0, 2, 3)), np.ascontiguousarray(dy.transpose(1, 0, 2, 3)),
                         padding=p.padding, stride=p.dilation, dilation=p.stride, algo="direct")   # (C, K, ., .)
    m = p.K // p.C
    expected = np.stack([y[k // m, k, :p.R, :p.S] for k in range(p.K)])[:, None]
    got = convalgos.conv2d_weight(x, p.weight_shape, dy, **kw, algo="depthwise")
    assert normwise_error(got, expected) <= 1e-12


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=(1, 0), dilation=(1, 2))])
def test_backward_passes_equal_torch(kw):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((2, 4, 9, 8)), rng.standard_normal((8, 1, 3, 3))
    dy = rng.standard_normal(ConvParams.from_shapes(x.shape, w.shape, groups=4, **kw).out_shape)
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    expect_dx = torch.nn.grad.conv2d_input(x.shape, tw, tdy, groups=4, **kw).numpy()
    expect_dw = torch.nn.grad.conv2d_weight(tx, w.shape, tdy, groups=4, **kw).numpy()
    assert normwise_error(convalgos.conv2d_input(x.shape, w, dy, groups=4, **kw, algo="depthwise"),
                          expect_dx) <= 1e-12
    assert normwise_error(convalgos.conv2d_weight(x, w.shape, dy, groups=4, **kw, algo="depthwise"),
                          expect_dw) <= 1e-12


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("stride", [1, 2])
@pytest.mark.parametrize("size", [7, 13, 28, 31])
def test_3x3_like_mobilenet(dtype, stride, size):
    check((2, 12, size, size), (12, 1, 3, 3), dtype, stride=stride, padding=1, groups=12)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=1), dict(stride=(1, 3), padding=(0, 2)),
                                dict(stride=(2, 1), padding=((0, 2), (1, 0))), dict(dilation=2, padding=(2, 1)),
                                dict(stride=(3, 4), dilation=(1, 3), padding=((4, 0), (0, 5))),
                                dict(padding=((1, 1), (2, 0))), dict(padding=((0, 2), (0, 2))),
                                dict(dilation=(1, 2), padding=(0, 2))])
def test_forward_rows_at_every_column_stride(dtype, kw):
    """Column stride 1 (vector copies), 2 (two-vector reads, even lanes) and 3, 4 (column phases); planes whose
    rows are one vector and a part (W = L + 3) and whose output rows are not whole blocks of four; padding that
    puts a whole block of rows, or a column phase, in the zeros."""
    width = REGISTER_BYTES // np.dtype(dtype).itemsize + 3
    check((2, 67, 9, width), (67, 1, 3, 3), dtype, groups=67, **kw)
    check((1, 3, 5, 9), (6, 1, 2, 3), dtype, groups=3, **kw)           # channel multiplier 2, 2x3 kernel


def test_channel_multiplier():
    check((1, 5, 9, 9), (10, 1, 3, 3), padding=1, groups=5)


LAYERS = [((2, 4, 15, 12), (4, 1, 3, 3), dict(stride=2, padding=1, groups=4)),     # column phases
          ((2, 4, 15, 12), (4, 1, 3, 3), dict(padding=1, groups=4)),               # partial sums only
          ((2, 4, 15, 12), (8, 1, 3, 3), dict(stride=(1, 3), dilation=2, groups=4)),  # multiplier 2
          ((2, 64, 15, 12), (64, 1, 3, 3), dict(stride=2, padding=1, groups=64)),
          ((2, 4, 15, 12), (4, 1, 3, 3), dict(stride=(2, 3), padding=2, groups=4))]    # column phases


@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("x_shape, w_shape, kw", LAYERS)
def test_workspace_bytes_is_what_each_pass_keeps(op, x_shape, w_shape, kw):
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape).astype(np.float32)
    w = rng.standard_normal(w_shape).astype(np.float32)
    p = ConvParams.from_arrays(x, w, **kw)
    dy = rng.standard_normal(p.out_shape).astype(np.float32)
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    DEPTHWISE.release()
    convalgos.run(DEPTHWISE, op, a, b, p, np.empty(p.result_shape(op), np.float32))
    assert DEPTHWISE.workspace.nbytes == DEPTHWISE.workspace_bytes(p, op)
    assert (DEPTHWISE.workspace_bytes(p, op) == 0) == (op == "backward_filter" and p.stride == (1, 1))
    DEPTHWISE.release()


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=(2, 0), dilation=(1, 2))])
def test_flops_count_the_taps_as_computed(kw):
    """Backward-filter multiplies only the (output, tap) pairs that read inside x; the forward pass every tap of
    every output it computes: Ho rounded up to blocks of four rows, Wo to whole vectors."""
    p = ConvParams.from_shapes((2, 3, 9, 8), (6, 1, 3, 3), groups=3, **kw)
    (sh, sw), (dh, dw), ((top, _), (left, _)), (Ho, Wo) = p.stride, p.dilation, p.padding, p.out_hw
    inside = sum(0 <= i * sh + r * dh - top < 9 and 0 <= j * sw + s * dw - left < 8
                 for i in range(Ho) for j in range(Wo) for r in range(3) for s in range(3))
    assert DEPTHWISE.flops(p, "backward_filter") == 2 * 2 * 6 * inside < p.flops
    L = REGISTER_BYTES // 4
    assert DEPTHWISE.flops(p) == 2 * 2 * 6 * 9 * -(-Ho // 4) * 4 * -(-Wo // L) * L


def test_backward_data_flops_at_stride_1():
    """One phase with every tap (9 per plane, times the multiplier 2) over H rows of the padded pitch Wd."""
    p = ConvParams.from_shapes((2, 3, 9, 8), (6, 1, 3, 3), groups=3, padding=1)
    phases, taps = data_tables(p)
    assert phases.shape[0] == 1 and taps.shape[0] == 9
    Wd = 8 + 3                                          # PL = 2 zero columns left, one right
    assert DEPTHWISE.flops(p, "backward_data") == 2 * 2 * 3 * (2 * 9) * ((9 - 1) * Wd + 8)
