"""Every GPU kernel signature the library launches compiles for sm_90 (H100, H200) without a GPU, and none spills
(``bench/gpu/ptx.py``: numba-cuda's ``compile_ptx``, then ptxas -v).

It needs NVIDIA's compiler from pip (``pip install -e ".[ptx]"``, which CI installs); without it the test skips
and says so. Two processes of its own share the work (each records the launches afresh, without the simulator:
``bench/gpu/launched.py`` replaces the launch route, which must not happen in this one). Under the simulator it
does not run (nothing there compiles). ``python -m bench.gpu.ptx`` prints the table this test reads.

The recorder's own test runs everywhere (no compiler needed): every kernel factory of the library must be
launched by its cases, so that a new kernel cannot slip past the compile test. KNOWN lists the (kernel,
arguments) that fail today, each with why: the test fails when a new one fails, and
when a known one is fixed (so the list only shrinks).
"""
import json
import os
import subprocess
import sys

import pytest

from convalgos.arrays import simulator_enabled

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PARTS = 2

#: (kernel family.factory, arguments) -> why it may fail today: "error" (does not compile) or "spill".
KNOWN = {
    ("implicit_gemm.tiled_kernel", "f64[4] f64[2] f64[4] i64 i64 i64 i64 i64 i64 i64 i64 i64 i64"): (
        "spill", "the 128x64 tile's 8x8 float64 register tile (forward)"),
    ("implicit_gemm.tiled_kernel", "f64[4] f64[3] f64[4] i64 i64 i64 i64 i64 i64 i64 i64 i64 i64"): (
        "spill", "the 128x64 tile's 8x8 float64 register tile (backward-data)"),
    ("implicit_gemm.tiled_kernel", "f64[4] f64[4] f64[3] i64 i64 i64 i64 i64 i64 i64 i64 i64 i64 i64"): (
        "spill", "the 128x64 tile's 8x8 float64 register tile (backward-filter)"),
}


def compile_everything() -> dict:
    from bench.gpu.ptx import compiler_problem
    problem = compiler_problem((9, 0))                            # quick: one line compiled here, or the reason
    if problem:
        pytest.skip(problem)
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    command = [sys.executable, "-m", "bench.gpu.ptx", "--json", "--cc", "9.0"]
    workers = [subprocess.Popen(command + ["--part", f"{i}/{PARTS}"], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for i in range(PARTS)]
    results = []
    for worker in workers:
        out, err = worker.communicate(timeout=900)
        assert out.strip(), f"bench.gpu.ptx printed nothing (exit status {worker.returncode}): {err[-2000:]}"
        results.append(json.loads(out))
    assert "problem" not in results[0], results[0]
    return {"ptxas": results[0]["ptxas"], "never_launched": results[0]["never_launched"],
            "rows": [row for r in results for row in r["rows"]]}


def family(row: dict) -> str:
    return row["kernel"].split("(")[0]


def failure(row: dict) -> str | None:
    if "error" in row:
        return "error"
    if row.get("spill_store_bytes") or row.get("spill_load_bytes"):
        return "spill"
    return None


RECORD = """
from bench.gpu.launched import factories, record
launches = record()
print(sum(map(len, launches.values())), len(launches))
print(*[f"{f.__module__}.{f.__name__}" for f in factories() if f.cache_info().currsize == 0])
"""


@pytest.mark.skipif(simulator_enabled(), reason="the recorder runs without the simulator")
def test_the_recorder_launches_every_kernel_factory_without_a_compiler():
    """What the compile test compiles, found here even without NVIDIA's compiler: every kernel factory of the
    library is launched by the recorder's cases (a new kernel with no case fails here)."""
    env = {k: v for k, v in os.environ.items() if k != "NUMBA_ENABLE_CUDASIM"}
    env["PYTHONPATH"] = os.pathsep.join([ROOT, env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, "-c", RECORD], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    counts, never = (done.stdout.splitlines() + [""])[:2]
    signatures, kernels = map(int, counts.split())
    assert never == "", f"kernel factories bench/gpu/launched.py never launches: {never}"
    assert kernels >= 50 and signatures >= kernels


@pytest.mark.skipif(simulator_enabled(), reason="the simulator compiles nothing: run in the main (CPU) suite")
def test_every_launched_kernel_compiles_for_sm_90_without_a_spill():
    result = compile_everything()
    rows = result["rows"]
    print(f"\nptxas: {result['ptxas']}")
    for row in rows:
        print(json.dumps(row))
    assert not result["never_launched"], f"kernel factories bench/gpu/launched.py never launches: " \
                                         f"{result['never_launched']}"
    assert len({family(r) for r in rows}) >= 30                  # every factory's kernel, in every dtype it runs
    failed = {(family(r), r["arguments"]): failure(r) for r in rows if failure(r)}
    new = {key: (kind, next(r.get("error", r) for r in rows if (family(r), r["arguments"]) == key))
           for key, kind in failed.items() if KNOWN.get(key, (None,))[0] != kind}
    assert not new, f"kernels that fail to compile or spill on sm_90: {new}"
    fixed = [key for key in KNOWN if key not in failed]
    assert not fixed, f"these compile without a spill now: remove them from KNOWN: {fixed}"
    if result["ptxas"]:
        assert all("registers" in r for r in rows if "error" not in r)
        fused = [r for r in rows if family(r) == "winograd.fused_kernel" and r["arguments"].startswith("f32")]
        assert {r["shared_bytes"] for r in fused} == {36864, 32768}      # (TILES + CHANNELS_OUT) x alpha^2 x CIN
