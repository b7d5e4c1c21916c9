"""Numba kernels of the layers whose NumPy form would take several passes over memory per element.

- ``relu``, ``relu_grad``: y = max(x, 0) on both cores; dx = dy where y > 0, else 0, in one pass (NumPy's
  ``np.where`` was ~10x slower here).
- ``add``: the two branches' gradients summed at a residual block's input, on both cores, each thread on the
  images it computed before and will compute next. NumPy's ``a + b`` ran on one thread, so the next block's
  ReLU gradient read half its input from the other core's cache. Measured (2026-12-06, AMD EPYC, ResNet-20
  b32 training step, paired in one process): 0.98x the step's time with the vCPUs near each other, 0.92x
  with them far apart (68.1 -> 61.9 ms).
- ``scale_shift``: eval-mode BatchNorm, y = x * scale[c] + shift[c] in one pass (NumPy: two and a temporary).
- ``max_pool``: each output is the max over its window, and the flat index (h*W + w) of that max within its
  input plane; taps outside the input are skipped (torch's -inf padding). As torch's CPU kernel: the search
  starts at the window's first in-bounds element with max -inf, and a later tap wins only if it is larger
  or NaN, so ties go to the first in scan order and NaN propagates.
- ``max_pool_grad``: each output's dy is added at its max's index (windows may overlap).
- ``epilogue``: a conv output's bias, a residual and a ReLU applied in place in one pass (eval mode's fused
  path, ``inference.py``), where NumPy would take three passes and two fresh arrays.
- ``batch_norm`` and ``batch_norm_grad``: train-mode BatchNorm per channel, three passes over x forward (sum,
  centred sum of squares, output) and two backward (the two sums, then dx), x_hat recomputed from x instead
  of stored; NumPy took seven passes each way and three fresh arrays. What the containers fuse after a
  BatchNorm runs in its kernels: ResNet's residual sum and the ReLU on each output row while it is in L1, and
  that ReLU's mask on dy in the backward pass (a pass and a fresh array each, otherwise). Parallel over the
  (n, c) planes, image-major: each plane's sums (reassociated into vector lanes), then each channel's over the
  images in image order (a fixed order for the compiled code, so repeatable). Image-major, each thread works on
  the images the convs before and after it gave that thread (they split their work n-major), so a layer's
  activations stay in the cache of the core that wrote them; split by channel, as before, half of them crossed
  to the other core at every BatchNorm. Measured (2026-12-05, AMD EPYC, ResNet-20 b32 training step, paired in
  one process, 1274 pairs of steps): 0.972x the step's time with the vCPUs near each other (fork/join 2.3-3.0 us),
  0.943x with them far apart (3.0-9 us: `bench/regret_placement.py`).

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
def add(a, b, out):
    """Flat arrays: out[i] = a[i] + b[i] on both cores; split as the flat index runs, image-major."""
    for i in prange(a.size):
        out[i] = a[i] + b[i]


@njit(parallel=True, cache=True)
def relu(x, y):
    """Flat arrays: y[i] = max(x[i], 0), NaN kept (np.maximum's result, on both cores)."""
    for i in prange(x.size):
        v = x[i]
        y[i] = v if v > 0 or v != v else 0


@njit(parallel=True, cache=True)
def scale_shift(x, scale, shift, y):
    """x, y: (N, C, P). y[n, c] = x[n, c] * scale[c] + shift[c] (eval-mode BatchNorm), rounded after the
    product and after the sum as NumPy's two operations are, in one pass instead of two and a temporary."""
    N, C, P = x.shape
    for nc in prange(N * C):
        a, b = scale[nc % C], shift[nc % C]
        row, out = x[nc // C, nc % C], y[nc // C, nc % C]
        for i in range(P):
            out[i] = row[i] * a + b


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


@njit(cache=True, inline="always")
def _channel_totals(part):
    """part (N, C) -> (C,): each channel's sum over the images, in image order (a fixed order: repeatable)."""
    N, C = part.shape
    total = np.zeros(C)
    for n in range(N):
        for c in range(C):
            total[c] += part[n, c]
    return total


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def batch_norm(x, weight, bias, eps, y, mean, var, residual, relu):
    """x, y: (N, C, P). Per channel c over its n = N*P values: mean[c] = sum(x) / n, var[c] = sum((x - mean)^2)
    / n (the biased variance), y = (x - mean) / sqrt(var + eps) * weight[c] + bias[c]; then y += residual
    (N, C, P) unless it is empty, then ReLU when ``relu`` (a NaN stays NaN), each row while it is in L1. Each
    pass is parallel over the (n, c) planes, image-major (module docstring): each plane's sum, then the
    channel's over the images."""
    N, C, P = x.shape
    count = N * P
    add = residual.shape[0] > 0
    part = np.empty((N, C))
    for nc in prange(N * C):
        row, s = x[nc // C, nc % C], 0.0
        for i in range(P):
            s += row[i]
        part[nc // C, nc % C] = s
    mu = _channel_totals(part) / count
    for nc in prange(N * C):
        row, m, ss = x[nc // C, nc % C], mu[nc % C], 0.0
        for i in range(P):
            d = row[i] - m
            ss += d * d
        part[nc // C, nc % C] = ss
    v = _channel_totals(part) / count
    scale = weight / np.sqrt(v + eps)
    shift = bias - mu * scale
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        row, out, a, b = x[n, c], y[n, c], scale[c], shift[c]
        for i in range(P):
            out[i] = row[i] * a + b
        if add:                               # rounded as NumPy's y + residual after the BatchNorm is
            more = residual[n, c]
            for i in range(P):
                out[i] += more[i]
        if relu:
            for i in range(P):
                if out[i] < 0:
                    out[i] = 0
    for c in range(C):
        mean[c], var[c] = mu[c], v[c]


@njit(parallel=True, cache=True, fastmath={"reassoc", "contract"})
def batch_norm_grad(x, dy, mask, mean, inv_std, weight, db, dw, dx):
    """Per channel c, with x_hat = (x - mean[c]) * inv_std[c] over its n = N*P values and g = dy (where mask
    (N, C, P), the output of a ReLU fused after the BatchNorm, is positive, else 0; all of dy when mask is
    empty): db[c] = sum(g), dw[c] = sum(g * x_hat), and, unless dx is empty, dx = weight[c] * inv_std[c] / n *
    (n*g - db - x_hat*dw). Parallel over the (n, c) planes, image-major, as ``batch_norm``."""
    N, C, P = x.shape
    count = N * P
    masked = mask.shape[0] > 0
    part_d, part_dx = np.empty((N, C)), np.empty((N, C))
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        mu, inv = mean[c], inv_std[c]
        row, grad = x[n, c], dy[n, c]
        keep = mask[n, c] if masked else grad
        sd, sdx = 0.0, 0.0
        for i in range(P):
            g = grad[i] if not masked or keep[i] > 0 else 0.0
            sd += g
            sdx += g * ((row[i] - mu) * inv)
        part_d[n, c], part_dx[n, c] = sd, sdx
    sums_d, sums_dx = _channel_totals(part_d), _channel_totals(part_dx)
    for c in range(C):
        db[c], dw[c] = sums_d[c], sums_dx[c]
    if dx.shape[0] == 0:
        return
    for nc in prange(N * C):
        n, c = nc // C, nc % C
        mu, inv, sd, sdx = mean[c], inv_std[c], sums_d[c], sums_dx[c]
        k = weight[c] * inv / count
        row, grad, out = x[n, c], dy[n, c], dx[n, c]
        keep = mask[n, c] if masked else grad
        for i in range(P):
            g = grad[i] if not masked or keep[i] > 0 else 0.0
            out[i] = k * (count * g - sd - (row[i] - mu) * inv * sdx)
