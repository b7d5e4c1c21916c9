"""Direct convolution, "direct": the defining sum, computed by a Numba loop nest.

Maths. With g = k // Kg the group of output channel k (Cg = C/groups input and Kg = K/groups output channels
per group), top/left the padding and x read as zero outside its H x W extent:

    y[n, k, i, j] = sum_{c < Cg, r < R, s < S} x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left] * w[k, c, r, s]

FLOPs (``flops``): one multiply and one add per tap, 2 * N * K * (C/groups) * R * S * Ho * Wo = ``p.flops``;
padded taps are skipped, not multiplied by zero, so near the borders slightly less is done.

Workspace: none (``workspace_bytes`` is 0). Padding is handled by bounds, not by a padded copy: for an output
row i only the kernel rows r whose input row lies inside x are visited, and for a kernel column s the output
columns j whose input column lies inside x form one contiguous range [j0, j1) computed once per tap
(``_col_range``), so the innermost loop has no per-element branch.

Constraints: none; any stride, asymmetric padding, dilation, groups, depthwise; float32 and float64 (each its
own compiled kernel; float16 is computed in float32 by ``conv2d``).

Loop order. ``out`` is the accumulator: each output row is zeroed, then every tap adds its weight times the
matching input row segment into it. The innermost loop runs over the output columns j, contiguous in ``out``
(and in ``x`` when the stride is 1), so it vectorises; the row being accumulated stays in L1.

- Ordinary and grouped layers (``_grouped``): the parallel items are (image n, group g, block of ``K_BLOCK``
  output channels), so even batch 1 keeps both cores busy. A block accumulates ``K_BLOCK`` output rows at once:
  each input element loaded is multiplied by ``K_BLOCK`` weights (register blocking over output channels),
  which cuts the loads of x per multiply-add by that factor. Loops: n, g, k-block (parallel) > i > c > r > s > j.
- Depthwise layers (Cg = 1, ``_depthwise``): there is nothing to share between output channels, so the items
  are the (n, k) planes and a row gathers its R*S taps; each inner loop is one multiply-add per element.
"""
from __future__ import annotations

from numba import njit, prange

from .params import ConvParams
from .registry import Algorithm, register

#: output channels accumulated together by ``_grouped`` (each input load feeds this many multiply-adds).
K_BLOCK = 4


@njit(cache=True)
def _col_range(s, dw, sw, left, W, Wo):
    """Output columns [j0, j1) whose input column j*sw + offset (offset = s*dw - left) lies in [0, W)."""
    offset = s * dw - left
    j0 = max(0, -(offset // sw))                 # ceil(-offset / sw)
    j1 = min(Wo, (W - 1 - offset) // sw + 1)
    return j0, max(j0, j1), offset


@njit(parallel=True, cache=True)
def _depthwise(x, w, sh, sw, dh, dw, top, left, out):
    """Depthwise (Cg = 1): out[n, k] = the R x S correlation of x[n, k // multiplier] with w[k, 0]."""
    N, C, H, W = x.shape
    K, _, R, S = w.shape
    Ho, Wo = out.shape[2], out.shape[3]
    multiplier = K // C
    for nk in prange(N * K):
        n, k = nk // K, nk % K
        plane, kernel = x[n, k // multiplier], w[k, 0]
        for i in range(Ho):
            orow = out[n, k, i]
            orow[:] = 0.0
            for r in range(R):
                ih = i * sh + r * dh - top
                if 0 <= ih < H:
                    xrow = plane[ih]
                    for s in range(S):
                        j0, j1, offset = _col_range(s, dw, sw, left, W, Wo)
                        weight = kernel[r, s]
                        for j in range(j0, j1):
                            orow[j] += weight * xrow[j * sw + offset]


@njit(cache=True)
def _row_block4(x, w, n, c0, k0, i, sh, sw, dh, dw, top, left, out):
    """out[n, k0:k0+4, i, :] = output row i of four output channels that read input channels c0.. c0+Cg."""
    H, W = x.shape[2], x.shape[3]
    Cg, R, S = w.shape[1], w.shape[2], w.shape[3]
    Wo = out.shape[3]
    o0, o1, o2, o3 = out[n, k0, i], out[n, k0 + 1, i], out[n, k0 + 2, i], out[n, k0 + 3, i]
    o0[:] = 0.0
    o1[:] = 0.0
    o2[:] = 0.0
    o3[:] = 0.0
    for c in range(Cg):
        for r in range(R):
            ih = i * sh + r * dh - top
            if 0 <= ih < H:
                xrow = x[n, c0 + c, ih]
                for s in range(S):
                    j0, j1, offset = _col_range(s, dw, sw, left, W, Wo)
                    w0, w1, w2, w3 = w[k0, c, r, s], w[k0 + 1, c, r, s], w[k0 + 2, c, r, s], w[k0 + 3, c, r, s]
                    for j in range(j0, j1):
                        v = xrow[j * sw + offset]
                        o0[j] += w0 * v
                        o1[j] += w1 * v
                        o2[j] += w2 * v
                        o3[j] += w3 * v


@njit(cache=True)
def _row_single(x, w, n, c0, k, i, sh, sw, dh, dw, top, left, out):
    """out[n, k, i, :] = output row i of one output channel that reads input channels c0.. c0+Cg."""
    H, W = x.shape[2], x.shape[3]
    Cg, R, S = w.shape[1], w.shape[2], w.shape[3]
    Wo = out.shape[3]
    orow = out[n, k, i]
    orow[:] = 0.0
    for c in range(Cg):
        for r in range(R):
            ih = i * sh + r * dh - top
            if 0 <= ih < H:
                xrow = x[n, c0 + c, ih]
                for s in range(S):
                    j0, j1, offset = _col_range(s, dw, sw, left, W, Wo)
                    weight = w[k, c, r, s]
                    for j in range(j0, j1):
                        orow[j] += weight * xrow[j * sw + offset]


@njit(parallel=True, cache=True)
def _grouped(x, w, sh, sw, dh, dw, top, left, out):
    """Any layer: items (n, g, block of K_BLOCK output channels of group g), rows accumulated K_BLOCK at once."""
    N, C = x.shape[0], x.shape[1]
    K, Cg = w.shape[0], w.shape[1]
    Ho = out.shape[2]
    groups = C // Cg
    Kg = K // groups
    n_blocks = (Kg + K_BLOCK - 1) // K_BLOCK
    for item in prange(N * groups * n_blocks):
        n, g, b = item // (groups * n_blocks), (item // n_blocks) % groups, item % n_blocks
        k0, c0 = g * Kg + b * K_BLOCK, g * Cg
        n_k = min(K_BLOCK, Kg - b * K_BLOCK)
        for i in range(Ho):
            if n_k == 4:
                _row_block4(x, w, n, c0, k0, i, sh, sw, dh, dw, top, left, out)
            else:
                for k in range(k0, k0 + n_k):
                    _row_single(x, w, n, c0, k, i, sh, sw, dh, dw, top, left, out)


class Direct(Algorithm):
    """The defining sum, bounds-checked per tap, no workspace; a separate kernel for depthwise layers."""

    name = "direct"
    deterministic = True
    # float32: sequential accumulation over Cg*R*S taps; measured below 1e-6 on C = 512 3x3 layers.
    tolerance = {"float16": 2e-3, "float32": 5e-6, "float64": 1e-12}

    def workspace_bytes(self, p: ConvParams) -> int:
        return 0

    def flops(self, p: ConvParams) -> int:
        return p.flops

    def forward(self, x, w, p: ConvParams, out) -> None:
        (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
        kernel = _depthwise if p.Cg == 1 else _grouped
        kernel(x, w, sh, sw, dh, dw, top, left, out)


register(Direct())
