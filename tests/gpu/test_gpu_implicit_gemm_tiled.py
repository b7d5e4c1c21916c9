"""The tiled implicit GEMMs (implicit_gemm_128x64, _64x64, _32x32) against the float64 reference, every pass,
float32 and float16, into NaN-poisoned results, on layers no tile divides (odd channels, 7x7 and 13x11 images,
one image), groups, depthwise, stride and dilation. Under the simulator each runs its small twin tiling (few
simulated threads); one test runs every configuration's real GPU tiling on one tiny layer."""
import numpy as np
import pytest

import convalgos
from convalgos import ConvParams, reference
from convalgos import cuda as gpu
from convalgos.arrays import simulator_enabled
from convalgos.implicit_gemm import tiled
from convalgos.implicit_gemm.tiling import CONFIGURATIONS, Tiling

from gpu_arrays import device, host

NAMES = [f"implicit_gemm_{shape}" for shape in CONFIGURATIONS]

# (x shape, w shape, keywords): sizes no tile divides.
LAYERS = {
    "odd-7x7": ((1, 3, 7, 7), (5, 3, 3, 3), dict(padding=1)),
    "13x11-groups-stride-dilation": ((1, 4, 13, 11), (6, 2, 3, 2), dict(stride=(2, 1), dilation=(1, 2),
                                                                        padding=((1, 0), (0, 1)), groups=2)),
    "depthwise-stride": ((1, 3, 7, 7), (3, 1, 3, 3), dict(stride=2, padding=1, groups=3)),
    "1x1-two-images": ((2, 5, 7, 7), (3, 5, 1, 1), {}),
}


def layer(name: str, dtype="float32") -> ConvParams:
    x_shape, w_shape, kwargs = LAYERS[name]
    return ConvParams.from_shapes(x_shape, w_shape, dtype=dtype, **kwargs)


def check(name: str, op: str, p: ConvParams, seed: int = 0) -> np.ndarray:
    """Pass ``op`` into a NaN-filled result: every element written, within the tolerance, buffers as declared."""
    algorithm = gpu.ALGORITHMS[name]
    assert algorithm.supports(p, op), algorithm.supports(p, op).reason
    rng = np.random.default_rng(seed)
    arrays = {k: rng.standard_normal(shape).astype(p.dtype)
              for k, shape in {"x": p.in_shape, "w": p.weight_shape, "dy": p.out_shape}.items()}
    a, b = (arrays["dy"], arrays["w"]) if op == "backward_data" else (arrays["x"], arrays[
        "dy" if op == "backward_filter" else "w"])
    out = device(np.full(p.result_shape(op), np.nan, dtype=p.dtype))
    algorithm.release()
    convalgos.run(algorithm, op, device(a), device(b), p, out)
    if p.dtype == p.compute_dtype:
        assert algorithm.workspace.nbytes <= algorithm.workspace_bytes(p, op)
    result = host(out)
    assert not np.isnan(result).any(), f"{np.isnan(result).sum()} elements never written"
    error = reference.normwise_error(result, reference.PASS[op](a, b, p))
    assert error <= algorithm.tolerance_of(op, p.dtype), error
    return result


@pytest.mark.parametrize("layer_name", list(LAYERS))
@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("name", NAMES)
def test_every_configuration_and_pass_agrees_with_the_reference(name, op, layer_name):
    check(name, op, layer(layer_name))


@pytest.mark.parametrize("op", convalgos.PASSES)
@pytest.mark.parametrize("name", NAMES)
def test_float16(name, op):
    check(name, op, layer("odd-7x7", "float16"), seed=1)


@pytest.mark.skipif(not simulator_enabled(), reason="the GPU runs the real tilings in every test")
@pytest.mark.parametrize("name", NAMES)
def test_the_real_gpu_tiling(name, monkeypatch):
    """One block of the configuration's real tiling per pass (128 to 256 simulated threads)."""
    algorithm = gpu.ALGORITHMS[name]
    monkeypatch.setattr(algorithm, "tiling", lambda: algorithm.gpu_tiling)
    p = ConvParams.from_shapes((1, 3, 5, 4), (5, 3, 3, 3), padding=1)
    for op in convalgos.PASSES:
        check(name, op, p, seed=2)


def test_backward_filter_splits_its_reduction_and_sums_the_ranges_in_order():
    """A long reduction over one small result tile is split in ranges (the grid's z), their sums added by one
    more kernel; the ranges' workspace and extra additions are declared, and the result is the same bits
    run to run."""
    algorithm = gpu.ALGORITHMS["implicit_gemm_32x32"]
    p = ConvParams.from_shapes((2, 2, 6, 6), (2, 2, 1, 1))
    splits, span = algorithm.splits(p)
    assert splits > 1 and splits * span >= p.N * 36 > (splits - 1) * span
    assert algorithm.workspace_bytes(p, "backward_filter") == splits * 2 * 2 * 4
    assert algorithm.flops(p, "backward_filter") == p.flops + (splits - 1) * 4
    with gpu.count_ops() as ops:
        first = check("implicit_gemm_32x32", "backward_filter", p)
    assert ops.by_name == {"implicit_gemm.tiled_kernel": 1, "implicit_gemm.sum_splits_kernel": 1}
    assert np.array_equal(first, check("implicit_gemm_32x32", "backward_filter", p))


def test_registered_shapes_and_their_gpu_tilings():
    assert [n for n in gpu.ALGORITHMS if n.startswith("implicit_gemm_")] == NAMES
    for name in NAMES:
        algorithm = gpu.ALGORITHMS[name]
        assert algorithm.deterministic and algorithm.tolerance is gpu.ALGORITHMS["implicit_gemm"].tolerance
        assert name == f"implicit_gemm_{algorithm.gpu_tiling.BLOCK_M}x{algorithm.gpu_tiling.BLOCK_N}"
        assert all(algorithm.workspace_bytes(layer(n), op) == 0 for n in LAYERS for op in ("forward", "backward_data"))
    # on a GPU, a big layer's backward_filter fills the multiprocessors with ranges of at least 8 chunks
    big = ConvParams.from_shapes((16, 64, 224, 224), (64, 64, 3, 3), padding=1)
    algorithm = gpu.ALGORITHMS["implicit_gemm_128x64"]
    splits, span = algorithm.splits(big, algorithm.gpu_tiling)
    assert algorithm.grid(big, "backward_filter", algorithm.gpu_tiling) == (9, 1, splits)
    assert 9 * splits >= tiled.TARGET_BLOCKS and span >= 8 * 8


def test_a_tiling_that_cannot_share_its_loads_is_refused():
    with pytest.raises(ValueError, match="THREAD_M=3 must divide BLOCK_M=32"):
        Tiling(32, 32, 8, 3, 4).check()
    with pytest.raises(ValueError, match="must be a multiple of BLOCK_N=64"):
        Tiling(16, 64, 8, 4, 8).check()
    with pytest.raises(ValueError, match="shape must be one of"):
        tiled.GPUTiledImplicitGemm("16x16")


def seeded_rank(p: ConvParams, op: str = "forward"):
    """The shipped GPU seed's ranking of the implicit GEMMs (benchmark off), its rule and its slowdowns."""
    from autotune.heuristics import Heuristics
    heuristics = Heuristics.from_file()
    names = ["implicit_gemm"] + NAMES
    flops = {n: gpu.ALGORITHMS[n].flops(p, op) for n in names}
    workspace = {n: gpu.ALGORITHMS[n].workspace_bytes(p, op) for n in names}
    ranked, rule = heuristics.rank(p, names, op=op, device="cuda", flops=flops, workspace=workspace)
    return ranked, rule, heuristics.slowdowns(rule, ranked, op=op, device="cuda")


def test_the_gpu_seed_picks_the_tile_shape_from_the_layer_and_says_so():
    """A small plane at batch 1 leaves 128x64's grid mostly idle: 32x32 first; a deep strided 1x1 layer at
    batch 32 fills the GPU with 128x64 tiles. The textbook kernel (one result per thread) is expected 8x slower
    than the best shape there, so benchmark mode prunes it (prune_ratio 6)."""
    ranked, rule, slowdowns = seeded_rank(ConvParams.from_shapes((1, 64, 56, 56), (64, 64, 3, 3), padding=1))
    assert ranked[0] == "implicit_gemm_32x32" and "implicit GEMM shape implicit_gemm_32x32" in rule
    assert slowdowns["implicit_gemm_32x32"] == 1.0 and max(slowdowns.values()) < 6
    ranked, rule, slowdowns = seeded_rank(ConvParams.from_shapes((32, 128, 28, 28), (256, 128, 1, 1), stride=2))
    assert ranked[0] == "implicit_gemm_128x64" and "implicit GEMM shape implicit_gemm_128x64" in rule
    assert slowdowns["implicit_gemm"] == pytest.approx(8.0) and slowdowns["implicit_gemm_64x64"] < 6
