"""im2col's two Numba kernels: ``fill_patches`` builds the patch matrix (forward, backward-filter) and ``col2im``
is its adjoint, the scatter-add of a column matrix back onto the input grid (backward-data).

Both see one chunk of the layer: ``nb`` images from ``n0`` on and, of each, the output rows ``i0 <= i < i0 + Hc``
(all Ho rows unless one image's patch matrix is over the budget). Row ``(c*R + r)*S + s`` of the matrix is tap
(c, r, s), c counted over all C channels (so group g's rows are the g-th block of Cg*R*S), and column
``(b*Hc + i - i0)*Wo + j`` is output pixel (i, j) of the chunk's image b. The tap reads (or, in col2im, adds to)

    x[n0 + b, c, i*sh + r*dh - top, j*sw + s*dw - left]        (nothing outside the H x W extent)
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.loops import copy_strided, valid_range


@njit(cache=True)
def _zero(line):
    for j in range(len(line)):
        line[j] = 0.0


@njit(cache=True, inline="always")
def _add_strided(dst, src, step):
    """dst[q * step] += src[q]; step 1 is its own loop, so that add is contiguous and vectorises."""
    if step == 1:
        for q in range(src.size):
            dst[q] += src[q]
    else:
        for q in range(src.size):
            dst[q * step] += src[q]


@njit(parallel=True, cache=True)
def fill_patches(x, n0, nb, i0, Hc, R, S, sh, sw, top, left, dh, dw, Wo, patches):
    """patches[(c*R + r)*S + s, (b*Hc + i - i0)*Wo + j] = x[n0 + b, c, i*sh + r*dh - top, j*sw + s*dw - left]
    for the chunk's nb images b and output rows i0 <= i < i0 + Hc, 0 outside x. Parallel over (image, tap)
    rows; columns past the chunk's nb*Hc*Wo are left as they are."""
    rows, H, W = patches.shape[0], x.shape[2], x.shape[3]
    for item in prange(nb * rows):
        b, row = item // rows, item % rows
        c, r, s = row // (R * S), (row // S) % R, row % S
        j0, j1 = valid_range(s * dw - left, sw, W, Wo)
        dst = patches[row, b * Hc * Wo:(b + 1) * Hc * Wo]
        src_image = x[n0 + b, c]
        for i in range(Hc):
            line = dst[i * Wo:(i + 1) * Wo]
            ih = (i0 + i) * sh + r * dh - top
            if ih < 0 or ih >= H:
                _zero(line)
                continue
            _zero(line[:j0])
            _zero(line[j1:])
            copy_strided(line[j0:j1], src_image[ih, j0 * sw + s * dw - left:], sw)


@njit(parallel=True, cache=True)
def col2im(cols, n0, nb, i0, Hc, R, S, sh, sw, top, left, dh, dw, Wo, fresh, dx):
    """The adjoint of ``fill_patches``: every column-matrix entry is added to the x element that fill_patches
    would have copied into it,

        dx[n0 + b, c, i*sh + r*dh - top, j*sw + s*dw - left] += cols[(c*R + r)*S + s, (b*Hc + i - i0)*Wo + j]

    (entries of taps in the padding are dropped). Each thread owns whole dx rows (image, channel, input row ih)
    and gathers the taps that land there, in the fixed order (r, s, j): no two threads write one element, and
    the sums are bitwise repeatable. ``fresh``: the first chunk of these images zeroes each row first (rows
    that no output reads, cut off by the stride, stay zero)."""
    C, H, W = dx.shape[1], dx.shape[2], dx.shape[3]
    for item in prange(nb * C * H):
        b, c, ih = item // (C * H), (item // H) % C, item % H
        line = dx[n0 + b, c, ih]
        if fresh:
            _zero(line)
        for r in range(R):
            t = ih + top - r * dh              # = i*sh for the output row i whose tap r lands on row ih
            if t < 0 or t % sh != 0 or not i0 <= t // sh < i0 + Hc:
                continue
            start = (b * Hc + t // sh - i0) * Wo
            for s in range(S):
                j0, j1 = valid_range(s * dw - left, sw, W, Wo)
                _add_strided(line[j0 * sw + s * dw - left:], cols[(c * R + r) * S + s, start + j0:start + j1], sw)
