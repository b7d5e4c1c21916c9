"""bench/gpu_check.py --simulate runs end to end in its own process (it switches the CUDA simulator on)."""
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_gpu_check_simulate(tmp_path):
    out = tmp_path / "gpu.md"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--simulate", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "Device: Numba CUDA simulator" in text and "FAIL" not in text and "ERROR" not in text
    assert "implicit_gemm" in text and "winograd_6x6" in text
    assert "| resnet18.tiny |" in text and "autotune pick" in text
    assert "correctness: 52/52 runs within tolerance" in done.stdout
