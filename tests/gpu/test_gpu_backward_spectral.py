"""The GPU fft, fft_tiled and Winograd twins, all three passes (simulator: NumPy arrays stand in for CuPy's).

Every pass of every layer of a small grid against the float64 reference within the algorithm's tolerance for
that pass, into outputs poisoned with NaN (an element a kernel skips fails); refusals with a reason, and the
front door's error; the kept device buffers within ``workspace_bytes``; ``deterministic`` checked bitwise; the
batch cut into chunks; FLOPs against the CPU twin's and direct's; loads typed in the compute dtype.
"""
import ast
import inspect

import numpy as np
import pytest

import convalgos
from convalgos import PASSES, ConvParams, reference
from convalgos import cuda as gpu
from convalgos.fft import gpu as fft_gpu
from convalgos.fft import gpu_kernels as fft_kernels
from convalgos.winograd import gpu as winograd_gpu
from convalgos.winograd import gpu_kernels as winograd_kernels

from gpu_arrays import device, host

NAMES = ["fft", "fft_tiled", "winograd_2x2", "winograd_4x4", "winograd_6x6"]
# (x shape, w shape, keywords): tiny, covering what each feature touches.
LAYERS = [
    ((1, 2, 5, 5), (3, 2, 3, 3), dict(padding=1)),                                        # 3x3 same
    ((2, 4, 6, 5), (4, 2, 3, 3), dict(padding=((0, 1), (2, 0)), groups=2)),              # asymmetric, groups
    ((1, 4, 5, 5), (4, 1, 3, 3), dict(padding=1, groups=4)),                              # depthwise
    ((1, 2, 4, 5), (2, 2, 3, 3), dict(padding=((3, 0), (1, 3)))),                         # padding > 2
    ((1, 3, 7, 6), (2, 3, 3, 2), dict(stride=2, padding=((1, 0), (0, 1)), dilation=(1, 2))),  # stride, dilation
    ((2, 3, 4, 4), (2, 3, 1, 1), {}),                                                     # 1x1
    ((1, 2, 12, 11), (2, 2, 9, 7), dict(stride=(3, 2), padding=1)),                       # large, strided
    ((1, 1, 67, 2), (1, 1, 65, 1), dict(stride=2)),                                       # 33 rows per phase
    ((1, 1, 1, 68), (2, 1, 1, 3), dict(dilation=(1, 33))),                                # 67 columns: no tile
]
IDS = [f"layer{i}" for i in range(len(LAYERS))]




def case(layer, dtype=np.float32, seed=0):
    """p, and x, w, dy of the layer (host arrays)."""
    xs, ws, kw = layer
    p = ConvParams.from_shapes(xs, ws, dtype=np.dtype(dtype).name, **kw)
    rng = np.random.default_rng(seed)
    return p, [rng.standard_normal(s).astype(dtype) for s in (p.in_shape, p.weight_shape, p.out_shape)]


def operands(op, x, w, dy):
    return {"forward": (x, w), "backward_data": (dy, w), "backward_filter": (x, dy)}[op]


def poisoned_run(algorithm, op, p, a, b, dtype):
    """The pass's result, written into an output filled with NaN first."""
    out = device(np.full(p.result_shape(op), np.nan, dtype))
    convalgos.run(algorithm, op, device(a), device(b), p, out)
    return host(out)


def front_door(op, name, layer, x, w, dy):
    kw = layer[2]
    if op == "forward":
        return convalgos.conv2d(device(x), device(w), **kw, algo=name, backend="cuda")
    if op == "backward_data":
        return convalgos.conv2d_input(x.shape, device(w), device(dy), **kw, algo=name, backend="cuda")
    return convalgos.conv2d_weight(device(x), w.shape, device(dy), **kw, algo=name, backend="cuda")


@pytest.mark.parametrize("layer", LAYERS, ids=IDS)
@pytest.mark.parametrize("name", NAMES)
def test_every_pass_agrees_with_the_reference_or_refuses_with_a_reason(name, layer):
    algorithm = gpu.ALGORITHMS[name]
    for dtype in (np.float32, np.float64):
        p, (x, w, dy) = case(layer, dtype)
        for op in PASSES:
            support = algorithm.supports(p, op)
            if not support:
                assert support.reason and support.reason == convalgos.ALGORITHMS[name].supports(p, op).reason
                with pytest.raises(convalgos.UnsupportedError, match=name):
                    front_door(op, name, layer, x, w, dy)
                continue
            result = poisoned_run(algorithm, op, p, *operands(op, x, w, dy), dtype)
            ref = reference.PASS[op](*operands(op, x, w, dy), p)
            assert reference.normwise_error(result, ref) <= algorithm.tolerance_of(op, p.dtype), (op, p.dtype)
            if op == "backward_data":
                assert np.all(result[ref == 0] == 0)               # pixels no output reads: exact zeros


def test_the_grid_reaches_refusals_and_runs():
    supported = {(name, i): bool(gpu.ALGORITHMS[name].supports(case(layer)[0], op))
                 for name in NAMES for i, layer in enumerate(LAYERS) for op in PASSES}
    assert all(supported[(name, i)] for name in ("fft", "fft_tiled") for i in range(8))
    assert not supported[("fft_tiled", 8)] and supported[("fft", 8)]
    assert {i for i in range(len(LAYERS)) if supported[("winograd_4x4", i)]} == {0, 1, 2, 3}


@pytest.mark.parametrize("op", ["backward_data", "backward_filter"])
def test_the_front_door_runs_the_backward_passes_and_casts_float16(op):
    layer = LAYERS[1]
    p, (x, w, dy) = case(layer, np.float16)
    for name in ("fft_tiled", "winograd_2x2"):
        result = host(front_door(op, name, layer, x, w, dy))
        assert result.dtype == np.float16 and result.shape == p.result_shape(op)
        ref = reference.PASS[op](*operands(op, x, w, dy), p)
        assert reference.normwise_error(result, ref) <= gpu.ALGORITHMS[name].tolerance_of(op, "float16")


@pytest.mark.parametrize("name", NAMES)
def test_kept_buffers_within_workspace_bytes_and_results_bitwise_repeatable(name):
    algorithm = gpu.ALGORITHMS[name]
    assert algorithm.deterministic
    p, (x, w, dy) = case(LAYERS[1])
    for op in PASSES:
        algorithm.release()
        first = poisoned_run(algorithm, op, p, *operands(op, x, w, dy), np.float32)
        assert 0 < algorithm.workspace.nbytes <= algorithm.workspace_bytes(p, op), op
        assert np.array_equal(first, poisoned_run(algorithm, op, p, *operands(op, x, w, dy), np.float32)), op


def test_fft_cuts_the_batch_into_chunks_in_every_pass(monkeypatch):
    layer = ((3, 2, 5, 6), (2, 2, 3, 3), dict(padding=1, stride=(1, 2)))
    p, (x, w, dy) = case(layer)
    algorithm = gpu.ALGORITHMS["fft"]
    for op in PASSES:
        one_image = fft_gpu.plan_workspace_bytes(p.with_batch(1), algorithm.plan(p, op), op, 3, "cuda")
        monkeypatch.setattr(fft_gpu, "CHUNK_WORKSPACE", one_image)
        assert algorithm.batch_chunk(p, op) == 1
        result = poisoned_run(algorithm, op, p, *operands(op, x, w, dy), np.float32)
        ref = reference.PASS[op](*operands(op, x, w, dy), p)
        assert reference.normwise_error(result, ref) <= algorithm.tolerance_of(op, "float32"), op
        monkeypatch.undo()


def test_fft_flops_and_plans_are_the_cpus_and_the_workspace_adds_cupys_copies():
    p = ConvParams.from_shapes((2, 8, 20, 20), (8, 8, 5, 5), padding=2, stride=2)
    for name in ("fft", "fft_tiled"):
        cpu, twin = convalgos.ALGORITHMS[name], gpu.ALGORITHMS[name]
        for op in PASSES:
            assert twin.plan(p, op) == cpu.plan(p, op) and twin.flops(p, op) == cpu.flops(p, op)
            assert twin.workspace_bytes(p, op) > cpu.workspace_bytes(p, op)


def test_winograd_flops_count_dense_transforms_and_stay_below_direct_on_deep_layers():
    p = ConvParams.from_shapes((1, 64, 16, 16), (64, 64, 3, 3), padding=1)
    for name in ("winograd_2x2", "winograd_4x4"):
        for op in PASSES:
            assert convalgos.ALGORITHMS[name].flops(p, op) < gpu.ALGORITHMS[name].flops(p, op) < p.flops, op


@pytest.mark.parametrize("module", [fft_gpu, fft_kernels, winograd_gpu, winograd_kernels], ids=lambda m: m.__name__)
def test_no_load_is_typed_float64_by_an_integer_zero(module):
    """``a[i] if inside else 0`` unifies the array's float32 with an integer: Numba types it float64 (issue 22,
    item 8). The kernels load into a variable that starts as a zero of the compute dtype instead."""
    tree = ast.parse(inspect.getsource(module))
    mixed = [node.lineno for node in ast.walk(tree) if isinstance(node, ast.IfExp)
             and isinstance(node.body, ast.Subscript) and isinstance(node.orelse, ast.Constant)]
    assert not mixed, f"{module.__name__}: lines {mixed}"
