"""bench/gpu_check.py --simulate runs end to end in its own process (it switches the CUDA simulator on)."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def correctness_cells(text: str) -> tuple[list[str], list[list[str]]]:
    """(algorithm names, one row of cells per layer-dtype case) of the report's correctness table."""
    table = text.split("## Correctness")[1].split("\n\n")[1].splitlines()
    names = [c.strip() for c in table[0].strip("|").split("|")][2:]
    return names, [[c.strip() for c in line.strip("|").split("|")] for line in table[2:]]


def test_gpu_check_simulate(tmp_path):
    out = tmp_path / "gpu.md"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--simulate", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    text = out.read_text()
    assert "Device: Numba CUDA simulator" in text
    names, rows = correctness_cells(text)
    assert "implicit_gemm" in names and "winograd_6x6" in names
    # every case checked: each layer in both dtypes, a cell for every algorithm, each cell a run within
    # tolerance or a refusal whose reason is listed; none failed
    assert {row[1] for row in rows} == {"float32", "float16"} and len(rows) % 2 == 0 and len(rows) >= 8
    cells = [(name, row[0], cell) for row in rows for name, cell in zip(names, row[2:])]
    assert len(cells) == len(rows) * len(names)
    ran = [c for c in cells if c[2] != "-"]
    assert all(re.fullmatch(r"\d\.\de-\d\d ok", cell) for _, _, cell in ran), ran
    for name, layer, _ in set(cells) - set(ran):
        assert re.search(rf"^- {name} on {layer}: \S", text, re.M), (name, layer)
    counts = re.search(r"correctness: (\d+)/(\d+) runs within tolerance", done.stdout)
    assert counts and int(counts[1]) == int(counts[2]) == len(ran)
    # the timing path ran: a row for the tiny layer with the tuner's pick among the GPU algorithms
    timing = next(line for line in text.splitlines() if line.startswith("| resnet18.tiny |"))
    assert timing.split("|")[-2].strip() in names
