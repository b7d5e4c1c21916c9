"""FFT-specific checks: the fast-length rule, the polyphase stride path, the tile plan, workspace and FLOPs."""
import tracemalloc

import numpy as np
import pytest
import scipy.fft

import convalgos
from convalgos import ALGORITHMS, ConvParams, fft, reference
from convalgos.fft import MAX_WORKSPACE, next_fast_len, phase_extent, plan_flops, whole_image_plan
from convalgos.fft_tiled import TILE_SIZES, cheapest_tile_plan, tile_plan
from convalgos.reference import normwise_error

FFT, TILED = ALGORITHMS["fft"], ALGORITHMS["fft_tiled"]


def arrays(x_shape, w_shape, seed=0, dtype=np.float32):
    rng = np.random.default_rng(seed)
    return rng.standard_normal(x_shape).astype(dtype), rng.standard_normal(w_shape).astype(dtype)


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


@pytest.mark.parametrize("name", ["fft", "fft_tiled"])
@pytest.mark.parametrize("stride, dilation, groups", [((2, 3), (1, 1), 1), ((3, 2), (2, 3), 2), ((4, 4), (1, 1), 1),
                                                      ((2, 1), (3, 1), 4)])
def test_strided_dilated_grouped_layers_agree(name, stride, dilation, groups):
    x, w = arrays((2, 8, 31, 27), (8, 8 // groups, 5, 4))
    kw = dict(stride=stride, padding=((2, 1), (0, 3)), dilation=dilation, groups=groups)
    err = normwise_error(convalgos.conv2d(x, w, **kw, algo=name), reference.conv2d(x, w, **kw))
    assert err <= ALGORITHMS[name].tolerance["float32"]


@pytest.mark.parametrize("name", ["fft", "fft_tiled"])
def test_workspace_formula_is_what_forward_allocates(name):
    x, w = arrays((2, 16, 40, 40), (24, 16, 7, 7))
    p = ConvParams.from_arrays(x, w, padding=3)
    algorithm = ALGORITHMS[name]
    convalgos.conv2d(x, w, padding=3, algo=name)            # compile and warm up
    algorithm.release()
    tracemalloc.start()
    convalgos.conv2d(x, w, padding=3, algo=name)
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    out_bytes = x.itemsize * np.prod(p.out_shape)
    # the formula sums every array; a few (the kernel's partial spectrum) are freed before the peak
    assert 0.75 * algorithm.workspace_bytes(p) <= peak - out_bytes <= algorithm.workspace_bytes(p)


def test_tiles_cover_the_output_and_pick_the_cheapest_size():
    p = ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 7, 7), padding=3)
    t = cheapest_tile_plan(p)
    assert t.nth * t.mh >= 56 and t.ntw * t.mw >= 56 and t.mh == t.Th - 7 + 1
    assert plan_flops(p, t) == min(plan_flops(p, tile_plan(p, T)) for T in TILE_SIZES if T >= 7)


def test_tiled_workspace_is_far_smaller_than_whole_image_on_a_large_image():
    p = ConvParams.from_shapes((1, 32, 256, 256), (32, 32, 5, 5), padding=2)
    assert TILED.workspace_bytes(p) * 5 < FFT.workspace_bytes(p)     # 52 MB against 328 MB


def test_fft_does_fewer_flops_than_direct_on_large_kernels():
    p = ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 7, 7), padding=3)
    assert TILED.flops(p) < FFT.flops(p) < p.flops
    # the convention by hand for one tile: 2.5 n log2 n per real FFT, 8 per complex multiply-add
    q = ConvParams.from_shapes((1, 2, 6, 6), (3, 2, 3, 3))              # one 6x6 tile (4 outputs + 3 - 1)
    t = whole_image_plan(q)
    assert (t.Th, t.Tw) == (6, 6)
    n = 36
    kernel_dft = 3 * 2 * (4 * 4 * 3 * 3 + 8 * 6 * 3 * 4)                 # Fw = 4 bins, 3x3 taps
    assert FFT.flops(q) == int((2 * 1 + 3 * 1) * 2.5 * n * np.log2(n) + kernel_dft + 8 * 6 * 4 * 3 * 2 * 1)


@pytest.mark.parametrize("name", ["fft", "fft_tiled"])
def test_repeated_calls_are_bitwise_identical(name):
    x, w = arrays((3, 24, 45, 38), (20, 24, 9, 5))
    first = convalgos.conv2d(x, w, padding=(4, 2), algo=name)
    assert all(np.array_equal(first, convalgos.conv2d(x, w, padding=(4, 2), algo=name)) for _ in range(3))
    assert ALGORITHMS[name].deterministic


def test_float64_is_exact_to_rounding():
    x, w = arrays((2, 6, 33, 29), (5, 6, 11, 7), dtype=np.float64)
    for name in ("fft", "fft_tiled"):
        y = convalgos.conv2d(x, w, padding=2, stride=(2, 1), algo=name)
        assert normwise_error(y, reference.conv2d(x, w, padding=2, stride=(2, 1))) < 1e-13


def test_large_batches_run_in_chunks_against_one_kernel_spectrum(monkeypatch):
    big = ConvParams.from_shapes((64, 3, 256, 256), (64, 3, 3, 3), padding=1)
    assert FFT.supports(big) and FFT.batch_chunk(big) < 64 and FFT.workspace_bytes(big) <= fft.CHUNK_WORKSPACE
    x, w = arrays((6, 4, 20, 17), (5, 4, 3, 3))
    whole = convalgos.conv2d(x, w, padding=1, algo="fft")
    monkeypatch.setattr(fft, "CHUNK_WORKSPACE", FFT.workspace_bytes(ConvParams.from_arrays(x[:2], w, padding=1)))
    assert FFT.batch_chunk(ConvParams.from_arrays(x, w, padding=1)) == 2
    chunked = convalgos.conv2d(x, w, padding=1, algo="fft")
    np.testing.assert_allclose(chunked, whole, rtol=0, atol=1e-5 * np.abs(whole).max())


def test_refusals_give_reasons():
    huge = ConvParams.from_shapes((1, 64, 1024, 1024), (64, 64, 3, 3), padding=1)
    assert FFT.workspace_bytes(huge) > MAX_WORKSPACE
    assert not FFT.supports(huge) and "MiB of workspace" in FFT.supports(huge).reason
    wide = ConvParams.from_shapes((1, 1, 80, 80), (1, 1, 65, 3))
    assert FFT.supports(wide)
    assert not TILED.supports(wide) and "65 pixels per stride phase" in TILED.supports(wide).reason
