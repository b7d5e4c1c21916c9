"""Numba helpers that more than one algorithm uses (one home for each)."""
from __future__ import annotations

from numba import njit


@njit(cache=True)
def share(n_items, thread, n_threads):
    """The range of items thread ``thread`` of ``n_threads`` takes (equal contiguous shares)."""
    return thread * n_items // n_threads, (thread + 1) * n_items // n_threads


@njit(cache=True, inline="always")
def copy_strided(dst, src, step):
    """dst[q] = src[q * step]; step 1 is its own loop, so that copy is contiguous and vectorises."""
    if step == 1:
        for q in range(dst.size):
            dst[q] = src[q]
    else:
        for q in range(dst.size):
            dst[q] = src[q * step]


@njit(cache=True)
def valid_range(offset, step, size, count):
    """[j0, j1): the outputs j < count whose input j*step + offset lies inside 0..size-1."""
    j0 = max(0, (-offset + step - 1) // step)
    j1 = min(count, (size - 1 - offset) // step + 1)
    return j0, max(j0, j1)


@njit(cache=True, fastmath={"reassoc", "contract"}, inline="always")
def dot(a, b, length):
    """sum a[t] * b[t] over t < length (length >= 1), reassociated so it vectorises."""
    s = a[0] * b[0]
    for t in range(1, length):
        s += a[t] * b[t]
    return s
