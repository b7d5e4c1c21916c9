"""The host side of the layers' GPU path: each function takes a layer's arrays, allocates its outputs and
launches its fused kernels (``gpu_kernels.py``, ``gpu_norm_kernels.py``, ``gpu_pool_kernels.py``) through
``convalgos.cuda.launch``, so that the counter (``convalgos.cuda.count_ops``) sees every launch.

Launches per call: BatchNorm 2 forward (statistics, normalise; 1 in eval mode) and 1 + 1 backward (sums, dx);
ReLU 1 each way; each pooling 1 each way. Nothing here copies between host and device or synchronises, so a
step made of these layers can be captured into a CUDA graph; what is still allocated per call is each
layer's output (and input gradient), from CuPy's pool. Small per-channel arrays (BatchNorm's statistics and
sums) are kept by the layer and reused.

The kernel modules are imported on first use, so ``import autotune`` does not load the CUDA compiler.
"""
from __future__ import annotations

import numpy as np

from convalgos.arrays import array_module

from . import gpu_flat


def _cuda():
    """``convalgos.cuda`` (imported on first GPU use): ``launch``, ``launch_1d``, ``record``."""
    from convalgos import cuda
    return cuda


def contiguous(a):
    """``a`` in C order: itself, or a counted device copy."""
    if a.flags.c_contiguous:
        return a
    _cuda().record("cupy.copy")
    return array_module(a).ascontiguousarray(a)


def kept(module, tag: str, shape, dtype, like):
    """A small device array ``module`` keeps for reuse across calls (made again when shape or dtype changes)."""
    store = module.__dict__.setdefault("_gpu_kept", {})
    a = store.get(tag)
    if a is None or a.shape != tuple(shape) or a.dtype != dtype or type(a) is not type(like):
        a = store[tag] = array_module(like).empty(shape, dtype)
    return a


def add(a, b):
    """a + b on the device (one counted array-module kernel)."""
    _cuda().record("cupy.add")
    return a + b


# ---- BatchNorm2d --------------------------------------------------------------------------------------------
def batch_norm_forward(bn, x, residual, relu: bool):
    """``bn``'s output: train mode from the batch's statistics (running ones updated), eval mode from the
    running ones; ``residual`` added, then ReLU when ``relu`` (gpu_norm_kernels.py)."""
    from . import gpu_kernels, gpu_norm_kernels
    cuda = _cuda()
    x = contiguous(x)
    N, C = x.shape[:2]
    planes = x.reshape(N, C, -1)
    dt = np.result_type(x.dtype, bn.weight.dtype)
    ct = gpu_kernels.compute_dtype(dt)
    y = array_module(x).empty(planes.shape, dt)
    if bn.training:
        stats = kept(bn, "stats", (2, C), ct, x)
        n, m = planes.shape[0] * planes.shape[2], bn.momentum
        blocks, threads = gpu_kernels.reduce_launch(C)
        cuda.launch(gpu_norm_kernels.bn_stats_kernel(dt.name, threads), blocks, threads)(
            planes, stats[0], stats[1], bn.running_mean, bn.running_var, ct.type(1 - m), ct.type(m),
            ct.type(n / (n - 1)))
        mean, var = stats
    else:
        mean, var = bn.running_mean, bn.running_var
    res = y if residual is None else contiguous(residual).reshape(planes.shape)     # y: read by no one
    cuda.launch(gpu_norm_kernels.bn_normalize_kernel(dt.name), *cuda.launch_1d(y.size))(
        planes, mean, var, ct.type(bn.eps), bn.weight, bn.bias, res, residual is not None, bool(relu), y)
    # a ReLU after a residual is the caller's to differentiate (it splits the gradient to the shortcut too)
    mask = y if relu and residual is None else None
    bn.save_for_backward(x, mean, var, mask) if bn.training else bn.save_for_backward()
    return y.reshape(x.shape)


def batch_norm_backward(bn, x, mean, var, mask, dy, input_grad: bool):
    """Accumulate ``bn``'s weight and bias gradients (into the kept buffers when there are: ``gpu_flat.py``);
    dx when ``input_grad``. ``mask``: the fused ReLU's output, or None."""
    from . import gpu_kernels, gpu_norm_kernels
    cuda = _cuda()
    xp, (N, C) = array_module(dy), x.shape[:2]
    planes = x.reshape(N, C, -1)
    dy = contiguous(dy).reshape(planes.shape)
    ct = gpu_kernels.compute_dtype(np.result_type(planes.dtype, bn.weight.dtype))
    y = dy if mask is None else mask                                                  # dy: a stand-in, unread
    sums = kept(bn, "sums", (2, C), ct, dy)
    targets = gpu_flat.grad_buffer(bn, "bias"), gpu_flat.grad_buffer(bn, "weight")
    direct = None not in targets and targets[0][1] == targets[1][1]
    (db, add), (dw, _) = targets if direct else ((xp.empty(C, bn.bias.dtype), False),
                                                 (xp.empty(C, bn.weight.dtype), False))
    blocks, threads = gpu_kernels.reduce_launch(C)
    cuda.launch(gpu_norm_kernels.bn_grad_sums_kernel(ct.name, threads), blocks, threads)(
        planes, dy, y, mask is not None, mean, var, ct.type(bn.eps), sums, db, dw, add)
    if direct:
        gpu_flat.grad_written(bn, "bias"), gpu_flat.grad_written(bn, "weight")
    else:
        bn.accumulate_grad("bias", db)
        bn.accumulate_grad("weight", dw)
    if not input_grad:
        return None
    dx = xp.empty(planes.shape, dy.dtype)
    cuda.launch(gpu_norm_kernels.bn_grad_input_kernel(ct.name), *cuda.launch_1d(dx.size))(
        planes, dy, y, mask is not None, mean, var, ct.type(bn.eps), bn.weight, sums, dx)
    return dx.reshape(x.shape)


# ---- ReLU -----------------------------------------------------------------------------------------------------
def relu(x):
    """max(x, 0), NaN kept: one launch."""
    from . import gpu_kernels
    cuda = _cuda()
    x = contiguous(x)
    y = array_module(x).empty_like(x)
    cuda.launch(gpu_kernels.relu_kernel(x.dtype.name), *cuda.launch_1d(x.size))(x.reshape(-1), y.reshape(-1))
    return y


def relu_backward(y, dy):
    """dy where the ReLU's output y > 0, else 0: one launch."""
    from . import gpu_kernels
    cuda = _cuda()
    dy = contiguous(dy)
    dx = array_module(dy).empty_like(dy)
    cuda.launch(gpu_kernels.relu_grad_kernel(dy.dtype.name), *cuda.launch_1d(dy.size))(
        y.reshape(-1), dy.reshape(-1), dx.reshape(-1))
    return dx


# ---- pooling (x as planes (N*C, H, W)) ----------------------------------------------------------------------------
def _planes(a):
    N, C, H, W = a.shape
    return contiguous(a).reshape(N * C, H, W)


def max_pool(x, kernel_size, stride, padding, out):
    """(y, argmax): each window's max and its flat index in the plane (``out``: (Ho, Wo)); one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    N, C = x.shape[:2]
    xp = array_module(x)
    y, argmax = xp.empty((N * C,) + tuple(out), x.dtype), xp.empty((N * C,) + tuple(out), np.int32)
    cuda.launch(gpu_pool_kernels.max_pool_kernel(x.dtype.name), *cuda.launch_1d(y.size))(
        _planes(x), *kernel_size, *stride, *padding, y, argmax)
    return y.reshape((N, C) + tuple(out)), argmax


def max_pool_backward(x_shape, argmax, dy, kernel_size, stride, padding):
    """dx: each dy gathered at its window's argmax; one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    dx = array_module(dy).empty(x_shape, dy.dtype)
    cuda.launch(gpu_pool_kernels.max_pool_grad_kernel(dy.dtype.name), *cuda.launch_1d(dx.size))(
        _planes(dy), argmax, *kernel_size, *stride, *padding, _planes(dx))
    return dx


def avg_pool(x, kernel_size, stride, padding, include_pad: bool, out):
    """Each window's mean (``out``: (Ho, Wo)); one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    N, C = x.shape[:2]
    y = array_module(x).empty((N, C) + tuple(out), x.dtype)
    cuda.launch(gpu_pool_kernels.avg_pool_kernel(x.dtype.name), *cuda.launch_1d(y.size))(
        _planes(x), *kernel_size, *stride, *padding, bool(include_pad), _planes(y))
    return y


def avg_pool_backward(x_shape, dy, kernel_size, stride, padding, include_pad: bool):
    """dx: the sum of dy / divisor over the windows holding each element; one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    dx = array_module(dy).empty(x_shape, dy.dtype)
    cuda.launch(gpu_pool_kernels.avg_pool_grad_kernel(dy.dtype.name), *cuda.launch_1d(dx.size))(
        _planes(dy), *kernel_size, *stride, *padding, bool(include_pad), _planes(dx))
    return dx


def adaptive_avg_pool(x, out):
    """Each bin's mean, bins computed on the device; one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    N, C = x.shape[:2]
    y = array_module(x).empty((N, C) + tuple(out), x.dtype)
    cuda.launch(gpu_pool_kernels.adaptive_avg_pool_kernel(x.dtype.name), *cuda.launch_1d(y.size))(
        _planes(x), _planes(y))
    return y


def adaptive_avg_pool_backward(x_shape, dy):
    """dx: the sum of dy / bin size over the bins holding each element; one launch."""
    from . import gpu_pool_kernels
    cuda = _cuda()
    dx = array_module(dy).empty(x_shape, dy.dtype)
    cuda.launch(gpu_pool_kernels.adaptive_avg_pool_grad_kernel(dy.dtype.name), *cuda.launch_1d(dx.size))(
        _planes(dy), _planes(dx))
    return dx


# ---- CrossEntropyLoss -------------------------------------------------------------------------------------------
def record(name: str) -> None:
    """Count an array-module operation issued outside this module (``convalgos.cuda.record``)."""
    _cuda().record(name)


def cross_entropy(loss_fn, logits, labels):
    """(loss (1,), bad (2,), grad (N, K)): one launch, into buffers ``loss_fn`` keeps (``gpu_kernels.py``)."""
    from . import gpu_kernels
    cuda = _cuda()
    ct = gpu_kernels.compute_dtype(logits.dtype)
    value = kept(loss_fn, "loss", (1,), ct, logits)
    bad = kept(loss_fn, "bad", (2,), np.int64, logits)
    grad = kept(loss_fn, "grad", logits.shape, logits.dtype, logits)
    threads = gpu_kernels.reduce_threads()
    cuda.launch(gpu_kernels.cross_entropy_kernel(logits.dtype.name, threads), 1, threads)(
        logits, labels, grad, value, bad)
    return value, bad, grad
