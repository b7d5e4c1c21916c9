"""TF32 (fp32 products rounded to a 10-bit mantissa on tensor cores), read from each library, never assumed.

fp32 here means fp32: a comparison with torch's cuDNN turns TF32 off on torch's side (``torch_tf32_off``), and a
report says what each library says it does (``torch_tf32``, ``cupy_tf32``) rather than what was asked:

- torch >= 2.9 keeps one setting per backend and operator (``torch.backends.cudnn.conv.fp32_precision``,
  ``torch.backends.cuda.matmul.fp32_precision``: "ieee", "tf32", or "none" to inherit the parent's); mixing it
  with the older ``allow_tf32`` flags raises, so only the newer one is used where it exists. cuDNN convolutions
  default to TF32 there; cuBLAS matmuls do not.
- CuPy's cuBLAS calls use TF32 only when ``CUPY_TF32`` > 0 when first asked; ``cupy._core._routines_linalg``
  says what it settled on for float32 (``get_compute_type``).
- ``NVIDIA_TF32_OVERRIDE=0`` in the environment turns TF32 off in every NVIDIA library, whatever they were told.
"""
from __future__ import annotations

import os


def _torch_setting(node) -> str | None:
    """The ``fp32_precision`` of a torch backends node, following "none" up to its parents."""
    value = getattr(node, "fp32_precision", None)
    return None if value is None else str(value)


def torch_tf32(torch) -> str:
    """What torch says about TF32 in cuDNN convolutions and cuBLAS matmuls, e.g. "cuDNN conv ieee, matmul ieee"."""
    conv = getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None)
    if conv is not None:
        parents = (torch.backends.cudnn, torch.backends)
        matmul = torch.backends.cuda.matmul.fp32_precision
        conv = next((v for v in [conv, *map(_torch_setting, parents)] if v not in (None, "none")), "none")
        matmul = next((v for v in [matmul, _torch_setting(torch.backends)] if v not in (None, "none")), "ieee")
    else:                                          # torch < 2.9: the allow_tf32 flags
        conv = "tf32" if torch.backends.cudnn.allow_tf32 else "ieee"
        matmul = "tf32" if torch.backends.cuda.matmul.allow_tf32 else "ieee"
    return f"cuDNN conv {conv}, matmul {matmul}" + _override()


def torch_tf32_off(torch) -> str:
    """Turn TF32 off in torch's cuDNN convolutions and cuBLAS matmuls; returns ``torch_tf32`` after."""
    if getattr(getattr(torch.backends.cudnn, "conv", None), "fp32_precision", None) is not None:
        torch.backends.cudnn.conv.fp32_precision = "ieee"
        torch.backends.cuda.matmul.fp32_precision = "ieee"
    else:
        torch.backends.cudnn.allow_tf32 = False
        torch.backends.cuda.matmul.allow_tf32 = False
    return torch_tf32(torch)


def cupy_tf32() -> str:
    """What CuPy's cuBLAS calls do with float32, as CuPy reports it (e.g. "COMPUTE_TYPE_DEFAULT")."""
    try:
        import numpy as np
        from cupy._core import _routines_linalg as linalg
        said = linalg.compute_type_to_str(linalg.get_compute_type(np.float32))
    except Exception as e:  # noqa: BLE001 - a CuPy without these internals: say what the environment asks
        said = f"unknown ({type(e).__name__}); CUPY_TF32={os.environ.get('CUPY_TF32', 'unset')}"
    return f"CuPy float32 matmul {said}" + _override()


def _override() -> str:
    value = os.environ.get("NVIDIA_TF32_OVERRIDE")
    return "" if value is None else f" (NVIDIA_TF32_OVERRIDE={value})"
