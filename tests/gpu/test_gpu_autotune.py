"""The tuner over the GPU algorithms (simulator), and its GPU hooks: device keys, out-of-memory skips."""
import numpy as np
import pytest

import convalgos
from autotune import tuner
from autotune.gpu import GpuDevice
from convalgos import cuda as gpu
from convalgos import reference
from convalgos.backend import simulator_enabled

pytestmark = pytest.mark.skipif(not simulator_enabled(), reason="NumPy arrays stand in for CuPy's only here")


class OutOfMemory(convalgos.Algorithm):
    name = "oom"

    def forward(self, x, w, p, out):
        raise MemoryError("out of memory allocating 1 GiB")


class RecordingDevice(tuner.CpuDevice):
    failures = (MemoryError,)
    released = 0

    def release(self):
        self.released += 1


def layer():
    rng = np.random.default_rng(0)
    return rng.standard_normal((1, 2, 4, 4)).astype(np.float32), rng.standard_normal((2, 2, 3, 3)).astype(np.float32)


def test_tuner_chooses_among_the_gpu_algorithms():
    x, w = layer()
    t = tuner.Tuner(gpu.ALGORITHMS, benchmark=True, heuristics=None, min_runs=1, max_runs=1, time_budget=0.0)
    y = t.conv2d(x, w, padding=1)
    assert reference.normwise_error(y, reference.conv2d(x, w, padding=1)) <= 1e-4
    (entry,) = list(t.dispatch_table())
    assert entry.algo in gpu.ALGORITHMS and set(entry.times) <= set(gpu.ALGORITHMS)
    assert "implicit_gemm" in entry.times


def test_a_candidate_out_of_memory_is_skipped_with_its_reason(monkeypatch):
    device = RecordingDevice()
    monkeypatch.setattr(tuner, "DEVICES", [device])
    x, w = layer()
    algorithms = {"oom": OutOfMemory(), "implicit_gemm": gpu.ALGORITHMS["implicit_gemm"]}
    t = tuner.Tuner(algorithms, benchmark=True, heuristics=None, min_runs=1, max_runs=1, time_budget=0.0)
    t.conv2d(x, w, padding=1)
    (entry,) = list(t.dispatch_table())
    assert entry.algo == "implicit_gemm"
    assert entry.skipped["oom"] == "failed: MemoryError: out of memory allocating 1 GiB"
    assert device.released == 1


def test_gpu_device_owns_cupy_arrays_only():
    fake_cupy = type("ndarray", (), {"__module__": "cupy._core.core"})()
    assert GpuDevice().owns(fake_cupy) and not GpuDevice().owns(np.zeros(1))
    assert isinstance(tuner.device_of(np.zeros((1, 1, 1, 1))), tuner.CpuDevice)
    assert any(isinstance(d, GpuDevice) for d in tuner.DEVICES)
