"""What the CPU and GPU Winograd algorithms (plain, fused and the GPU twin) share: F(m x m, 3 x 3)'s
constraints, its tile grid, the FLOPs of a transform, each pass's transform matrices and the tolerances, per
m, pass and dtype. The matrices themselves come from one exact generator (``cooktoom.py``), rounded once to the
compute dtype.
"""
from __future__ import annotations

import numpy as np

from .. import gpu_ops
from ..params import ConvParams
from ..registry import SUPPORTED, Support, unsupported
from .cooktoom import WinogradMatrices


def sandwich_flops(matrix) -> int:
    """FLOPs of X d X^T for one a x a array d and X (b x a): a multiply-add per nonzero of X per row or column."""
    b, a = len(matrix), len(matrix[0])
    return 2 * sum(1 for row in matrix for v in row if v != 0) * (a + b)


def f3x3_constraints(name: str, p: ConvParams) -> Support:
    """F(m x m, 3 x 3) needs a 3x3 kernel at stride 1 and dilation 1, on every pass (the GPU twin too)."""
    if (p.R, p.S) != (3, 3):
        return unsupported(f"{name} needs a 3x3 kernel, got {p.R}x{p.S}")
    if p.stride != (1, 1):
        return unsupported(f"{name} needs stride 1, got {p.stride}")
    if p.dilation != (1, 1):
        return unsupported(f"{name} needs dilation 1, got {p.dilation}")
    return SUPPORTED


def pass_matrices(forward: WinogradMatrices, backward_filter: WinogradMatrices,
                  dtype) -> dict[str, tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """Pass -> (output, filter, input) transform matrices (A^T, G, B^T) in ``dtype``: F(m, 3)'s for forward,
    with G J (G's columns reversed: the flipped filter, ``cpu.py``) for backward_data, F(3, m)'s for
    backward_filter."""
    AT, G, BT = forward.as_float(dtype)
    return {"forward": (AT, G, BT), "backward_data": (AT, np.ascontiguousarray(G[:, ::-1]), BT),
            "backward_filter": backward_filter.as_float(dtype)}


class DeviceConstants:
    """Each pass's transform matrices (``pass_matrices``) as device arrays, copied to a device once per device and
    dtype, then reused by every call (the GPU twins'; under the simulator NumPy arrays stand in, device 0).
    ``host`` holds the host matrices per NumPy dtype."""

    def __init__(self, per_dtype):
        self.host = {np.dtype(mats["forward"][0].dtype): mats for mats in per_dtype}
        self._on_device: dict = {}

    def get(self, like, op: str):
        """(A^T, G, B^T) of pass ``op`` in like's dtype, on like's device."""
        from ..arrays import array_module, is_cupy_array
        key = (like.device.id if is_cupy_array(like) else 0, np.dtype(like.dtype), op)
        if key not in self._on_device:
            xp = array_module(like)
            gpu_ops.record("cupy.copy", 3)
            self._on_device[key] = tuple(xp.asarray(mat) for mat in self.host[np.dtype(like.dtype)][op])
        return self._on_device[key]


def tile_grid(p: ConvParams, op: str, m: int) -> tuple[int, int]:
    """The m x m tile grid of pass ``op`` (fused or not): over dx in backward-data, over y (or dy) otherwise."""
    H, W = (p.H, p.W) if op == "backward_data" else p.out_hw
    return -(-H // m), -(-W // m)


# Normwise error allowed against the float64 reference, per m, pass and dtype. Measured float32 maxima (normwise,
# random data; forward / backward-data / backward-filter) over C = 512 12x12 and 28x28, 256->32 28x28, ResNet-20
# 16->16 32x32 at N = 32, 64->64 16x16 at N = 8 and 32, 32->32 32x32 at N = 64, 128->64 56x56, 3->64 224x224 and
# a depthwise 32-channel layer:
#     m = 2: 8e-7 (forward, module docstring) / 3.7e-7 / 7.2e-7
#     m = 4: 1e-5 to 3e-5                     / 7.7e-6 / 8.8e-6
#     m = 6: 0.6e-5 to 3e-5                   / 1.1e-5 / 1.4e-5   (the error grows with the tile)
# Tolerances keep a margin of 3x or more, far below what a wrong tile or matrix gives (order 1). float64 maxima on
# the same layers: 1.5e-15 (m = 2), 2.3e-14 (m = 4), 3.1e-14 (m = 6), every pass. float16 is computed in float32
# and rounded (2^-11 relative), in every pass.
TOLERANCES = {
    2: {"forward": {"float16": 2e-3, "float32": 1e-5, "float64": 1e-13},
        "backward_data": {"float16": 2e-3, "float32": 5e-6, "float64": 1e-13},
        "backward_filter": {"float16": 2e-3, "float32": 5e-6, "float64": 1e-13}},
    4: {"forward": {"float16": 2e-3, "float32": 1e-4, "float64": 1e-12},
        "backward_data": {"float16": 2e-3, "float32": 5e-5, "float64": 1e-12},
        "backward_filter": {"float16": 2e-3, "float32": 5e-5, "float64": 1e-12}},
    6: {"forward": {"float16": 3e-3, "float32": 2e-4, "float64": 1e-12},
        "backward_data": {"float16": 3e-3, "float32": 1e-4, "float64": 1e-12},
        "backward_filter": {"float16": 3e-3, "float32": 1e-4, "float64": 1e-12}},
}
