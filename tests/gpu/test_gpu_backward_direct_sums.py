"""The backward passes of the GPU direct-sum families (direct, implicit_gemm, im2col) against the float64
reference, on tiny layers (simulator: ~1 ms per GPU thread), into results poisoned with NaN so that an element
a kernel never writes fails. Each run also holds the kept buffers to ``workspace_bytes``."""
import numpy as np
import pytest

import convalgos
from convalgos import ConvParams, reference
from convalgos import cuda as gpu
from convalgos.arrays import simulator_enabled

from gpu_arrays import device, host

NAMES = ["direct", "implicit_gemm", "im2col"]
BACKWARD = ["backward_data", "backward_filter"]

# (x shape, w shape, keywords): tiny, each covering what a feature touches in the kernels.
LAYERS = {
    "same": ((1, 2, 4, 4), (2, 2, 3, 3), dict(padding=1)),
    "groups": ((2, 4, 4, 3), (4, 2, 3, 3), dict(padding=((0, 1), (2, 0)), groups=2)),
    "depthwise": ((1, 3, 4, 4), (3, 1, 3, 3), dict(padding=1, groups=3)),
    "stride-dilation": ((1, 2, 7, 6), (2, 2, 3, 2), dict(stride=2, padding=((1, 0), (0, 1)), dilation=(1, 2))),
    "unreached-phase": ((1, 2, 5, 6), (2, 2, 2, 3), dict(stride=(3, 2), dilation=(2, 1), padding=((2, 0), (1, 1)))),
    "taps-per-phase": ((1, 1, 12, 3), (2, 1, 5, 1), dict(stride=(2, 1), dilation=(3, 1), padding=((2, 1), (0, 0)))),
    "1x1": ((2, 3, 3, 3), (2, 3, 1, 1), {}),
    "1x1-stride": ((1, 2, 5, 5), (3, 2, 1, 1), dict(stride=2)),
    "kernel-fills-input": ((1, 2, 4, 3), (2, 2, 5, 4), dict(padding=((0, 1), (1, 0)))),
}




def layer(name: str, dtype="float32"):
    x_shape, w_shape, kwargs = LAYERS[name]
    return ConvParams.from_shapes(x_shape, w_shape, dtype=dtype, **kwargs)


def operands(p: ConvParams, op: str, seed: int = 0):
    rng = np.random.default_rng(seed)
    arrays = {"x": p.in_shape, "w": p.weight_shape, "dy": p.out_shape}
    arrays = {k: rng.standard_normal(shape).astype(p.dtype) for k, shape in arrays.items()}
    return (arrays["dy"], arrays["w"]) if op == "backward_data" else (arrays["x"], arrays["dy"])


def poisoned_run(algorithm, op: str, a, b, p: ConvParams):
    """Pass ``op`` into a NaN-filled result, from a released workspace; the result on the host."""
    out = device(np.full(p.result_shape(op), np.nan, dtype=p.dtype))
    algorithm.release()
    convalgos.run(algorithm, op, device(a), device(b), p, out)
    if p.dtype == p.compute_dtype:           # run() writes straight into out: the kept buffers are the pass's
        assert algorithm.workspace.nbytes <= algorithm.workspace_bytes(p, op)
    return host(out)


def check(name: str, op: str, p: ConvParams, seed: int = 0):
    algorithm = gpu.ALGORITHMS[name]
    assert algorithm.supports(p, op), algorithm.supports(p, op).reason
    a, b = operands(p, op, seed)
    result = poisoned_run(algorithm, op, a, b, p)
    assert not np.isnan(result).any(), f"{np.isnan(result).sum()} elements never written"
    error = reference.normwise_error(result, reference.PASS[op](a, b, p))
    assert error <= algorithm.tolerance_of(op, p.dtype), error
    return a, b, result


@pytest.mark.parametrize("layer_name", list(LAYERS))
@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("name", NAMES)
def test_backward_passes_agree_with_the_reference(name, op, layer_name):
    check(name, op, layer(layer_name))


@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", ["float64", "float16"])
def test_float64_and_float16(name, op, dtype):
    check(name, op, layer("stride-dilation", dtype), seed=1)


@pytest.mark.parametrize("op", BACKWARD)
@pytest.mark.parametrize("name", NAMES)
def test_deterministic_means_the_same_bits(name, op):
    algorithm = gpu.ALGORITHMS[name]
    assert algorithm.deterministic
    p = layer("depthwise")
    a, b, first = check(name, op, p, seed=2)
    assert np.array_equal(first, poisoned_run(algorithm, op, a, b, p))


def test_implicit_gemm_runs_every_pass_under_a_zero_workspace_cap():
    algorithm = gpu.ALGORITHMS["implicit_gemm"]
    p = layer("groups")
    convalgos.set_workspace_cap(0)
    try:
        for op in convalgos.PASSES:
            assert algorithm.workspace_bytes(p, op) == 0 and algorithm.supports(p, op)
            assert not gpu.ALGORITHMS["im2col"].supports(p, op)
        dy, w = operands(p, "backward_data")
        dx = convalgos.conv2d_input(p.in_shape, device(w), device(dy), padding=((0, 1), (2, 0)), groups=2,
                                    algo="implicit_gemm", backend="cuda")
    finally:
        convalgos.set_workspace_cap(None)
    assert reference.normwise_error(host(dx), reference.backward_data(dy, w, p)) <= 5e-6


def test_the_front_door_runs_the_backward_passes_on_the_gpu():
    p = layer("stride-dilation")
    x, dy = operands(p, "backward_filter")
    kwargs = dict(stride=2, padding=((1, 0), (0, 1)), dilation=(1, 2), algo="im2col", backend="cuda")
    dw = convalgos.conv2d_weight(device(x), p.weight_shape, device(dy), **kwargs)
    assert reference.normwise_error(host(dw), reference.backward_filter(x, dy, p)) <= 5e-6


def test_flops_count_what_each_kernel_does():
    strided, same = layer("stride-dilation"), layer("same")
    direct, implicit_gemm, im2col = (gpu.ALGORITHMS[name] for name in NAMES)
    # implicit_gemm's gather multiplies every (dx pixel, k, r, s), the stride's zeros included; direct's
    # phases take only the taps that reach each phase: sh*sw times fewer at stride 2.
    assert implicit_gemm.flops(strided, "backward_data") == 2 * 7 * 6 * 2 * 2 * 3 * 2
    assert direct.flops(strided, "backward_data") * 4 <= implicit_gemm.flops(strided, "backward_data")
    # at stride 1 with "same" padding every pass does the direct count (direct's filter skips padded taps).
    assert implicit_gemm.flops(same, "backward_data") == direct.flops(same, "backward_data") == same.flops
    assert direct.flops(same, "backward_filter") < same.flops == implicit_gemm.flops(same, "backward_filter")
    assert direct.flops(layer("1x1"), "backward_filter") == layer("1x1").flops
    # im2col: the GEMM's count, plus col2im's additions (none for the plain 1x1 GEMM), one chunk here.
    assert im2col.flops(same, "backward_data") > same.flops == im2col.flops(same, "backward_filter")
    assert im2col.flops(layer("1x1"), "backward_data") == layer("1x1").flops


def test_workspace_formulas():
    p, plain = layer("groups"), layer("1x1")
    direct, implicit_gemm, im2col = (gpu.ALGORITHMS[name] for name in NAMES)
    weights = p.K * p.Cg * p.R * p.S * 4
    assert direct.workspace_bytes(p, "backward_data") == weights                 # the phases' flipped taps
    assert direct.workspace_bytes(p, "backward_filter") == 0
    assert all(implicit_gemm.workspace_bytes(p, op) == 0 for op in convalgos.PASSES)
    assert p.out_hw == (3, 3)
    patches = p.N * p.C * p.R * p.S * 9 * 4                                      # one chunk of both images
    assert im2col.workspace_bytes(p, "backward_data") == patches + weights       # + W^T
    assert im2col.workspace_bytes(p, "backward_filter") == patches + p.N * p.K * 9 * 4    # + dy by group
    assert im2col.workspace_bytes(plain, "backward_data") == plain.K * plain.C * 4


def test_grid_limits_are_backward_constraints():
    wide = ConvParams.from_shapes((1, 70000, 1, 1), (70000, 1, 1, 1), groups=70000)
    refused = gpu.ALGORITHMS["implicit_gemm"].supports(wide, "backward_data")
    assert not refused and "65535" in refused.reason
    for op in BACKWARD:                                       # direct puts (image, group) on grid x
        assert gpu.ALGORITHMS["direct"].supports(wide, op)


def test_implicit_gemm_with_the_gpu_tiles(monkeypatch):
    from convalgos.implicit_gemm import gpu as implicit_gemm
    monkeypatch.setattr(implicit_gemm, "SIM_TILE", implicit_gemm.TILE)
    monkeypatch.setattr(implicit_gemm, "SIM_FILTER_TILE", implicit_gemm.FILTER_TILE)
    monkeypatch.setattr(implicit_gemm, "SIM_FILTER_SLICES", implicit_gemm.FILTER_SLICES)
    p = ConvParams.from_shapes((1, 2, 3, 3), (3, 2, 2, 2), padding=1)
    for op in BACKWARD:
        check("implicit_gemm", op, p)


def test_direct_filter_with_the_gpu_block(monkeypatch):
    from convalgos.direct import gpu as direct
    monkeypatch.setattr(direct, "SIM_FILTER_LANES", direct.FILTER_LANES)
    monkeypatch.setattr(direct, "SIM_FILTER_TAPS", direct.FILTER_TAPS)
    check("direct", "backward_filter", ConvParams.from_shapes((1, 1, 6, 6), (1, 1, 1, 2), stride=(1, 2)))


@pytest.mark.parametrize("op", BACKWARD)
def test_im2col_in_chunks_of_images(op, monkeypatch):
    """Three images in chunks of two: the last chunk is one image (dy read in place), and backward_filter sums
    the chunks' products through its partial buffer."""
    from convalgos.im2col import gpu as im2col
    p = ConvParams.from_shapes((3, 2, 4, 4), (2, 2, 3, 3), padding=1)
    monkeypatch.setattr(im2col, "CHUNK_BYTES", 2 * im2col.patch_elements(p) * p.itemsize)
    algorithm = gpu.ALGORITHMS["im2col"]
    assert (algorithm.chunk(p), algorithm.chunk_count(p)) == (2, 2)
    check("im2col", op, p)
    if op == "backward_filter":
        assert algorithm.flops(p, op) == p.flops + p.K * p.Cg * p.R * p.S
        patches, by_group, partial = 2 * im2col.patch_elements(p), 2 * p.K * 16, p.K * p.Cg * p.R * p.S
        assert algorithm.workspace_bytes(p, op) == (patches + by_group + partial) * 4


@pytest.mark.skipif(not simulator_enabled(), reason="the kit passes NumPy arrays: device arrays only here")
def test_the_testing_kit_checks_a_gpu_algorithm_under_the_simulator():
    """``convalgos.testing`` runs a GPU algorithm as it is under the simulator, every check but "workspace":
    tracemalloc would count the simulator's own copies of each kernel argument (the kept buffers are held to
    ``workspace_bytes`` above instead)."""
    from convalgos.testing import CHECKS, check_algorithm
    result = check_algorithm(gpu.ALGORITHMS["im2col"], checks=[c for c in CHECKS if c != "workspace"],
                             max_examples=6, seed=0, dtypes=("float32", "float64", "float16"),
                             constraints=dict(max_batch=2, max_channels=3, max_size=6, max_kernel=3))
    assert result.ok and all(result.passes[op].examples == 6 for op in convalgos.PASSES)
