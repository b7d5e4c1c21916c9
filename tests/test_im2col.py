"""im2col-specific checks: the patch matrix and its adjoint col2im, the zero-copy 1x1 path, the three passes
against the reference (chunked over the batch and over output rows), the identities between the passes, and
the workspace and FLOP formulas against what the code allocates and does."""
import tracemalloc

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import convalgos
from convalgos import ALGORITHMS, ConvParams, reference
from convalgos.im2col.cpu import (Im2col, is_zero_copy, patch_bytes_per_image, patch_bytes_per_row,
                              product_bytes_per_image, scatter_adds)
from convalgos.im2col.kernels import col2im, fill_patches
from convalgos.reference import normwise_error
from layers import conv_kwargs, layers, params_of

IM2COL = ALGORITHMS["im2col"]
SETTINGS = settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def arrays(x_shape, w_shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)


def operands(p: ConvParams, seed=0):
    """x, w and dy of layer p, seeded, in its compute dtype."""
    rng = np.random.default_rng(seed)
    return tuple(rng.standard_normal(shape).astype(p.compute_dtype)
                 for shape in (p.in_shape, p.weight_shape, p.out_shape))


def run_pass(algorithm, op, p, x, w, dy):
    """Pass op of algorithm into a NaN-filled result (so an element left unwritten fails the check)."""
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    out = np.full(p.result_shape(op), np.nan, p.compute_dtype)
    getattr(algorithm, op)(a, b, p, out)
    return out, reference.PASS[op](a, b, p)


def with_budget(nbytes) -> Im2col:
    algorithm = Im2col()
    algorithm.workspace_budget_bytes = nbytes
    return algorithm


# ---- the kernels -------------------------------------------------------------------------------------------
def test_patch_matrix_matches_its_definition():
    x, _ = arrays((3, 3, 7, 9), (1, 1, 1, 1), dtype=np.float64)
    R, S, (sh, sw), (dh, dw), (top, left) = 2, 3, (2, 1), (1, 2), (1, 2)
    p = ConvParams.from_shapes(x.shape, (4, 3, R, S), stride=(sh, sw), padding=((top, 0), (left, 1)),
                               dilation=(dh, dw))
    Ho, Wo = p.out_hw
    for n0, nb, i0, Hc in [(1, 2, 0, Ho), (2, 1, 1, 2)]:     # images 1 and 2 side by side; rows 1..2 of image 2
        patches = np.full((3 * R * S, nb * Hc * Wo), np.nan)
        fill_patches(x, n0, nb, i0, Hc, R, S, sh, sw, top, left, dh, dw, Wo, patches)
        for b in range(nb):
            padded = np.pad(x[n0 + b], ((0, 0), (top, 0), (left, 1)))
            for c in range(3):
                for r in range(R):
                    for s in range(S):
                        window = padded[c, r * dh::sh, s * dw::sw][i0:i0 + Hc, :Wo]
                        row = patches[(c * R + r) * S + s, b * Hc * Wo:(b + 1) * Hc * Wo]
                        np.testing.assert_array_equal(row.reshape(Hc, Wo), window)


@pytest.mark.parametrize("chunk", [(0, 3, 0, None), (1, 1, 2, 3)])
def test_col2im_is_the_adjoint_of_fill_patches(chunk):
    """<fill_patches(x), D> == <x, col2im(D)> for every x and D: col2im is im2col transposed."""
    p = ConvParams.from_shapes((3, 2, 9, 8), (1, 2, 3, 2), stride=(2, 1), padding=((1, 2), (0, 1)),
                               dilation=(2, 3))
    Ho, Wo = p.out_hw
    n0, nb, i0, Hc = chunk
    Hc = Hc or Ho
    (top, _), (left, _) = p.padding
    rng = np.random.default_rng(3)
    x, cols = rng.standard_normal(p.in_shape), rng.standard_normal((p.C * p.R * p.S, nb * Hc * Wo))
    patches = np.empty_like(cols)
    fill_patches(x, n0, nb, i0, Hc, p.R, p.S, *p.stride, top, left, *p.dilation, Wo, patches)
    dx = np.full(p.in_shape, np.nan)
    dx[n0:n0 + nb] = 0.0
    col2im(cols, n0, nb, i0, Hc, p.R, p.S, *p.stride, top, left, *p.dilation, Wo, True, dx)
    assert np.isnan(dx[:n0]).all() and np.isnan(dx[n0 + nb:]).all()   # other images untouched
    np.testing.assert_allclose(np.vdot(patches, cols), np.vdot(x[n0:n0 + nb], dx[n0:n0 + nb]), rtol=1e-12)


# ---- the passes against the reference ----------------------------------------------------------------------
BUDGETS = st.sampled_from([64 << 20, 4000, 1])   # whole batch, a few images or bands of rows, one row


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@SETTINGS
@given(layer=layers(), budget=BUDGETS)
def test_backward_passes_on_random_layers(dtype, layer, budget):
    p = params_of(layer, dtype)
    if p.N == 0:
        return
    algorithm = with_budget(budget)
    x, w, dy = operands(p)
    for op in ("backward_data", "backward_filter"):
        algorithm.release()
        out, ref = run_pass(algorithm, op, p, x, w, dy)
        err = normwise_error(out, ref)
        assert err <= algorithm.tolerance_of(op, dtype), f"{op} of {p}, budget {budget}: error {err:.3g}"
        assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p, op)


@pytest.mark.parametrize("op", ["backward_data", "backward_filter"])
@settings(max_examples=10, deadline=None)
@given(layer=layers(max_batch=2))
def test_float16_backward_passes_through_the_front_door(op, layer):
    p = params_of(layer, "float16")
    x, w, dy = (a.astype(np.float16) for a in operands(p))
    kw = conv_kwargs(layer)
    if op == "backward_data":
        out = convalgos.conv2d_input(p.in_shape, w, dy, **kw, algo="im2col")
        ref = reference.backward_data(dy, w, p)
    else:
        out = convalgos.conv2d_weight(x, p.weight_shape, dy, **kw, algo="im2col")
        ref = reference.backward_filter(x, dy, p)
    assert out.dtype == np.float16 and out.shape == p.result_shape(op)
    assert normwise_error(out, ref) <= IM2COL.tolerance_of(op, "float16")


@pytest.mark.parametrize("kw", [dict(padding="same", dilation=2), dict(groups=6, stride=2, padding=(1, 0)),
                                dict(groups=3, padding="same")])
def test_named_layers_all_passes(kw):
    """"same" padding (asymmetric for even kernels), depthwise with a channel multiplier, grouped."""
    w_shape = (12, 1, 3, 3) if kw.get("groups") == 6 else (9, 6 // kw.get("groups", 1), 4, 3)
    p = ConvParams.from_shapes((2, 6, 10, 9), w_shape, **kw)
    x, w, dy = operands(p, seed=4)
    for op in convalgos.PASSES:
        out, ref = run_pass(IM2COL, op, p, x, w, dy)
        assert normwise_error(out, ref) <= IM2COL.tolerance_of(op, "float32"), op


def test_backward_passes_agree_with_torch():
    torch = pytest.importorskip("torch")
    kw = dict(stride=(2, 1), padding=(1, 2), dilation=(1, 2), groups=2)
    p = ConvParams.from_shapes((3, 4, 11, 10), (6, 2, 3, 3), **kw)
    x, w, dy = operands(p, seed=5)
    dx = convalgos.conv2d_input(p.in_shape, w, dy, **kw, algo="im2col")
    dw = convalgos.conv2d_weight(x, p.weight_shape, dy, **kw, algo="im2col")
    t = {name: torch.from_numpy(a.astype(np.float64)) for name, a in (("x", x), ("w", w), ("dy", dy))}
    dx_torch = torch.nn.grad.conv2d_input(p.in_shape, t["w"], t["dy"], **kw).numpy()
    dw_torch = torch.nn.grad.conv2d_weight(t["x"], p.weight_shape, t["dy"], **kw).numpy()
    assert normwise_error(dx, dx_torch) <= IM2COL.tolerance_of("backward_data", "float32")
    assert normwise_error(dw, dw_torch) <= IM2COL.tolerance_of("backward_filter", "float32")


# ---- the identities between the passes, with im2col's own forward ------------------------------------------
def test_backward_data_at_stride_1_is_a_forward_conv_with_the_flipped_transposed_kernel():
    kw = dict(padding=((2, 0), (1, 1)), dilation=(1, 2), groups=2)
    p = ConvParams.from_shapes((2, 4, 9, 10), (6, 2, 3, 2), **kw)
    x, w, dy = operands(p, seed=6)
    dx, _ = run_pass(IM2COL, "backward_data", p, x, w, dy)
    (top, bottom), (left, right) = p.padding
    eh, ew = p.kernel_extent
    w_flipped = (w[:, :, ::-1, ::-1].reshape(p.groups, p.Kg, p.Cg, p.R, p.S).transpose(0, 2, 1, 3, 4)
                 .reshape(p.C, p.Kg, p.R, p.S))
    dx_forward = convalgos.conv2d(dy, np.ascontiguousarray(w_flipped), dilation=p.dilation, groups=p.groups,
                                  padding=((eh - 1 - top, eh - 1 - bottom), (ew - 1 - left, ew - 1 - right)),
                                  algo="im2col")
    assert normwise_error(dx, dx_forward) <= 2 * IM2COL.tolerance["float32"]


def test_backward_filter_is_a_forward_conv_of_x_with_dy_as_the_kernel():
    kw = dict(stride=(2, 1), padding=((1, 0), (2, 1)), dilation=(1, 2))
    p = ConvParams.from_shapes((3, 4, 11, 9), (5, 4, 3, 2), **kw)
    x, w, dy = operands(p, seed=7)
    dw, _ = run_pass(IM2COL, "backward_filter", p, x, w, dy)
    # channels of x become the batch, images become the channels; strides and dilations swap
    dw_forward = convalgos.conv2d(np.ascontiguousarray(x.transpose(1, 0, 2, 3)),
                                  np.ascontiguousarray(dy.transpose(1, 0, 2, 3)), padding=p.padding,
                                  stride=p.dilation, dilation=p.stride, algo="im2col")
    dw_forward = dw_forward[:, :, :p.R, :p.S].transpose(1, 0, 2, 3)
    assert normwise_error(dw, dw_forward) <= 2 * IM2COL.tolerance["float32"]


# ---- zero-copy 1x1 ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("groups", [1, 4])
@pytest.mark.parametrize("dilation", [1, 3])
def test_1x1_layer_is_a_zero_copy_gemm(groups, dilation):
    x, w = arrays((3, 8, 10, 7), (12, 8 // groups, 1, 1))
    kw = dict(groups=groups, dilation=dilation)          # a 1x1 kernel has no taps for dilation to spread
    p = ConvParams.from_arrays(x, w, **kw)
    assert is_zero_copy(p)
    assert IM2COL.workspace_bytes(p) == IM2COL.workspace_bytes(p, "backward_data") == 0
    assert IM2COL.workspace_bytes(p, "backward_filter") == 3 * 12 * (8 // groups) * 4      # the stack of 3 images
    dy = operands(p)[2]
    for op in convalgos.PASSES:
        IM2COL.release()
        out, ref = run_pass(IM2COL, op, p, x, w, dy)
        assert IM2COL.workspace.nbytes == IM2COL.workspace_bytes(p, op)
        assert normwise_error(out, ref) <= IM2COL.tolerance_of(op, "float32"), op


def test_1x1_backward_filter_in_several_stacks():
    p = ConvParams.from_shapes((5, 6, 4, 4), (4, 6, 1, 1))
    algorithm = with_budget(2 * 4 * 6 * 4)                   # stacks of 2, 2 and 1 images
    assert algorithm.stacked_images(p) == 2
    assert algorithm.workspace_bytes(p, "backward_filter") == (2 + 1) * 4 * 6 * 4      # stack and partial sum
    assert algorithm.flops(p, "backward_filter") == p.flops + 4 * 4 * 6
    out, ref = run_pass(algorithm, "backward_filter", p, *operands(p))
    assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p, "backward_filter")
    assert normwise_error(out, ref) <= algorithm.tolerance_of("backward_filter", "float32")


@pytest.mark.parametrize("kw", [dict(stride=(1, 2)), dict(padding=((0, 1), (0, 0)))])
def test_1x1_layers_that_need_a_patch_matrix_are_not_zero_copy(kw):
    p = ConvParams.from_shapes((1, 4, 9, 9), (5, 4, 1, 1), **kw)
    assert not is_zero_copy(p) and IM2COL.workspace_bytes(p) > 0
    x, w = arrays((2, 4, 9, 9), (5, 4, 1, 1))
    err = normwise_error(convalgos.conv2d(x, w, **kw, algo="im2col"), reference.conv2d(x, w, **kw))
    assert err <= IM2COL.tolerance["float32"]


# ---- chunks -----------------------------------------------------------------------------------------------
def test_chunking_over_the_batch():
    p = ConvParams.from_shapes((5, 6, 11, 13), (8, 3, 3, 2), stride=(1, 2), padding=((2, 0), (1, 1)),
                               dilation=(2, 1), groups=2)
    x, w, dy = operands(p, seed=10)
    whole = Im2col()
    chunked = with_budget(2 * (patch_bytes_per_image(p) + product_bytes_per_image(p)))   # 2, 2, 1
    one_by_one = with_budget(patch_bytes_per_image(p))                                   # straight into out
    assert whole.chunk_plan(p) == (5, p.out_hw[0]) and chunked.chunk_plan(p) == (2, p.out_hw[0])
    assert one_by_one.chunk_plan(p) == (1, p.out_hw[0])
    for algorithm in (whole, chunked, one_by_one):
        for op in convalgos.PASSES:
            out, ref = run_pass(algorithm, op, p, x, w, dy)
            assert normwise_error(out, ref) <= algorithm.tolerance_of(op, "float32"), (op, algorithm.chunk_plan(p))


def test_bands_of_output_rows_when_one_image_is_over_budget():
    # 3 taps of dilation 2 over stride 1: consecutive bands overlap on 4 rows of dx
    p = ConvParams.from_shapes((2, 3, 17, 12), (4, 3, 3, 2), padding=((1, 2), (0, 1)), dilation=(2, 1))
    Ho, Wo = p.out_hw
    algorithm = with_budget(5 * patch_bytes_per_row(p))       # Ho = 16 rows -> 4 equal bands of 4
    assert algorithm.chunk_plan(p) == (1, 4) and algorithm.chunk_count(p) == 8
    assert [c for c in algorithm.chunks(p)][:5] == [(0, 1, 0, 4), (0, 1, 4, 4), (0, 1, 8, 4), (0, 1, 12, 4),
                                                    (1, 1, 0, 4)]
    x, w, dy = operands(p, seed=8)
    for op in convalgos.PASSES:
        algorithm.release()
        out, ref = run_pass(algorithm, op, p, x, w, dy)
        assert normwise_error(out, ref) <= algorithm.tolerance_of(op, "float32"), op
        assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p, op) <= algorithm.workspace_budget_bytes
    uneven = with_budget(6 * patch_bytes_per_row(p))           # at most 6 rows -> 3 bands of 6, 6, 4
    assert [c[2:] for c in uneven.chunks(p)][:3] == [(0, 6), (6, 6), (12, 4)]


def test_workspace_is_bounded_by_the_budget_or_one_row():
    # the layer of issue 10: one image's patch matrix is 5.67 GiB
    p = ConvParams.from_shapes((1, 3, 2048, 2048), (64, 3, 11, 11))
    assert patch_bytes_per_image(p) > 5.6 * 2 ** 30
    for op in convalgos.PASSES:
        assert IM2COL.workspace_bytes(p, op) <= IM2COL.workspace_budget_bytes + 64 * 3 * 121 * 4
        assert IM2COL.supports(p, op)
    # one output row over the budget: bands of one row, the bound's other term
    p = ConvParams.from_shapes((1, 64, 10, 50), (8, 64, 3, 3))
    tiny = with_budget(1)
    assert tiny.chunk_plan(p) == (1, 1) and tiny.workspace_bytes(p) == patch_bytes_per_row(p)


# ---- formulas ---------------------------------------------------------------------------------------------
def test_workspace_formula():
    # VGG-16's 64->64 3x3 layer: one image's patch matrix (115.6 MB) is over the budget: 2 bands of 112 rows
    p = ConvParams.from_shapes((4, 64, 224, 224), (64, 64, 3, 3), padding=1)
    assert IM2COL.chunk_plan(p) == (1, 112)
    assert IM2COL.workspace_bytes(p) == IM2COL.workspace_bytes(p, "backward_data") == 64 * 9 * 112 * 224 * 4
    assert IM2COL.workspace_bytes(p, "backward_filter") == 64 * 9 * 112 * 224 * 4 + 64 * 64 * 9 * 4
    # CIFAR 32x32: the whole batch fits in 64 MiB: its patch matrix and the wide GEMM's (K, N*Ho*Wo) product
    p = ConvParams.from_shapes((32, 16, 32, 32), (16, 16, 3, 3), padding=1)
    for op in convalgos.PASSES:             # one chunk: no partial sum for backward-filter
        assert IM2COL.workspace_bytes(p, op) == 32 * 16 * 9 * 32 * 32 * 4 + 32 * 16 * 32 * 32 * 4
    p = ConvParams.from_shapes((32, 64, 32, 32), (64, 64, 3, 3), padding=1, dtype="float64")
    nb = (64 << 20) // ((64 * 9 + 64) * 32 * 32 * 8)                 # patch matrix and product, per image
    assert nb == 12 and IM2COL.workspace_bytes(p) == nb * (64 * 9 + 64) * 32 * 32 * 8
    assert IM2COL.workspace_bytes(p, "backward_filter") == nb * (64 * 9 + 64) * 32 * 32 * 8 + 64 * 64 * 9 * 8
    # the N=64, C=3, 256x256 layer: chunks of 2 images keep the 64-channel product buffer within the budget
    p = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
    assert IM2COL.chunk_plan(p)[0] == 2 and IM2COL.workspace_bytes(p) == 2 * (27 + 64) * 256 * 256 * 4 <= 64 << 20


@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("budget_rows", [None, 6])          # one chunk of 3 images; bands of 5 rows
def test_workspace_formula_is_what_each_pass_allocates(op, budget_rows):
    p = ConvParams.from_shapes((3, 8, 20, 20), (16, 4, 3, 3), padding=1, groups=2)
    x, w, dy = operands(p)
    a, b = {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]
    out = np.empty(p.result_shape(op), np.float32)
    algorithm = with_budget(budget_rows * patch_bytes_per_row(p)) if budget_rows else Im2col()
    assert algorithm.chunk_plan(p) == ((1, 5) if budget_rows else (3, 20))
    getattr(algorithm, op)(a, b, p, out)                 # compile and warm up
    algorithm.release()
    tracemalloc.start()
    getattr(algorithm, op)(a, b, p, out)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p, op) > 0
    assert algorithm.workspace_bytes(p, op) <= peak <= algorithm.workspace_bytes(p, op) + 4096


@SETTINGS
@given(layer=layers())
def test_scatter_adds_count_the_taps_inside_x(layer):
    """col2im's additions = the (n, c, k-free) terms that land in x: the reference's dx of ones over Kg."""
    p = params_of(layer)
    ones = reference.backward_data(np.ones(p.out_shape), np.ones(p.weight_shape), p)
    assert scatter_adds(p) * p.Kg == round(ones.sum())
    assert IM2COL.flops(p, "backward_data") == p.flops + (0 if is_zero_copy(p) else scatter_adds(p))


def test_flops():
    p = ConvParams.from_shapes((2, 6, 10, 10), (4, 3, 3, 3), groups=2, stride=2)
    assert IM2COL.flops(p) == p.flops == 2 * 2 * 4 * 3 * 9 * 4 * 4
    # 3 taps of 4 rows and of 4 columns, all inside x (no padding): 2 images * 6 channels * 12 * 12 adds
    assert IM2COL.flops(p, "backward_data") == p.flops + 2 * 6 * 12 * 12
    assert IM2COL.flops(p, "backward_filter") == p.flops                 # one chunk: no sums of chunks
    banded = with_budget(patch_bytes_per_row(p))                             # 2 images x 4 rows: 8 chunks
    assert banded.flops(p, "backward_filter") == p.flops + 7 * 4 * 3 * 9
    with pytest.raises(ValueError, match="op must be one of"):
        IM2COL.flops(p, "sideways")


def test_backward_passes_are_bitwise_repeatable():
    p = ConvParams.from_shapes((3, 4, 12, 12), (6, 4, 3, 3), padding=1)
    x, w, dy = operands(p, seed=9)
    for op in ("backward_data", "backward_filter"):
        algorithm = with_budget(3 * patch_bytes_per_row(p))                  # bands: sums across chunks
        np.testing.assert_array_equal(run_pass(algorithm, op, p, x, w, dy)[0],
                                      run_pass(algorithm, op, p, x, w, dy)[0])
