"""The polyphase geometry of backward-data: a stride-s gradient as s^2 stride-1 passes, one per phase of dx.

dx[h] = sum over (i, r) with i*sh + r*dh - top = h of dy[i] * w[r] (likewise columns). Split h by its phase
rho = (h + top) % sh: only the taps r with r*dh % sh == rho reach it, and along that phase the sum is a plain
stride-1 correlation of dy, zero-padded, with those taps flipped. ``direct`` and ``depthwise`` both compute
backward-data this way, each with its own loops; this is where the phases and the padded dy plane are laid
out, once.
"""
from __future__ import annotations

import numpy as np

from ..params import ConvParams


def axis_phases(size: int, kernel: int, dilation: int, stride: int, before: int):
    """Backward-data along one axis: for each phase rho < stride of the padded input, (rho, taps, first,
    count): the kernel taps r with r*dilation % stride == rho, and the phase's input positions
    a*stride + rho - before inside [0, size), for first <= a < first + count."""
    result = []
    for rho in range(stride):
        taps = np.array([r for r in range(kernel) if r * dilation % stride == rho], np.int64)
        first = max(0, -((rho - before) // stride))                  # ceil((before - rho) / stride)
        result.append((rho, taps, first, max(0, (before + size - 1 - rho) // stride + 1 - first)))
    return result


def data_phases(p: ConvParams):
    """Backward-data's phases of dx, one pair ((rho_h, row taps, first row, rows), (rho_w, column taps, first
    column, columns)) per phase, rho_h major (``axis_phases`` along each axis)."""
    (sh, sw), (dh, dw), ((top, _), (left, _)) = p.stride, p.dilation, p.padding
    return [(a, b) for a in axis_phases(p.H, p.R, dh, sh, top) for b in axis_phases(p.W, p.S, dw, sw, left)]


def data_plane(p: ConvParams) -> tuple[int, int, int, int]:
    """(PT, PL, Hd, Wd): dy zero-padded by PT rows above and PL columns left, as Hd x Wd planes: every phase's
    taps read inside, plus one spare row for the junk columns (Wd is the flat pitch of every phase)."""
    (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
    PT, PL = (p.R - 1) * dh // sh, (p.S - 1) * dw // sw
    phases = data_phases(p)
    Hd = max(Ho, max(f + n for (_, _, f, n), _ in phases)) + PT + 1
    Wd = max(Wo, max(f + n for _, (_, _, f, n) in phases)) + PL
    return PT, PL, Hd, Wd
