"""What one call of the Tuner is, before the table is asked: its operands as arrays (torch tensors read in
place, with a short cut when every operand is already a NumPy array), and the memo's record of a call
signature validated once (``Call``: the device, the layer, the key, the result's shape), so a hit validates
nothing again."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from convalgos import ConvParams
from convalgos.interop import to_arrays

from .table import Key


def signature(a) -> tuple:
    """What of an array enters the memo: its type, shape, strides and dtype."""
    return type(a), a.shape, a.strides, a.dtype


PLAIN = (np.ndarray, type(None))


def as_arrays(*values, names, activation=True):
    """``convalgos.interop.to_arrays``, short-cut when no value needs converting (NumPy arrays and None)."""
    for v in values:
        if type(v) not in PLAIN:
            return to_arrays(*values, names=names, activation=activation)
    return values, None


@dataclass(frozen=True)
class Call:
    """What one call signature resolves to, validated once and kept in the memo: the device that owns its
    arrays, the layer, its key in the table and the shape of its result."""

    device: object
    params: ConvParams
    key: Key
    result_shape: tuple
