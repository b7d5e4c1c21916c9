"""FFT-specific checks: the fast-length rule, the polyphase stride path, the tile plans, workspace and FLOPs of
every pass, both backward passes against the reference, the identities between the passes, and torch."""
import tracemalloc

import numpy as np
import pytest
import scipy.fft
from hypothesis import HealthCheck, given, settings

import convalgos
from convalgos import ALGORITHMS, PASSES, ConvParams, reference
from convalgos.fft import whole as fft
from convalgos.fft.plan import (TILE_SIZES, cheapest_tile_plan, next_fast_len, phase_extent, plan_flops,
                                plan_workspace_bytes, tile_plan, whole_image_plan)
from convalgos.reference import normwise_error
from layers import conv_kwargs, layers, make_arrays, params_of

FFT, TILED = ALGORITHMS["fft"], ALGORITHMS["fft_tiled"]
NAMES = ["fft", "fft_tiled"]
BACKWARD = ["backward_data", "backward_filter"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def arrays(x_shape, w_shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)


def operands(op, x, w, dy):
    """The two operands of pass ``op``, as ``convalgos.run`` takes them."""
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


def pass_case(p: ConvParams, seed=0):
    """x, w and dy of layer p, seeded, in p's dtype."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(p.dtype) for shape in (p.in_shape, p.weight_shape, p.out_shape))


@pytest.fixture
def cap():
    """Set the workspace cap for one test, restored after it."""
    yield convalgos.set_workspace_cap
    convalgos.set_workspace_cap(None)


# ---- plans ---------------------------------------------------------------------------------------------------
def test_next_fast_len_is_the_smallest_2_3_5_smooth_length():
    for n in range(1, 3000):
        assert next_fast_len(n) == scipy.fft.next_fast_len(n, real=True), n
    assert [next_fast_len(n) for n in (57, 62, 97, 129)] == [60, 64, 100, 135]


def test_polyphase_plan_computes_only_the_strided_outputs():
    # AlexNet conv1: the 11x11 stride-4 kernel becomes 16 phases of 3x3 over 57x57 phase images.
    p = ConvParams.from_shapes((1, 3, 224, 224), (64, 3, 11, 11), stride=4, padding=2)
    t = whole_image_plan(p)
    assert phase_extent(p) == (3, 3) and p.out_hw == (55, 55)
    assert (t.Th, t.Tw) == (next_fast_len(55 + 3 - 1),) * 2 == (60, 60)   # not the 218x218 stride-1 output
    # backward_data yields every phase pixel some output reads, in the same transform size
    b = whole_image_plan(p, "backward_data")
    assert (b.Th, b.Tw, b.mh, b.mw) == (60, 60, 57, 57)


def test_tiles_cover_the_result_of_each_pass_and_pick_the_cheapest_size():
    p = ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 7, 7), padding=3)
    for op, extent in (("forward", 56), ("backward_data", 56 + 7 - 1), ("backward_filter", 56)):
        t = cheapest_tile_plan(p, op)
        assert t.nth * t.mh >= extent and t.ntw * t.mw >= extent and t.mh == t.Th - 7 + 1
        assert plan_flops(p, t, op) == min(plan_flops(p, tile_plan(p, T, op), op) for T in TILE_SIZES if T >= 7)
    # one backward_data tile that holds all of dy between zeros yields every pixel, like the whole image
    assert (tile_plan(p, 64, "backward_data").mh, tile_plan(p, 64, "backward_data").nth) == (62, 1)
    assert (tile_plan(p, 48, "backward_data").mh, tile_plan(p, 48, "backward_data").nth) == (42, 2)


# ---- forward -------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("stride, dilation, groups", [((2, 3), (1, 1), 1), ((3, 2), (2, 3), 2), ((4, 4), (1, 1), 1),
                                                      ((2, 1), (3, 1), 4)])
def test_strided_dilated_grouped_layers_agree_in_every_pass(name, stride, dilation, groups):
    p = ConvParams.from_shapes((2, 8, 31, 27), (8, 8 // groups, 5, 4), stride=stride, padding=((2, 1), (0, 3)),
                               dilation=dilation, groups=groups)
    x, w, dy = pass_case(p)
    for op in PASSES:
        err = normwise_error(convalgos.run(ALGORITHMS[name], op, *operands(op, x, w, dy), p),
                             reference.PASS[op](*operands(op, x, w, dy), p))
        assert err <= ALGORITHMS[name].tolerance_of(op, "float32"), op


def test_float64_is_exact_to_rounding():
    p = ConvParams.from_shapes((2, 6, 33, 29), (5, 6, 11, 7), padding=2, stride=(2, 1), dtype="float64")
    x, w, dy = pass_case(p)
    for name in NAMES:
        for op in PASSES:
            ref = reference.PASS[op](*operands(op, x, w, dy), p)
            assert normwise_error(convalgos.run(ALGORITHMS[name], op, *operands(op, x, w, dy), p), ref) < 1e-13


# ---- backward passes against the reference on random layers --------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@SETTINGS
@given(layer=layers())
def test_backward_passes_agree_with_the_reference(name, op, dtype, layer):
    p = params_of(layer, dtype)
    x, w, _ = make_arrays(layer, dtype)
    dy = np.random.default_rng(1).standard_normal(p.out_shape).astype(dtype)
    algorithm = ALGORITHMS[name]
    if not algorithm.supports(p, op):
        assert name == "fft_tiled" and "per stride phase" in algorithm.supports(p, op).reason
        return
    kw = conv_kwargs(layer)
    if op == "backward_data":
        result = convalgos.conv2d_input(p.in_shape, w, dy, **kw, algo=name)
        ref = reference.backward_data(dy, w, p)
        assert np.all(result[ref == 0] == 0)           # pixels no output reads: exact zeros, as in torch
    else:
        result = convalgos.conv2d_weight(x, p.weight_shape, dy, **kw, algo=name)
        ref = reference.backward_filter(x, dy, p)
    assert result.dtype == np.dtype(dtype) and result.shape == p.result_shape(op)
    assert normwise_error(result, ref) <= algorithm.tolerance_of(op, dtype), f"{name} {op} on {p}"


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("padding", ["same", ((0, 2), (1, 0))])
def test_float16_backward_passes_compute_in_float32(name, padding):
    p = ConvParams.from_shapes((2, 4, 9, 10), (6, 2, 4, 3), padding=padding, dilation=(1, 2), groups=2,
                               dtype="float16")
    x, w, dy = pass_case(p)
    kw = dict(padding=padding, dilation=(1, 2), groups=2)
    dx = convalgos.conv2d_input(p.in_shape, w, dy, **kw, algo=name)
    dw = convalgos.conv2d_weight(x, p.weight_shape, dy, **kw, algo=name)
    assert dx.dtype == dw.dtype == np.float16
    assert normwise_error(dx, reference.backward_data(dy, w, p)) <= FFT.tolerance_of("backward_data", "float16")
    assert normwise_error(dw, reference.backward_filter(x, dy, p)) <= FFT.tolerance_of("backward_filter", "float16")


def test_rows_cut_by_the_stride_or_between_dilated_taps_get_exact_zeros():
    # stride 3 with a 2-tap kernel skips every third row; dilation 3 over 2 output columns skips column 2
    for x_shape, kw in (((1, 2, 10, 7), dict(stride=(3, 1))),
                        ((1, 2, 6, 4), dict(dilation=(1, 3), padding=((0, 0), (1, 0))))):
        p = ConvParams.from_shapes(x_shape, (3, 2, 2, 2), **kw)
        x, w, dy = pass_case(p)
        ref = reference.backward_data(dy, w, p)
        assert (ref == 0).any()
        for name in NAMES:
            dx = convalgos.run(ALGORITHMS[name], "backward_data", dy, w, p)
            np.testing.assert_array_equal(dx == 0, ref == 0)


# ---- the identities between the passes -----------------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
def test_backward_data_at_stride_1_is_a_forward_conv_with_the_flipped_transposed_kernel(name):
    p = ConvParams.from_shapes((2, 5, 12, 11), (4, 5, 3, 4), padding=((1, 0), (2, 1)), dilation=(2, 1))
    x, w, dy = pass_case(p, seed=3)
    (top, bottom), (left, right) = p.padding
    (eh, ew) = p.kernel_extent
    full = ((eh - 1 - top, eh - 1 - bottom), (ew - 1 - left, ew - 1 - right))
    flipped = np.ascontiguousarray(w[:, :, ::-1, ::-1].transpose(1, 0, 2, 3))
    identity = convalgos.conv2d(dy, flipped, padding=full, dilation=p.dilation, algo=name)
    dx = convalgos.run(ALGORITHMS[name], "backward_data", dy, w, p)
    assert normwise_error(dx, identity) <= 2 * ALGORITHMS[name].tolerance_of("backward_data", "float32")


@pytest.mark.parametrize("name", NAMES)
def test_backward_filter_is_a_forward_conv_of_x_with_dy_as_kernel_strides_and_dilations_swapped(name):
    p = ConvParams.from_shapes((3, 4, 17, 15), (5, 4, 3, 2), stride=(2, 1), padding=((1, 2), (0, 1)),
                               dilation=(1, 2))
    x, w, dy = pass_case(p, seed=4)
    # images become channels (summed), channels become the batch, dy's K planes are the filters
    lagged = convalgos.conv2d(x.transpose(1, 0, 2, 3).copy(), dy.transpose(1, 0, 2, 3).copy(), padding=p.padding,
                              stride=p.dilation, dilation=p.stride, algo=name)
    identity = lagged[:, :, :p.R, :p.S].transpose(1, 0, 2, 3)
    dw = convalgos.run(ALGORITHMS[name], "backward_filter", x, dy, p)
    assert normwise_error(dw, identity) <= 2 * ALGORITHMS[name].tolerance_of("backward_filter", "float32")


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_backward_passes_agree_with_torch(name, dtype):
    torch = pytest.importorskip("torch")
    kw = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    p = ConvParams.from_shapes((2, 6, 13, 14), (4, 3, 3, 3), **kw, dtype=dtype)
    x, w, dy = pass_case(p, seed=5)
    tx, tw, tdy = (torch.from_numpy(a) for a in (x, w, dy))
    dx = convalgos.conv2d_input(p.in_shape, tw, tdy, **kw, algo=name)
    dw = convalgos.conv2d_weight(tx, p.weight_shape, tdy, **kw, algo=name)
    assert isinstance(dx, torch.Tensor) and isinstance(dw, torch.Tensor)
    ref_dx = torch.nn.grad.conv2d_input(p.in_shape, tw, tdy, **kw).numpy()
    ref_dw = torch.nn.grad.conv2d_weight(tx, p.weight_shape, tdy, **kw).numpy()
    assert normwise_error(dx.numpy(), ref_dx) <= ALGORITHMS[name].tolerance_of("backward_data", dtype)
    assert normwise_error(dw.numpy(), ref_dw) <= ALGORITHMS[name].tolerance_of("backward_filter", dtype)


# ---- workspace, FLOPs, chunking, determinism -----------------------------------------------------------------
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("op", PASSES)
def test_workspace_formula_is_what_each_pass_allocates(name, op):
    p = ConvParams.from_shapes((2, 16, 40, 40), (24, 16, 7, 7), padding=3, stride=(1, 2))
    x, w, dy = pass_case(p)
    algorithm = ALGORITHMS[name]
    result = np.empty(p.result_shape(op), np.float32)
    convalgos.run(algorithm, op, *operands(op, x, w, dy), p, out=result)          # compile and warm up
    algorithm.release()
    tracemalloc.start()
    convalgos.run(algorithm, op, *operands(op, x, w, dy), p, out=result)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    # the formula sums every array; a few (the kernel's partial spectrum, a chunk's tiles) are freed before the peak
    assert 0.75 * algorithm.workspace_bytes(p, op) <= peak <= algorithm.workspace_bytes(p, op)


def test_tiled_workspace_is_far_smaller_than_whole_image_on_a_large_image():
    p = ConvParams.from_shapes((1, 32, 256, 256), (32, 32, 5, 5), padding=2)
    for op in PASSES:
        assert TILED.workspace_bytes(p, op) * 5 < FFT.workspace_bytes(p, op), op    # e.g. forward 52 MB vs 328 MB


def test_fft_does_fewer_flops_than_direct_on_large_kernels_in_every_pass():
    p = ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 7, 7), padding=3)
    for op in PASSES:
        assert TILED.flops(p, op) < FFT.flops(p, op) < p.flops, op


def test_flop_formulas_by_hand_on_one_tile():
    # the convention: 2.5 n log2 n per real FFT, 8 per complex multiply-add
    q = ConvParams.from_shapes((1, 2, 6, 6), (3, 2, 3, 3))              # one 6x6 tile (4 outputs + 3 - 1)
    t = whole_image_plan(q)
    assert (t.Th, t.Tw) == (6, 6)
    fft36, gemm = 2.5 * 36 * np.log2(36), 8 * (6 * 4) * 3 * 2 * 1        # F = 6*4 bins, K=3 x C=2, one tile
    kernel_dft = 3 * 2 * (4 * 4 * 3 * 3 + 8 * 6 * 3 * 4)                 # Fw = 4 bins, 3x3 taps
    assert FFT.flops(q) == FFT.flops(q, "backward_data") == int((2 + 3) * fft36 + gemm + kernel_dft)
    # backward_filter: no kernel DFT, but the inverse DFT at the 3x3 lags of the K*C = 6 planes: 3 x 6 over
    # the row bins of each of the 4 column bins, then 3 x 4 over the column bins of each of the 3 lag rows
    lags_dft = 6 * 8 * (3 * 6 * 4 + 3 * 3 * 4)
    assert FFT.flops(q, "backward_filter") == int((2 + 3) * fft36 + gemm + lags_dft)


@pytest.mark.parametrize("op", PASSES)
def test_large_batches_run_in_chunks_with_the_same_result(op, monkeypatch):
    big = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
    assert FFT.supports(big, op) and FFT.batch_chunk(big, op) < 64
    assert FFT.workspace_bytes(big, op) <= fft.CHUNK_WORKSPACE
    p = ConvParams.from_shapes((6, 4, 20, 17), (5, 4, 3, 3), padding=1)
    x, w, dy = pass_case(p)
    whole = convalgos.run(FFT, op, *operands(op, x, w, dy), p)
    whole_flops = FFT.flops(p, op)
    # room for two of the six images (backward_filter's chunks of 2 also keep a product spectrum)
    monkeypatch.setattr(fft, "CHUNK_WORKSPACE", plan_workspace_bytes(p.with_batch(2), FFT.plan(p, op), op, 3) + 2**10)
    assert FFT.batch_chunk(p, op) == 2
    chunked = convalgos.run(FFT, op, *operands(op, x, w, dy), p)
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-5 * np.abs(whole).max())
    if op == "backward_filter":              # three chunks: two accumulations of the (F, K, Csg) spectrum
        t = FFT.plan(p, op)
        assert abs(FFT.flops(p, op) - whole_flops - 2 * 2 * t.freqs * p.K * p.Cg) <= 1


@pytest.mark.parametrize("name", NAMES)
def test_repeated_calls_are_bitwise_identical_in_every_pass(name):
    p = ConvParams.from_shapes((3, 24, 45, 38), (20, 24, 9, 5), padding=(4, 2))
    x, w, dy = pass_case(p)
    for op in PASSES:
        first = convalgos.run(ALGORITHMS[name], op, *operands(op, x, w, dy), p)
        assert all(np.array_equal(first, convalgos.run(ALGORITHMS[name], op, *operands(op, x, w, dy), p))
                   for _ in range(2)), op
    assert ALGORITHMS[name].deterministic


# ---- constraints ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("op", PASSES)
def test_refusals_give_reasons(op, cap):
    huge = ConvParams.from_shapes((4, 64, 1024, 1024), (64, 64, 3, 3), padding=1)
    one = FFT.workspace_bytes(huge.with_batch(1), op)               # about 2.4 GiB
    cap(2 * one)
    assert FFT.supports(huge, op) and FFT.batch_chunk(huge, op) == 1    # the batch runs one image at a time
    cap(one - 1)
    reason, t = FFT.supports(huge, op).reason, FFT.plan(huge, op)
    assert not FFT.supports(huge, op)
    assert all(s in reason for s in ("for one image", op, f"{t.Th}x{t.Tw}", "workspace cap", "set_workspace_cap"))
    wide = ConvParams.from_shapes((1, 1, 80, 80), (1, 1, 65, 3))
    assert FFT.supports(wide, op)
    assert not TILED.supports(wide, op) and "65 pixels per stride phase" in TILED.supports(wide, op).reason


@pytest.mark.parametrize("op", PASSES)
def test_chunks_shrink_to_fit_a_lower_cap(op, cap):
    p = ConvParams.from_shapes((16, 8, 64, 64), (8, 8, 5, 5), padding=2)
    assert FFT.batch_chunk(p, op) == 16
    limit = (FFT.workspace_bytes(p.with_batch(1), op) + FFT.workspace_bytes(p, op)) // 2
    cap(limit)
    assert FFT.supports(p, op) and FFT.batch_chunk(p, op) < 16 and FFT.workspace_bytes(p, op) <= limit
