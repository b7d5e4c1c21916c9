"""python -m bench.gpu_check --simulate end to end (its jobs switch the CUDA simulator on), with faults planted
by its test hook: a sticky CUDA error in one algorithm's job, another algorithm's job killed outright, the
timing job killed once. The report must still hold every section, written row by row."""
import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FAULTS = "direct:sticky,fft:abort,time:abort"


def tables(section: str) -> dict:
    """'### name' -> its table's body rows (lists of cells) within one report section."""
    found = {}
    for part in section.split("\n### ")[1:]:
        name, _, rest = part.partition("\n")
        rows = [line for line in rest.splitlines() if line.startswith("|")][2:]
        found[name.strip()] = [[c.strip() for c in line.strip("|").split("|")] for line in rows]
    return found


def section(text: str, heading: str) -> str:
    return text.split(f"\n## {heading}")[1].split("\n## ")[0]


def test_gpu_check_simulated_survives_planted_faults(tmp_path):
    from convalgos import cuda as gpu
    out = tmp_path / "gpu.md"
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["GPU_CHECK_FAULT"] = FAULTS
    done = subprocess.run([sys.executable, "-m", "bench.gpu_check", "--simulate", "--out", str(out)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 1, done.stdout + done.stderr          # 1: jobs died (the planted faults)
    text = out.read_text()
    for heading in ("Versions", "Preflight", "Per-launch cost by route", "Correctness", "Times per layer",
                    "Forward pass", "The torch bridge", "tests/gpu", "Summary"):
        assert f"\n## {heading}" in text, heading
    assert "| numba-cuda |" in text and "| device | yes | Numba CUDA simulator |" in text
    assert "No cuDNN columns" in text or "## cuDNN with benchmark on" in text
    checked = tables(section(text, "Correctness"))
    assert list(checked) == list(gpu.ALGORITHMS)
    for name, rows in checked.items():
        cells = [cell for row in rows for cell in row[2:]]
        assert len(rows) == 6 and all(len(row) == len(rows[0]) for row in rows), name
        if name == "direct":                       # a sticky error at its second case ends its job
            assert cells[:2] == [cells[0], "ERROR"] and cells[0].endswith(" ok") and set(cells[2:]) == {"not run"}
            assert "the CUDA context died (sticky error" in section(text, "Correctness").split("### direct")[1]
        elif name == "fft":                        # its job killed at its second case
            assert cells[0].endswith(" ok") and set(cells[1:]) <= {"not run", "-"}
            assert "its process died (killed by SIGABRT)" in text.split("### fft\n")[1].split("###")[0]
        else:                                      # every case ran within tolerance, or was refused with a reason
            ran = [c for c in cells if c != "-"]
            assert ran and all(re.fullmatch(r"\d\.\de-\d\d ok", c) for c in ran), (name, ran)
            assert "-" not in cells or "- unsupported" in text.split(f"### {name}\n")[1].split("###")[0]
    times = section(text, "Times per layer")
    assert "tiny 3x3 bwd data: not timed, the job died there (its process died (killed by SIGABRT))" in times
    for op in ("fwd", "bwd filter"):                # before the death, and after the restart
        assert re.search(rf"^\| tiny 3x3 \| {op} \|", times, re.M), op
    assert re.search(r"^\| tiny \| step \| [\d.]+ \| [\d.]+ \|", section(text, "Forward pass"), re.M)
    launches = section(text, "Per-launch cost by route")
    assert re.search(r"^\| Numba, CuPy array through gpu_base.launch .* \| [\d.]+ \| 3 \|", launches, re.M)
    for route in ("a pre-made Numba view", "CuPy RawKernel", "CUDA graph replay"):    # said plainly, not left out
        assert re.search(rf"^\| [^|]*{route}[^|]* \| needs hardware \(CuPy on a GPU\) \| 0 \|", launches, re.M)
    # where a step's time goes: the profiler's columns need hardware; the device-operation counter runs here
    for side in ("autotuned", "heuristic"):
        ops = re.search(rf"^\| tiny \| {side} \| needs torch with CUDA on a GPU \| (\d+) \|", text, re.M)
        assert ops and int(ops.group(1)) > 0, side
    bridge = section(text, "The torch bridge")
    if "no torch here" not in bridge:             # torch is optional: without it the section says so
        assert re.search(r"dispatcher [1-9]\d*, by torch's conv \(fallbacks\) 0;", bridge)
        assert re.search(r"^\| tiny \| SGD step \| [\d.]+ \| [\d.]+ \| [\d.]+x \|", bridge, re.M)
    summary = section(text, "Summary")
    assert "did not finish: check direct: its process died (exit status 3)" in summary
    assert "did not finish: check fft: its process died (killed by SIGABRT)" in summary
    assert re.search(r"correctness: (\d+)/\1 runs", summary) is None    # the planted error is counted
    assert re.search(r"tiny b2 per step: .*device operations counted: autotuned \d+, heuristic \d+", summary)
    assert "Run time" in text


def test_the_file_form_runs_as_the_module():
    """python bench/gpu_check.py puts bench/ first on sys.path, where bench/autotune.py would shadow autotune."""
    done = subprocess.run([sys.executable, "bench/gpu_check.py", "--help"], cwd=ROOT, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0 and "--simulate" in done.stdout, done.stderr
