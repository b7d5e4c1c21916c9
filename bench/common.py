"""What every benchmark needs: a machine description, interleaved median timing, and a results file."""
from __future__ import annotations

import datetime
import os
import platform
from pathlib import Path

import numpy as np

from autotune import measure
from autotune.cache import cpu_model

RESULTS = Path(__file__).parent / "results"


def cpu_description() -> str:
    """The CPU's model name, vendor family and model, and whether it has AVX-512 (the records of two machine
    kinds sit side by side: a record must say which it came from)."""
    try:
        with open("/proc/cpuinfo") as f:
            text = f.read()
    except OSError:
        return cpu_model()
    fields = dict(line.split(":", 1) for line in text.split("\n\n")[0].splitlines() if ":" in line)
    fields = {k.strip(): v.strip() for k, v in fields.items()}
    vector = "AVX-512" if "avx512f" in fields.get("flags", "").split() else "no AVX-512"
    return (f"{fields.get('model name', cpu_model())} (family {fields.get('cpu family', '?')}, model "
            f"{fields.get('model', '?')}, {vector})")


def machine() -> str:
    import numba
    return (f"{cpu_description()}, {os.cpu_count()} cores, numba {numba.__version__} with {numba.get_num_threads()} "
            f"threads, numpy {np.__version__}, Python {platform.python_version()}")


def header(title: str) -> str:
    today = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    return f"# {title}\n\nMachine: {machine()}.  \nDate: {today}.\n"


def write_record(out: Path, text: str) -> None:
    """Write a benchmark's record (making its folder) and print it."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text)
    print(text)
    print(f"wrote {out}")


def interleaved_medians(fns: dict, rounds: int = 7, min_seconds: float = 0.0) -> dict:
    """Median seconds of each callable, timed by ``autotune.measure.interleaved`` (one warm-up, then at least
    ``rounds`` interleaved rounds, more while they last under ``min_seconds``)."""
    samples = measure.interleaved(fns, rounds, min_seconds=min_seconds)
    return {name: measure.median(s) for name, s in samples.items()}


def sgemm_gflops(m=256, k=2304, n=3136, rounds=7) -> float:
    """numpy float32 matmul GFLOP/s at a VGG-like GEMM shape, measured now."""
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.empty((m, n), np.float32)
    t = interleaved_medians({"sgemm": lambda: np.matmul(a, b, out=c)}, rounds=rounds)["sgemm"]
    return 2 * m * k * n / t / 1e9


def torch_conv(p, x, w):
    """A callable running torch's forward convolution of the layer into a kept output (``aten.convolution.out``,
    as our candidates write into a kept ``out``: a fresh 1 GiB output costs torch ~1 s of page faults here), or
    None without torch."""
    try:
        import torch
    except ImportError:
        return None
    import numba
    torch.set_num_threads(numba.get_num_threads())
    tx, tw = torch.from_numpy(x), torch.from_numpy(w)
    out = torch.empty(p.out_shape, dtype=tx.dtype)
    (t, b), (l, r) = p.padding
    if t != b or l != r:                       # torch pads symmetrically: pad first, then an unpadded conv
        tx = torch.nn.functional.pad(tx, (l, r, t, b))
        t = l = 0
    args = (None, list(p.stride), [t, l], list(p.dilation), False, [0, 0], p.groups)
    return lambda: torch.ops.aten.convolution.out(tx, tw, *args, out=out)
