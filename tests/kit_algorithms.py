"""Small algorithms as a user would write them, one correct and several with a planted bug each, for the tests
of ``convalgos.testing`` (and of ``python -m convalgos.check``, which imports this module by name).

``ShiftAndAdd`` is the correct one: the convolution as a sum over kernel taps, each tap one tensordot of its
weights with the window of the padded input that tap sees. Every other class changes a few lines of it.
"""
from __future__ import annotations

import random

import numpy as np

import convalgos
from convalgos import Support


class ShiftAndAdd(convalgos.Algorithm):
    """y = sum over taps (r, s) of w[ks, :, r, s] @ the window of padded x that tap sees, group by group."""

    name = "shift_and_add"

    def padded(self, x, p):
        return np.pad(x, ((0, 0), (0, 0)) + p.padding)

    def window(self, p, r, s):
        """The rows and columns of the padded input tap (r, s) reads, one per output."""
        (sh, sw), (dh, dw), (Ho, Wo) = p.stride, p.dilation, p.out_hw
        return slice(r * dh, r * dh + sh * (Ho - 1) + 1, sh), slice(s * dw, s * dw + sw * (Wo - 1) + 1, sw)

    def group_slices(self, p):
        """(output channels, input channels) of each group."""
        return [(slice(g * p.Kg, (g + 1) * p.Kg), slice(g * p.Cg, (g + 1) * p.Cg)) for g in range(p.groups)]

    def taps(self, p):
        return [(r, s) for r in range(p.R) for s in range(p.S)]

    def workspace_bytes(self, p, op="forward"):
        (Hp, Wp), (Ho, Wo) = p.padded_hw, p.out_hw
        # the padded copy; a group's sum, a tap's window (copied: it is strided), its product; w's slice
        return p.itemsize * (p.N * p.C * Hp * Wp + p.N * (2 * p.Kg + p.Cg) * Ho * Wo + p.Kg * p.Cg)

    def forward(self, x, w, p, out):
        xpad = self.padded(x, p)
        for ks, cs in self.group_slices(p):
            total = np.zeros((p.N, p.Kg, p.out_hw[0] * p.out_hw[1]), out.dtype)
            for r, s in self.taps(p):
                rows, cols = self.window(p, r, s)
                total += w[ks, :, r, s] @ xpad[:, cs, rows, cols].reshape(p.N, p.Cg, -1)
            out[:, ks] = total.reshape(p.N, p.Kg, *p.out_hw)


class IgnoresDilation(ShiftAndAdd):
    name = "ignores_dilation"

    def window(self, p, r, s):
        (sh, sw), (Ho, Wo) = p.stride, p.out_hw                  # bug: tap (r, s) read as if dilation were 1
        return slice(r, r + sh * (Ho - 1) + 1, sh), slice(s, s + sw * (Wo - 1) + 1, sw)


class Narrow(ShiftAndAdd):
    """Takes only 3x3 kernels at stride 1: about 1 in 70 of the default layers."""

    name = "narrow"

    def constraints(self, p, op):
        if (p.R, p.S) != (3, 3) or p.stride != (1, 1):
            return Support(False, f"needs a 3x3 kernel at stride 1, got {p.R}x{p.S} stride {p.stride}")
        return Support(True)


class NarrowIgnoresDilation(IgnoresDilation, Narrow):
    name = "narrow_ignores_dilation"


class PaddingOffByOne(ShiftAndAdd):
    name = "padding_off_by_one"

    def padded(self, x, p):
        # bug: re-centres the padding as "same" does: (top, bottom) = (1, 0) becomes (0, 1)
        return np.pad(x, ((0, 0), (0, 0)) + tuple(((t + b) // 2, t + b - (t + b) // 2) for t, b in p.padding))


class WrongGroups(ShiftAndAdd):
    name = "wrong_groups"

    def group_slices(self, p):
        # bug: every group reads the input channels of group 0
        return [(slice(g * p.Kg, (g + 1) * p.Kg), slice(0, p.Cg)) for g in range(p.groups)]


class UnwrittenLastColumn(ShiftAndAdd):
    name = "unwritten_last_column"

    def workspace_bytes(self, p, op="forward"):
        return super().workspace_bytes(p, op) + p.N * p.K * p.out_hw[0] * p.out_hw[1] * p.itemsize  # full

    def forward(self, x, w, p, out):
        full = np.empty_like(out)
        super().forward(x, w, p, full)
        out[..., :-1] = full[..., :-1]                           # bug: the last output column is never written


class FalselyDeterministic(ShiftAndAdd):
    name = "falsely_deterministic"
    deterministic = True                                         # bug: the taps are summed in a random order

    def taps(self, p):
        taps = super().taps(p)
        random.shuffle(taps)
        return taps


class UnderDeclaredWorkspace(ShiftAndAdd):
    name = "under_declared_workspace"

    def workspace_bytes(self, p, op="forward"):
        (Ho, Wo) = p.out_hw                                      # bug: forgets the padded copy of x
        return p.itemsize * (p.N * (2 * p.Kg + p.Cg) * Ho * Wo + p.Kg * p.Cg)


class NotDeterministic(FalselyDeterministic):
    name = "not_deterministic"
    deterministic = False                                        # honest: the check is "not claimed"


class RefusesEverything(ShiftAndAdd):
    name = "refuses_everything"

    def constraints(self, p, op):
        return Support(False, "takes only 7x7 kernels")


class SilentRefusal(ShiftAndAdd):
    name = "silent_refusal"

    def constraints(self, p, op):
        return Support(p.stride == (1, 1))                       # bug: a refusal with no reason


class RaisesOnGroups(ShiftAndAdd):
    name = "raises_on_groups"

    def forward(self, x, w, p, out):
        if p.groups > 1:                                         # bug: supports() says yes, forward says no
            raise NotImplementedError("groups")
        super().forward(x, w, p, out)


class WithBackwardData(ShiftAndAdd):
    """Also the input gradient: each tap's window of the padded dx gets w^T dy, then the padding is cut off."""

    name = "with_backward_data"

    def crop(self, p):
        (t, b), (l, r) = p.padding
        return t, l

    def backward_data(self, dy, w, p, out):
        dxpad = np.zeros((p.N, p.C) + p.padded_hw, dy.dtype)
        for ks, cs in self.group_slices(p):
            dy_group = dy[:, ks].reshape(p.N, p.Kg, -1)
            for r, s in self.taps(p):
                rows, cols = self.window(p, r, s)
                dxpad[:, cs, rows, cols] += (w[ks, :, r, s].T @ dy_group).reshape(p.N, p.Cg, *p.out_hw)
        top, left = self.crop(p)
        out[...] = dxpad[:, :, top:top + p.H, left:left + p.W]

    def workspace_bytes(self, p, op="forward"):
        if op == "forward":
            return super().workspace_bytes(p, op)
        (Hp, Wp), (Ho, Wo) = p.padded_hw, p.out_hw
        # padded dx, dy's group (copied when strided), a tap's product, and NumPy's buffers for adding that
        # product into a strided window of dx (as large as its two operands on small arrays)
        return p.itemsize * (p.N * p.C * Hp * Wp + p.N * (p.Kg + 3 * p.Cg) * Ho * Wo + p.Kg * p.Cg)


class NotTheTranspose(WithBackwardData):
    name = "not_the_transpose"

    def crop(self, p):
        (t, b), (l, r) = p.padding
        return b, r                                              # bug: cuts the bottom padding off the top


#: the correct algorithm, as an instance, for ``python -m convalgos.check kit_algorithms:CORRECT``
CORRECT = ShiftAndAdd()
