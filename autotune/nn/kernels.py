"""Numba kernels of the layers whose NumPy form would take several passes over memory per element.

- ``relu_grad``: dx = dy where y > 0, else 0, in one pass (NumPy's ``np.where`` was ~10x slower here).
- ``max_pool``: each output is the max over its window, and the flat index (h*W + w) of that max within its
  input plane; taps outside the input are skipped (torch's -inf padding). As torch's CPU kernel: the search
  starts at the window's first in-bounds element with max -inf, and a later tap wins only if it is larger
  or NaN, so ties go to the first in scan order and NaN propagates.
- ``max_pool_grad``: each output's dy is added at its max's index (windows may overlap).
- ``epilogue``: a conv output's bias, a residual and a ReLU applied in place in one pass (eval mode's fused
  path, ``inference.py``), where NumPy would take three passes and two fresh arrays.

All run in parallel over the (n, c) planes, so no two threads write the same element.
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange


@njit(parallel=True, cache=True)
def relu_grad(y, dy, dx):
    """Flat arrays: dx[i] = dy[i] if y[i] > 0 else 0."""
    for i in prange(y.size):
        dx[i] = dy[i] if y[i] > 0 else 0


@njit(parallel=True, cache=True)
def max_pool(x, kh, kw, sh, sw, ph, pw, y, argmax):
    """x (P, H, W) planes -> y (P, Ho, Wo) window maxima and argmax (P, Ho, Wo) flat indices into a plane."""
    P, H, W = x.shape
    _, Ho, Wo = y.shape
    for p in prange(P):
        for i in range(Ho):
            h0 = i * sh - ph
            for j in range(Wo):
                w0 = j * sw - pw
                best = -np.inf
                where = max(h0, 0) * W + max(w0, 0)
                for r in range(max(h0, 0), min(h0 + kh, H)):
                    for s in range(max(w0, 0), min(w0 + kw, W)):
                        v = x[p, r, s]
                        if v > best or math.isnan(v):
                            best = v
                            where = r * W + s
                y[p, i, j] = best
                argmax[p, i, j] = where


@njit(parallel=True, cache=True)
def max_pool_grad(dy, argmax, dx):
    """dx (P, H*W) zeroed, then dy (P, Ho*Wo) added at each output's argmax."""
    P, n_out = dy.shape
    for p in prange(P):
        dx[p, :] = 0
        for o in range(n_out):
            dx[p, argmax[p, o]] += dy[p, o]


@njit(parallel=True, cache=True)
def epilogue(y, bias, residual, relu):
    """y (N, K, P) in place: y += bias[k], += residual (N, K, P) unless it is empty, then ReLU when ``relu``
    (a NaN stays NaN, as with np.maximum)."""
    N, K, P = y.shape
    add = residual.shape[0] > 0
    for nk in prange(N * K):
        n, k = nk // K, nk % K
        b = bias[k]
        for i in range(P):
            v = y[n, k, i] + b
            if add:
                v += residual[n, k, i]
            if relu and v < 0:
                v = 0
            y[n, k, i] = v
