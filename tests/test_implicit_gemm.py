"""implicit_gemm: all three passes against the reference and torch, zero workspace (declared and real), FLOPs."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import convalgos
from convalgos import ALGORITHMS, ConvParams, PASSES, reference
from convalgos.implicit_gemm.cpu import is_flat, valid_taps
from convalgos.reference import normwise_error
from layers import layers, params_of

IMPLICIT_GEMM = ALGORITHMS["implicit_gemm"]


def operands(p: ConvParams, op: str, dtype, seed=0):
    """The pass's two operands, as ``convalgos.run`` takes them: (x, w), (dy, w) or (x, dy)."""
    rng = np.random.default_rng(seed)
    x, w, dy = (rng.standard_normal(shape).astype(dtype) for shape in (p.in_shape, p.weight_shape, p.out_shape))
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


def check_pass(p: ConvParams, op: str, dtype: str, seed=0):
    a, b = operands(p, op, dtype, seed)
    assert IMPLICIT_GEMM.supports(p, op)
    out = np.full(p.result_shape(op), np.nan, dtype)                 # every element must be written
    convalgos.run(IMPLICIT_GEMM, op, a, b, p, out)
    err = normwise_error(out, reference.PASS[op](a, b, p))
    assert err <= IMPLICIT_GEMM.tolerance_of(op, dtype), f"{op} on {p}: normwise error {err:.3g}"


@pytest.mark.parametrize("op", PASSES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=layers())
def test_every_pass_of_random_layers_matches_the_reference(op, dtype, layer):
    p = params_of(layer, dtype)
    if p.N > 0:
        check_pass(p, op, dtype)


@pytest.mark.parametrize("op", PASSES)
@pytest.mark.parametrize("kw", [dict(stride=(3, 2), padding=((2, 0), (0, 3)), dilation=(2, 3)),      # strided
                                dict(padding=((3, 1), (2, 4)), groups=6),                             # depthwise
                                dict(stride=4, dilation=1)])                        # rows no output reads
def test_layers_with_every_feature(op, kw):
    groups = kw.get("groups", 1)
    p = ConvParams.from_shapes((2, 6, 11, 13), (12, 6 // groups, 3, 4), **kw)
    assert not is_flat(p)
    check_pass(p, op, "float32", seed=1)


@pytest.mark.parametrize("op", PASSES)
@pytest.mark.parametrize("w_shape, kw", [
    ((4, 6, 3, 3), dict(padding=1)),                                                  # 3x3 same
    ((4, 3, 5, 4), dict(padding=((0, 3), (1, 2)), groups=2)),                         # 4 taps: a triple and one
    ((6, 1, 3, 3), dict(padding=((2, 2), (3, 1)), dilation=(2, 2), groups=6)),        # depthwise, dilated, lopsided
    ((5, 6, 1, 1), dict()),                                                           # 1x1
    ((3, 6, 2, 7), dict(padding=((1, 0), (3, 3)), dilation=(1, 1)))])                 # kernel as wide as x's row
def test_flat_path_layers(op, w_shape, kw):
    """Stride 1 with Wo = W: the one-pass-per-block path with its border columns summed again."""
    for dtype in ("float32", "float64"):
        p = ConvParams.from_shapes((2, 6, 9, 7), w_shape, **kw, dtype=dtype)
        assert is_flat(p)
        check_pass(p, op, dtype, seed=2)


def test_dx_is_zero_where_no_output_reads():
    p = ConvParams.from_shapes((1, 2, 9, 9), (3, 2, 2, 2), stride=4)           # rows/columns 2, 3, 6, 7 unread
    dy, w = operands(p, "backward_data", "float64")
    dx = convalgos.run(IMPLICIT_GEMM, "backward_data", dy, w, p, np.full(p.in_shape, np.nan))
    assert np.all(dx[:, :, [2, 3, 6, 7, 8], :] == 0) and np.all(dx[:, :, :, [2, 3, 6, 7, 8]] == 0)
    assert np.all(dx[:, :, :2, :2] != 0)


@pytest.mark.parametrize("op", PASSES)
def test_no_workspace_declared_or_allocated(op):
    """workspace_bytes is 0, a zero workspace cap still supports it, and a call allocates nothing large: its
    peak traced allocation is under 16 KiB on a layer whose patch matrix would take 576 KiB."""
    p = ConvParams.from_shapes((2, 8, 32, 32), (8, 8, 3, 3), padding=1, stride=1)
    assert IMPLICIT_GEMM.workspace_bytes(p, op) == 0
    a, b = operands(p, op, "float32")
    out = np.empty(p.result_shape(op), np.float32)
    IMPLICIT_GEMM.release()
    convalgos.run(IMPLICIT_GEMM, op, a, b, p, out)                       # compiled before tracing
    convalgos.set_workspace_cap(0)
    try:
        assert IMPLICIT_GEMM.supports(p, op)
        tracemalloc.start()
        convalgos.run(IMPLICIT_GEMM, op, a, b, p, out)
        peak = tracemalloc.get_traced_memory()[1]
        tracemalloc.stop()
    finally:
        convalgos.set_workspace_cap(None)
    assert peak < 16 << 10 < p.N * p.C * 9 * 32 * 32 * 4 // 32
    assert IMPLICIT_GEMM.workspace.nbytes == 0


def test_flops_count_the_taps_inside_x():
    p = ConvParams.from_shapes((2, 3, 6, 6), (4, 3, 3, 3), padding=1)
    assert valid_taps(p) == (3 * 6 - 2, 3 * 6 - 2)                      # each border tap misses one row
    assert IMPLICIT_GEMM.flops(p) == 2 * 2 * 4 * 3 * 16 * 16 < p.flops
    unpadded = ConvParams.from_shapes((2, 3, 6, 6), (4, 3, 3, 3))
    assert all(IMPLICIT_GEMM.flops(unpadded, op) == unpadded.flops for op in PASSES)


def test_backward_filter_repeats_bitwise():
    p = ConvParams.from_shapes((3, 4, 12, 12), (5, 4, 3, 3), padding=1)
    x, dy = operands(p, "backward_filter", "float32")
    first = convalgos.run(IMPLICIT_GEMM, "backward_filter", x, dy, p)
    np.testing.assert_array_equal(first, convalgos.run(IMPLICIT_GEMM, "backward_filter", x, dy, p))


@pytest.mark.parametrize("kw", [dict(padding=1), dict(stride=2, padding=((1, 0), (2, 1)), dilation=(1, 2)),
                                dict(padding=1, groups=4)])
def test_all_three_passes_equal_torch(kw):
    torch = pytest.importorskip("torch")
    groups = kw.get("groups", 1)
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 9, 8))
    w = rng.standard_normal((8, 4 // groups, 3, 3))
    torch_kw = dict(kw)
    pad = torch_kw.pop("padding")
    if isinstance(pad, tuple):                     # torch pads symmetrically: pad x itself, as F.pad would
        (t, b), (l, r) = pad
        x_t = torch.nn.functional.pad(torch.from_numpy(x), (l, r, t, b))
        torch_kw["padding"] = 0
    else:
        x_t, torch_kw["padding"] = torch.from_numpy(x), pad
    y = convalgos.conv2d(x, w, **kw, algo="implicit_gemm")
    y_t = torch.nn.functional.conv2d(x_t, torch.from_numpy(w), **torch_kw)
    np.testing.assert_allclose(y, y_t.numpy(), rtol=1e-10, atol=1e-10)
    dy = rng.standard_normal(y.shape)
    dw = convalgos.conv2d_weight(x, w.shape, dy, **kw, algo="implicit_gemm")
    dw_t = torch.nn.grad.conv2d_weight(x_t, w.shape, torch.from_numpy(dy), **torch_kw)
    np.testing.assert_allclose(dw, dw_t.numpy(), rtol=1e-10, atol=1e-10)
    dx = convalgos.conv2d_input(x.shape, w, dy, **kw, algo="implicit_gemm")
    dx_t = torch.nn.grad.conv2d_input(x_t.shape, torch.from_numpy(w), torch.from_numpy(dy), **torch_kw)
    if isinstance(pad, tuple):
        dx_t = dx_t[:, :, t:t + x.shape[2], l:l + x.shape[3]]
    np.testing.assert_allclose(dx, dx_t.numpy(), rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("op", ["forward", "backward_data"])
@pytest.mark.parametrize("kw", [dict(padding=((2, 0), (1, 1))), dict(stride=2, padding=1)])
def test_row_blocks_of_one_and_three_rows(monkeypatch, op, kw):
    """Work items of 1 and of 3 rows (not dividing the plane) give the reference, on both paths."""
    from convalgos.implicit_gemm import cpu as implicit_gemm
    p = ConvParams.from_shapes((2, 4, 8, 7), (6, 2, 3, 3), groups=2, **kw)
    for rows in (1, 3):
        monkeypatch.setattr(implicit_gemm, "SEGMENT", rows * 7)
        check_pass(p, op, "float32", seed=rows)
