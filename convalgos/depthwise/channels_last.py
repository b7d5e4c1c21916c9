"""The channels-last forward pass of ``depthwise`` (``cpu.channels_last`` says when): x moved channels-last
and zero-padded (N, Hp, Wp, C), one pass over all C channels per output pixel and tap triple, y moved back. On
small planes with many channels (MobileNet's 7x7 with 1024) a plane's passes are too short to vectorise; a pass
over the channels is as long as C."""
from __future__ import annotations

from numba import njit, prange

#: channels moved together by the layout changes (a cache-friendly transpose).
TILE = 16


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_products3(acc, xa, wa, xb, wb, xc, wc):
    """acc[c] += wa[c]*xa[c] + wb[c]*xb[c] + wc[c]*xc[c]: three taps of every channel, one store."""
    for c in range(acc.size):
        acc[c] += wa[c] * xa[c] + wb[c] * xb[c] + wc[c] * xc[c]


@njit(cache=True, fastmath={"contract"}, inline="always")
def _add_products(acc, xa, wa):
    """acc[c] += wa[c] * xa[c]."""
    for c in range(acc.size):
        acc[c] += wa[c] * xa[c]


@njit(parallel=True, cache=True)
def to_channels_last(x, top, left, xt):
    """xt[n, ph, pw, c] = x[n, c, ph - top, pw - left], zero outside x; xt: (N, Hp, Wp, C).

    Each padded row is transposed in tiles of TILE channels, so the TILE input rows read stay in cache."""
    N, C, H, W = x.shape
    Hp, Wp = xt.shape[1], xt.shape[2]
    for nh in prange(N * Hp):
        n, ph = nh // Hp, nh % Hp
        i, rows = ph - top, xt[n, ph]
        j0, j1 = (min(Wp, left), min(Wp, left + W)) if 0 <= i < H else (Wp, Wp)
        rows[:j0, :] = 0.0
        rows[j1:, :] = 0.0
        if j1 > j0:
            for c0 in range(0, C, TILE):
                for pw in range(j0, j1):
                    pixel = rows[pw]
                    for c in range(c0, min(C, c0 + TILE)):
                        pixel[c] = x[n, c, i, pw - left]


@njit(parallel=True, cache=True)
def depthwise_channels_last(xt, wt, R, S, sh, sw, dh, dw, yt):
    """yt[n, i, j, :] = sum_{r, s} wt[r*S + s, :] * xt[n, i*sh + r*dh, j*sw + s*dw, :]: the channels innermost,
    so every pass is as long as C; three taps per pass. xt: (N, Hp, Wp, C), wt: (R*S, C), yt: (N, Ho, Wo, C)."""
    N, Ho, Wo = yt.shape[0], yt.shape[1], yt.shape[2]
    n_taps = R * S
    for ni in prange(N * Ho):
        n, i = ni // Ho, ni % Ho
        for j in range(Wo):
            acc = yt[n, i, j]
            for c in range(acc.size):
                acc[c] = 0.0
            q = 0
            while q + 3 <= n_taps:
                xa = xt[n, i * sh + (q // S) * dh, j * sw + (q % S) * dw]
                xb = xt[n, i * sh + ((q + 1) // S) * dh, j * sw + ((q + 1) % S) * dw]
                xc = xt[n, i * sh + ((q + 2) // S) * dh, j * sw + ((q + 2) % S) * dw]
                _add_products3(acc, xa, wt[q], xb, wt[q + 1], xc, wt[q + 2])
                q += 3
            for q in range(q, n_taps):
                _add_products(acc, xt[n, i * sh + (q // S) * dh, j * sw + (q % S) * dw], wt[q])


@njit(parallel=True, cache=True)
def from_channels_last(yt, out):
    """out[n, k, i, j] = yt[n, i, j, k], each output row transposed in tiles of TILE channels."""
    N, K, Ho, Wo = out.shape
    for ni in prange(N * Ho):
        n, i = ni // Ho, ni % Ho
        row = yt[n, i]
        for k0 in range(0, K, TILE):
            for j in range(Wo):
                for k in range(k0, min(K, k0 + TILE)):
                    out[n, k, i, j] = row[j, k]
