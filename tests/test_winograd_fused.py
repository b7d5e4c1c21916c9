"""winograd_fused_4x4: F(4x4, 3x3) (F(3x3, 4x4) for backward-filter) one block of tiles at a time. It agrees with
the float64 reference on all three passes (blocks that straddle tile rows and images, a last partial block,
groups, padding that crops, channels that do not fill a register tile), gives the same backward-filter at any
thread count, and counts its products as done: 36 per tile and (k, c). Its written-out transforms are
cook_toom's matrices, and its pixel-major copy places, pads and crops as the passes need."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

import numba
from numba import njit

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.reference import normwise_error
from convalgos.kernels.simd import REGISTER_BYTES
from convalgos.kernels.simd import load, store
from convalgos.winograd.cooktoom import cook_toom
from convalgos.winograd.f43 import OUTPUT_FLOPS, filter_row, input_row, output_row
from convalgos.winograd.fused_kernels import pixel_row
from layers import layers

FUSED = ALGORITHMS["winograd_fused_4x4"]
PASSES = convalgos.PASSES


def operands(p, op, seed=0):
    rng = np.random.default_rng(seed)
    x, w, dy = (rng.standard_normal(shape).astype(p.compute_dtype)
                for shape in (p.in_shape, p.weight_shape, p.out_shape))
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


def error(p, op, seed=0):
    a, b = operands(p, op, seed)
    got = convalgos.run(FUSED, op, a, b, p)
    return normwise_error(got, reference.PASS[op](a, b, p))


@pytest.mark.parametrize("op", PASSES)
@pytest.mark.parametrize("dtype", ["float16", "float32", "float64"])
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(layer=layers(kernel=(3, 3), stride=(1, 1), dilation=(1, 1), max_hw=14))
def test_random_3x3_layers_every_pass(op, dtype, layer):
    p = ConvParams.from_shapes(layer["x_shape"], layer["w_shape"], padding=layer["padding"],
                               groups=layer["groups"], dtype=dtype)
    assert error(p, op) <= FUSED.tolerance_of(op, dtype)


@pytest.mark.parametrize("op", PASSES)
@pytest.mark.parametrize("shape, padding, groups", [
    (((5, 8, 12, 12), (16, 8, 3, 3)), 1, 1),        # 9 tiles an image: blocks straddle images
    (((1, 12, 30, 22), (12, 6, 3, 3)), 1, 2),       # blocks straddle tile rows; partial tiles at both edges
    (((2, 16, 4, 4), (24, 16, 3, 3)), 1, 1),        # one partial block; 8, 8, 4, 4-wide... channel blocks
    (((3, 9, 11, 9), (13, 9, 3, 3)), ((3, 0), (0, 4)), 1),   # padding over 2 crops dy in backward-data
    (((1, 3, 9, 262), (5, 3, 3, 3)), 1, 1),         # 66 tiles a row: whole blocks inside one row
    (((1, 40, 6, 6), (40, 40, 3, 3)), 1, 1),        # one block: the channel blocks split over parts (threads)
    (((2, 48, 8, 8), (20, 24, 3, 3)), 1, 2),        # backward-filter: 24 channels a group (a wide tile's 32
    (((1, 5, 13, 7), (3, 5, 3, 3)), ((0, 2), (1, 0)), 1),    # lanes, 8 of them zero), 10 rows; 3 rows, 5 lanes
])
def test_blocks_channels_and_edges(op, shape, padding, groups):
    p = ConvParams.from_shapes(*shape, padding=padding, groups=groups)
    assert error(p, op) <= FUSED.tolerance_of(op, "float32")


def test_agrees_with_the_non_fused_pass_of_the_same_maths():
    """Same tiles, same transforms: only the order of the channel sums differs."""
    p = ConvParams.from_shapes((2, 32, 20, 20), (32, 32, 3, 3), padding=1)
    x, w = operands(p, "forward")
    fused = convalgos.run(FUSED, "forward", x, w, p)
    plain = convalgos.run(ALGORITHMS["winograd_4x4"], "forward", x, w, p)
    assert normwise_error(fused, plain) < 1e-5


def test_the_usual_3x3_limits_on_every_pass():
    p = ConvParams.from_shapes((1, 4, 8, 8), (4, 4, 3, 3), padding=1)
    assert all(FUSED.supports(p, op) for op in PASSES)
    strided = ConvParams.from_shapes((1, 4, 8, 8), (4, 4, 3, 3), padding=1, stride=2)
    assert "stride 1, got (2, 2)" in FUSED.supports(strided, "forward").reason
    five = ConvParams.from_shapes((1, 4, 8, 8), (4, 4, 5, 5), padding=2)
    assert "3x3 kernel, got 5x5" in FUSED.supports(five, "backward_data").reason
    assert "3x3 kernel, got 5x5" in FUSED.supports(five, "backward_filter").reason


def test_backward_filter_at_any_thread_count_keeps_sums_only_where_there_are_tiles():
    """Each thread sums its own blocks of tiles and the threads' sums are added at the end (within tolerance at
    one thread and at all of them); a layer of one
    block (here 4 tiles) runs on one thread and keeps one S, not one per thread."""
    p = ConvParams.from_shapes((8, 32, 16, 16), (32, 32, 3, 3), padding=1)          # 128 tiles: 4 blocks
    x, dy = operands(p, "backward_filter")
    ref = reference.PASS["backward_filter"](x, dy, p)
    threads = numba.get_num_threads()
    small = ConvParams.from_shapes((1, 32, 8, 8), (32, 32, 3, 3), padding=1)
    try:
        results, sizes = [], []
        for n_threads in sorted({1, threads}):
            numba.set_num_threads(n_threads)
            results.append(convalgos.run(FUSED, "backward_filter", x, dy, p))
            sizes.append(FUSED.workspace_bytes(small, "backward_filter"))
    finally:
        numba.set_num_threads(threads)
    for got in results:
        assert normwise_error(got, ref) <= FUSED.tolerance_of("backward_filter", "float32")
    assert max(sizes) - min(sizes) < 36 * small.K * small.Cg * 4          # not one S (147 KB) per thread


@pytest.mark.parametrize("op", PASSES)
def test_flops_count_36_products_per_tile(op):
    """4x fewer products than direct's 9 per output when tiles and blocks are whole, plus the transforms (a
    small extra on a deep layer). Forward and backward-data compute a last partial block's products and input
    transforms whole (its missing tiles repeat its tiles) and its output transforms for the tiles it has;
    backward-filter sums the tiles it has only."""
    block = 2 * REGISTER_BYTES // 4
    # 32 tiles, whole blocks at 8 lanes and at 16, on every CPU (one block of an AVX2 CPU, 16 tiles, spreads the
    # filters' transforms over half as many tiles: backward-filter's extra was 1.24x there)
    deep = ConvParams.from_shapes((8, 256, 8, 8), (256, 256, 3, 3), padding=1)         # 4 tiles an image
    products = 2 * 36 * deep.K * deep.Cg * deep.N * 4
    assert products * 4 == deep.flops
    assert products < FUSED.flops(deep, op) < 1.2 * products
    p = ConvParams.from_shapes((block // 4, 256, 8, 8), (256, 256, 3, 3), padding=1)    # one block of tiles
    one_more = ConvParams.from_shapes((block // 4 + 1, 256, 8, 8), (256, 256, 3, 3), padding=1)
    first = FUSED.flops(p, op) - FUSED.flops(p.with_batch(0), op)                 # a whole block
    second = FUSED.flops(one_more, op) - FUSED.flops(p, op)                       # a block of 4 tiles
    if op == "backward_filter":
        assert second * block == first * 4
    else:
        assert first - second == OUTPUT_FLOPS * 256 * (block - 4)


@njit
def _rows(d, out):
    """out[0, :6], out[1, :4], out[2, :6] = B^T, A^T and G applied (f43's code) to d's columns."""
    r = input_row(load(d[0], 0), load(d[1], 0), load(d[2], 0), load(d[3], 0), load(d[4], 0), load(d[5], 0))
    y = output_row(load(d[0], 0), load(d[1], 0), load(d[2], 0), load(d[3], 0), load(d[4], 0), load(d[5], 0))
    g = filter_row(load(d[0], 0), load(d[1], 0), load(d[2], 0))
    for i in range(6):
        store(out[0, i], 0, r[i])
        store(out[2, i], 0, g[i])
    for i in range(4):
        store(out[1, i], 0, y[i])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_the_written_out_transforms_are_cook_toom_s_matrices(dtype):
    """f43's factored rows compute B^T d, A^T m and G g of cook_toom(4, 3), to rounding."""
    L = REGISTER_BYTES // np.dtype(dtype).itemsize
    d = np.random.default_rng(2).standard_normal((6, L)).astype(dtype)
    out = np.zeros((3, 6, L), dtype)
    _rows(d, out)
    m = cook_toom(4, 3)
    BT, AT, G = (np.array(x, dtype=np.float64) for x in (m.BT, m.AT, m.G))
    tol = 50 * np.finfo(dtype).eps
    np.testing.assert_allclose(out[0], BT @ d, rtol=tol, atol=tol)
    np.testing.assert_allclose(out[1, :4], AT @ d, rtol=tol, atol=tol)
    np.testing.assert_allclose(out[2], G @ d[:3], rtol=tol, atol=tol)


@njit
def _pixel_rows(x, top, left, xl):
    """Every row of xl (N, Hp, Wp, groups, Cgp) by ``pixel_row``, as the fused passes make them a tile row at a time."""
    groups, Cg = xl.shape[3], x.shape[1] // xl.shape[3]
    for n in range(xl.shape[0]):
        for i in range(xl.shape[1]):
            for g in range(groups):
                pixel_row(x, n, g * Cg, Cg, i - top, left, xl[n, i, :, g])


@pytest.mark.parametrize("top, left", [(1, 1), (2, 0), (-1, 3)])
@pytest.mark.parametrize("shape, groups, Cgp", [((2, 16, 5, 37), 1, 16), ((1, 12, 4, 9), 2, 16),
                                                ((1, 9, 3, 20), 1, 16)])
def test_the_pixel_major_copy_places_pads_and_crops(shape, groups, Cgp, top, left):
    """xl[n, i, j, g, c] = x[n, g Cg + c, i - top, j - left] inside x, else 0 (channels past Cg, borders; a
    negative offset crops): whole rows turned in registers, part rows and odd channel counts copied."""
    x = np.random.default_rng(3).standard_normal(shape).astype(np.float32)
    N, C, H, W = shape
    Cg = C // groups
    xl = np.full((N, H + 3, W + 2, groups, Cgp), np.nan, np.float32)
    _pixel_rows(x, top, left, xl)
    want = np.zeros_like(xl)
    for i in range(xl.shape[1]):
        for j in range(xl.shape[2]):
            if 0 <= i - top < H and 0 <= j - left < W:
                want[:, i, j, :, :Cg] = x[:, :, i - top, j - left].reshape(N, groups, Cg)
    np.testing.assert_array_equal(xl, want)
