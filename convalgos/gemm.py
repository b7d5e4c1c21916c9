"""``matmul``: ``np.matmul`` for convalgos' own products, on scipy's BLAS instead of numpy's.

    >>> from convalgos.gemm import matmul
    >>> matmul(w_groups, patches, out=y)        # same shapes, broadcasting, ``out=`` and result as np.matmul

Why another BLAS (issue 20; measured, see ``convalgos.threads``): numpy's OpenBLAS reads its spin time when numpy
loads, which in a user's program is before convalgos is imported, and then its worker threads spin ~0.1 s
after every product and take the cores from the Numba kernels that follow. scipy bundles a second OpenBLAS,
loaded only when ``scipy.linalg`` first is, so ``convalgos.threads`` can set its spin time first whatever the
user imported before. numpy's BLAS is left exactly as the user had it.

How: ``scipy.linalg.cython_blas`` exports the Fortran ``?gemm`` of that library. A row-major product
C = A @ B (m x n) is the column-major product C^T = B^T A^T, so each 2-D item is one call
``gemm(opB, opA, n, m, k, 1, B, ldb, A, lda, 0, C, ldc)`` with no copy: a row-major operand (unit stride along
its last axis, any row stride) is passed as is ("N"), a column-major one (a transposed view) with "T". Items of
a stack (up to two leading axes, broadcast as matmul does) are called from one cached Numba loop, a few
hundred nanoseconds each (the same route Numba's own ``np.dot`` takes to BLAS). Other dtypes (float16, ints)
and operands of more than four axes go to ``np.matmul``, which uses no BLAS threads for them.
"""
from __future__ import annotations

import ctypes

import numpy as np
from numba import njit
from numba.extending import get_cython_function_address

#: BLAS routine per dtype character; float16 and integers are not BLAS types.
ROUTINE = {"f": "sgemm", "d": "dgemm", "F": "cgemm", "D": "zgemm"}
#: the Fortran signature, every argument by address: transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc.
FORTRAN_GEMM = ctypes.CFUNCTYPE(None, *[ctypes.c_void_p] * 13)
_GEMM = {}


def routine(dtype):
    """scipy's ``?gemm`` for ``dtype`` as a ctypes function Numba can call (looked up once)."""
    char = np.dtype(dtype).char
    if char not in _GEMM:
        _GEMM[char] = FORTRAN_GEMM(get_cython_function_address("scipy.linalg.cython_blas", ROUTINE[char]))
    return _GEMM[char]


@njit(cache=True)
def _stacked(gemm, ops, dims, scalars, stack, a, a_steps, b, b_steps, c, c_steps):
    """For i < stack[0], j < stack[1]: item (i, j) of C = A @ B, addresses advancing by the byte ``*_steps``.
    ``ops`` holds the two transpose characters (B's, A's), ``dims`` n, m, k, ldb, lda, ldc (int32), ``scalars``
    1 and 0 in the operands' dtype."""
    o, d, s = ops.ctypes.data, dims.ctypes.data, scalars.ctypes.data
    for i in range(stack[0]):
        for j in range(stack[1]):
            gemm(o, o + 1, d, d + 4, d + 8, s, b + i * b_steps[0] + j * b_steps[1], d + 12,
                 a + i * a_steps[0] + j * a_steps[1], d + 16, s + scalars.itemsize, c + i * c_steps[0] + j * c_steps[1],
                 d + 20)


def _as_fortran(x, rows, cols):
    """(x, or a copy of it, its transpose character, its leading dimension) for a (rows x cols) row-major item
    seen column-major; a copy when neither axis has unit stride (or a stride is negative)."""
    size = x.itemsize
    row, col = x.strides[-2:]
    col = size if cols == 1 else col                    # the stride of a length-1 axis is never used
    row = cols * size if rows == 1 else row
    if col == size and row >= cols * size and row % size == 0:
        return x, b"N", max(1, row // size)
    if row == size and col >= rows * size and col % size == 0:
        return x, b"T", max(1, col // size)
    return np.ascontiguousarray(x), b"N", max(1, cols)


def broadcast(s, t) -> tuple:
    """The broadcast of stack shapes ``s`` and ``t`` (np.broadcast_shapes allocates ~6 KB each call)."""
    s, t = (1,) * (len(t) - len(s)) + tuple(s), (1,) * (len(s) - len(t)) + tuple(t)
    if any(i != j and 1 not in (i, j) for i, j in zip(s, t)):
        raise ValueError(f"matmul: stacks of shapes {s} and {t} do not broadcast")
    return tuple(max(i, j) if 0 not in (i, j) else 0 for i, j in zip(s, t))


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)`` for a and b of 2 to 4 axes, on scipy's BLAS (float32/64, complex64/128);
    anything else goes to np.matmul. ``out`` may be any writable array of the result's shape and dtype."""
    a, b = np.asarray(a), np.asarray(b)
    dtype = np.result_type(a, b)
    if dtype.char not in ROUTINE or not (2 <= a.ndim <= 4 and 2 <= b.ndim <= 4) or (
            out is not None and out.dtype != dtype):
        return np.matmul(a, b, out=out)
    (m, k), (k2, n) = a.shape[-2:], b.shape[-2:]
    if k != k2:
        raise ValueError(f"matmul: a's last axis ({k}) does not match b's second last ({k2}); shapes {a.shape} "
                         f"and {b.shape}")
    stack = broadcast(a.shape[:-2], b.shape[:-2])
    shape = stack + (m, n)
    if out is None:
        out = np.empty(shape, dtype)
    elif out.shape != shape:
        raise ValueError(f"matmul: out has shape {out.shape}, the product has {shape}")
    if out.size == 0:
        return out
    if k == 0:
        out[...] = 0
        return out
    target = out
    if (out.strides[-1] != out.itemsize or out.strides[-2] < n * out.itemsize and m > 1 or not out.flags.writeable
            or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        target = np.empty(shape, dtype)                                   # written back below
    items = (1,) * (2 - len(stack)) + stack
    a4 = np.broadcast_to(a.astype(dtype, copy=False), stack + (m, k)).reshape(items + (m, k))
    b4 = np.broadcast_to(b.astype(dtype, copy=False), stack + (k, n)).reshape(items + (k, n))
    a4, op_a, lda = _as_fortran(a4, m, k)
    b4, op_b, ldb = _as_fortran(b4, k, n)
    c4 = target.reshape(items + (m, n))
    ldc = max(1, n if m == 1 else c4.strides[-2] // c4.itemsize)
    _stacked(routine(dtype), np.frombuffer(op_b + op_a, np.uint8), np.array([n, m, k, ldb, lda, ldc], np.int32),
             np.array([1, 0], dtype), np.array(items, np.int64), a4.ctypes.data, np.array(a4.strides[:2], np.int64),
             b4.ctypes.data, np.array(b4.strides[:2], np.int64), c4.ctypes.data,
             np.array(c4.strides[:2], np.int64))
    if target is not out:
        out[...] = target
    return out
