"""BatchNorm's GPU kernels (the twins of ``kernels.batch_norm``, ``batch_norm_grad`` and ``scale_shift``), with
the ReLU that follows and ResNet's residual fused in. x, y, dy: (N, C, P) with P = H*W; n = N*P per channel.

- ``bn_stats_kernel`` (train forward, one launch): a block per channel (blocks stride over the channels)
  sums x over its n values in the compute dtype, then the centred squares (two passes over x, as the CPU
  kernel: no cancellation from sum(x^2) - n*mean^2), each a tree in shared memory; its thread 0 writes the
  biased mean and variance and updates the running statistics with torch's momentum (unbiased variance).
- ``bn_normalize_kernel`` (one launch, train and eval): y = x*s[c] + (b[c] - mean[c]*s[c]) with
  s = w[c] / sqrt(var[c] + eps), then + residual (when given), then ReLU (when asked). Train mode passes the
  batch's mean and variance, eval mode the running ones: eval's scale-shift, residual and ReLU are one pass,
  as the CPU's fused inference path (``inference.epilogue``) makes them.
- ``bn_grad_sums_kernel`` (backward, one launch): per channel db = sum(g), dw = sum(g * x_hat) with
  x_hat = (x - mean) * inv_std recomputed from x (not stored), g = dy masked by the ReLU's output (y > 0)
  when the ReLU was fused; written straight into the gradient buffers (``add``: added to what they hold).
- ``bn_grad_input_kernel`` (backward, one launch): dx = w*inv_std/n * (n*g - db - x_hat*dw).

FLOPs per element: 3 + 3 forward (sums, then normalise), 4 + 6 backward. Memory: x read twice and y written
forward; x and dy read twice and dx written backward (the CPU kernels' traffic).
"""
from __future__ import annotations

import functools
import math

from convalgos.gpu_compiler import cuda, numba_dtype

from .gpu_kernels import block_sum, compute_dtype


@functools.lru_cache(maxsize=None)
def bn_stats_kernel(dtype: str, threads: int):
    """x (N, C, P) -> mean[c], var[c] (biased, compute dtype); running_mean/var[c] updated in place:
    r = keep*r + m*stat, var's stat times ``unbias`` = n/(n-1)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, mean, var, running_mean, running_var, keep, m, unbias):
        N, C, P = x.shape
        count = N * P
        part = cuda.shared.array(threads, ct)
        t = cuda.threadIdx.x
        for c in range(cuda.blockIdx.x, C, cuda.gridDim.x):
            s = ct(0)
            for i in range(t, count, threads):
                s += ct(x[i // P, c, i % P])
            mu = block_sum(part, s) / ct(count)
            ss = ct(0)
            for i in range(t, count, threads):
                d = ct(x[i // P, c, i % P]) - mu
                ss += d * d
            v = block_sum(part, ss) / ct(count)
            if t == 0:
                mean[c], var[c] = mu, v
                running_mean[c] = keep * ct(running_mean[c]) + m * mu
                running_var[c] = keep * ct(running_var[c]) + m * (v * unbias)

    return kernel


@functools.lru_cache(maxsize=None)
def bn_normalize_kernel(dtype: str):
    """y = (x - mean[c]) / sqrt(var[c] + eps) * w[c] + b[c] (+ residual when ``add``) (ReLU when ``relu``), in
    the scale-shift form of the CPU kernels; x, residual, y: (N, C, P)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, mean, var, eps, weight, bias, residual, add, relu, y):
        N, C, P = x.shape
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            n, c, q = i // (C * P), (i // P) % C, i % P
            scale = ct(weight[c]) / ct(math.sqrt(ct(var[c]) + eps))
            shift = ct(bias[c]) - ct(mean[c]) * scale
            v = ct(x[n, c, q]) * scale + shift
            if add:
                v += ct(residual[n, c, q])
            if relu and v < 0:
                v = ct(0)
            y[n, c, q] = v

    return kernel


@functools.lru_cache(maxsize=None)
def bn_grad_sums_kernel(dtype: str, threads: int):
    """Per channel c: sums[0, c] = db = sum(g), sums[1, c] = dw = sum(g * x_hat), g = dy where y > 0 when
    ``masked`` (y: the fused ReLU's output) else dy; also written (``add``: added) into db_out[c], dw_out[c]."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, dy, y, masked, mean, var, eps, sums, db_out, dw_out, add):
        N, C, P = x.shape
        count = N * P
        part = cuda.shared.array(threads, ct)
        t = cuda.threadIdx.x
        for c in range(cuda.blockIdx.x, C, cuda.gridDim.x):
            mu, inv = ct(mean[c]), ct(1) / ct(math.sqrt(ct(var[c]) + eps))
            sd, sdx = ct(0), ct(0)
            for i in range(t, count, threads):
                n, q = i // P, i % P
                g = ct(dy[n, c, q])
                if masked and not y[n, c, q] > 0:
                    g = ct(0)
                sd += g
                sdx += g * ((ct(x[n, c, q]) - mu) * inv)
            sd = block_sum(part, sd)
            sdx = block_sum(part, sdx)
            if t == 0:
                sums[0, c], sums[1, c] = sd, sdx
                if add:
                    db_out[c] = ct(db_out[c]) + sd
                    dw_out[c] = ct(dw_out[c]) + sdx
                else:
                    db_out[c], dw_out[c] = sd, sdx

    return kernel


@functools.lru_cache(maxsize=None)
def bn_grad_input_kernel(dtype: str):
    """dx = w[c] * inv_std[c] / n * (n*g - db[c] - x_hat*dw[c]), g masked as in ``bn_grad_sums_kernel``;
    db, dw from ``sums`` (its output)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(x, dy, y, masked, mean, var, eps, weight, sums, dx):
        N, C, P = x.shape
        count = ct(N * P)
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            n, c, q = i // (C * P), (i // P) % C, i % P
            inv = ct(1) / ct(math.sqrt(ct(var[c]) + eps))
            g = ct(dy[n, c, q])
            if masked and not y[n, c, q] > 0:
                g = ct(0)
            x_hat = (ct(x[n, c, q]) - ct(mean[c])) * inv
            k = ct(weight[c]) * inv / count
            dx[n, c, q] = k * (count * g - sums[0, c] - x_hat * sums[1, c])

    return kernel
