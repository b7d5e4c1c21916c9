"""Every GPU algorithm against the float64 reference on tiny layers (simulator: ~1 ms per GPU thread).

The grid test is the contract between ``supports`` and the kernels: for every GPU algorithm and layer, a
truthy answer means the forward pass runs and agrees with the reference within that algorithm's own
tolerance; a falsy one carries a reason and ``convalgos.conv2d(..., backend="cuda")`` refuses with ``UnsupportedError``.
"""
import functools

import numpy as np
import pytest

import convalgos
from convalgos import cuda as gpu
from convalgos import reference

from gpu_arrays import device, host

# (N, C, H, W, K, R, S, stride, padding, dilation, groups): tiny, covering what each feature touches.
LAYERS = [
    (1, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1),                     # 3x3 same
    (2, 4, 6, 5, 4, 3, 3, 1, ((0, 1), (2, 0)), 1, 2),      # asymmetric padding, groups, batch 2
    (1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 4),                     # depthwise
    (1, 3, 7, 6, 2, 3, 2, 2, ((1, 0), (0, 1)), (1, 2), 1),  # stride, dilation, non-square kernel
    (2, 3, 4, 4, 2, 1, 1, 1, 0, 1, 1),                     # 1x1 plain GEMM
    (1, 2, 5, 4, 2, 5, 4, 1, 1, 1, 1),                     # kernel as large as the padded input
    (1, 1, 67, 2, 1, 65, 1, 2, 0, 1, 1),                   # 65x1 at stride 2: 33 rows per stride phase
    (1, 1, 1, 68, 2, 1, 3, 1, 0, (1, 33), 1),              # dilated 1x3 spanning 67 columns
    (1, 1, 1, 66, 1, 1, 64, 1, 0, 1, 1),                   # 1x64: fft_tiled's largest tile, one output each
]
#: the GPU twins of CPU algorithms (the tiled implicit GEMMs' tile shapes have their own grid:
#: test_gpu_implicit_gemm_tiled.py)
NAMES = [name for name in gpu.ALGORITHMS if name in convalgos.ALGORITHMS]
gpu_conv2d = functools.partial(convalgos.conv2d, backend="cuda")




def layer_arrays(layer, dtype, seed=0):
    N, C, H, W, K, R, S, stride, padding, dilation, groups = layer
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((K, C // groups, R, S)).astype(dtype)
    b = rng.standard_normal(K).astype(dtype)
    return x, w, b, dict(stride=stride, padding=padding, dilation=dilation, groups=groups)


def check_layer(name, layer, dtype, seed=0):
    """Run the layer if the algorithm supports it and compare with the reference; else check the refusal."""
    x, w, b, kwargs = layer_arrays(layer, dtype, seed)
    p = convalgos.ConvParams.from_arrays(x, w, b, **kwargs)
    algorithm = gpu.ALGORITHMS[name]
    support = algorithm.supports(p)
    if not support:
        assert support.reason
        with pytest.raises(convalgos.UnsupportedError, match=name):
            gpu_conv2d(device(x), device(w), device(b), **kwargs, algo=name)
        return False
    y = host(gpu_conv2d(device(x), device(w), device(b), **kwargs, algo=name))
    assert y.dtype == np.dtype(dtype) and y.shape == p.out_shape
    assert reference.normwise_error(y, reference.conv2d(x, w, b, **kwargs)) <= algorithm.tolerance_of(
        "forward", np.dtype(dtype).name)
    return True


@pytest.mark.parametrize("layer", LAYERS, ids=[f"layer{i}" for i in range(len(LAYERS))])
@pytest.mark.parametrize("name", NAMES)
def test_supports_answers_what_runs(name, layer):
    check_layer(name, layer, np.float32)


def test_the_grid_holds_refusals_and_runs():
    """The grid above reaches both branches for the algorithms with constraints."""
    supported = {(name, i): bool(gpu.ALGORITHMS[name].supports(convalgos.ConvParams.from_arrays(
        *layer_arrays(layer, np.float32)[:3], **layer_arrays(layer, np.float32)[3])))
        for name in NAMES for i, layer in enumerate(LAYERS)}
    assert supported[("fft_tiled", 6)] and not supported[("fft_tiled", 7)] and supported[("fft_tiled", 8)]
    assert supported[("fft", 6)] and supported[("fft", 7)]
    assert not supported[("winograd_4x4", 3)] and supported[("winograd_4x4", 0)]
    assert all(supported[(name, i)] for name in ("direct", "implicit_gemm", "im2col") for i in range(len(LAYERS)))


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("dtype", [np.float16, np.float64])
def test_float16_and_float64(name, dtype):
    assert check_layer(name, LAYERS[1], dtype, seed=1)


def test_every_gpu_algorithm_has_the_name_of_a_cpu_one_in_its_order():
    """... but the tiled implicit GEMM's tile shapes and the fused F(6x6), GPU-only entries of their families."""
    assert [name for name in convalgos.ALGORITHMS if name in gpu.ALGORITHMS] == NAMES
    assert [name for name in gpu.ALGORITHMS if name not in NAMES] == [
        f"implicit_gemm_{shape}" for shape in gpu.IMPLICIT_GEMM_TILES] + ["winograd_fused_6x6"]


def test_out_and_non_contiguous_input():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)[:, :, ::2, :]       # non-contiguous view
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    out = device(np.zeros((1, 2, 3, 6), np.float32))
    y = gpu_conv2d(device(x), device(w), padding=1, algo="implicit_gemm", out=out)
    assert y is out
    assert reference.normwise_error(host(y), reference.conv2d(x, w, padding=1)) <= 5e-6


def test_empty_batch():
    x = device(np.zeros((0, 2, 4, 4), np.float32))
    w = device(np.zeros((3, 2, 3, 3), np.float32))
    assert gpu_conv2d(x, w, algo="direct").shape == (0, 3, 2, 2)


def test_unsupported_and_unknown_names():
    x = device(np.zeros((1, 2, 8, 8), np.float32))
    with pytest.raises(convalgos.UnsupportedError, match="needs a 3x3 kernel, got 5x5"):
        gpu_conv2d(x, device(np.zeros((2, 2, 5, 5), np.float32)), algo="winograd_4x4")
    with pytest.raises(ValueError, match="algo must be one of"):
        gpu_conv2d(x, device(np.zeros((2, 2, 3, 3), np.float32)), algo="nope")


def test_bad_input_validated_like_the_cpu():
    x = device(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="channel mismatch"):
        gpu_conv2d(x, device(np.zeros((2, 2, 3, 3), np.float32)))
    with pytest.raises(TypeError, match="x must be a CuPy"):
        gpu_conv2d([[1.0]], device(np.zeros((2, 3, 3, 3), np.float32)))


def run_cases(cases, seed=3):
    rng = np.random.default_rng(seed)
    for name, xs, ws, kw in cases:
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        y = host(gpu_conv2d(device(x), device(w), **kw, algo=name))
        assert reference.normwise_error(y, reference.conv2d(x, w, **kw)) <= 5e-6, (name, xs)


def test_launch_geometry_beyond_one_block():
    """direct: several 8x8 tiles per image, column tiles beside (group, channel block) pairs on grid x;
    implicit_gemm: several pixel tiles, and channel tiles of two groups on grid y; direct: a stride wider than
    its shared patch row (its tile narrows)."""
    run_cases([("direct", (1, 2, 10, 10), (10, 1, 3, 3), dict(padding=((1, 0), (0, 2)), groups=2)),
               ("implicit_gemm", (1, 4, 3, 3), (10, 2, 3, 3), dict(padding=1, groups=2)),
               ("direct", (1, 1, 3, 300), (1, 1, 1, 3), dict(stride=(1, 100)))])


def test_implicit_gemm_with_the_gpu_tile(monkeypatch):
    from convalgos.implicit_gemm import gpu as implicit_gemm
    monkeypatch.setattr(implicit_gemm, "SIM_TILE", implicit_gemm.TILE)
    run_cases([("implicit_gemm", (1, 3, 4, 4), (5, 3, 3, 3), dict(padding=1))])
