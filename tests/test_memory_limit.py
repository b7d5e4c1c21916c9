"""Memory is a budget, not a crash: under a limited address space (RLIMIT_AS, in a subprocess) the big layer of
issue 10 (1x3x2048x2048, 11x11 filters; im2col's one-image patch matrix alone was 5.67 GiB) runs, in heuristic
and in benchmark mode, with an algorithm that fits and no MemoryError."""
import json
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent("""
    import json, resource
    import numpy as np
    import autotune, convalgos

    x = np.ones((1, 3, 2048, 2048), np.float32)
    w = np.full((4, 3, 11, 11), 0.01, np.float32)
    for name in convalgos.ALGORITHMS:            # compile outside the limit (LLVM needs address space)
        p = convalgos.ConvParams.from_arrays(x[:, :, :32, :32], w)
        if convalgos.ALGORITHMS[name].supports(p):
            convalgos.conv2d(x[:, :, :32, :32], w, algo=name)
    with open("/proc/self/status") as f:
        vm = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmSize"))
    limit = vm + (3 << 30)
    resource.setrlimit(resource.RLIMIT_AS, (limit, resource.getrlimit(resource.RLIMIT_AS)[1]))
    report = {"cap": convalgos.workspace_cap(), "limit_over_vm": 3 << 30, "modes": {}}
    for benchmark in (False, True):
        tuner = autotune.Tuner(benchmark=benchmark, benchmark_limit=3, time_budget=0.05)
        y = tuner.conv2d(x, w)
        entry = list(tuner.dispatch_table())[0]
        report["modes"][str(benchmark)] = {
            "algo": entry.algo, "workspace": entry.workspace.get(entry.algo, 0), "skipped": entry.skipped,
            "centre": float(y[0, 0, 1019, 1019]), "shape": list(y.shape)}
    print(json.dumps(report))
""")


def test_big_layer_runs_under_an_address_space_limit():
    out = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.strip().splitlines()[-1])
    assert report["cap"] < 3 << 30                       # the default cap follows the address-space limit
    for mode in report["modes"].values():
        assert mode["shape"] == [1, 4, 2038, 2038]
        assert abs(mode["centre"] - 3 * 121 * 0.01) < 1e-3          # an interior output: the full sum
        assert mode["workspace"] <= report["cap"]
        assert not any("MemoryError" in why for why in mode["skipped"].values())
