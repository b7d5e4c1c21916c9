"""Operands for timing a key away from its call: what ``Fleet.prepare`` times, since the calls that asked for
the keys have returned. A convolution's time does not depend on its operands' values (finite values: the
candidates run the same instructions), only on the key: the shapes, dtype, device and the first operand's
memory layout. Standard normal values, so the float64 reference check (``measure.ReferenceCheck``) judges each
candidate as it would on real data.

    forward:          a = x  (N, C, H, W),   b = w  (K, C/groups, R, S)
    backward_data:    a = dy (N, K, Ho, Wo), b = w
    backward_filter:  a = x,                 b = dy
"""
from __future__ import annotations

import numpy as np

from autotune.table import Key


def device_of_key(tuner, key: Key):
    """The tuner's device whose name is the key's; ValueError when it has none."""
    kind = key.device.split(":")[0]
    for device in tuner.devices:
        if device.kind == kind and device.name == key.device:
            return device
    raise ValueError(f"key.device={key.device!r}: no device of the tuner has that name")


def operands(key: Key, device, seed: int = 0) -> tuple:
    """(a, b) for ``key`` on ``device``, ``a`` in the key's layout; ValueError when it cannot be made."""
    p = key.params
    shapes = {"forward": (p.in_shape, p.weight_shape), "backward_data": (p.out_shape, p.weight_shape),
              "backward_filter": (p.in_shape, p.out_shape)}[key.op]
    rng = np.random.default_rng(seed)
    a, b = (device.xp.asarray(rng.standard_normal(s).astype(p.dtype)) for s in shapes)
    if key.layout == "channels_last":
        a = device.xp.ascontiguousarray(a.transpose(0, 2, 3, 1)).transpose(0, 3, 1, 2)
    elif key.layout == "strided":                         # a view of every other column of a wider array
        wide = device.xp.zeros(a.shape[:3] + (2 * a.shape[3],), a.dtype)
        wide[..., ::2] = a
        a = wide[..., ::2]
    if device.layout(a) != key.layout:
        raise ValueError(f"key.layout={key.layout!r}: operands in that layout cannot be made here "
                         f"(made {device.layout(a)!r})")
    return a, b
