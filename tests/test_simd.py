"""convalgos.kernels.simd: one register as a Numba value; each operation against NumPy, in float32 and float64."""
import numpy as np
import pytest
from numba import njit

import os
import subprocess
import sys

from convalgos.kernels.simd import (REGISTER_BYTES, add, evens, fma, lanes, load, load_head, mul_add, mul_sub, scale,
                                    splat, store, store4, store8, store_head, sub, total, transpose8, zeros)


@njit
def _saxpy_blocks(a, x, y, out):
    """out[i] = a[0] * x[i] + y[i], one register at a time; returns the sum of out's lanes, register by register."""
    L = lanes(x)
    s = 0.0
    for i in range(0, x.size, L):
        v = fma(splat(a, 0), load(x, i), load(y, i))
        store(out, i, v)
        s += total(v)
    return s


@njit
def _zeros_stored(x):
    store(x, 0, zeros(x))


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_operations_match_numpy(dtype):
    expected_lanes = REGISTER_BYTES // np.dtype(dtype).itemsize              # 16 or 8 with AVX-512, else 8 or 4
    rng = np.random.default_rng(0)
    x, y = rng.standard_normal(32).astype(dtype), rng.standard_normal(32).astype(dtype)
    a, out = np.array([1.5], dtype), np.empty(32, dtype)
    assert njit(lambda v: lanes(v))(x) == expected_lanes
    s = _saxpy_blocks(a, x, y, out)
    np.testing.assert_allclose(out, a[0] * x + y, rtol=1e-6)
    assert s == pytest.approx(float(out.sum()), rel=1e-5)
    _zeros_stored(x)
    assert not x[:expected_lanes].any() and x[expected_lanes:].all()


def _tree_sum(lanes_):
    """total's order in NumPy: the upper half added to the lower half until one lane is left."""
    while lanes_.size > 1:
        lanes_ = lanes_[:lanes_.size // 2] + lanes_[lanes_.size // 2:]
    return lanes_[0]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_total_is_a_fixed_tree_of_adds(dtype):
    """total adds the halves lane by lane, always in that order: bitwise the tree done in NumPy (not the
    left-to-right sum), the same on every run. In float32, 1e8 + 1 loses the one wherever it meets 1e8."""
    n = REGISTER_BYTES // np.dtype(dtype).itemsize
    summed = njit(lambda v: total(load(v, 0)))
    for seed in range(20):
        x = (np.random.default_rng(seed).standard_normal(n) * 10.0 ** np.arange(n)).astype(dtype)
        assert summed(x) == _tree_sum(x)
    ones = np.array([1e8] + [1] * (REGISTER_BYTES // 4 - 2) + [-1e8], np.float32)
    assert summed(ones) == _tree_sum(ones) == np.float32(0.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_evens_gathers_every_other_element(dtype):
    n = REGISTER_BYTES // np.dtype(dtype).itemsize
    x, out = np.arange(4 * n, dtype=dtype), np.zeros(n, dtype)
    njit(lambda a, o, i: store(o, 0, evens(a, i)))(x, out, 3)
    np.testing.assert_array_equal(out, x[3:3 + 2 * n:2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_store_head_writes_the_first_lanes_only_even_at_the_end_of_an_array(dtype):
    """The masked store of a row's last part: lanes past n are neither written nor read from memory, so a store
    at the last element of an array is safe."""
    n = REGISTER_BYTES // np.dtype(dtype).itemsize
    head = njit(lambda a, o, i, k: store_head(o, i, load(a, 0), k))
    x = np.arange(1, n + 1, dtype=dtype)
    for k in (0, 1, n - 1, n):
        out = np.full(n + 5, -1, dtype)
        head(x, out, 2, k)
        np.testing.assert_array_equal(out[2:2 + k], x[:k])
        assert (out[:2] == -1).all() and (out[2 + k:] == -1).all()
    tail = np.full(3, -1, dtype)
    head(x, tail, 1, 2)                                   # a full vector would run n - 2 elements past tail
    np.testing.assert_array_equal(tail, [-1, 1, 2])


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_transpose8_and_store8_turn_eight_rows_into_columns(dtype):
    """Eight vectors of L lanes (L >= 8) as an 8 x L matrix; each column of 8 stored as one row of the result."""
    n = REGISTER_BYTES // np.dtype(dtype).itemsize
    if n < 8:
        pytest.skip("a vector of fewer than 8 lanes")

    @njit
    def turn(m, out):
        u = transpose8(load(m[0], 0), load(m[1], 0), load(m[2], 0), load(m[3], 0), load(m[4], 0), load(m[5], 0),
                       load(m[6], 0), load(m[7], 0))
        for q in range(8):
            for h in range(n // 8):
                store8(out, (8 * h + q, 1), u[q], h)

    m = np.random.default_rng(0).standard_normal((8, n)).astype(dtype)
    out = np.zeros((n, 10), dtype)
    turn(m, out)
    np.testing.assert_array_equal(out[:, 1:9], m.T)
    assert (out[:, 0] == 0).all() and (out[:, 9] == 0).all()


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_lane_arithmetic_and_scalar_multiples(dtype):
    """add, sub, and the scalar forms a transform's code uses: c * v + w, c * v - w (one rounding), c * v."""

    @njit
    def arithmetic(u, v, out):
        L = lanes(u)
        a, b = load(u, 0), load(v, 0)
        for i, r in enumerate((add(a, b), sub(a, b), mul_add(-5.0, a, b), mul_sub(0.25, a, b), scale(1.0 / 3.0, a))):
            store(out, i * L, r)

    rng = np.random.default_rng(1)
    n = REGISTER_BYTES // np.dtype(dtype).itemsize
    u, v = rng.standard_normal(n).astype(dtype), rng.standard_normal(n).astype(dtype)
    out = np.empty(5 * n, dtype)
    arithmetic(u, v, out)
    third = dtype(1.0 / 3.0)
    for got, want in zip(out.reshape(5, n), (u + v, u - v, dtype(-5) * u + v, dtype(0.25) * u - v, third * u)):
        np.testing.assert_allclose(got, want, rtol=4 * np.finfo(dtype).eps, atol=4 * np.finfo(dtype).eps)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_store4_writes_a_quarter_of_eight_lanes(dtype):
    """store4(a, idx, v, h) writes v[4h : 4h + 4] and nothing around it."""
    n = REGISTER_BYTES // np.dtype(dtype).itemsize

    @njit
    def quarters(x, out):
        v = load(x, 0)
        for h in range(n // 4):
            store4(out, (h, 1), v, h)

    x = np.arange(n, dtype=dtype) + 1
    out = np.zeros((n // 4, 6), dtype)
    quarters(x, out)
    np.testing.assert_array_equal(out[:, 1:5], x.reshape(-1, 4))
    assert not out[:, 0].any() and not out[:, 5].any()


def test_transpose8_compiles_with_four_lanes_and_refuses_to_run():
    """A kernel with a branch for 8 lanes (``direct_channels``, the fused Winograd) must compile where a vector has 4
    (float64 with AVX2): there transpose8 compiles, and raises if it is ever reached."""
    code = """
import numpy as np
from numba import njit
from convalgos.kernels.simd import lanes, load, transpose8, store
@njit
def kernel(x, turn):
    if turn:
        u = transpose8(load(x, 0), load(x, 0), load(x, 0), load(x, 0), load(x, 0), load(x, 0), load(x, 0), load(x, 0))
        store(x, 0, u[0])
    return lanes(x)
x = np.zeros(8)
print(kernel(x, False))
try:
    kernel(x, True)
except ValueError as error:
    print(error)
"""
    env = {**os.environ, "NUMBA_CPU_NAME": "haswell"}                   # AVX2: 4 float64 lanes
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split("\n")[:2] == ["4", "transpose8 needs 8 lanes"]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_load_head_reads_the_first_lanes_only_even_at_the_end_of_an_array(dtype):
    """load_head(a, i, n): a[i:i + n] then zeros, reading nothing past a[i + n - 1] (here the array's end)."""
    n = REGISTER_BYTES // np.dtype(dtype).itemsize

    @njit
    def head(x, i, k, out):
        store(out, 0, load_head(x, i, k))

    x = np.arange(1, n + 3, dtype=dtype)
    for k in range(n + 1):
        out = np.full(n, -1, dtype)
        head(x[:2 + k], 2, k, out)                      # x[2:2 + k] ends the view: a full load would run past it
        np.testing.assert_array_equal(out, np.concatenate([x[2:2 + k], np.zeros(n - k, dtype)]))
