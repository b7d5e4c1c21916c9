"""im2col-specific checks: the patch matrix itself, the zero-copy 1x1 path, chunking over the batch, workspace."""
import tracemalloc

import numpy as np
import pytest

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.im2col import Im2col, _fill_patches, is_zero_copy, patch_bytes_per_image, product_bytes_per_image
from convalgos.reference import normwise_error

IM2COL = ALGORITHMS["im2col"]


def arrays(x_shape, w_shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)


def test_patch_matrix_matches_its_definition():
    x, _ = arrays((3, 3, 7, 9), (1, 1, 1, 1), dtype=np.float64)
    R, S, (sh, sw), (dh, dw), (top, left) = 2, 3, (2, 1), (1, 2), (1, 2)
    p = ConvParams.from_shapes(x.shape, (4, 3, R, S), stride=(sh, sw), padding=((top, 0), (left, 1)),
                               dilation=(dh, dw))
    Ho, Wo = p.out_hw
    patches = np.full((3 * R * S, 2 * Ho * Wo), np.nan)
    _fill_patches(x, 1, 2, R, S, sh, sw, top, left, dh, dw, Ho, Wo, patches)     # images 1 and 2, side by side
    for b in range(2):
        padded = np.pad(x[1 + b], ((0, 0), (top, 0), (left, 1)))
        for c in range(3):
            for r in range(R):
                for s in range(S):
                    window = padded[c, r * dh::sh, s * dw::sw][:Ho, :Wo]
                    row = patches[(c * R + r) * S + s, b * Ho * Wo:(b + 1) * Ho * Wo]
                    np.testing.assert_array_equal(row.reshape(Ho, Wo), window)


@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("dilation", [1, 3])
def test_1x1_layer_is_a_zero_copy_gemm(groups, dilation):
    x, w = arrays((3, 8, 10, 7), (12, 8 // groups, 1, 1))
    kw = dict(groups=groups, dilation=dilation)          # a 1x1 kernel has no taps for dilation to spread
    p = ConvParams.from_arrays(x, w, **kw)
    assert is_zero_copy(p) and IM2COL.workspace_bytes(p) == 0
    IM2COL.release()
    y = convalgos.conv2d(x, w, **kw, algo="im2col")
    assert IM2COL.workspace.nbytes == 0
    assert normwise_error(y, reference.conv2d(x, w, **kw)) <= IM2COL.tolerance["float32"]


@pytest.mark.parametrize("kw", [dict(stride=(1, 2)), dict(padding=((0, 1), (0, 0)))])
def test_1x1_layers_that_need_a_patch_matrix_are_not_zero_copy(kw):
    p = ConvParams.from_shapes((1, 4, 9, 9), (5, 4, 1, 1), **kw)
    assert not is_zero_copy(p) and IM2COL.workspace_bytes(p) > 0
    x, w = arrays((2, 4, 9, 9), (5, 4, 1, 1))
    err = normwise_error(convalgos.conv2d(x, w, **kw, algo="im2col"), reference.conv2d(x, w, **kw))
    assert err <= IM2COL.tolerance["float32"]


def test_chunking_over_the_batch_gives_the_same_result():
    x, w = arrays((5, 6, 11, 13), (8, 3, 3, 2))
    kw = dict(stride=(1, 2), padding=((2, 0), (1, 1)), dilation=(2, 1), groups=2)
    p = ConvParams.from_arrays(x, w, **kw)
    whole, chunked = Im2col(), Im2col()
    chunked.workspace_budget_bytes = 2 * (patch_bytes_per_image(p) + product_bytes_per_image(p))  # 2, 2, 1
    assert whole.images_per_chunk(p) == 5 and chunked.images_per_chunk(p) == 2
    y_whole, y_chunked = np.empty(p.out_shape, np.float32), np.full(p.out_shape, np.nan, np.float32)
    one_by_one = Im2col()
    one_by_one.workspace_budget_bytes = 1                                    # each GEMM straight into out
    y_one = np.full(p.out_shape, np.nan, np.float32)
    whole.forward(x, w, p, y_whole)
    chunked.forward(x, w, p, y_chunked)
    one_by_one.forward(x, w, p, y_one)
    np.testing.assert_array_equal(y_whole, y_chunked)
    np.testing.assert_array_equal(y_whole, y_one)
    assert normwise_error(y_chunked, reference.conv2d(x, w, **kw)) <= IM2COL.tolerance["float32"]


def test_a_chunk_holds_at_least_one_image():
    p = ConvParams.from_shapes((3, 4, 8, 8), (2, 4, 3, 3))
    tiny = Im2col()
    tiny.workspace_budget_bytes = 1
    assert tiny.images_per_chunk(p) == 1
    # one image per chunk: its GEMM writes straight into out, so the patch matrix is all the workspace
    assert tiny.workspace_bytes(p) == patch_bytes_per_image(p) == 4 * 3 * 3 * 6 * 6 * 4


def test_workspace_formula():
    # VGG-16's 64->64 3x3 layer: one image's patch matrix (115.6 MB) is over the budget, so chunks of one
    p = ConvParams.from_shapes((4, 64, 224, 224), (64, 64, 3, 3), padding=1)
    assert IM2COL.workspace_bytes(p) == 64 * 9 * 224 * 224 * 4
    # CIFAR 32x32: the whole batch fits in 64 MiB: its patch matrix and the wide GEMM's (K, N*Ho*Wo) product
    p = ConvParams.from_shapes((32, 16, 32, 32), (16, 16, 3, 3), padding=1)
    assert IM2COL.workspace_bytes(p) == 32 * 16 * 9 * 32 * 32 * 4 + 32 * 16 * 32 * 32 * 4
    p = ConvParams.from_shapes((32, 64, 32, 32), (64, 64, 3, 3), padding=1, dtype="float64")
    nb = (64 << 20) // ((64 * 9 + 64) * 32 * 32 * 8)                 # patch matrix and product, per image
    assert nb == 12 and IM2COL.workspace_bytes(p) == nb * (64 * 9 + 64) * 32 * 32 * 8
    # the N=64, C=3, 256x256 layer: chunks of 2 images keep the 64-channel product buffer within the budget
    p = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
    assert IM2COL.images_per_chunk(p) == 2 and IM2COL.workspace_bytes(p) == 2 * (27 + 64) * 256 * 256 * 4 <= 64 << 20


def test_workspace_formula_is_what_forward_allocates():
    x, w = arrays((3, 8, 20, 20), (16, 4, 3, 3))
    p = ConvParams.from_arrays(x, w, padding=1, groups=2)
    out = np.empty(p.out_shape, np.float32)
    algorithm = Im2col()
    algorithm.forward(x, w, p, out)                    # compile and warm up
    algorithm.release()
    tracemalloc.start()
    algorithm.forward(x, w, p, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p)
    assert algorithm.workspace_bytes(p) <= peak <= algorithm.workspace_bytes(p) + 4096


def test_flops_are_the_direct_count():
    p = ConvParams.from_shapes((2, 6, 10, 10), (4, 3, 3, 3), groups=2, stride=2)
    assert IM2COL.flops(p) == p.flops == 2 * 2 * 4 * 3 * 9 * 4 * 4
