"""What the GPU passes put on the stream, counted (``convalgos.cuda.count_ops``): im2col writes its patch
matrix once, in the layout its GEMM reads (no transposed copy), and Winograd copies its matrices to the device
once per device and dtype, not per call."""
import numpy as np
import pytest

import convalgos
from convalgos import ConvParams
from convalgos import cuda as gpu

from gpu_arrays import device, host


def run_counted(name: str, op: str, p: ConvParams):
    rng = np.random.default_rng(0)
    shapes = {"forward": (p.in_shape, p.weight_shape), "backward_data": (p.out_shape, p.weight_shape),
              "backward_filter": (p.in_shape, p.out_shape)}[op]
    a, b = (device(rng.standard_normal(s).astype(np.float32)) for s in shapes)
    with gpu.count_ops() as ops:
        convalgos.run(gpu.ALGORITHMS[name], op, a, b, p)
    return dict(ops.by_name)


@pytest.mark.parametrize("N, copies", [(1, 0), (2, 1)])
def test_im2col_backward_filter_is_one_patch_kernel_and_one_gemm(N, copies):
    """dy is laid out by group for a batch of images (one copy); the patches are never transposed."""
    p = ConvParams.from_shapes((N, 2, 5, 5), (3, 2, 3, 3), padding=1)
    expected = {"im2col.im2col_kernel": 1, "cublas.gemm": 1} | ({"cupy.copy": copies} if copies else {})
    assert run_counted("im2col", "backward_filter", p) == expected


def test_im2col_forward_and_backward_data():
    p = ConvParams.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), padding=1)
    assert run_counted("im2col", "forward", p) == {"im2col.im2col_kernel": 1, "cublas.gemm": 1}
    assert run_counted("im2col", "backward_data", p) == {"cupy.copy": 1, "cublas.gemm": 1,
                                                          "im2col.col2im_kernel": 1}


def test_winograd_copies_its_matrices_to_the_device_once():
    p = ConvParams.from_shapes((1, 2, 5, 5), (2, 2, 3, 3), padding=1)
    gpu.ALGORITHMS["winograd_2x2"].constants._on_device.clear()
    first = run_counted("winograd_2x2", "forward", p)
    again = run_counted("winograd_2x2", "forward", p)
    assert first["cupy.copy"] == again["cupy.copy"] + 3                     # A^T, G, B^T: once
    assert again == {"cublas.gemm": 3, "cupy.copy": 1, "winograd.tile_transform_kernel": 1,
                     "winograd.output_transform_kernel": 1}


@pytest.mark.parametrize("op", ["forward", "backward_data"])
def test_winograd_prepared_weight_skips_the_filter_transform(op):
    """Inference: U made once by ``prepare``; a pass on it is the tile transforms and one batched GEMM, with
    the bits of the plain pass."""
    p = ConvParams.from_shapes((1, 2, 5, 5), (3, 2, 3, 3), padding=1)
    algorithm = gpu.ALGORITHMS["winograd_2x2"]
    rng = np.random.default_rng(1)
    a = rng.standard_normal(p.out_shape if op == "backward_data" else p.in_shape).astype(np.float32)
    w = rng.standard_normal(p.weight_shape).astype(np.float32)
    prepared = algorithm.prepare(device(w), p, op)
    assert prepared.nbytes == algorithm.prepare_bytes(p, op) == 16 * 3 * 2 * 4
    plain = convalgos.run(algorithm, op, device(a), device(w), p)
    with gpu.count_ops() as ops:
        fast = convalgos.run(algorithm, op, device(a), None, p, prepared=prepared)
    assert dict(ops.by_name) == {"cublas.gemm": 1, "winograd.tile_transform_kernel": 1,
                                 "winograd.output_transform_kernel": 1}
    assert np.array_equal(host(fast), host(plain))
