"""The tuner on the GPU path (simulator): the device hands over the GPU registry, the candidates timed are
exactly those the GPU algorithms support, failures of any kind skip a candidate, GPU keys and heuristics."""
import numpy as np
import pytest

import convalgos
from autotune import Tuner, devices
from autotune.heuristics import Heuristics
from convalgos import cuda as gpu
from convalgos import reference
from convalgos.arrays import simulator_enabled
from float32_bounds import chosen_bound, within

pytestmark = pytest.mark.skipif(not simulator_enabled(), reason="NumPy arrays stand in for CuPy's only here")

QUICK = dict(benchmark=True, min_runs=1, max_runs=1, time_budget=0.0, prune_ratio=None)


class Failing(convalgos.Algorithm):
    def __init__(self, name, error):
        super().__init__()
        self.name, self.error = name, error

    def forward(self, x, w, p, out):
        raise self.error


class RecordingDevice(devices.SimulatedGpuDevice):
    released = ()

    def release(self, algorithm):
        self.released += (algorithm.name,)


def arrays(C=2, H=4, K=2, R=3, S=None, W=None, seed=0):
    rng = np.random.default_rng(seed)
    return (rng.standard_normal((1, C, H, W or H)).astype(np.float32),
            rng.standard_normal((K, C, R, S or R)).astype(np.float32))


def test_the_simulated_gpu_device_times_exactly_what_the_gpu_algorithms_support():
    x, w = arrays()
    t = Tuner(devices=[devices.SimulatedGpuDevice()], **QUICK)
    y = t.conv2d(x, w, padding=1)
    assert within(y, reference.conv2d(x, w, padding=1), chosen_bound(t, registry=gpu.ALGORITHMS))
    (entry,) = t.dispatch_table()
    p = entry.key.params
    supported = {n for n, a in gpu.ALGORITHMS.items() if a.supports(p)}
    assert set(entry.warmup) == supported and "implicit_gemm" in supported
    assert entry.key.device == "cuda:simulator" and "no measured rules for cuda forward" in entry.rule
    assert {n for n in entry.skipped if not entry.skipped[n].startswith(("failed", "rejected"))} == \
        set(gpu.ALGORITHMS) - supported


def test_a_layer_the_gpu_twin_refuses_is_not_a_gpu_candidate(monkeypatch):
    x, w = arrays(C=1, K=1, H=66, W=3, R=65, S=1)     # a 65x1 kernel at stride 2
    p = convalgos.ConvParams.from_arrays(x, w, stride=2)
    needs = [registry["fft_tiled"].workspace_bytes(p) for registry in (convalgos.ALGORITHMS, gpu.ALGORITHMS)]
    monkeypatch.setenv("CONVALGOS_WORKSPACE_CAP", str(sum(needs) // 2))   # the GPU twin's workspace is larger
    assert convalgos.ALGORITHMS["fft_tiled"].supports(p) and not gpu.ALGORITHMS["fft_tiled"].supports(p)
    t = Tuner(devices=[devices.SimulatedGpuDevice()], **QUICK)
    t.conv2d(x, w, stride=2)
    (entry,) = t.dispatch_table()
    for name, algorithm in gpu.ALGORITHMS.items():
        assert (name in entry.warmup) == bool(algorithm.supports(p)), name
        if not algorithm.supports(p):
            assert entry.skipped[name] == algorithm.supports(p).reason


@pytest.mark.parametrize("error", [MemoryError("out of memory allocating 1 GiB"),
                                   AttributeError("'NoneType' object has no attribute 'tiles'")])
def test_a_failing_gpu_candidate_is_skipped_with_its_reason(error):
    device = RecordingDevice()
    x, w = arrays()
    algorithms = {"failing": Failing("failing", error), "implicit_gemm": gpu.ALGORITHMS["implicit_gemm"]}
    t = Tuner(algorithms, devices=[device], **QUICK)
    t.conv2d(x, w, padding=1)
    (entry,) = t.dispatch_table()
    assert entry.algo == "implicit_gemm" and device.released == ("failing",)
    assert entry.skipped["failing"] == f"failed: {type(error).__name__}: {error}"
    heuristic = Tuner(algorithms, devices=[device], heuristics=Heuristics({"rules": []}))
    y = heuristic.conv2d(x, w, padding=1)                 # the heuristic's first choice fails: the next serves
    assert within(y, reference.conv2d(x, w, padding=1), chosen_bound(heuristic, registry=gpu.ALGORITHMS))
    assert heuristic.dispatch_table().entries[0].algo == "implicit_gemm"


def test_workspace_limit_zero_runs_on_the_gpu():
    x, w = arrays()
    t = Tuner(devices=[devices.SimulatedGpuDevice()], workspace_limit=0)
    y = t.conv2d(x, w, padding=1)
    assert within(y, reference.conv2d(x, w, padding=1), chosen_bound(t, registry=gpu.ALGORITHMS))
    assert t.dispatch_table().entries[0].workspace[t.dispatch_table().entries[0].algo] == 0


def test_gpu_device_owns_cupy_arrays_only():
    fake_cupy = type("ndarray", (), {"__module__": "cupy._core.core"})()
    gpu_device = devices.GpuDevice()
    assert gpu_device.owns(fake_cupy) and not gpu_device.owns(np.zeros(1)) and gpu_device.kind == "cuda"
    assert isinstance(devices.device_of(np.zeros((1, 1, 1, 1))), devices.CpuDevice)
    assert devices.device_of(fake_cupy) is next(d for d in devices.DEVICES if isinstance(d, devices.GpuDevice))
    assert gpu_device.algorithms is gpu.ALGORITHMS and devices.CpuDevice().algorithms is convalgos.ALGORITHMS
