"""``matmul``: ``np.matmul`` for convalgos' own products, on scipy's BLAS instead of numpy's.

    >>> from convalgos.gemm import matmul
    >>> matmul(w_groups, patches, out=y)        # same shapes, broadcasting, ``out=`` and result as np.matmul

Why another BLAS (issue 20; measured, see ``convalgos.threads``): numpy's OpenBLAS reads its spin time when numpy
loads, which in a user's program is before convalgos is imported, and then its worker threads spin ~0.1 s
after every product and take the cores from the Numba kernels that follow. scipy bundles a second OpenBLAS,
loaded only when ``scipy.linalg`` first is, so ``convalgos.threads`` can set its spin time first whatever the
user imported before. numpy's BLAS is left exactly as the user had it.

How: ``scipy.linalg.cython_blas`` exports the Fortran ``?gemm`` of that library; its addresses are given to LLVM
under names of ours, which a cached Numba kernel calls (the route Numba's own ``np.dot`` takes to BLAS). A
row-major product C = A @ B (m x n) is the column-major product C^T = B^T A^T, so each 2-D item is one call
``gemm(opB, opA, n, m, k, 1, B, ldb, A, lda, 0, C, ldc)`` with no copy: a row-major operand (unit stride along
its last axis, any row stride) is passed as is ("N"), a column-major one (a transposed view) with "T". The items
of a stack (up to two leading axes, broadcast as matmul does) are called from the kernel's loop: about 1 us per
call beside np.matmul's, measured. Other dtypes (float16, ints) and operands of more than four axes go to
``np.matmul``, which uses no BLAS threads for them.
"""
from __future__ import annotations

import llvmlite.binding as llvm
import numpy as np
from numba import njit, types
from numba.extending import get_cython_function_address

from .arrays import array_module

#: BLAS routine per dtype character (its index is the kernel's ``routine`` argument); float16 and integers are
#: not BLAS types.
ROUTINES = {"f": "sgemm", "d": "dgemm", "F": "cgemm", "D": "zgemm"}
#: the Fortran signature, every argument by address: transa, transb, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc.
_FORTRAN = types.void(*[types.voidptr] * 13)
for _name in ROUTINES.values():
    llvm.add_symbol(f"convalgos_scipy_{_name}", get_cython_function_address("scipy.linalg.cython_blas", _name))
_sgemm, _dgemm, _cgemm, _zgemm = (types.ExternalFunction(f"convalgos_scipy_{n}", _FORTRAN) for n in ROUTINES.values())
#: alpha = 1 and beta = 0 in each dtype, read by address.
_SCALARS = {c: np.array([1, 0], c) for c in ROUTINES}
#: bytes of one scalar per routine number (s, d, c, z): where the 0 follows the 1.
_SCALAR_BYTES = np.array([4, 8, 8, 16], np.int64)


@njit(cache=True)
def _stacked(plan):
    """For i < plan[6], j < plan[7]: item (i, j) of C = A @ B on ``?gemm`` number plan[16] (s, d, c, z).
    ``plan``: n, m, k, ldb, lda, ldc, the stack's two sizes, then A's, B's and C's byte steps along them (two
    each), the transpose characters of B and A, the routine, then the addresses of A, B, C and of the
    routine's (1, 0) scalars. Addresses, not arrays: the caller keeps the arrays alive, and the kernel has
    one signature (as arrays, each dtype, layout and number of axes of A, B and C compiled a kernel of its
    own: 110 of them in a test run, ~0.4 s each)."""
    dims = np.empty(6, np.int32)
    for q in range(6):
        dims[q] = plan[q]
    ops = np.empty(2, np.uint8)
    ops[0], ops[1] = plan[14], plan[15]
    o, d = ops.ctypes.data, dims.ctypes.data
    one, zero = plan[20], plan[20] + _SCALAR_BYTES[plan[16]]
    gemm = plan[16]
    for i in range(plan[6]):
        for j in range(plan[7]):
            pa = plan[17] + i * plan[8] + j * plan[9]
            pb = plan[18] + i * plan[10] + j * plan[11]
            pc = plan[19] + i * plan[12] + j * plan[13]
            if gemm == 0:
                _sgemm(o, o + 1, d, d + 4, d + 8, one, pb, d + 12, pa, d + 16, zero, pc, d + 20)
            elif gemm == 1:
                _dgemm(o, o + 1, d, d + 4, d + 8, one, pb, d + 12, pa, d + 16, zero, pc, d + 20)
            elif gemm == 2:
                _cgemm(o, o + 1, d, d + 4, d + 8, one, pb, d + 12, pa, d + 16, zero, pc, d + 20)
            else:
                _zgemm(o, o + 1, d, d + 4, d + 8, one, pb, d + 12, pa, d + 16, zero, pc, d + 20)
    # Numba frees an array after its last use; BLAS reads dims and ops through raw addresses, so they are used
    # here, after the loop, to keep them alive through it (without this, freed memory was read as dims).
    return dims[0] + ops[0]


def _address(x) -> int:
    return x.__array_interface__["data"][0]


def _steps(x, stack) -> list:
    """x's byte steps along the two stack axes (``stack`` padded to two): 0 where x is broadcast."""
    lead = x.ndim - 2
    if lead == 0:
        return [0, 0]
    shape = (1,) * (2 - lead) + x.shape[:lead]
    strides = (0,) * (2 - lead) + x.strides[:lead]
    return [st if size == full and size > 1 else 0 for size, st, full in zip(shape, strides, stack)]


def _as_fortran(x, rows, cols):
    """(x, or a copy of it, its transpose character, its leading dimension) for a (rows x cols) row-major item
    seen column-major; a copy when neither axis has unit stride (or a stride is negative)."""
    size = x.itemsize
    row, col = x.strides[-2:]
    col = size if cols == 1 else col                    # the stride of a length-1 axis is never used
    row = cols * size if rows == 1 else row
    if col == size and row >= cols * size and row % size == 0:
        return x, ord("N"), max(1, row // size)
    if row == size and col >= rows * size and col % size == 0:
        return x, ord("T"), max(1, col // size)
    return np.ascontiguousarray(x), ord("N"), max(1, cols)


def broadcast(s, t) -> tuple:
    """The broadcast of stack shapes ``s`` and ``t`` (np.broadcast_shapes allocates ~6 KB each call)."""
    if s == t:
        return s
    s, t = (1,) * (len(t) - len(s)) + tuple(s), (1,) * (len(s) - len(t)) + tuple(t)
    if any(i != j and 1 not in (i, j) for i, j in zip(s, t)):
        raise ValueError(f"matmul: stacks of shapes {s} and {t} do not broadcast")
    return tuple(max(i, j) if 0 not in (i, j) else 0 for i, j in zip(s, t))


def matmul(a, b, out=None):
    """``np.matmul(a, b, out=out)`` for a and b of 2 to 4 axes, on scipy's BLAS (float32/64, complex64/128);
    anything else goes to np.matmul, and device arrays to their own module's matmul (CuPy's: cuBLAS), so a
    family's code that serves both twins multiplies through this one name. ``out`` may be any writable array
    of the result's shape and dtype."""
    device = next((v for v in (a, b, out) if hasattr(v, "__cuda_array_interface__")), None)
    if device is not None:
        return array_module(device).matmul(a, b, out=out)
    a, b = np.asarray(a), np.asarray(b)
    dtype = a.dtype if a.dtype == b.dtype else np.result_type(a, b)
    if dtype.char not in ROUTINES or not (2 <= a.ndim <= 4 and 2 <= b.ndim <= 4) or (
            out is not None and out.dtype != dtype):
        return np.matmul(a, b, out=out)
    a, b = a.astype(dtype, copy=False), b.astype(dtype, copy=False)
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
    if out.size == 0 or k == 0:
        out[...] = 0
        return out
    target = out
    if (out.strides[-1] != out.itemsize or out.strides[-2] < n * out.itemsize and m > 1 or not out.flags.writeable
            or np.may_share_memory(out, a) or np.may_share_memory(out, b)):
        target = np.empty(shape, dtype)                                   # written back below
    a, op_a, lda = _as_fortran(a, m, k)
    b, op_b, ldb = _as_fortran(b, k, n)
    ldc = max(1, n if m == 1 else target.strides[-2] // target.itemsize)
    items = (1,) * (2 - len(stack)) + stack
    plan = np.array([n, m, k, ldb, lda, ldc, *items, *_steps(a, items), *_steps(b, items), *_steps(target, items),
                     op_b, op_a, "fdFD".index(dtype.char), _address(a), _address(b), _address(target),
                     _address(_SCALARS[dtype.char])], np.int64)
    _stacked(plan)          # a, b and target stay alive here, as locals, through the call
    if target is not out:
        out[...] = target
    return out
