"""Pooling's GPU kernels (the twins of ``kernels.max_pool``/``max_pool_grad`` and of ``pool.py``'s average
pooling), on planes: x, dx (P, H, W) and y, dy (P, Ho, Wo) with P = N*C. One work item per output element
forward, one per input element backward: every backward pass is a gather (each dx element sums the outputs
whose window holds it, in output order), so no two threads write one element, no atomics and no zeroing
launch are needed.

Window (i, j) covers rows i*sh - ph .. i*sh - ph + kh - 1 (likewise columns); the input elements of row h lie
in the windows i = ceil((h + ph - kh + 1) / sh) .. floor((h + ph) / sh) within [0, Ho).

- ``max_pool_kernel``: the window's max over its in-bounds taps and its flat index h*W + w in the plane, by the
  CPU kernel's rule (start at -inf on the first in-bounds tap, a later tap wins if larger or NaN: ties go to
  the first in scan order, NaN propagates); ``max_pool_grad_kernel``: dx = the sum of dy over the windows whose
  max it is.
- ``avg_pool_kernel``: the window's sum over in-bounds taps / its divisor (``count_include_pad``: the cells
  inside the padded input, else inside the input; ceil mode's overhang is never counted);
  ``avg_pool_grad_kernel``: dx = the sum of dy / divisor over the windows that hold it.
- ``adaptive_avg_pool_kernel``: bin (i, j) averages rows floor(i*H/Ho) .. ceil((i+1)*H/Ho) - 1 (likewise
  columns), computed from the indices on the device (no bin matrices built on the host);
  ``adaptive_avg_pool_grad_kernel``: dx = the sum of dy / bin size over the bins that hold it.
"""
from __future__ import annotations

import functools
import math

from convalgos.gpu_compiler import cuda, numba_dtype

from .gpu_kernels import compute_dtype


@cuda.jit(device=True)
def _windows(h, k, s, p, n_out):
    """(first, last + 1): the windows along one axis holding input index h."""
    first = max(0, -((-(h + p - k + 1)) // s))
    return first, min(n_out, (h + p) // s + 1)


@cuda.jit(device=True)
def _divisor(i, j, H, W, kh, kw, sh, sw, ph, pw, include_pad):
    """The number of cells window (i, j) averages over."""
    h0, w0 = i * sh - ph, j * sw - pw
    if include_pad:
        return (min(h0 + kh, H + ph) - h0) * (min(w0 + kw, W + pw) - w0)
    return (min(h0 + kh, H) - max(h0, 0)) * (min(w0 + kw, W) - max(w0, 0))


@functools.lru_cache(maxsize=None)
def max_pool_kernel(dtype: str):
    """x (P, H, W) -> y (P, Ho, Wo) window maxima, argmax (P, Ho, Wo) flat indices into a plane."""
    ct = numba_dtype(compute_dtype(dtype))
    lowest = ct(-math.inf)

    @cuda.jit
    def kernel(x, kh, kw, sh, sw, ph, pw, y, argmax):
        H, W = x.shape[1], x.shape[2]
        Ho, Wo = y.shape[1], y.shape[2]
        for item in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            p, i, j = item // (Ho * Wo), (item // Wo) % Ho, item % Wo
            h0, w0 = i * sh - ph, j * sw - pw
            best, where = lowest, max(h0, 0) * W + max(w0, 0)
            for r in range(max(h0, 0), min(h0 + kh, H)):
                for s in range(max(w0, 0), min(w0 + kw, W)):
                    v = ct(x[p, r, s])
                    if v > best or v != v:
                        best, where = v, r * W + s
            y[p, i, j] = best
            argmax[p, i, j] = where

    return kernel


@functools.lru_cache(maxsize=None)
def max_pool_grad_kernel(dtype: str):
    """dx (P, H, W) = dy (P, Ho, Wo) gathered at each window's argmax (pooling sizes as the forward's)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(dy, argmax, kh, kw, sh, sw, ph, pw, dx):
        H, W = dx.shape[1], dx.shape[2]
        Ho, Wo = dy.shape[1], dy.shape[2]
        for item in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
            p, h, w = item // (H * W), (item // W) % H, item % W
            i0, i1 = _windows(h, kh, sh, ph, Ho)
            j0, j1 = _windows(w, kw, sw, pw, Wo)
            acc = ct(0)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    if argmax[p, i, j] == h * W + w:
                        acc += ct(dy[p, i, j])
            dx[p, h, w] = acc

    return kernel


@functools.lru_cache(maxsize=None)
def avg_pool_kernel(dtype: str):
    """x (P, H, W) -> y (P, Ho, Wo): each window's mean (module docstring)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, kh, kw, sh, sw, ph, pw, include_pad, y):
        H, W = x.shape[1], x.shape[2]
        Ho, Wo = y.shape[1], y.shape[2]
        for item in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            p, i, j = item // (Ho * Wo), (item // Wo) % Ho, item % Wo
            h0, w0 = i * sh - ph, j * sw - pw
            acc = ct(0)
            for r in range(max(h0, 0), min(h0 + kh, H)):
                for s in range(max(w0, 0), min(w0 + kw, W)):
                    acc += ct(x[p, r, s])
            y[p, i, j] = acc / ct(_divisor(i, j, H, W, kh, kw, sh, sw, ph, pw, include_pad))

    return kernel


@functools.lru_cache(maxsize=None)
def avg_pool_grad_kernel(dtype: str):
    """dx (P, H, W) = the sum of dy / divisor over the windows holding each element."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(dy, kh, kw, sh, sw, ph, pw, include_pad, dx):
        H, W = dx.shape[1], dx.shape[2]
        Ho, Wo = dy.shape[1], dy.shape[2]
        for item in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
            p, h, w = item // (H * W), (item // W) % H, item % W
            i0, i1 = _windows(h, kh, sh, ph, Ho)
            j0, j1 = _windows(w, kw, sw, pw, Wo)
            acc = ct(0)
            for i in range(i0, i1):
                for j in range(j0, j1):
                    acc += ct(dy[p, i, j]) / ct(_divisor(i, j, H, W, kh, kw, sh, sw, ph, pw, include_pad))
            dx[p, h, w] = acc

    return kernel


@functools.lru_cache(maxsize=None)
def adaptive_avg_pool_kernel(dtype: str):
    """x (P, H, W) -> y (P, Ho, Wo): bin (i, j)'s mean (module docstring)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, y):
        H, W = x.shape[1], x.shape[2]
        Ho, Wo = y.shape[1], y.shape[2]
        for item in range(cuda.grid(1), y.size, cuda.gridsize(1)):
            p, i, j = item // (Ho * Wo), (item // Wo) % Ho, item % Wo
            r0, r1 = (i * H) // Ho, -((-(i + 1) * H) // Ho)
            s0, s1 = (j * W) // Wo, -((-(j + 1) * W) // Wo)
            acc = ct(0)
            for r in range(r0, r1):
                for s in range(s0, s1):
                    acc += ct(x[p, r, s])
            y[p, i, j] = acc / ct((r1 - r0) * (s1 - s0))

    return kernel


@functools.lru_cache(maxsize=None)
def adaptive_avg_pool_grad_kernel(dtype: str):
    """dx (P, H, W) = the sum of dy / bin size over the bins holding each element."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(dy, dx):
        H, W = dx.shape[1], dx.shape[2]
        Ho, Wo = dy.shape[1], dy.shape[2]
        for item in range(cuda.grid(1), dx.size, cuda.gridsize(1)):
            p, h, w = item // (H * W), (item // W) % H, item % W
            acc = ct(0)
            for i in range(Ho):
                r0, r1 = (i * H) // Ho, -((-(i + 1) * H) // Ho)
                if r0 <= h < r1:
                    for j in range(Wo):
                        s0, s1 = (j * W) // Wo, -((-(j + 1) * W) // Wo)
                        if s0 <= w < s1:
                            acc += ct(dy[p, i, j]) / ct((r1 - r0) * (s1 - s0))
            dx[p, h, w] = acc

    return kernel
