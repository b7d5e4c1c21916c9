"""Every GPU kernel the library launches, compiled for a GPU that is not here: sm_90 (H100, H200) by default.

    pip install -e ".[ptx]"          # NVIDIA's compiler from pip (NVVM, NVRTC, ptxas), no GPU, no driver
    python -m bench.gpu.ptx [--json] [--cc 9.0]

The simulator runs every kernel but compiles none, so what only a compiler sees (a shared tile whose size is
not a compile-time constant, a type no overload takes, registers spilled to local memory) shows first on the
GPU. Here each kernel and argument signature the library launches (``launched.py``: the GPU algorithms' passes
and autotune's GPU layers, run in this process with the launch route recording instead of launching) goes
through numba-cuda's ``compile_ptx`` with the kernel's own options, then through ptxas (``-v``), which says per
kernel the registers a thread uses, the bytes it spills (stores and loads), its stack frame and the block's
static shared memory. Without ptxas only the PTX is made and the shared memory is read from it. A kernel's
device functions are compiled for the device numba-cuda asks the driver for: here a stand-in answers ``cc``.

One row per (kernel, signature); a compile error is a row with its error. ``tests/test_gpu_ptx.py`` runs this
in a process of its own (``launched.record`` replaces the launch route) and fails on an error or a spill.
"""
from __future__ import annotations

import argparse
import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

#: the compile options a kernel's dispatcher holds that ``compile_ptx`` takes too.
OPTIONS = ("debug", "lineinfo", "fastmath", "opt", "forceinline", "launch_bounds")
_USED = re.compile(r"Used (\d+) registers")
_SMEM = re.compile(r"(\d+) bytes smem")
_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_SHARED_DECL = re.compile(r"\.shared \.align \d+ \.b8 \S+\[(\d+)\]")


def ptxas_paths() -> list[str]:
    """ptxas from NVIDIA's pip package (``nvidia-cuda-nvcc``: nvidia/cu13/bin or nvidia/cuda_nvcc/bin, beside
    the NVVM that ``compile_ptx`` finds there), then from PATH."""
    found = [c for root in sys.path for c in sorted(glob.glob(os.path.join(root, "nvidia", "*", "bin", "ptxas")))
             if os.access(c, os.X_OK)]
    return found + ([shutil.which("ptxas")] if shutil.which("ptxas") else [])


def _run_ptxas(ptxas: str, ptx: str, cc: tuple[int, int]) -> subprocess.CompletedProcess:
    with tempfile.TemporaryDirectory() as scratch:
        source = os.path.join(scratch, "kernel.ptx")
        with open(source, "w") as f:
            f.write(ptx)
        return subprocess.run([ptxas, f"-arch=sm_{cc[0]}{cc[1]}", "-v", "-o", os.devnull, source],
                              capture_output=True, text=True, timeout=600)


def ptxas_for(ptx: str, cc: tuple[int, int]) -> str | None:
    """The first ptxas that reads this NVVM's PTX (an older CUDA's refuses a newer PTX ``.version``)."""
    for ptxas in ptxas_paths():
        if "Unsupported .version" not in _run_ptxas(ptxas, ptx, cc).stderr:
            return ptxas
    return None


def label(kernel) -> str:
    """The kernel's family and factory, with the constants its factory gave it (say ``m=4 TILES=16``)."""
    from convalgos.gpu_base import op_name
    function = kernel.py_func
    cells = zip(function.__code__.co_freevars, function.__closure__ or ())
    constants = [f"{name}={cell.cell_contents}" for name, cell in cells
                 if isinstance(cell.cell_contents, (int, str)) or type(cell.cell_contents).__name__ == "Tiling"]
    return f"{op_name(kernel)}({', '.join(constants)})"


def dtypes(signature) -> str:
    """The signature's arrays as dtype and rank, say ``f32[4] f32[4] i64``."""
    import numba
    short = {"float16": "f16", "float32": "f32", "float64": "f64", "int32": "i32", "int64": "i64", "bool": "b"}
    parts = [f"{short.get(str(t.dtype), t.dtype)}[{t.ndim}]" if isinstance(t, numba.types.Array)
             else short.get(str(t), str(t)) for t in signature]
    return " ".join(parts)


def resources(ptx: str, ptxas: str | None, cc: tuple[int, int]) -> dict:
    """ptxas -v's registers, spills, stack frame and shared bytes of the PTX's one kernel (shared bytes only,
    from the PTX's declarations, without ptxas)."""
    if ptxas is None:
        return {"shared_bytes": sum(int(n) for n in _SHARED_DECL.findall(ptx))}
    done = _run_ptxas(ptxas, ptx, cc)
    if done.returncode != 0:
        raise RuntimeError(f"ptxas failed: {done.stderr.strip()[-600:]}")
    frame = _FRAME.search(done.stderr)
    smem = _SMEM.search(done.stderr)
    return {"registers": int(_USED.search(done.stderr).group(1)), "stack_bytes": int(frame.group(1)),
            "spill_store_bytes": int(frame.group(2)), "spill_load_bytes": int(frame.group(3)),
            "shared_bytes": int(smem.group(1)) if smem else 0}


def compiler_problem(cc: tuple[int, int] = (9, 0)) -> str | None:
    """Why numba-cuda cannot compile PTX here (no NVVM or NVRTC found, most often), with the fix; None when it
    can."""
    from numba import cuda

    def probe(x):
        x[0] = 1.0
    try:
        cuda.compile_ptx(probe, "void(float32[:])", cc=cc)
    except Exception as e:  # noqa: BLE001 - whatever the compiler raises is the reason
        return (f"numba-cuda cannot compile PTX here ({type(e).__name__}: {str(e).strip()[:300]}): "
                f"pip install -e '.[ptx]' (NVIDIA's NVVM, NVRTC and ptxas from pip, no GPU needed)")
    return None


def compile_all(cc: tuple[int, int] = (9, 0), part: tuple[int, int] = (0, 1)) -> dict:
    """{"cc", "ptxas", "never_launched", "rows"}: every launched (kernel, signature) compiled (module docstring),
    or part i of n of them (every n-th, from the i-th, in a fixed order: n processes share the work). Run it in
    a process of its own (``launched.record``)."""
    from numba import cuda
    from numba.cuda import dispatcher

    from .launched import factories, record
    launches, ptxas, rows = record(), None, []
    device = type("Device", (), {"compute_capability": cc})()
    dispatcher.get_current_device = lambda: device        # the device functions' cc (module docstring)
    never = [f"{f.__module__}.{f.__name__}" for f in factories() if f.cache_info().currsize == 0]
    work = sorted(((label(kernel), dtypes(signature), kernel, signature)
                   for kernel, signatures in launches.items() for signature in signatures), key=lambda w: w[:2])
    for name, arguments, kernel, signature in work[part[0]::part[1]]:
        options = {k: v for k, v in kernel.targetoptions.items() if k in OPTIONS}
        row = {"kernel": name, "arguments": arguments}
        start = time.perf_counter()
        try:
            ptx, _ = cuda.compile_ptx(kernel.py_func, signature, cc=cc, **options)
            if ptxas is None:                                  # looked for once, with the first PTX
                ptxas = ptxas_for(ptx, cc) or ""
            row.update(resources(ptx, ptxas or None, cc))
        except Exception as e:  # noqa: BLE001 - the row says which kernel failed and how
            row["error"] = f"{type(e).__name__}: {str(e).strip()[-600:]}"
        row["seconds"] = round(time.perf_counter() - start, 2)
        rows.append(row)
    return {"cc": f"{cc[0]}.{cc[1]}", "ptxas": ptxas or None, "never_launched": never,
            "rows": sorted(rows, key=lambda r: (r["kernel"], r["arguments"]))}


def markdown(result: dict) -> str:
    lines = [f"sm_{result['cc'].replace('.', '')}, ptxas: {result['ptxas'] or 'not found (PTX only)'}", "",
             "| kernel | arguments | registers | spill stores / loads (B) | stack (B) | shared (B) | s |",
             "|---|---|---|---|---|---|---|"]
    for r in result["rows"]:
        if "error" in r:
            lines.append(f"| {r['kernel']} | {r['arguments']} | ERROR: {r['error'][:200]} | | | | {r['seconds']} |")
            continue
        spills = (f"{r['spill_store_bytes']} / {r['spill_load_bytes']}" if "registers" in r else "?")
        lines.append(f"| {r['kernel']} | {r['arguments']} | {r.get('registers', '?')} | {spills} | "
                     f"{r.get('stack_bytes', '?')} | {r['shared_bytes']} | {r['seconds']} |")
    if result["never_launched"]:
        lines.append(f"\nkernel factories never launched here: {', '.join(result['never_launched'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cc", default="9.0", help="compute capability, say 9.0 (sm_90) or 8.0")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    parser.add_argument("--part", default="0/1", help="i/n: compile every n-th signature from the i-th")
    args = parser.parse_args(argv)
    major, minor = (int(n) for n in args.cc.split("."))
    problem = compiler_problem((major, minor))
    if problem:
        print(json.dumps({"problem": problem}) if args.json else problem)
        return 2
    result = compile_all((major, minor), tuple(int(n) for n in args.part.split("/")))
    print(json.dumps(result) if args.json else markdown(result))
    return 1 if any("error" in r for r in result["rows"]) else 0


if __name__ == "__main__":
    sys.exit(main())
