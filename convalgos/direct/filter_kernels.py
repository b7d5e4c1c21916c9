"""The Numba kernels of ``direct``'s backward-filter (see cpu.py for the maths): a GEMM dw = dy . X^T whose
reduction runs over the pixels, blocked so that it streams through cache once per (channel block, tap block).

X is never built whole. A work item is a run of images and a block of input channels of one group; its
**row patches** are copied into the thread's own buffer, small enough to stay in L2: plane (c, s, b) of image n
holds, at row a and column j (a < Hr = Ho + (R-1)*dh//sh, j < Wo), the zero-padded input at padded row
a*sh + b and column j*sw + s*dw. Tap (c, r, s) of output (i, j) then reads plane (c, s, (r*dh) % sh) at
((r*dh)//sh)*Wo + i*Wo + j: a fixed offset plus the output's flat index t = i*Wo + j, with no junk columns,
whatever the stride and dilation. A plane is followed by zeros up to whole vectors of t (``filter_tail``).

The register tile is BLOCK output channels x 3 taps (24 accumulators with AVX-512's 32 registers, 12 with
16): per vector step of t, three loads of the patches and one of dy per channel feed 3 x BLOCK multiply-adds,
and the step runs over every image of the run before the lanes are summed. The dy rows of a channel block
(BLOCK x images x P floats) stay in L1 while the item's taps go by; the patches stream from L2.
"""
from __future__ import annotations

from numba import njit, prange

from ..kernels.blocks import BLOCK, channel_block, channel_blocks
from ..kernels.loops import share
from ..kernels.simd import evens, fma, lanes, load, store, store_head, total, zeros


@njit(cache=True)
def patch_taps(R, S, sh, dh, Wo, taps):
    """taps[0, q] = the patch plane of tap q = (c, r, s) within its group, (c*S + s)*sh + (r*dh) % sh;
    taps[1, q] = where output (0, 0) reads in it, ((r*dh) // sh) * Wo."""
    for q in range(taps.shape[1]):
        c, r, s = q // (R * S), (q // S) % R, q % S
        taps[0, q] = (c * S + s) * sh + (r * dh) % sh
        taps[1, q] = ((r * dh) // sh) * Wo


@njit(cache=True, inline="always")
def _fill_patches(x, n0, images, c0, width, R, S, sh, sw, dh, dw, top, left, Hr, Wo, pitch, patches):
    """patches[(cc*S + s)*sh + b, (n - n0)*pitch:][:pitch] = plane (c0 + cc, s, b) of image n (module
    docstring), for the row phases b some tap reads; zeros from Hr*Wo to ``pitch``. Row by row, by flat
    indices (on 8-px rows a view per row cost more than the copy); at stride 2 a row is gathered by vectors
    (``evens``: 3x faster on ResNet-20's 16-px rows, 1.5x on 28 px), its last part by a masked store (a row of
    8 outputs under 16 lanes was copied one by one: ResNet-20's C32 16 px stride-2 layer 0.48 -> 0.33-0.40 ms), from
    where its first column would be, then the columns outside the image are zeroed."""
    C, H, W = x.shape[1], x.shape[2], x.shape[3]
    flat, L = x.reshape(-1), lanes(patches)
    used = 0
    for r in range(R):
        used |= 1 << ((r * dh) % sh)
    for cc in range(width):
        for s in range(S):
            j0 = max(0, min(Wo, -((s * dw - left) // sw)))                  # first j with j*sw + s*dw >= left
            j1 = max(j0, min(Wo, (W - 1 + left - s * dw) // sw + 1))
            for b in range(sh):
                if not (used >> b) & 1:
                    continue
                plane = patches[(cc * S + s) * sh + b]
                for m in range(images):
                    for a in range(Hr):
                        at, i = m * pitch + a * Wo, a * sh + b - top
                        if not (0 <= i < H and j1 > j0):
                            for j in range(Wo):
                                plane[at + j] = 0.0
                            continue
                        src = ((n0 + m) * C + c0 + cc) * H * W + i * W + s * dw - left     # column j = 0
                        done = 0
                        if sw == 2 and src >= 0:
                            while done < Wo and src + 2 * (done + L) <= flat.size:    # the last one masked
                                store_head(plane, at + done, evens(flat, src + 2 * done), min(L, Wo - done))
                                done += min(L, Wo - done)
                        for j in range(min(done, j0)):
                            plane[at + j] = 0.0
                        for j in range(j1, done):
                            plane[at + j] = 0.0
                        for j in range(done, j0):
                            plane[at + j] = 0.0
                        for j in range(max(done, j0), j1):
                            plane[at + j] = flat[src + j * sw]
                        for j in range(max(done, j1), Wo):
                            plane[at + j] = 0.0
                    for t in range(m * pitch + Hr * Wo, (m + 1) * pitch):
                        plane[t] = 0.0


@njit(cache=True, inline="always")
def _fill_shifted(x, n0, images, c0, width, S, dw, top, left, Hr, Wo, pitch, patches):
    """``_fill_patches`` where sh = sw = 1 and Wo = W: plane (c, s) is the image shifted by s*dw - left columns
    and top rows, so its rows that lie inside the image are one flat copy, by vectors, of the image from that
    shift, then the |shift| columns a row wraps into are zeroed. On 8-32 px planes 3.5-10x faster than row by
    row (measured alone, 1 thread)."""
    H, W = x.shape[2], x.shape[3]
    flat, L = x.reshape(-1), lanes(patches)
    a0, a1 = min(Hr, top), max(min(Hr, top), min(Hr, top + H))        # the plane's rows inside the image
    for cc in range(width):
        for s in range(S):
            shift, plane = s * dw - left, patches[cc * S + s]
            for m in range(images):
                base, src = m * pitch, ((n0 + m) * x.shape[1] + c0 + cc) * H * W + (a0 - top) * W + shift
                for t in range(base, base + a0 * Wo):
                    plane[t] = 0.0
                at, count = base + a0 * Wo, (a1 - a0) * W
                t0, t1 = min(count, max(0, -shift)), max(0, count - max(0, shift))
                for t in range(t0):
                    plane[at + t] = 0.0
                t = t0
                while t + L <= t1:
                    store(plane, at + t, load(flat, src + t))
                    t += L
                for u in range(t, t1):
                    plane[at + u] = flat[src + u]
                for t in range(max(t0, t1), count):
                    plane[at + t] = 0.0
                for i in range(a1 - a0):                                  # the columns the shift wrapped into
                    for j in range(min(W, max(0, -shift))):
                        plane[at + i * W + j] = 0.0
                    for j in range(max(0, W - max(0, shift)), W):
                        plane[at + i * W + j] = 0.0
                for t in range(at + count, base + pitch):
                    plane[t] = 0.0


@njit(cache=True, inline="always")
def _eight_by_three(patches, dy, taps, n0, images, K, k0, q, p0, pitch, length, part):
    """part[k0 + kk, q + j] += sum over the run's images m and t < length of dy[((n0 + m)*K + k0 + kk)*length
    + t] * patches[taps[0, q + j] - p0, m*pitch + taps[1, q + j] + t], for kk < 8 and j < 3: 24 accumulators
    (dy flat, each image's plane at a pitch of ``length``)."""
    L = lanes(part)
    oa, ob, oc = taps[1, q], taps[1, q + 1], taps[1, q + 2]
    a0, b0, c0, a1 = zeros(part), zeros(part), zeros(part), zeros(part)
    b1, c1, a2, b2 = zeros(part), zeros(part), zeros(part), zeros(part)
    c2, a3, b3, c3 = zeros(part), zeros(part), zeros(part), zeros(part)
    a4, b4, c4, a5 = zeros(part), zeros(part), zeros(part), zeros(part)
    b5, c5, a6, b6 = zeros(part), zeros(part), zeros(part), zeros(part)
    c6, a7, b7, c7 = zeros(part), zeros(part), zeros(part), zeros(part)
    pa, pb, pc = patches[taps[0, q] - p0], patches[taps[0, q + 1] - p0], patches[taps[0, q + 2] - p0]
    for m in range(images):
        ia, ib, ic, d0 = m * pitch + oa, m * pitch + ob, m * pitch + oc, ((n0 + m) * K + k0) * length
        d1, d2, d3, d4 = d0 + length, d0 + 2 * length, d0 + 3 * length, d0 + 4 * length
        d5, d6, d7 = d0 + 5 * length, d0 + 6 * length, d0 + 7 * length
        for t in range(0, length, L):
            xa, xb, xc = load(pa, ia + t), load(pb, ib + t), load(pc, ic + t)
            v = load(dy, d0 + t)
            a0, b0, c0 = fma(v, xa, a0), fma(v, xb, b0), fma(v, xc, c0)
            v = load(dy, d1 + t)
            a1, b1, c1 = fma(v, xa, a1), fma(v, xb, b1), fma(v, xc, c1)
            v = load(dy, d2 + t)
            a2, b2, c2 = fma(v, xa, a2), fma(v, xb, b2), fma(v, xc, c2)
            v = load(dy, d3 + t)
            a3, b3, c3 = fma(v, xa, a3), fma(v, xb, b3), fma(v, xc, c3)
            v = load(dy, d4 + t)
            a4, b4, c4 = fma(v, xa, a4), fma(v, xb, b4), fma(v, xc, c4)
            v = load(dy, d5 + t)
            a5, b5, c5 = fma(v, xa, a5), fma(v, xb, b5), fma(v, xc, c5)
            v = load(dy, d6 + t)
            a6, b6, c6 = fma(v, xa, a6), fma(v, xb, b6), fma(v, xc, c6)
            v = load(dy, d7 + t)
            a7, b7, c7 = fma(v, xa, a7), fma(v, xb, b7), fma(v, xc, c7)
    for kk, (ra, rb, rc) in enumerate(((a0, b0, c0), (a1, b1, c1), (a2, b2, c2), (a3, b3, c3),
                                       (a4, b4, c4), (a5, b5, c5), (a6, b6, c6), (a7, b7, c7))):
        part[k0 + kk, q] += total(ra)
        part[k0 + kk, q + 1] += total(rb)
        part[k0 + kk, q + 2] += total(rc)


@njit(cache=True, inline="always")
def _four_by_three(patches, dy, taps, n0, images, K, k0, q, p0, pitch, length, part):
    """``_eight_by_three`` for 4 channels: 12 accumulators (for CPUs with 16 vector registers)."""
    L = lanes(part)
    oa, ob, oc = taps[1, q], taps[1, q + 1], taps[1, q + 2]
    a0, b0, c0, a1, b1, c1 = zeros(part), zeros(part), zeros(part), zeros(part), zeros(part), zeros(part)
    a2, b2, c2, a3, b3, c3 = zeros(part), zeros(part), zeros(part), zeros(part), zeros(part), zeros(part)
    pa, pb, pc = patches[taps[0, q] - p0], patches[taps[0, q + 1] - p0], patches[taps[0, q + 2] - p0]
    for m in range(images):
        ia, ib, ic, d0 = m * pitch + oa, m * pitch + ob, m * pitch + oc, ((n0 + m) * K + k0) * length
        d1, d2, d3 = d0 + length, d0 + 2 * length, d0 + 3 * length
        for t in range(0, length, L):
            xa, xb, xc = load(pa, ia + t), load(pb, ib + t), load(pc, ic + t)
            v = load(dy, d0 + t)
            a0, b0, c0 = fma(v, xa, a0), fma(v, xb, b0), fma(v, xc, c0)
            v = load(dy, d1 + t)
            a1, b1, c1 = fma(v, xa, a1), fma(v, xb, b1), fma(v, xc, c1)
            v = load(dy, d2 + t)
            a2, b2, c2 = fma(v, xa, a2), fma(v, xb, b2), fma(v, xc, c2)
            v = load(dy, d3 + t)
            a3, b3, c3 = fma(v, xa, a3), fma(v, xb, b3), fma(v, xc, c3)
    for kk, (ra, rb, rc) in enumerate(((a0, b0, c0), (a1, b1, c1), (a2, b2, c2), (a3, b3, c3))):
        part[k0 + kk, q] += total(ra)
        part[k0 + kk, q + 1] += total(rb)
        part[k0 + kk, q + 2] += total(rc)


@njit(cache=True, inline="always")
def _one_by_one(patches, dy, taps, n0, images, K, k, q, p0, pitch, length, part):
    """part[k, q] += one tap's dot for one channel (the channels and taps the tiles leave over)."""
    L = lanes(part)
    plane, acc = patches[taps[0, q] - p0], zeros(part)
    for m in range(images):
        at, d = m * pitch + taps[1, q], ((n0 + m) * K + k) * length
        for t in range(0, length, L):
            acc = fma(load(dy, d + t), load(plane, at + t), acc)
    part[k, q] += total(acc)


@njit(parallel=True, cache=True)
def filter_patches(x, dy, taps, R, S, steps, top, left, Hr, Wo, pitch, images, width, patches, partial):
    """partial[thread, k, q] = thread's share of dw[k, q] = sum over n and t of dy[n, k, t] * X[n, q, t], X the
    row patches (module docstring) of group k // Kg, Hr x Wo each; steps = (sh, sw, dh, dw). ``dy`` is flat:
    (N, K, length), length the whole vectors covering P = Ho*Wo, zero past P. One item is a run of ``images``
    images and a block of ``width`` input channels of one group; ``patches[thread]`` (width*S*sh planes of
    ``images`` x ``pitch``, pitch >= (Hr - Ho)*Wo + length) holds its row patches. Each thread sums its items in
    order into its own partial; the caller adds the partials in thread order (repeatable at a fixed thread
    count)."""
    sh, sw, dh, dw = steps
    N, C = x.shape[0], x.shape[1]
    n_threads, K, Cg = partial.shape[0], partial.shape[1], partial.shape[2] // (R * S)
    G, length = C // Cg, dy.size // (N * K)
    Kg = K // G
    runs, c_blocks, k_blocks = (N + images - 1) // images, (Cg + width - 1) // width, channel_blocks(Kg, BLOCK)
    n_items = runs * G * c_blocks
    for thread in prange(n_threads):
        part, buffer = partial[thread], patches[thread]
        part[...] = 0.0
        start, stop = share(n_items, thread, n_threads)
        for item in range(start, stop):
            run, g, cb = item // (G * c_blocks), (item // c_blocks) % G, item % c_blocks
            n0, cw = run * images, min(width, Cg - cb * width)
            m = min(images, N - n0)
            if sh == 1 and sw == 1 and Wo == x.shape[3]:
                _fill_shifted(x, n0, m, g * Cg + cb * width, cw, S, dw, top, left, Hr, Wo, pitch, buffer)
            else:
                _fill_patches(x, n0, m, g * Cg + cb * width, cw, R, S, sh, sw, dh, dw, top, left, Hr, Wo, pitch,
                              buffer)
            q0, q1, p0 = cb * width * R * S, (cb * width + cw) * R * S, cb * width * S * sh
            for kb in range(k_blocks):
                first, kw = channel_block(Kg, kb, BLOCK)
                k0 = g * Kg + first
                whole = q0 + (q1 - q0) // 3 * 3 if kw >= 4 else q0
                for q in range(q0, whole, 3):
                    if BLOCK == 8 and kw == 8:
                        _eight_by_three(buffer, dy, taps, n0, m, K, k0, q, p0, pitch, length, part)
                    else:
                        _four_by_three(buffer, dy, taps, n0, m, K, k0, q, p0, pitch, length, part)
                for kk in range(kw):
                    for q in range(whole, q1):
                        _one_by_one(buffer, dy, taps, n0, m, K, k0 + kk, q, p0, pitch, length, part)
