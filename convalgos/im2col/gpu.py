"""GPU im2col + GEMM: Numba-CUDA kernels build the patch matrix (or scatter it back), cuBLAS (through
``xp.matmul``) does the three passes' matrix products (CPU twin: ``convalgos.im2col``).

Patch matrix of image n and group g, one row per tap (c, r, s), one column per output pixel (i, j):

    P[n, g][(c, r, s), (i, j)] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]   (0 outside)

With W[g] = w[g*Kg:(g+1)*Kg] as (Kg x Cg*R*S) and y, dy of image n, group g as (Kg x Ho*Wo):

    forward          y[n, g]  = W[g] @ P[n, g]                  one batched GEMM over (image, group)
    backward_data    D[n, g]  = W[g]^T @ dy[n, g]               one batched GEMM, then dx = col2im(D)
    backward_filter  dW[g]    = sum_n dy[n, g] @ P[n, g]^T      one batched GEMM over the groups, the images
                                                                side by side along its reduction

Each byte moves once: the patch matrix is written once, in the layout its GEMM reads, and never transposed.
col2im is the adjoint of the patch matrix: each dx element gathers the entries of D that its (tap, pixel) pairs
hold (``gpu_kernels.col2im_kernel``), one thread per element, consecutive threads on consecutive dx pixels
reading consecutive columns of D (coalesced at stride 1), so no atomics. backward_filter has the same patch
kernel lay its output out (tap, image, pixel), so that P[g] of the whole chunk is one contiguous
(Cg*R*S x n*Ho*Wo) matrix; dy is laid out as dY[g] (Kg x n*Ho*Wo) and dW[g] = dY[g] @ P[g]^T is one GEMM per
group whose right operand cuBLAS reads transposed in place (its transb flag: a row-major P[g] is a column-major
P[g]^T).
The images go in chunks whose patch matrix fits CHUNK_BYTES (at least one image); backward_filter sums the
chunks' products. A 1x1, stride-1, unpadded layer needs no patch matrix: x is already it, so forward and
backward_data are one GEMM each straight between x (or dx) and y (or dy).

FLOPs (``flops``): every pass's GEMMs do the direct arithmetic, 2*N*K*Cg*R*S*Ho*Wo = ``p.flops``; backward_data
adds col2im's additions, one per (image, channel, tap, output) whose tap lands inside x (``scatter_adds``, none
for the plain 1x1 GEMM); backward_filter adds (chunks - 1)*K*Cg*R*S to sum the chunks.
Workspace (``workspace_bytes``), chunks of n images: the patch matrix, n*C*R*S*Ho*Wo elements (none for the
plain 1x1 GEMM, except in backward_filter, which always builds P); backward_data W^T (K*Cg*R*S); backward_filter
dy laid out by group when n > 1 (n*K*Ho*Wo) and the partial sum (K*Cg*R*S) when there are several chunks. One
patch buffer serves the three passes. Constraints: none. Deterministic: the kernels write each element from one
thread in a fixed order, the chunks are summed in order, and cuBLAS repeats its results on one GPU model.
"""
from __future__ import annotations

from .. import gpu_ops
from ..arrays import array_module
from ..gpu_base import GPUAlgorithm, launch, launch_1d
from ..params import ConvParams
from ..registry import check_pass
from .cpu import scatter_adds
from .gpu_kernels import col2im_kernel, im2col_kernel
from .shared import TOLERANCE

#: the patch matrix of one chunk of images stays within this many bytes (at least one image).
CHUNK_BYTES = 1 << 30


def is_plain_gemm(p: ConvParams) -> bool:
    """A 1x1, stride-1, unpadded layer: x (N, C, H*W) is its own patch matrix."""
    return (p.R, p.S) == (1, 1) and p.stride == (1, 1) and p.padding == ((0, 0), (0, 0))


def patch_elements(p: ConvParams) -> int:
    """One image's patch matrix: C*R*S rows of Ho*Wo columns."""
    Ho, Wo = p.out_hw
    return p.C * p.R * p.S * Ho * Wo


class GPUIm2col(GPUAlgorithm):
    """Numba-CUDA patch matrices and col2im around cuBLAS GEMMs per chunk of images (module docstring)."""

    name = "im2col"
    deterministic = True
    tolerance = TOLERANCE

    def chunk(self, p: ConvParams) -> int:
        return max(1, min(p.N, CHUNK_BYTES // (patch_elements(p) * p.itemsize)))

    def chunk_count(self, p: ConvParams) -> int:
        return -(-p.N // self.chunk(p))

    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        check_pass(op)
        n, weights = self.chunk(p), p.K * p.Cg * p.R * p.S
        if op == "backward_filter":
            Ho, Wo = p.out_hw
            dy_by_group = n * p.K * Ho * Wo if n > 1 else 0
            partial = weights if self.chunk_count(p) > 1 else 0
            return (n * patch_elements(p) + dy_by_group + partial) * p.itemsize
        patches = 0 if is_plain_gemm(p) else n * patch_elements(p)
        return (patches + (weights if op == "backward_data" else 0)) * p.itemsize

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        check_pass(op)
        if op == "backward_data" and not is_plain_gemm(p):
            return p.flops + scatter_adds(p)
        if op == "backward_filter":
            return p.flops + (self.chunk_count(p) - 1) * p.K * p.Cg * p.R * p.S
        return p.flops

    def _patches(self, like, p: ConvParams):
        """The kept patch buffer (one chunk's patch matrix, flat): each pass views it in its own layout."""
        return self.buffer(like, "im2col.patches", (self.chunk(p) * patch_elements(p),))

    def _chunks(self, p: ConvParams):
        chunk = self.chunk(p)
        for n0 in range(0, p.N, chunk):
            yield n0, min(chunk, p.N - n0)

    def forward(self, x, w, p: ConvParams, out) -> None:
        xp = array_module(x)
        (Ho, Wo), (top, _), (left, _) = p.out_hw, *p.padding
        G, crs, P = p.groups, p.Cg * p.R * p.S, Ho * Wo
        wg = w.reshape(G, p.Kg, crs)
        if is_plain_gemm(p):
            gpu_ops.record("cublas.gemm")
            xp.matmul(wg, x.reshape(p.N, G, crs, P), out=out.reshape(p.N, G, p.Kg, P))
            return
        patches = self._patches(x, p)
        for n0, n in self._chunks(p):
            cols = patches[:n * patch_elements(p)].reshape(n, p.C * p.R * p.S, P)
            blocks, threads = launch_1d(n * P)
            launch(im2col_kernel(p.compute_dtype), blocks, threads)(
                x[n0:n0 + n], cols.reshape(-1), p.C * p.R * p.S * P, P, top, left, *p.stride, *p.dilation, p.R,
                p.S, Wo, P)
            gpu_ops.record("cublas.gemm")
            xp.matmul(wg, cols.reshape(n, G, crs, P), out=out[n0:n0 + n].reshape(n, G, p.Kg, P))

    def backward_data(self, dy, w, p: ConvParams, out) -> None:
        xp = array_module(dy)
        (Ho, Wo), (top, _), (left, _) = p.out_hw, *p.padding
        G, crs, P = p.groups, p.Cg * p.R * p.S, Ho * Wo
        w_t = self.buffer(w, "im2col.w_t", (G, crs, p.Kg))                   # W[g]^T, contiguous for cuBLAS
        gpu_ops.record("cupy.copy")
        w_t[...] = w.reshape(G, p.Kg, crs).transpose(0, 2, 1)
        if is_plain_gemm(p):
            gpu_ops.record("cublas.gemm")
            xp.matmul(w_t, dy.reshape(p.N, G, p.Kg, P), out=out.reshape(p.N, G, p.Cg, P))
            return
        patches = self._patches(dy, p)
        for n0, n in self._chunks(p):
            cols = patches[:n * patch_elements(p)].reshape(n, p.C * p.R * p.S, P)
            gpu_ops.record("cublas.gemm")
            xp.matmul(w_t, dy[n0:n0 + n].reshape(n, G, p.Kg, P), out=cols.reshape(n, G, crs, P))
            blocks, threads = launch_1d(n * p.C * p.H * p.W)
            launch(col2im_kernel(p.compute_dtype), blocks, threads)(cols, out[n0:n0 + n], top, left, *p.stride,
                                                                   *p.dilation, p.R, p.S, Wo)

    def backward_filter(self, x, dy, p: ConvParams, out) -> None:
        xp = array_module(x)
        (Ho, Wo), (top, _), (left, _) = p.out_hw, *p.padding
        G, crs, P = p.groups, p.Cg * p.R * p.S, Ho * Wo
        dw = out.reshape(G, p.Kg, crs)
        patches = self._patches(x, p)
        chunk = self.chunk(p)
        by_group = self.buffer(dy, "im2col.dy_by_group", (chunk * p.K * P,)) if chunk > 1 else None
        partial = self.buffer(dy, "im2col.partial", dw.shape) if self.chunk_count(p) > 1 else None
        for n0, n in self._chunks(p):
            cols = patches[:n * patch_elements(p)].reshape(G, crs, n * P)         # P[g]: (tap, image, pixel)
            blocks, threads = launch_1d(n * P)
            launch(im2col_kernel(p.compute_dtype), blocks, threads)(
                x[n0:n0 + n], cols.reshape(-1), P, n * P, top, left, *p.stride, *p.dilation, p.R, p.S, Wo, P)
            if n == 1:
                dy_g = dy[n0].reshape(G, p.Kg, P)
            else:                                                            # (n, g, k, pixel) -> (g, k, n, pixel)
                dy_g = by_group[:n * p.K * P].reshape(G, p.Kg, n * P)
                gpu_ops.record("cupy.copy")
                dy_g.reshape(G, p.Kg, n, P)[...] = dy[n0:n0 + n].reshape(n, G, p.Kg, P).transpose(1, 2, 0, 3)
            gpu_ops.record("cublas.gemm")
            if G == 1:                                                       # 2-D: cuBLAS reads P^T in place
                xp.matmul(dy_g[0], cols[0].T, out=(partial if n0 else dw)[0])
            else:
                xp.matmul(dy_g, cols.transpose(0, 2, 1), out=partial if n0 else dw)
            if n0:
                gpu_ops.record("cupy.add")
                dw += partial
