"""What the CPU and GPU FFT algorithms (``fft``, ``fft_tiled``) share: the accuracy of the idea and their
constraints. The tile plans, fast transform lengths, tile sizes and batch chunks they share are in ``plan.py``.

The spectra round each product, and the error grows slowly with the transform length (log2(Th*Tw)). One table
for every pass. Worst normwise errors measured on the CPU (300 random layers up to 40x40 with kernels up to
7x7, N <= 4, both algorithms; and N2 64->64 7x7 56x56, ResNet-20's N32 16->16 3x3 32x32, N4 3->8 11x11 s4
128x128, N16 32->32 3x3 s2): float32 forward 3.0e-7, backward_data 3.1e-7, backward_filter 5.3e-7 (its sums
over N*Ho*Wo stay 10x inside); float64 2.5e-15, backward_filter 2.4e-14 (the lags' direct DFT sums Th terms
where an FFT sums log2 Th); float16 4.7e-4, the float16 result's rounding.

Constraints (``plan_constraints``, every pass, both twins): a plan exists (``fft_tiled``: the phase kernel fits
the largest tile), and one image's workspace fits the backend's workspace cap (the batch is already chunked
down to one image at a time, so only a layer whose single image does not fit is refused).
"""
from __future__ import annotations

from ..memory import GiB
from ..params import ConvParams
from ..registry import SUPPORTED, Support, unsupported
from .plan import TILE_SIZES, TilePlan, phase_extent, plan_workspace_bytes

#: normwise error allowed against the float64 reference, every pass, per dtype.
TOLERANCE = {"float16": 2e-3, "float32": 1e-5, "float64": 1e-12}


def plan_constraints(name: str, p: ConvParams, t: TilePlan | None, op: str, cap: int,
                     device: str = "cpu") -> Support:
    """Whether pass ``op`` of ``p`` runs on plan ``t`` (None: no tile holds the kernel) within ``cap`` bytes."""
    if t is None:
        return unsupported(f"{name} tiles are at most {TILE_SIZES[-1]} pixels, but the kernel spans "
                           f"{max(phase_extent(p))} pixels per stride phase")
    need = plan_workspace_bytes(p.with_batch(1), t, op, max(p.N, 1), device)
    if need > cap:
        return unsupported(f"{name} needs {need / GiB:.2f} GiB of workspace for one image in its {op} "
                           f"pass (FFT tiles {t.Th}x{t.Tw}, {t.nth * t.ntw} per image; the batch already "
                           f"runs one image at a time), over the workspace cap of {cap / GiB:.2f} GiB "
                           f"(convalgos.set_workspace_cap(bytes) or CONVALGOS_WORKSPACE_CAP to change it)")
    return SUPPORTED
