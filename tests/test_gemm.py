"""convalgos.gemm.matmul gives np.matmul's result for every layout the call sites pass: stacks of up to two axes
(broadcast), transposed views, row-strided slices, strided or overlapping ``out``, each BLAS dtype."""
import itertools

import numpy as np
import pytest

from convalgos.gemm import matmul

TOL = {"float32": 1e-4, "float64": 1e-12, "complex64": 1e-4, "complex128": 1e-12, "float16": 3e-2}
SHAPES = [((4, 5), (5, 3)), ((2, 4, 5), (5, 3)), ((3, 1, 4, 5), (2, 5, 3)), ((1, 5), (5, 1)), ((4, 1), (1, 3)),
          ((2, 3, 4, 5), (2, 3, 5, 6)), ((36, 1, 1, 16), (36, 1, 16, 1)), ((8, 64, 96), (96, 200)),
          ((0, 5), (5, 3)), ((4, 0), (0, 3))]


def operand(rng, shape, dtype, transposed):
    x = rng.standard_normal(shape)
    if np.dtype(dtype).kind == "c":
        x = x + 1j * rng.standard_normal(shape)
    x = x.astype(dtype)
    return np.ascontiguousarray(x.swapaxes(-1, -2)).swapaxes(-1, -2) if transposed else x


def close(got, want, dtype):
    scale = max(1.0, float(np.abs(want).max(initial=0.0)))
    return got.shape == want.shape and got.dtype == want.dtype and np.abs(got - want).max(initial=0.0) <= TOL[dtype] * scale


@pytest.mark.parametrize("dtype", list(TOL))
def test_every_layout_equals_np_matmul(dtype):
    rng = np.random.default_rng(0)
    for (sa, sb), ta, tb in itertools.product(SHAPES, (False, True), (False, True)):
        a, b = operand(rng, sa, dtype, ta), operand(rng, sb, dtype, tb)
        assert close(matmul(a, b), np.matmul(a, b), dtype), (sa, sb, ta, tb)


def test_row_strided_operands_and_out_are_written_in_place():
    rng = np.random.default_rng(1)
    a, big = rng.standard_normal((3, 4, 8), np.float32), rng.standard_normal((3, 8, 20), np.float32)
    out = np.zeros((3, 4, 30), np.float32)
    assert matmul(a, big[:, :, :10], out=out[:, :, 5:15]).base is not None
    assert close(out[:, :, 5:15], a @ big[:, :, :10], "float32") and not out[:, :, :5].any() and not out[:, :, 15:].any()
    column_major = np.zeros((3, 10, 4), np.float32).swapaxes(1, 2)
    matmul(a, big[:, :, :10], out=column_major)
    assert close(column_major, a @ big[:, :, :10], "float32")


def test_out_overlapping_an_operand_gets_the_product_of_the_inputs():
    x = np.random.default_rng(2).standard_normal((6, 6))
    want = x @ x
    matmul(x, x, out=x)
    assert close(x, want, "float64")


def test_mismatched_inner_dimensions_name_both_shapes():
    with pytest.raises(ValueError, match=r"\(2, 3\) and \(4, 2\)"):
        matmul(np.ones((2, 3), np.float32), np.ones((4, 2), np.float32))
