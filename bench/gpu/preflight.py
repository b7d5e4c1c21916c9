"""The preflight job: versions, the device, TF32 as each library reports it, and four small things that must
work before anything else is worth running (one Numba kernel on a CuPy array through ``gpu_base.launch``, one
matmul, one rfft2, torch's CUDA). What a launch costs by each route is ``launch_routes.py``'s job.
"""
from __future__ import annotations

import platform
import time

import numpy as np

from convalgos.gpu_compiler import cuda

from .common import Device, emit, short_error


def _version(module_name: str) -> str:
    try:
        module = __import__(module_name)
        return str(getattr(module, "__version__", "?"))
    except Exception as e:  # noqa: BLE001 - not installed, or fails to load: the report says which
        return f"not available ({type(e).__name__})"


def _cuda_version(number: int) -> str:
    return f"{number // 1000}.{number % 1000 // 10}"


def versions(dev: Device) -> dict:
    """Every version the report's header names (CUDA's own only on a GPU)."""
    import numba
    found = {"Python": platform.python_version(), "numpy": np.__version__, "numba": numba.__version__,
             "numba-cuda": _version("numba_cuda"), "CuPy": _version("cupy"), "torch": _version("torch")}
    if not dev.simulated:
        try:
            runtime = dev.xp.cuda.runtime
            found["CUDA runtime (CuPy)"] = _cuda_version(runtime.runtimeGetVersion())
            found["CUDA driver"] = _cuda_version(runtime.driverGetVersion())
        except Exception as e:  # noqa: BLE001 - no CuPy or no driver: the preflight's first step says so
            found["CUDA"] = f"not available ({short_error(e)})"
    try:
        import torch
        found["torch CUDA"] = str(torch.version.cuda)
        found["cuDNN"] = str(torch.backends.cudnn.version()) if torch.backends.cudnn.is_available() else "none"
    except Exception as e:  # noqa: BLE001
        found["torch CUDA"] = f"not available ({type(e).__name__})"
    return found


def device_text(dev: Device) -> str:
    if dev.simulated:
        return "Numba CUDA simulator"
    props = dev.xp.cuda.runtime.getDeviceProperties(dev.xp.cuda.Device().id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    return (f"{name} (compute capability {props['major']}.{props['minor']}, {props['multiProcessorCount']} SMs, "
            f"{props['totalGlobalMem'] / 2**30:.0f} GiB)")


def torch_status() -> tuple[bool, str]:
    """(whether torch can run cuDNN here, in words)."""
    try:
        import torch
    except ImportError:
        return False, "torch is not installed: no cuDNN columns"
    if not torch.cuda.is_available():
        return False, f"torch {torch.__version__} has no CUDA here (CPU build or no driver): no cuDNN columns"
    from autotune.profile.tf32 import torch_tf32_off
    return True, f"torch {torch.__version__} on {torch.cuda.get_device_name()}; {torch_tf32_off(torch)} (set off)"


@cuda.jit
def add_one(a):
    i = cuda.grid(1)
    if i < a.size:
        a[i] += 1


def checks(dev: Device) -> list:
    """(name, function returning a detail string or raising) for each preflight step."""
    xp = dev.xp

    def numba_kernel():
        from convalgos.gpu_base import launch
        a = xp.arange(64, dtype=np.float32)
        launch(add_one, 2, 32)(a)
        dev.synchronize()
        assert np.array_equal(dev.host(a), np.arange(64) + 1), "wrong result"
        return f"{type(a).__module__.split('.')[0]} array of 64, 2 blocks of 32 threads"

    def matmul():
        a = np.random.default_rng(0).standard_normal((64, 48)).astype(np.float32)
        err = np.abs(dev.host(xp.asarray(a) @ xp.asarray(a.T)) - a.astype(np.float64) @ a.T).max()
        assert err < 1e-3, f"error {err:.1e}"
        return f"64x48 @ 48x64 float32, max error {err:.1e}"

    def rfft2():
        a = np.random.default_rng(1).standard_normal((4, 16, 16)).astype(np.float32)
        err = np.abs(dev.host(xp.fft.rfft2(xp.asarray(a))) - np.fft.rfft2(a.astype(np.float64))).max()
        assert err < 1e-3, f"error {err:.1e}"
        return f"4x16x16 float32, max error {err:.1e}"
    def available():
        from convalgos.arrays import require_gpu
        require_gpu()
        return "the simulator" if dev.simulated else "CuPy and Numba find a CUDA device"
    return [("GPU available", available), ("device", lambda: device_text(dev)),
            ("Numba kernel on a device array", numba_kernel), ("matmul", matmul), ("rfft2", rfft2)]


def run_preflight() -> None:
    """Emit the header facts, then one row per check; a failed check stops the job (exit status 1)."""
    from autotune.profile.tf32 import cupy_tf32
    dev = Device()
    emit("versions", versions=versions(dev))
    for name, check in checks(dev):
        start = time.perf_counter()
        try:
            detail = check()
        except Exception as e:  # noqa: BLE001 - reported, and the check stops here
            emit("row", step=name, ok=False, detail=short_error(e), seconds=time.perf_counter() - start)
            raise SystemExit(1)
        emit("row", step=name, ok=True, detail=detail, seconds=time.perf_counter() - start)
    usable, words = torch_status()
    emit("torch", usable=usable, detail=words)
    emit("tf32", cupy="not used (simulator)" if dev.simulated else cupy_tf32())
