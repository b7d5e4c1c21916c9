"""The GPU twins of ``kernels.py`` that are not BatchNorm or pooling: ReLU, the cross-entropy loss and the
multi-tensor SGD update, as Numba-CUDA kernels, and the launch sizes the fused layers share.

Every kernel is made once per dtype (and, for block reductions, per block size) by an ``lru_cache`` factory and
launched through ``convalgos.cuda.launch``, so the device-operation counter sees it as ``nn.<factory>``.
float16 is read and written as float16 and computed in float32 (``compute_dtype``), as on the CPU.

- ``relu_kernel``, ``relu_grad_kernel``: y = max(x, 0) with NaN kept; dx = dy where y > 0, else 0. One
  grid-stride pass each.
- ``cross_entropy_kernel``: softmax cross-entropy, mean over the rows, in ONE launch of one block: each thread
  takes rows, computes logsumexp(z) - z[label] (the row's maximum subtracted first) and the row's gradient
  (softmax(z) - onehot(label)) / N, and the block sums the rows' losses (a tree in shared memory). A label
  outside [0, classes) is not checked on the host (that would be a copy and a sync): the kernel writes a flag
  and the label into ``bad``, that row's loss and gradient become NaN, and the loss raises when it is read.
- ``sgd_kernel``: torch's SGD (dampening 0) over the flat range [lo, hi) of one dtype's parameters, gradients
  and momentum buffers (``gpu_flat.py`` makes them views of three flat arrays), so one launch updates every
  parameter, as torch's fused/foreach optimizers do (``multi_tensor_apply``). Per element, as ``optim.SGD``:
  d = p*wd + g; buf = d on the first step, else buf*m + d; p -= lr*buf, or with nesterov p -= lr*d, then
  p -= (lr*m)*buf. 8 FLOPs per element at most.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from convalgos.arrays import simulator_enabled
from convalgos.gpu_compiler import cuda, numba_dtype

#: threads per block of a block reduction (a power of two), on a GPU and under the simulator (~1 ms a thread).
REDUCE_THREADS, SIM_REDUCE_THREADS = 256, 4


def compute_dtype(dtype) -> np.dtype:
    """The dtype a kernel computes in: float32 for float16 and float32, float64 for float64."""
    return np.promote_types(np.dtype(dtype), np.float32)


def reduce_threads() -> int:
    """Threads per block of the block-reduction kernels here."""
    return SIM_REDUCE_THREADS if simulator_enabled() else REDUCE_THREADS


def reduce_launch(groups: int) -> tuple[int, int]:
    """(blocks, threads) for a kernel whose blocks stride over ``groups`` (channels): a block per group on a
    GPU, one block under the simulator (the blocks would run one after the other there anyway)."""
    return (1 if simulator_enabled() else max(1, groups)), reduce_threads()


@cuda.jit(device=True)
def block_sum(part, value):
    """The sum of ``value`` over the block's threads (every thread gets it): a tree in shared array ``part``
    of blockDim.x (a power of two) elements, which is free again on return."""
    t = cuda.threadIdx.x
    part[t] = value
    cuda.syncthreads()
    half = cuda.blockDim.x // 2
    while half > 0:
        if t < half:
            part[t] += part[t + half]
        cuda.syncthreads()
        half //= 2
    total = part[0]
    cuda.syncthreads()
    return total


@functools.lru_cache(maxsize=None)
def relu_kernel(dtype: str):
    """Flat x, y: y[i] = max(x[i], 0), a NaN kept (as ``kernels.relu``). For float16 on sm_90
    (tests/test_gpu_ptx.py): the zero is a literal, converted by the store (a float16 constant captured from
    Python gives IR that NVVM rejects), and NaN is kept by ``v <= 0`` being false (``v != v`` on a half calls an
    operator ptxas cannot resolve)."""

    @cuda.jit
    def kernel(x, y):
        for i in range(cuda.grid(1), x.size, cuda.gridsize(1)):
            v = x[i]
            y[i] = 0 if v <= 0 else v          # NaN <= 0 is False: a NaN is kept

    return kernel


@functools.lru_cache(maxsize=None)
def relu_grad_kernel(dtype: str):
    """Flat y, dy, dx: dx[i] = dy[i] where y[i] > 0, else 0 (as ``kernels.relu_grad``; the zero a literal, as
    in ``relu_kernel``)."""

    @cuda.jit
    def kernel(y, dy, dx):
        for i in range(cuda.grid(1), dy.size, cuda.gridsize(1)):
            dx[i] = dy[i] if y[i] > 0 else 0

    return kernel


@functools.lru_cache(maxsize=None)
def cross_entropy_kernel(dtype: str, threads: int):
    """logits (N, K) -> grad (N, K) = (softmax - onehot) / N, loss[0] = the mean row loss; bad = (flag, label)
    (module docstring). One block of ``threads`` threads."""
    ct = numba_dtype(compute_dtype(dtype))
    nan = ct(math.nan)

    @cuda.jit
    def kernel(logits, labels, grad, loss, bad):
        N, K = logits.shape
        t = cuda.threadIdx.x
        part = cuda.shared.array(threads, ct)
        if t == 0:
            bad[0] = 0
        cuda.syncthreads()
        total = ct(0)
        for n in range(t, N, threads):
            label = labels[n]
            if label < 0 or label >= K:
                bad[0], bad[1] = 1, label
                total += nan
                for k in range(K):
                    grad[n, k] = nan
                continue
            top = ct(logits[n, 0])
            for k in range(1, K):
                v = ct(logits[n, k])
                if v > top or v != v:
                    top = v
            s = ct(0)
            for k in range(K):
                s += ct(math.exp(ct(logits[n, k]) - top))
            log_sum = ct(math.log(s))
            total += log_sum - (ct(logits[n, label]) - top)
            for k in range(K):
                g = ct(math.exp(ct(logits[n, k]) - top - log_sum))
                if k == label:
                    g -= ct(1)
                grad[n, k] = g / ct(N)
        mean = block_sum(part, total) / ct(N)
        if t == 0:
            loss[0] = mean

    return kernel


@functools.lru_cache(maxsize=None)
def sgd_kernel(dtype: str):
    """Flat p, g, buf of one dtype: torch's SGD step on elements [lo, hi) (module docstring). ``first``: the
    momentum buffers of this range start now (buf = d)."""
    ct = numba_dtype(compute_dtype(dtype))

    @cuda.jit
    def kernel(p, g, buf, lo, hi, lr, weight_decay, momentum, lr_momentum, nesterov, first):
        for i in range(lo + cuda.grid(1), hi, cuda.gridsize(1)):
            w = ct(p[i])
            d = w * weight_decay + ct(g[i])
            if momentum != 0:
                b = d if first else ct(buf[i]) * momentum + d
                buf[i] = b
                if nesterov:
                    w = (w - d * lr) - ct(buf[i]) * lr_momentum
                else:
                    w = w - ct(buf[i]) * lr
            else:
                w = w - d * lr
            p[i] = w

    return kernel
