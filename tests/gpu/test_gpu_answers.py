"""supports / flops / workspace_bytes on the GPU side, and the clear errors without a GPU."""
import functools
import os
import subprocess
import sys

import numpy as np
import pytest

import convalgos
from convalgos import PASSES, ConvParams, reference
from convalgos import cuda as gpu
from convalgos.fft.plan import result_extent
from convalgos.implicit_gemm import gpu as implicit_gemm

from gpu_arrays import device, host

gpu_conv2d = functools.partial(convalgos.conv2d, backend="cuda")

LAYERS = [ConvParams.from_shapes((2, 4, 6, 6), (4, 2, 3, 3), padding=1, groups=2),
          ConvParams.from_shapes((1, 3, 9, 7), (2, 3, 5, 5), stride=2, dilation=(1, 2), padding=((2, 1), (0, 3))),
          ConvParams.from_shapes((2, 3, 4, 4), (5, 3, 1, 1))]


def test_gpu_algorithms_answer_without_the_cpu_registry(monkeypatch):
    """No GPU algorithm asks a CPU algorithm anything: with the CPU registry emptied, every answer stands."""
    answers = {name: [(bool(a.supports(p)), a.workspace_bytes(p), a.flops(p), a.tolerance_of("forward", "float32"))
                      for p in LAYERS] for name, a in gpu.ALGORITHMS.items()}
    cpu = dict(convalgos.ALGORITHMS)
    convalgos.ALGORITHMS.clear()
    try:
        for name, a in gpu.ALGORITHMS.items():
            assert [(bool(a.supports(p)), a.workspace_bytes(p), a.flops(p), a.tolerance_of("forward", "float32"))
                    for p in LAYERS] == answers[name]
    finally:
        convalgos.ALGORITHMS.update(cpu)


def test_winograd_reasons():
    p = LAYERS[1]
    assert gpu.ALGORITHMS["winograd_4x4"].supports(p).reason == "winograd_4x4 needs a 3x3 kernel, got 5x5"
    p = ConvParams.from_shapes((1, 2, 6, 6), (2, 2, 3, 3), stride=2)
    assert gpu.ALGORITHMS["winograd_2x2"].supports(p).reason == "winograd_2x2 needs stride 1, got (2, 2)"


#: passes a CPU algorithm has and its GPU twin not yet: the fused F(3x3, 4x4) backward-filter (the GPU's
#: Winograd backward-filter is winograd_4x4's non-fused pass).
CPU_ONLY_PASSES = {("winograd_fused_4x4", "backward_filter")}


def test_every_gpu_algorithm_has_the_three_passes_of_its_cpu_twin():
    """(the GPU-only entries have their family's: the tiled implicit GEMM's shapes implicit_gemm's, the fused
    F(6x6) the fused F(4x4)'s), but for the passes listed as CPU-only"""
    for name, algorithm in gpu.ALGORITHMS.items():
        twin = ("implicit_gemm" if name.startswith("implicit_gemm_") else
                "winograd_fused_4x4" if name == "winograd_fused_6x6" else name)
        for op in convalgos.PASSES:
            cpu_has = convalgos.ALGORITHMS[twin].implements(op) and (twin, op) not in CPU_ONLY_PASSES
            assert algorithm.implements(op) == cpu_has, (name, op)


def test_implicit_gemm_supports_every_layer_without_workspace():
    for p in LAYERS:
        assert gpu.ALGORITHMS["implicit_gemm"].supports(p)
        assert gpu.ALGORITHMS["implicit_gemm"].workspace_bytes(p) == 0
        assert gpu.ALGORITHMS["implicit_gemm"].flops(p) == p.flops


def test_a_zero_workspace_cap_leaves_implicit_gemm_and_it_allocates_nothing():
    """On the device's arrays (CuPy on a GPU: a GPU algorithm refuses NumPy operands there), and read back."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 4, 4)).astype(np.float32)
    w = rng.standard_normal((2, 2, 3, 3)).astype(np.float32)
    p = ConvParams.from_arrays(x, w, padding=1)
    algorithm = gpu.ALGORITHMS["implicit_gemm"]
    algorithm.release()
    convalgos.set_workspace_cap(0)
    try:
        runnable = [name for name, a in gpu.ALGORITHMS.items() if a.supports(p)]
        assert "implicit_gemm" in runnable and "im2col" not in runnable and "fft" not in runnable
        assert all(gpu.ALGORITHMS[name].workspace_bytes(p) == 0 for name in runnable)
        y = gpu_conv2d(device(x), device(w), padding=1, algo="implicit_gemm")
    finally:
        convalgos.set_workspace_cap(None)
    assert algorithm.workspace.nbytes == 0
    assert reference.normwise_error(host(y), reference.conv2d(x, w, padding=1)) <= algorithm.tolerance["float32"]


def test_grid_limits_are_constraints():
    wide = ConvParams.from_shapes((1, 70000 * 16, 1, 1), (70000 * 16, 1, 1, 1), groups=70000 * 16)
    answer = gpu.ALGORITHMS["implicit_gemm"].supports(wide)
    assert not answer and "65535" in answer.reason
    assert gpu.ALGORITHMS["direct"].supports(wide)        # direct puts (image, group) on grid x


def test_fft_tiled_refuses_a_kernel_wider_than_its_largest_tile():
    p = ConvParams.from_shapes((1, 1, 90, 90), (1, 1, 3, 3), dilation=40)
    answer = gpu.ALGORITHMS["fft_tiled"].supports(p)
    assert not answer and "tiles are at most 64 pixels" in answer.reason
    assert "the kernel spans 81 pixels per stride phase" in answer.reason
    assert gpu.ALGORITHMS["fft"].supports(p)


def test_fft_tiled_takes_what_the_cpus_polyphase_tiles_take():
    p = ConvParams.from_shapes((1, 1, 67, 2), (1, 1, 65, 1), stride=2)      # 65 rows: 33 per stride phase
    assert gpu.ALGORITHMS["fft_tiled"].supports(p) and convalgos.ALGORITHMS["fft_tiled"].supports(p)


def test_fft_plans_are_the_cpus_and_cover_each_pass():
    for p in LAYERS:
        for name in ("fft", "fft_tiled"):
            for op in PASSES:
                t = gpu.ALGORITHMS[name].plan(p, op)
                assert t == convalgos.ALGORITHMS[name].plan(p, op)
                extent_h, extent_w = result_extent(p, op)
                assert t.nth * t.mh >= extent_h and t.ntw * t.mw >= extent_w


def test_fast_length():
    from convalgos.fft.plan import next_fast_len
    assert [next_fast_len(n) for n in (1, 11, 13, 17, 97, 129)] == [1, 12, 15, 18, 100, 135]


def test_im2col_workspace_is_the_patch_matrix_it_keeps():
    algorithm = gpu.ALGORITHMS["im2col"]
    p = LAYERS[0]
    x = np.random.default_rng(0).standard_normal((p.N, p.C, p.H, p.W)).astype(np.float32)
    w = np.zeros((p.K, p.Cg, p.R, p.S), np.float32)
    algorithm.release()
    algorithm.forward(x, w, p, np.empty(p.out_shape, np.float32))
    assert algorithm.workspace.nbytes == algorithm.workspace_bytes(p) == p.N * p.C * 9 * 36 * 4
    assert algorithm.workspace_bytes(LAYERS[2]) == 0                     # 1x1: x is the patch matrix


def test_kept_buffers_within_workspace_bytes():
    p = LAYERS[0]
    x = np.random.default_rng(0).standard_normal((p.N, p.C, p.H, p.W)).astype(np.float32)
    w = np.ones((p.K, p.Cg, p.R, p.S), np.float32)
    for name in ("winograd_2x2", "fft", "fft_tiled"):
        algorithm = gpu.ALGORITHMS[name]
        algorithm.release()
        algorithm.forward(x, w, p, np.empty(p.out_shape, np.float32))
        assert 0 < algorithm.workspace.nbytes <= algorithm.workspace_bytes(p), name


def test_flops_winograd_count_dense_transforms_and_stay_below_direct_on_deep_layers():
    p = ConvParams.from_shapes((1, 64, 16, 16), (64, 64, 3, 3), padding=1)
    for name in ("winograd_2x2", "winograd_4x4"):
        assert convalgos.ALGORITHMS[name].flops(p) < gpu.ALGORITHMS[name].flops(p) < p.flops


def test_kernels_compile_once_per_dtype():
    from convalgos.direct import gpu as direct
    assert direct.direct_kernel("float32") is direct.direct_kernel("float32")
    assert implicit_gemm.implicit_gemm_kernel("float32", 4) is implicit_gemm.implicit_gemm_kernel("float32", 4)


def test_without_a_gpu_import_works_and_use_says_what_is_missing():
    """In a process that sees no GPU: no simulator, and no device (``CUDA_VISIBLE_DEVICES`` empty hides a real
    one from CuPy and Numba, so on a GPU machine too the child has none)."""
    code = ("import numpy as np, convalgos\n"
            "from convalgos.arrays import GPUUnavailableError\n"
            "try:\n"
            "    convalgos.conv2d(np.zeros((1, 1, 3, 3), np.float32), np.zeros((1, 1, 3, 3), np.float32),\n"
            "                     backend='cuda')\n"
            "except GPUUnavailableError as e:\n"
            "    print(e)\n")
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["CUDA_VISIBLE_DEVICES"] = ""
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "convalgos.cuda needs CuPy and a CUDA driver, or NUMBA_ENABLE_CUDASIM=1" in done.stdout
    assert "Numba's CUDA target finds no CUDA driver or device" in done.stdout
    assert "CuPy" in done.stdout.split("Here:", 1)[1]        # not installed, or finds no device: either way, why


def test_a_gpu_side_that_cannot_run_fails_a_tuning_once_with_why(monkeypatch):
    """The tuner asks the GPU side before it tunes a key, so its failure is one error, not one per candidate."""
    import autotune
    from autotune.devices import SimulatedGpuDevice
    from convalgos import arrays
    monkeypatch.setattr(arrays, "gpu_problem", lambda: "numba-cuda's CUDA target failed to load (...); install")
    x = device(np.ones((1, 2, 4, 4), np.float32))
    w = device(np.ones((2, 2, 3, 3), np.float32))
    devices = [SimulatedGpuDevice()] if arrays.simulator_enabled() else None
    for benchmark in (True, False):
        tuner = autotune.Tuner(devices=devices, benchmark=benchmark)
        with pytest.raises(arrays.GPUUnavailableError) as raised:
            tuner.conv2d(x, w, padding=1)
        assert str(raised.value) == "numba-cuda's CUDA target failed to load (...); install"
        assert not list(tuner.dispatch_table())
