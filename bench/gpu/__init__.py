"""The GPU check's parts (``python -m bench.gpu_check`` runs them; see its docstring for the whole).

One process, the parent (``bench/gpu_check.py``), never touches the GPU: it runs every job in a subprocess
(``runner.py``) and writes the report row by row as each job prints its rows (``report.py``). A job is one of:

    preflight    device properties and versions, TF32 as each library reports it, one Numba kernel on a CuPy
                 array, one matmul, one rfft2 (``preflight.py``)
    launch       what a launch costs by route, a captured CUDA graph's replay included (``launch_routes.py``)
    check ALGO   one GPU algorithm's passes against the float64 reference on a small grid, outputs poisoned
                 (``check.py``)
    time         every candidate (and a fresh autotuner) per layer and pass, timed between CUDA events
    cudnn MODE   torch's cuDNN on the same layers and passes, benchmark mode off or on, each in its own
                 process: torch's cuDNN v8 plan cache is looked up before the benchmark flag (``timing.py``)
    net NAME     a model's forward pass and training step, autotuned (benchmark on, and the heuristic alone),
                 against torch's same model on cuDNN (``nets.py``), and where each side's step spends its time
                 (``step_profile.py``)
    bridge NAME  a converted torch model on CUDA tensors against the same model unconverted (``bridge.py``)

Beside them, not a job of the check and needing no GPU: ``ptx.py`` compiles every kernel the library launches
for sm_90 (``launched.py`` finds them by running the passes with the launch route recording), for
``tests/test_gpu_ptx.py``.

A job prints one JSON object per line behind a marker (``common.emit``), so a sticky CUDA error (an illegal
address, after which every CUDA call fails) ends that job's process and its rows so far stay in the report.
"""
