"""What convalgos.threads promises, whatever the user imported first (no timings; each order in a fresh process):

- after convalgos' own products and kernels, no thread of the process keeps spinning while it is idle;
- those products ran on the BLAS convalgos configured (scipy's OpenBLAS, short spin), and Numba's parallel
  regions on the OpenMP runtime convalgos configured, not torch's;
- numpy's BLAS keeps the user's settings: as many threads, the same spin, as in a process without convalgos.

"Spinning" is read from each thread's CPU time (/proc/self/task/*/schedstat) over idle windows: OpenBLAS's
default spin burns tens of ms per window, a sleeping pool none. The positive control shows the probe sees it.
"""
import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc and the ELF loader")

FIRST = {"numpy": "import numpy", "torch": "import torch", "convalgos": "import convalgos",
         "sklearn": "import sklearn"}
#: variables that would configure the pools themselves and hide what the policy does.
CLEARED = ("OPENBLAS_THREAD_TIMEOUT", "OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OPENBLAS_NUM_THREADS",
           "OMP_NUM_THREADS", "NUMBA_NUM_THREADS")

PROBE = '''
import os, time
def thread_cpu():
    """tid -> seconds on a CPU, every thread but this one."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        if int(tid) != os.getpid():
            try:
                with open(f"/proc/self/task/{tid}/schedstat") as f:
                    out[tid] = int(f.read().split()[0]) / 1e9
            except OSError:
                pass
    return out
def idle_burn(call, windows=3, idle=0.15, settle=0.002):
    """CPU seconds the other threads burn in ``idle`` s of sleep after ``call()``, summed over ``windows``; the
    window opens ``settle`` s after the call: a thread's CPU time is booked when it stops or at a scheduler
    tick (4 ms here), so a worker read while finishing the call's last region books up to a tick of the call's
    own work inside the window (0-5.3 ms seen over 3 windows)."""
    total = 0.0
    for _ in range(windows):
        call()
        time.sleep(settle)
        before = thread_cpu(); time.sleep(idle); after = thread_cpu()
        total += sum(v - before.get(t, 0.0) for t, v in after.items())
    return total
'''

SCRIPT = '''
{first}
import json
import numpy as np
import threadpoolctl
def numpy_blas():
    return [{{k: i[k] for k in ("num_threads", "filepath")}} for i in threadpoolctl.threadpool_info()
            if "numpy.libs" in i["filepath"] or i.get("prefix") == "libopenblas"]
import convalgos
from convalgos import gemm, threads
rng = np.random.default_rng(0)
x = rng.standard_normal((8, 64, 32, 32), dtype=np.float32)
w = rng.standard_normal((64, 64, 3, 3), dtype=np.float32)
a, b = rng.standard_normal((256, 1024), dtype=np.float32), rng.standard_normal((1024, 1024), dtype=np.float32)
facts = {{
    "im2col": idle_burn(lambda: convalgos.conv2d(x, w, padding=1, algo="im2col")),
    "fft": idle_burn(lambda: convalgos.conv2d(x, w, padding=1, algo="fft")),
    "direct": idle_burn(lambda: convalgos.conv2d(x, w, padding=1, algo="direct")),
    "gemm": idle_burn(lambda: gemm.matmul(a, b)),
    "scipy_blas": threads.openblas(threads.scipy_blas_path()),
    "numpy_blas_after": numpy_blas(),
    "numpy_timeouts": [threads.openblas(p)["timeout"] for p in threads.loaded_libraries("openblas")
                       if "numpy.libs" in p],
}}
facts["user_np_dot"] = idle_burn(lambda: a @ b)      # the user's own product, on numpy's BLAS
print(json.dumps(facts))
'''

BASELINE = PROBE + '''
import json, numpy as np, threadpoolctl
a, b = np.ones((256, 1024), np.float32), np.ones((1024, 1024), np.float32)
burn = idle_burn(lambda: a @ b)
print(json.dumps({"numpy_blas": [{k: i[k] for k in ("num_threads", "filepath")}
                                 for i in threadpoolctl.threadpool_info() if "numpy.libs" in i["filepath"]
                                 or i.get("prefix") == "libopenblas"], "np_dot": burn}))
'''


def environment(**extra):
    env = {k: v for k, v in os.environ.items() if k not in CLEARED}
    return env | extra


def run(code, **env):
    out = subprocess.run([sys.executable, "-c", code], env=environment(**env), capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads(out.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def baseline():
    """numpy alone in a fresh process: its BLAS's threads, and what its own product leaves spinning."""
    pytest.importorskip("threadpoolctl")
    return run(BASELINE)


@pytest.fixture(scope="module")
def facts():
    pytest.importorskip("threadpoolctl")
    cache = {}

    def of(order):
        if order == "torch":
            pytest.importorskip("torch")
        if order == "sklearn":
            pytest.importorskip("sklearn")
        if order not in cache:
            cache[order] = run(PROBE + SCRIPT.format(first=FIRST[order]))
        return cache[order]
    return of


@pytest.mark.parametrize("order", list(FIRST))
def test_no_thread_spins_after_convalgos_work(order, facts):
    """3 idle windows of 150 ms after each kind of call; OpenBLAS's default spin alone burns ~50-100 ms a
    window, libgomp's default ~4 ms per parallel region. With torch first, Numba's regions run on torch's
    runtime (one pool: ``convalgos.threads``), which spins as torch's settings say: a few regions' ~4 ms (10-30
    ms over the 3 windows seen here, so up to 60 ms allowed), never OpenBLAS's 150-300 ms."""
    got = facts(order)
    allowed = 0.06 if order == "torch" else 0.005
    for call in ("im2col", "fft", "direct", "gemm"):
        assert got[call] < allowed, f"{order} first: {call} left threads burning {got[call] * 1e3:.1f} ms idle"


@pytest.mark.parametrize("order", list(FIRST))
def test_products_run_on_the_configured_blas(order, facts):
    scipy_blas = facts(order)["scipy_blas"]
    assert "scipy.libs" in scipy_blas["path"] and scipy_blas["timeout"] == 16


@pytest.mark.parametrize("order", list(FIRST))
def test_numpy_blas_keeps_the_users_settings(order, facts, baseline):
    got = facts(order)
    assert got["numpy_blas_after"] == baseline["numpy_blas"]          # same library, same thread count
    assert got["numpy_timeouts"] == [0]                               # its default spin, as the user left it


def test_the_probe_sees_numpy_blas_spinning(baseline, facts):
    """Positive control: numpy's own product (default spin) leaves its threads burning while idle, alone and
    beside convalgos. Skipped where numpy's BLAS has one thread (nothing to spin)."""
    if all(i["num_threads"] < 2 for i in baseline["numpy_blas"]):
        pytest.skip("numpy's BLAS runs one thread here")
    assert baseline["np_dot"] > 0.01
    assert facts("numpy")["user_np_dot"] > 0.01


def test_with_torch_first_numba_runs_on_torch_s_runtime_one_pool():
    """torch first: torch's libgomp is in the global scope, and Numba's omppool binds its GOMP_* there, so torch's
    ops and convalgos' kernels share one pool (convalgos.threads: two pools cost the bridge's step 2x). The
    loader's own log says which library each symbol came from."""
    pytest.importorskip("torch")
    code = ("import torch, convalgos, numba, numpy as np\n"
            "convalgos.conv2d(np.ones((1, 4, 8, 8), np.float32), np.ones((4, 4, 3, 3), np.float32), algo='direct')\n"
            "print(numba.threading_layer())\n"
            "print(convalgos.threads.report().splitlines()[0])")
    log = "/tmp/convalgos-ld-%d" % os.getpid()
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=environment(LD_DEBUG="bindings", LD_DEBUG_OUTPUT=log))
    assert out.returncode == 0, out.stderr[-3000:]
    layer, first = out.stdout.strip().splitlines()[-2:]
    if layer != "omp":
        pytest.skip(f"Numba's threading layer here is {layer}")
    lines = []
    for name in os.listdir("/tmp"):
        if name.startswith(os.path.basename(log)):
            with open(os.path.join("/tmp", name)) as f:
                lines += [line for line in f if "omppool" in line and "GOMP_parallel" in line]
            os.remove(os.path.join("/tmp", name))
    assert lines and all("torch" in line.split(" to ")[1] for line in lines), lines
    assert "on torch's (one pool with torch's ops)" in first, first


def test_with_convalgos_first_torch_runs_on_the_runtime_convalgos_configured():
    """convalgos first: Numba loads the system's libgomp with convalgos' wait settings; torch, imported later,
    finds a libgomp.so.1 already loaded and runs on it (one runtime, which prints its settings once)."""
    pytest.importorskip("torch")
    code = "import convalgos, torch\ntorch.ones(64, 64) @ torch.ones(64, 64)\nprint(convalgos.threads.report())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300,
                         env=environment(OMP_DISPLAY_ENV="verbose"))
    assert out.returncode == 0, out.stderr[-3000:]
    spins = [s.split("GOMP_SPINCOUNT = '")[1].split("'")[0] for s in out.stderr.split("DISPLAY ENVIRONMENT BEGIN")[1:]]
    assert spins == ["10000"], spins
    assert "torch/lib/libgomp" not in out.stdout
