"""Every GPU algorithm against the float64 reference on tiny layers (simulator: ~1 ms per GPU thread)."""
import numpy as np
import pytest

import convalgos
from convalgos import cuda as gpu
from convalgos import reference
from convalgos.backend import simulator_enabled

# (N, C, H, W, K, R, S, stride, padding, dilation, groups): tiny, covering what each feature touches.
LAYERS = [
    (1, 2, 5, 5, 3, 3, 3, 1, 1, 1, 1),                     # 3x3 same
    (2, 4, 6, 5, 4, 3, 3, 1, ((0, 1), (2, 0)), 1, 2),      # asymmetric padding, groups, batch 2
    (1, 4, 5, 5, 4, 3, 3, 1, 1, 1, 4),                     # depthwise
    (1, 3, 7, 6, 2, 3, 2, 2, ((1, 0), (0, 1)), (1, 2), 1),  # stride, dilation, non-square kernel
    (2, 3, 4, 4, 2, 1, 1, 1, 0, 1, 1),                     # 1x1 plain GEMM
    (1, 2, 5, 4, 2, 5, 4, 1, 1, 1, 1),                     # kernel as large as the padded input
]
NAMES = list(gpu.ALGORITHMS)


def device(a):
    """The array on the device: a NumPy array under the simulator, else a CuPy array."""
    if simulator_enabled():
        return a
    import cupy
    return cupy.asarray(a)


def host(a):
    return a if isinstance(a, np.ndarray) else a.get()


def run_layer(name, layer, dtype, seed=0):
    N, C, H, W, K, R, S, stride, padding, dilation, groups = layer
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((N, C, H, W)).astype(dtype)
    w = rng.standard_normal((K, C // groups, R, S)).astype(dtype)
    b = rng.standard_normal(K).astype(dtype)
    kwargs = dict(stride=stride, padding=padding, dilation=dilation, groups=groups)
    p = convalgos.ConvParams.from_arrays(x, w, b, **kwargs)
    algorithm = gpu.ALGORITHMS[name]
    if not algorithm.supports(p):
        pytest.skip(f"{name}: {algorithm.supports(p).reason}")
    y = gpu.conv2d(device(x), device(w), device(b), **kwargs, algo=name)
    ref = reference.conv2d(x, w, b, **kwargs)
    return host(y), ref, algorithm


@pytest.mark.parametrize("layer", LAYERS, ids=[f"layer{i}" for i in range(len(LAYERS))])
@pytest.mark.parametrize("name", NAMES)
def test_float32_matches_reference(name, layer):
    y, ref, algorithm = run_layer(name, layer, np.float32)
    assert y.dtype == np.float32 and y.shape == ref.shape
    assert reference.normwise_error(y, ref) <= algorithm.tolerance["float32"]


@pytest.mark.parametrize("name", NAMES)
def test_float16_computed_in_float32(name):
    y, ref, algorithm = run_layer(name, LAYERS[1], np.float16, seed=1)
    assert y.dtype == np.float16
    assert reference.normwise_error(y, ref) <= algorithm.tolerance["float16"]


def test_registry_mirrors_cpu_plus_implicit_gemm():
    assert NAMES == list(convalgos.ALGORITHMS) + ["implicit_gemm"]


def test_tolerances_are_the_cpu_twins():
    for name in convalgos.ALGORITHMS:
        assert gpu.ALGORITHMS[name].tolerance == convalgos.ALGORITHMS[name].tolerance


def test_out_and_non_contiguous_input():
    rng = np.random.default_rng(2)
    x = rng.standard_normal((1, 2, 6, 6)).astype(np.float32)[:, :, ::2, :]       # non-contiguous view
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    out = device(np.zeros((1, 2, 3, 6), np.float32))
    y = gpu.conv2d(device(x), device(w), padding=1, algo="implicit_gemm", out=out)
    assert y is out
    assert reference.normwise_error(host(y), reference.conv2d(x, w, padding=1)) <= 5e-6


def test_empty_batch():
    x = device(np.zeros((0, 2, 4, 4), np.float32))
    w = device(np.zeros((3, 2, 3, 3), np.float32))
    assert gpu.conv2d(x, w, algo="direct").shape == (0, 3, 2, 2)


def test_unsupported_and_unknown_names():
    x = device(np.zeros((1, 2, 8, 8), np.float32))
    with pytest.raises(convalgos.UnsupportedError, match="needs a 3x3 kernel, got 5x5"):
        gpu.conv2d(x, device(np.zeros((2, 2, 5, 5), np.float32)), algo="winograd_4x4")
    with pytest.raises(ValueError, match="algo must be one of"):
        gpu.conv2d(x, device(np.zeros((2, 2, 3, 3), np.float32)), algo="nope")


def test_bad_input_validated_like_the_cpu():
    x = device(np.zeros((1, 3, 8, 8), np.float32))
    with pytest.raises(ValueError, match="channel mismatch"):
        gpu.conv2d(x, device(np.zeros((2, 2, 3, 3), np.float32)))
    with pytest.raises(TypeError, match="x must be a CuPy"):
        gpu.conv2d([[1.0]], device(np.zeros((2, 3, 3, 3), np.float32)))


def test_launch_geometry_beyond_one_block(monkeypatch):
    """Several 8x8 direct tiles per image; implicit_gemm with the GPU's 16x16 tile; a stride wider than
    direct's shared patch row (its tile narrows)."""
    from convalgos.cuda import implicit_gemm
    monkeypatch.setattr(implicit_gemm, "SIM_TILE", implicit_gemm.TILE)
    rng = np.random.default_rng(3)
    cases = [("direct", (1, 2, 11, 10), (5, 2, 3, 3), dict(padding=((1, 0), (0, 2)))),
             ("implicit_gemm", (1, 3, 5, 5), (17, 3, 3, 3), dict(padding=1)),
             ("direct", (1, 1, 3, 300), (1, 1, 1, 3), dict(stride=(1, 100)))]
    for name, xs, ws, kw in cases:
        x, w = rng.standard_normal(xs).astype(np.float32), rng.standard_normal(ws).astype(np.float32)
        y = host(gpu.conv2d(device(x), device(w), **kw, algo=name))
        assert reference.normwise_error(y, reference.conv2d(x, w, **kw)) <= 5e-6, (name, xs)
