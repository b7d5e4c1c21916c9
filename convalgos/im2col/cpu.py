"""im2col + GEMM, "im2col": copy every receptive field into a column of a patch matrix, then matrix products.

Maths. For image n and group g (Cg = C/groups input and Kg = K/groups output channels per group), the patch
matrix P has one row per (c, r, s) tap and one column per output pixel (i, j), with x read as zero outside its
H x W extent (the padding is written as zeros, top/left being the leading pads):

    P[(c*R + r)*S + s, i*Wo + j] = x[n, g*Cg + c, i*sh + r*dh - top, j*sw + s*dw - left]

and the weights of the group flatten the same way, W_g[k, (c*R + r)*S + s] = w[g*Kg + k, c, r, s]. Writing
Y_g, dY_g for y[n, group g], dy[n, group g] viewed as (Kg x Ho*Wo) and X_g for x[n, group g], the three passes
are three GEMMs with the same two matrices (taps = Cg*R*S):

    forward          Y_g  (Kg x Ho*Wo)  = W_g (Kg x taps)  @ P (taps x Ho*Wo)
    backward-data    D    (taps x Ho*Wo) = W_g^T (taps x Kg) @ dY_g (Kg x Ho*Wo),  then  dX_g = col2im(D)
    backward-filter  dW_g (Kg x taps)   = sum over images of  dY_g (Kg x Ho*Wo) @ P^T (Ho*Wo x taps)

Backward-data is the transposed GEMM plus a scatter: P = im2col(X_g) is linear in x, Y_g = W_g P, so
dX_g = im2col^T(W_g^T dY_g), and im2col^T, "col2im", adds each entry D[(c*R + r)*S + s, i*Wo + j] back onto the
x element that P copied into that place (entries of taps in the padding are dropped; x elements that no output
reads, cut off by the stride, get zero). Backward-filter is dy times the patches transposed: dW_g = dY_g P^T,
one GEMM per group summed over the batch. Both identities hold per group; the groups of one product are one
``matmul`` over stacked operands (groups, ...) on the BLAS convalgos configures (``convalgos.gemm``: scipy's
OpenBLAS; transposed operands as BLAS transposes, no copy). The kernels (``kernels.py``): ``fill_patches``
builds P in parallel over (image, tap) rows; ``col2im`` gathers each dx row's taps in a fixed order, in
parallel over (image, channel, row): no two threads write one element, so the result is bitwise repeatable.

Chunks. The passes walk the layer in chunks, each with its own patch (or column) matrix:
- Several images per chunk (small images at large batch): their columns sit side by side, column
  b*Ho*Wo + i*Wo + j for image b, so each group is ONE wide GEMM, (Kg x taps) @ (taps x nb*Ho*Wo) and so on,
  with y (forward) or dy (backward) reordered between (image, group, k, pixel) and (group, k, image, pixel)
  through a product buffer. Measured on CIFAR 3x3 layers at batch 32 (16..64 channels, 32..8 px) the wide
  forward GEMM plus reorder took 2-3x less time than 32 per-image GEMMs.
- One image per chunk: the GEMMs read dy or write y in place, (groups, Kg, Ho*Wo) views of one image.
- A band of output rows i0 <= i < i0 + Hc of one image, when one image's patch matrix passes the budget
  (1x3x2048x2048 with 11x11 filters needs 5.67 GiB): P has Hc*Wo columns, the GEMMs read and write the band's
  columns of y or dy in place (strided views), col2im adds each band onto dx (bands overlap there when R*dh >
  sh) and backward-filter sums the bands' dW_g.
``chunk_plan`` picks nb images, else bands of Hc rows (equal bands, at least one row), so the patch matrix and
product buffer of one chunk fit ``workspace_budget_bytes`` (64 MiB). Another chunking changes the GEMMs' sizes,
and OpenBLAS may then sum a column's taps in another order (its small-matrix kernels): results agree to
rounding, not bitwise (one layer at 5 images against chunks of 2: 89 of 2520 outputs differed, by 1.5e-6 at most).

1x1, stride-1, unpadded layers (any dilation: one tap has nothing to spread) need no patch matrix: P is
x[n, group g] viewed as (Cg x H*W) and col2im is the identity, so forward and backward-data are one stacked
GEMM straight between x (or dx) and y (or dy), and backward-filter one stacked GEMM of dy[n]_g @ x[n]_g^T over
a stack of nb images into a (nb, K, Cg) buffer, summed over the stack.

FLOPs (``flops``, one multiply and one add per GEMM term): every pass's GEMMs do the direct arithmetic,
2*N*K*Cg*R*S*Ho*Wo = ``p.flops`` (taps in the padding are multiplied by the zeros written for them, or computed
and dropped by col2im). Backward-data adds col2im's additions, one per (image, channel, tap, output) whose tap
lands inside x (``scatter_adds``); backward-filter adds (chunks - 1)*K*Cg*R*S to sum the chunks (1x1:
(N - 1)*K*Cg). Building P is memory traffic: C*R*S*Ho*Wo elements per image, R*S times x at stride 1.

Workspace (``workspace_bytes``), for chunks of nb images of Hc output rows: the patch (or column) matrix
nb*C*R*S*Hc*Wo elements; when nb > 1 the product buffer nb*K*Ho*Wo; for backward-filter over several chunks,
the partial sum K*Cg*R*S. 1x1 layers: 0 for forward and backward-data, nb*K*Cg (nb > 1) plus K*Cg (several
stacks) for backward-filter. So every pass of every layer needs at most max(64 MiB, C*R*S*Wo*itemsize: one
output row's patch matrix) + K*Cg*R*S*itemsize (backward-filter's partial sum, the size of dw). The buffers
live in ``self.workspace``, kept between calls and shared by the passes.

Constraints: none; any stride, asymmetric padding, dilation, groups (depthwise included); float32 and float64
(float16 is computed in float32 by ``convalgos.run``). Deterministic: OpenBLAS is repeatable at a fixed thread
count, col2im and the chunk sums add in a fixed order. One tolerance serves the three passes (measured values
beside ``Im2col.tolerance``).
"""
from __future__ import annotations

import numpy as np

from ..kernels.loops import valid_range
from ..gemm import matmul
from ..params import ConvParams
from ..registry import Algorithm, check_pass
from .kernels import col2im, fill_patches
from .shared import TOLERANCE


def is_zero_copy(p: ConvParams) -> bool:
    """A 1x1, stride-1, unpadded layer (any dilation: one tap has nothing to spread): x is the patch matrix."""
    return (p.R, p.S) == (1, 1) and p.stride == (1, 1) and p.padding == ((0, 0), (0, 0))


def patch_bytes_per_row(p: ConvParams) -> int:
    """One output row's share of the patch matrix (all C*R*S taps, Wo columns)."""
    return p.C * p.R * p.S * p.out_hw[1] * p.itemsize


def patch_bytes_per_image(p: ConvParams) -> int:
    return patch_bytes_per_row(p) * p.out_hw[0]


def product_bytes_per_image(p: ConvParams) -> int:
    """One image's share of the wide GEMM's product buffer (used when a chunk holds several images)."""
    Ho, Wo = p.out_hw
    return p.K * Ho * Wo * p.itemsize


def scatter_adds(p: ConvParams) -> int:
    """col2im's additions: (image, channel, tap, output) terms whose tap lands inside x."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    (top, _), (left, _) = p.padding
    rows = sum(j1 - j0 for j0, j1 in (valid_range(r * dh - top, sh, p.H, Ho) for r in range(p.R)))
    cols = sum(j1 - j0 for j0, j1 in (valid_range(s * dw - left, sw, p.W, Wo) for s in range(p.S)))
    return p.N * p.C * rows * cols


class Im2col(Algorithm):
    """Patch matrix (Numba) + stacked BLAS GEMMs per chunk, for all three passes; see the module docstring."""

    name = "im2col"
    deterministic = True
    tolerance = TOLERANCE
    #: the most bytes one chunk's patch matrix and product buffer may take (a chunk holds at least one row).
    workspace_budget_bytes = 64 << 20

    # ---- chunks --------------------------------------------------------------------------------------------
    def chunk_plan(self, p: ConvParams) -> tuple[int, int]:
        """(nb, Hc): nb images per chunk, or (1, Hc) bands of Hc output rows when one image is over budget."""
        Ho, budget = p.out_hw[0], self.workspace_budget_bytes
        nb = min(p.N, budget // (patch_bytes_per_image(p) + product_bytes_per_image(p)))
        if nb >= 2:
            return nb, Ho
        if patch_bytes_per_image(p) <= budget:
            return 1, Ho
        bands = -(-Ho // max(1, budget // patch_bytes_per_row(p)))
        return 1, -(-Ho // bands)

    def chunks(self, p: ConvParams):
        """(n0, images, i0, rows) of each chunk, in order."""
        nb, Hc = self.chunk_plan(p)
        Ho = p.out_hw[0]
        for n0 in range(0, p.N, nb):
            for i0 in range(0, Ho, Hc):
                yield n0, min(nb, p.N - n0), i0, min(Hc, Ho - i0)

    def chunk_count(self, p: ConvParams) -> int:
        nb, Hc = self.chunk_plan(p)
        return -(-p.N // nb) * -(-p.out_hw[0] // Hc)

    def stacked_images(self, p: ConvParams) -> int:
        """Images per stack of the 1x1 backward-filter GEMM: its (nb, K, Cg) products fit the budget."""
        return max(1, min(p.N, self.workspace_budget_bytes // (p.K * p.Cg * p.itemsize)))

    # ---- the questions -------------------------------------------------------------------------------------
    def workspace_bytes(self, p: ConvParams, op: str = "forward") -> int:
        check_pass(op)
        if is_zero_copy(p):
            if op != "backward_filter":
                return 0
            nb = self.stacked_images(p)
            return ((nb if nb > 1 else 0) + (1 if p.N > nb else 0)) * p.K * p.Cg * p.itemsize
        nb, Hc = self.chunk_plan(p)
        need = nb * patch_bytes_per_row(p) * Hc + (nb * product_bytes_per_image(p) if nb > 1 else 0)
        if op == "backward_filter" and self.chunk_count(p) > 1:
            need += p.K * p.Cg * p.R * p.S * p.itemsize
        return need

    def flops(self, p: ConvParams, op: str = "forward") -> int:
        check_pass(op)
        if op == "backward_data" and not is_zero_copy(p):
            return p.flops + scatter_adds(p)
        if op == "backward_filter":
            sums = p.N - 1 if is_zero_copy(p) else self.chunk_count(p) - 1
            return p.flops + sums * p.K * p.Cg * p.R * p.S
        return p.flops

    # ---- the passes ----------------------------------------------------------------------------------------
    def _buffers(self, p: ConvParams, dtype):
        """The chunk's patch (or column) matrix (G, taps, nb*Hc*Wo), and the product buffer when nb > 1."""
        nb, Hc = self.chunk_plan(p)
        G, (Ho, Wo) = p.groups, p.out_hw
        patches = self.workspace.get("im2col.patches", (G, p.Cg * p.R * p.S, nb * Hc * Wo), dtype)
        products = self.workspace.get("im2col.products", (G, p.Kg, nb * Ho * Wo), dtype) if nb > 1 else None
        return patches, products

    def _fill(self, x, p, patches, n0, images, i0, rows):
        (top, _), (left, _) = p.padding
        fill_patches(x, n0, images, i0, rows, p.R, p.S, *p.stride, top, left, *p.dilation, p.out_hw[1],
                     patches.reshape(-1, patches.shape[2]))

    @staticmethod
    def _band(a, p, products, n0, images, i0, rows):
        """Chunk (n0, images, i0, rows) of y or dy as a (G, Kg, columns) matrix: a view of a
        when the chunk is one image, else ``products``, whose (group, k, image, pixel) order is what it holds."""
        G, (Ho, Wo) = p.groups, p.out_hw
        if products is None:
            return a[n0].reshape(G, p.Kg, Ho * Wo)[:, :, i0 * Wo:(i0 + rows) * Wo]
        return products[:, :, :images * Ho * Wo]

    def forward(self, x, w, p, out):
        Ho, Wo = p.out_hw
        G = p.groups
        w_groups = w.reshape(G, p.Kg, p.Cg * p.R * p.S)
        if is_zero_copy(p):
            matmul(w_groups, x.reshape(p.N, G, p.Cg, Ho * Wo), out=out.reshape(p.N, G, p.Kg, Ho * Wo))
            return
        patches, products = self._buffers(p, x.dtype)
        for n0, images, i0, rows in self.chunks(p):
            self._fill(x, p, patches, n0, images, i0, rows)
            y = self._band(out, p, products, n0, images, i0, rows)
            matmul(w_groups, patches[:, :, :images * rows * Wo], out=y)
            if products is not None:          # (g, k, b, pixel) -> (b, g, k, pixel)
                out[n0:n0 + images].reshape(images, G, p.Kg, Ho * Wo)[...] = (
                    y.reshape(G, p.Kg, images, Ho * Wo).transpose(2, 0, 1, 3))

    def backward_data(self, dy, w, p, out):
        Ho, Wo = p.out_hw
        G = p.groups
        w_t = w.reshape(G, p.Kg, p.Cg * p.R * p.S).transpose(0, 2, 1)        # W_g^T, a view
        if is_zero_copy(p):
            matmul(w_t, dy.reshape(p.N, G, p.Kg, Ho * Wo), out=out.reshape(p.N, G, p.Cg, Ho * Wo))
            return
        patches, products = self._buffers(p, dy.dtype)
        (top, _), (left, _) = p.padding
        for n0, images, i0, rows in self.chunks(p):
            dy_chunk = self._gathered(dy, p, products, n0, images, i0, rows)
            matmul(w_t, dy_chunk, out=patches[:, :, :images * rows * Wo])
            col2im(patches.reshape(-1, patches.shape[2]), n0, images, i0, rows, p.R, p.S, *p.stride, top, left,
                   *p.dilation, Wo, i0 == 0, out)

    def backward_filter(self, x, dy, p, out):
        dw = out.reshape(p.groups, p.Kg, p.Cg * p.R * p.S)
        if is_zero_copy(p):
            self._backward_filter_1x1(x, dy, p, dw)
            return
        patches, products = self._buffers(p, x.dtype)
        partial = self.workspace.get("im2col.partial", dw.shape, x.dtype) if self.chunk_count(p) > 1 else None
        for chunk, (n0, images, i0, rows) in enumerate(self.chunks(p)):
            self._fill(x, p, patches, n0, images, i0, rows)
            dy_chunk = self._gathered(dy, p, products, n0, images, i0, rows)
            matmul(dy_chunk, patches[:, :, :images * rows * p.out_hw[1]].transpose(0, 2, 1),
                      out=partial if chunk else dw)
            if chunk:
                dw += partial

    def _gathered(self, dy, p, products, n0, images, i0, rows):
        """dy of the chunk as (G, Kg, columns): a view for one image, else reordered into ``products``."""
        y = self._band(dy, p, products, n0, images, i0, rows)
        if products is not None:              # (b, g, k, pixel) -> (g, k, b, pixel)
            Ho, Wo = p.out_hw
            y.reshape(p.groups, p.Kg, images, Ho * Wo)[...] = (
                dy[n0:n0 + images].reshape(images, p.groups, p.Kg, Ho * Wo).transpose(1, 2, 0, 3))
        return y

    def _backward_filter_1x1(self, x, dy, p, dw):
        """dW_g = sum_n dY[n]_g @ X[n]_g^T: a stacked GEMM per stack of nb images into (nb, G, Kg, Cg), summed
        over the stack into dw (the first stack) or a partial sum added to it."""
        G, HW = p.groups, p.H * p.W
        dy_groups, x_t = dy.reshape(p.N, G, p.Kg, HW), x.reshape(p.N, G, p.Cg, HW).transpose(0, 1, 3, 2)
        nb = self.stacked_images(p)
        stack = self.workspace.get("im2col.stack", (nb,) + dw.shape, x.dtype) if nb > 1 else None
        partial = self.workspace.get("im2col.partial", dw.shape, x.dtype) if p.N > nb else None
        for n0 in range(0, p.N, nb):
            images, target = min(nb, p.N - n0), dw if n0 == 0 else partial
            if images == 1:
                matmul(dy_groups[n0], x_t[n0], out=target)
            else:
                matmul(dy_groups[n0:n0 + images], x_t[n0:n0 + images], out=stack[:images])
                np.sum(stack[:images], axis=0, out=target)
            if n0 > 0:
                dw += partial

