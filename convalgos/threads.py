"""What convalgos does to the threads of the process, the same whatever the user imported first (issue 20).

    >>> import convalgos.threads
    >>> convalgos.threads.configure()      # once, first thing in convalgos/__init__.py
    >>> print(convalgos.threads.report())  # the libraries found, their threads and how each waits

Three thread pools run convalgos' work on a CPU, and each reads how its idle threads wait (spin, or sleep) from
the environment once, when its library loads. In a user's program numpy (and torch) load before convalgos.
Measured on 2 shared cores (Sapphire Rapids), fresh processes (``bench/orders.py``, as bench.nets does):

1. **numpy's OpenBLAS** keeps its worker threads spinning for 2**28 cycles (~0.1 s) after every product. Any GEMM
   on it (im2col, FFT channel mixing, Winograd, Linear) then takes a core from the Numba kernels that follow.
   Not repaired in place: convalgos does its products on **scipy's OpenBLAS** (``convalgos.gemm.matmul``), a
   second copy that loads when ``scipy.linalg`` first does. ``configure`` loads it with
   OPENBLAS_THREAD_TIMEOUT=16 (2**16 cycles, ~25 us: still awake across back-to-back products). numpy's BLAS
   keeps the user's settings: their own ``np.dot`` is as fast, and as threaded, as without convalgos.
2. **Numba's OpenMP runtime.** Numba loads its threading layer on first use. Loaded by ``configure`` before
   torch, it gets the system's libgomp with OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=10000 (~0.1 ms of
   spin, then sleep) in the environment for that load only; torch imported later finds a ``libgomp.so.1``
   already loaded and uses the same runtime, so there is one pool, set up by convalgos. Loaded after torch,
   whose own ``libgomp.so.1`` is in the global scope, the choice is between two pools and one:
   - loaded with RTLD_DEEPBIND, Numba's layer binds to the system's libgomp: a second pool, set up by convalgos,
     beside torch's, whose threads spin ~4 ms after every torch op (libgomp's default) and take the cores from
     the kernels that follow. Measured (ResNet-20 b32 training step through the torch bridge, torch imported
     first): 168-178 ms, against 83 ms with convalgos imported first;
   - left to bind through the global scope, Numba's regions run on torch's runtime: one pool, so the threads
     that spin after a torch op are the ones the next convalgos kernel runs on. The same step: 78-92 ms;
     ResNet-18 b1 eval through the bridge 23 ms against 49-50 ms with two pools; the project's own training
     step (bench.train, torch's twin in the process) 73.6 against 75.9 ms. Its cost: with ANOTHER process busy
     on the cores, a small ``prange`` kernel took 8-10 ms instead of 1.0 ms on the spinning runtime.
   ``configure`` takes one pool (torch's) when torch came first: the bridge, where torch ops run between our
   passes in every step, is where a torch user meets this.
3. **torch's OpenMP runtime** is the user's: convalgos does not set its variables. After each region its threads
   spin ~4 ms by default (measured: 3.8-4.4 ms of CPU per torch op); convalgos cannot change that once torch is
   loaded, so ``report`` says how to (the environment variables above, set before the program starts).

scipy.fft's worker threads (``workers=-1``) sleep when idle: measured, they burn no CPU after a transform.

The environment is restored after each load, so nothing convalgos sets reaches a library loaded later (torch,
numpy) or a child process. A variable the user set is left as they set it and wins. What cannot be configured
(Numba's pool started before convalgos, torch's runtime) is listed by ``report``; the first is warned about.
scipy's BLAS loaded before convalgos (``import sklearn`` loads it) is made to read its variables again and
restart its threads (``reread_environment``), which ends in the state the other orders give.
"""
from __future__ import annotations

import contextlib
import ctypes
import os
import sys
import warnings

#: how convalgos' own pools wait, set in the environment only while each one loads.
SCIPY_BLAS_ENV = {"OPENBLAS_THREAD_TIMEOUT": "16"}
NUMBA_OPENMP_ENV = {"OMP_WAIT_POLICY": "PASSIVE", "GOMP_SPINCOUNT": "10000"}

#: what configure() found and did, for report().
STATE: dict = {}


@contextlib.contextmanager
def environment(values: dict):
    """The variables of ``values`` that the user has not set, set for the duration of the block only."""
    added = {k: v for k, v in values.items() if k not in os.environ}
    os.environ.update(added)
    try:
        yield added
    finally:
        for k in added:
            os.environ.pop(k, None)


@contextlib.contextmanager
def deep_binding():
    """Libraries loaded in the block look up their symbols in their own dependencies before the global scope."""
    flags = sys.getdlopenflags()
    sys.setdlopenflags(flags | getattr(os, "RTLD_DEEPBIND", 0))
    try:
        yield
    finally:
        sys.setdlopenflags(flags)


def loaded_libraries(*words) -> list:
    """Paths of the shared libraries mapped into this process whose file name holds one of ``words`` (Linux;
    empty elsewhere)."""
    try:
        with open("/proc/self/maps") as maps:
            paths = {line.split()[-1] for line in maps if "/" in line}
    except OSError:
        return []
    return sorted(p for p in paths if any(w in os.path.basename(p) for w in words))


def torch_libgomp() -> bool:
    """True when torch has its own libgomp mapped (torch's wheels bundle one under torch/lib)."""
    return any("torch" in path for path in loaded_libraries("libgomp"))


def scipy_blas_path():
    """The OpenBLAS file bundled with scipy, if mapped (scipy.libs/libscipy_openblas*)."""
    return next((p for p in loaded_libraries("openblas") if "scipy.libs" in p), None)


def openblas(path):
    """{"threads": n, "timeout": the OPENBLAS_THREAD_TIMEOUT it read (0: its default, 2**28 cycles)} of the
    OpenBLAS at ``path``; its exported names carry a build-dependent prefix and suffix."""
    lib = ctypes.CDLL(path)
    info = {"path": path}
    for name in ("scipy_openblas_get_num_threads64_", "scipy_openblas_get_num_threads", "openblas_get_num_threads"):
        if hasattr(lib, name):
            info["threads"] = getattr(lib, name)()
            break
    if hasattr(lib, "openblas_thread_timeout"):
        info["timeout"] = lib.openblas_thread_timeout()
    return info


def reread_environment(path) -> None:
    """Have the OpenBLAS at ``path``, loaded earlier (``import sklearn`` loads scipy's), read its variables again
    and restart its threads, which pick up the new timeout on its next call; its thread count is kept. Not to be
    called while another thread is inside that BLAS."""
    lib = ctypes.CDLL(path)
    lib.openblas_read_env()
    lib.blas_thread_shutdown_()


def configure() -> None:
    """Load scipy's BLAS and Numba's OpenMP layer with convalgos' wait settings (once per process)."""
    if STATE:
        return
    import numpy  # noqa: F401  numpy's BLAS loads (if it has not) with the user's environment, untouched
    preloaded = scipy_blas_path()
    STATE["loaded before"] = {"torch": "torch" in sys.modules, "scipy BLAS": preloaded is not None}
    with environment(SCIPY_BLAS_ENV) as added:
        import scipy.linalg.cython_blas  # noqa: F401  loads scipy's OpenBLAS, which reads its timeout now
        if preloaded and added:
            reread_environment(preloaded)
    STATE["scipy BLAS env"] = added
    import numba
    from numba.np.ufunc import parallel
    STATE["loaded before"]["Numba threads"] = bool(getattr(parallel, "_is_initialized", False))
    torch_pool = STATE["loaded before"]["torch"] and bool(loaded_libraries("libgomp") and torch_libgomp())
    binding = contextlib.nullcontext() if torch_pool else deep_binding()
    with environment(NUMBA_OPENMP_ENV) as added, binding:
        numba.get_num_threads()          # loads Numba's threading layer and starts its pool, here
    STATE["Numba OpenMP env"] = added
    STATE["Numba OpenMP runtime"] = "torch's (one pool with torch's ops)" if torch_pool else "the system's libgomp"
    missed = ["Numba's thread pool"] if STATE["loaded before"]["Numba threads"] else []
    if missed and not NUMBA_OPENMP_ENV.keys() & os.environ.keys():
        warnings.warn(f"{' and '.join(missed)} loaded before convalgos: its threads wait as they were set up "
                      "then, which convalgos cannot change; " + FIX, RuntimeWarning, stacklevel=3)


FIX = ("set OPENBLAS_THREAD_TIMEOUT=16, OMP_WAIT_POLICY=PASSIVE and GOMP_SPINCOUNT=10000 in the environment "
       "before the program starts (see convalgos.threads.report())")


def report() -> str:
    """What convalgos did to this process's threads, and what it found set up before it."""
    import numba
    runtime = STATE.get("Numba OpenMP runtime", "?")
    settings = ("as torch's runtime read them when torch loaded" if runtime.startswith("torch")
                else f"loaded by convalgos with {STATE.get('Numba OpenMP env') or 'the environment as the user set it'}")
    lines = [f"Numba: threading layer {numba.threading_layer()}, {numba.get_num_threads()} threads, on {runtime}; "
             f"{settings}"]
    omp = loaded_libraries("libgomp", "libiomp", "libomp")
    if omp:
        lines.append("OpenMP runtimes mapped: " + ", ".join(omp))
    for path in loaded_libraries("openblas"):
        info = openblas(path)
        owner = "scipy's (convalgos' products)" if "scipy.libs" in path else "numpy's (the user's; untouched)"
        lines.append(f"OpenBLAS {owner}: {info.get('threads', '?')} threads, spin "
                     f"{'2**%d cycles' % info['timeout'] if info.get('timeout') else 'default (2**28 cycles)'}")
    if "torch" in sys.modules:
        torch_env = {k: os.environ.get(k) for k in NUMBA_OPENMP_ENV}
        lines.append(f"torch's OpenMP: the user's (environment {torch_env}); with OMP_WAIT_POLICY unset its threads "
                     "spin ~4 ms after each region, burning CPU that other work could use: " + FIX)
    before = [name for name, was in STATE.get("loaded before", {}).items() if was]
    if before:
        lines.append("loaded before convalgos: " + ", ".join(before))
    return "\n".join(lines)
