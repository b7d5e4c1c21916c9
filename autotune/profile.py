"""Per-layer profiling of a model's convolutions: what each conv layer is, what the table chose for it, and
how long whole passes take with every conv autotuned, forced to one algorithm, or computed by torch.

Shared by ``python -m autotune``, ``bench/nets.py`` and the notebooks, so they all measure the same way
(``autotune.measure.interleaved``: rounds interleaved, medians).

    >>> with ConvProfile(model) as prof:              # every conv call recorded: layer name, ConvParams, seconds
    ...     model(x)
    >>> prof.layers()                                 # the distinct ConvParams, in call order
    >>> medians, abandoned = time_passes(model_workload(model, x), {"autotuned": None, "im2col": "im2col"}, 5)

A *pass* names who computes every conv: ``None`` (the autotuner), an algorithm name (forced), or a callable
with ``conv2d``'s signature (a peer such as torch's, ``torch_conv2d()``). A *workload* runs the model (or every
conv layer alone, ``layer_workload``, as on a GPU where the other layers cannot run) with one pass.
"""
from __future__ import annotations

import functools
import sys

import numpy as np

import convalgos
from convalgos import ConvParams

import autotune

from . import measure, nn
from .cache import cpu_model


class ConvProfile:
    """Within the block, every conv call of ``model`` is recorded: ``calls`` (layer name, ConvParams) in call
    order, ``params`` (layer name -> ConvParams of its first call), ``seconds`` (layer name -> seconds of its
    latest call, timed by ``timer``), and ``bar`` (a tqdm bar, or None) advances once per call."""

    def __init__(self, model, *, bar=None, timer=None):
        self.convs = nn.conv_layers(model)
        self.timer = measure.Timer() if timer is None else timer
        self.bar = bar
        self.calls: list[tuple[str, ConvParams]] = []
        self.params: dict[str, ConvParams] = {}
        self.seconds: dict[str, float] = {}

    def __enter__(self):
        for name, conv in self.convs:
            conv.forward = self._wrap(name, conv, type(conv).forward.__get__(conv))
        return self

    def __exit__(self, *exc):
        for _, conv in self.convs:
            del conv.forward

    def layers(self) -> list[ConvParams]:
        return list(dict.fromkeys(p for _, p in self.calls))

    def _wrap(self, name, conv, forward):
        def recorded(x):
            p = ConvParams.from_arrays(x, conv.weight, conv.bias, stride=conv.stride, padding=conv.padding,
                                       dilation=conv.dilation, groups=conv.groups)
            self.calls.append((name, p))
            self.params.setdefault(name, p)
            if self.bar is not None:
                self.bar.set_postfix_str(name)
            y = [None]
            self.seconds[name] = self.timer.time(lambda: y.__setitem__(0, forward(x)))
            if self.bar is not None:
                self.bar.update()
            return y[0]
        return recorded


def _no_conv(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """A conv that computes nothing: zeros of the output's shape (for finding shapes)."""
    p = ConvParams.from_arrays(x, weight, stride=stride, padding=padding, dilation=dilation, groups=groups)
    return np.zeros(p.out_shape, x.dtype)


def conv_calls(model, shape, dtype="float32") -> list[tuple[str, ConvParams]]:
    """(layer name, ConvParams) of every conv call of ``model`` on an input of ``shape``, found without computing
    a convolution. Raises whatever the model raises for an input it cannot take."""
    with nn.use_algorithm(model, _no_conv), ConvProfile(model) as prof:
        model(np.zeros(shape, dtype))
    return prof.calls


def accepted_sizes(model, most: int) -> list[int]:
    """The square input sizes from 1 to ``most`` that ``model`` takes (its channels, batch 1)."""
    fits = []
    for size in range(1, most + 1):
        try:
            conv_calls(model, (1, model.input_shape[0], size, size))
        except (ValueError, IndexError):
            continue
        fits.append(size)
    return fits


def spans(values: list[int]) -> str:
    """[1, 2, 3, 7] -> "1-3, 7"."""
    parts, start = [], None
    for i, v in enumerate(values):
        start = v if start is None else start
        if i + 1 == len(values) or values[i + 1] != v + 1:
            parts.append(str(v) if start == v else f"{start}-{v}")
            start = None
    return ", ".join(parts)


def first_pass(model, x, desc="tuning") -> tuple[ConvProfile, float]:
    """One forward pass (it tunes every new key) with a progress bar per conv call on stderr."""
    from tqdm import tqdm
    with tqdm(total=len(nn.conv_layers(model)), desc=desc, unit="conv", file=sys.stderr, leave=False) as bar:
        with ConvProfile(model, bar=bar) as prof:
            start = prof.timer.now()
            model(x)
            seconds = prof.timer.now() - start
    return prof, seconds


# ---- the table, per layer ---------------------------------------------------------------------------------
def entry_params(entry) -> ConvParams:
    """The ConvParams inside an entry's key."""
    return entry.key.params


def forward_entries(layers, table=None, device="cpu") -> dict:
    """ConvParams -> the table's (default: autotune's) forward entry on ``device`` ("cpu" or "cuda") for each of
    ``layers`` that has one."""
    wanted = set(layers)
    table = autotune.dispatch_table() if table is None else table
    return {e.key.params: e for e in table if e.key.op == "forward" and e.key.params in wanted
            and e.key.device.split(":")[0] == device}


def unsupported_layers(algorithm, layers) -> list[str]:
    """Why ``algorithm`` cannot run each of ``layers`` it does not support (forward pass)."""
    return [algorithm.supports(p).reason for p in layers if not algorithm.supports(p)]


def torch_conv2d(device: str = "cpu"):
    """A conv2d with convalgos' signature computed by torch, or None without torch (or, for ``"cuda"``,
    without a CUDA torch). On the CPU torch gets numba's thread count; on the GPU arrays pass through DLPack."""
    try:
        import torch
    except ImportError:
        return None
    if device == "cuda" and not torch.cuda.is_available():
        return None
    import numba
    torch.set_num_threads(numba.get_num_threads())

    def tensor(a):
        if a is None:
            return None
        return torch.from_numpy(np.ascontiguousarray(a)) if isinstance(a, np.ndarray) else torch.from_dlpack(a)

    def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        with torch.no_grad():
            y = torch.nn.functional.conv2d(tensor(x), tensor(weight), tensor(bias), stride, padding, dilation,
                                           groups)
        if isinstance(x, np.ndarray):
            return y.numpy()
        import cupy
        return cupy.from_dlpack(y)
    return conv2d


def device_description(device: str) -> str:
    """The machine a run is on, in words: the CPU model and threads, or the GPU's name."""
    if device == "cuda":
        from .devices import GpuDevice
        return GpuDevice().name
    import numba
    return f"cpu: {cpu_model()}, {numba.get_num_threads()} threads"


def gpu_problem() -> str | None:
    """Why the GPU cannot run here, or None."""
    from convalgos import backend
    try:
        import cupy  # noqa: F401
    except ImportError:
        return "CuPy is not installed; " + backend.GPU_MISSING.split("(", 1)[1].rstrip(")")
    if not backend.cupy_available():
        return "CuPy finds no CUDA GPU (or no driver) on this machine; use --device cpu"
    if not backend.driver_available():
        return "Numba's CUDA target finds no driver or GPU on this machine; use --device cpu"
    return None


# ---- timing whole passes ----------------------------------------------------------------------------------
class Abandoned(Exception):
    """A pass ran past its deadline and was stopped."""


def as_conv(algo):
    """A pass (None, an algorithm name, or a callable) as a conv2d-like callable."""
    if algo is None:
        return autotune.conv2d
    if isinstance(algo, str):
        return functools.partial(convalgos.conv2d, algo=algo)
    return algo


def model_workload(model, x):
    """Runs ``model(x)`` with every conv computed by the pass it is given."""
    def run(algo):
        with nn.use_algorithm(model, algo):
            model(x)
    return run


def layer_workload(calls, convs: dict, xp=np, dtype="float32", seed=0):
    """Runs every conv call in ``calls`` ((layer name, ConvParams)) on its own, on arrays of ``xp`` (NumPy,
    or CuPy for the GPU), with the weights of ``convs[name]`` (an nn.Conv2d): the conv time of a model."""
    rng = np.random.default_rng(seed)
    inputs = {p: xp.asarray(rng.standard_normal(p.in_shape).astype(dtype)) for _, p in calls}
    args = [(inputs[p], xp.asarray(convs[name].weight), None if convs[name].bias is None
             else xp.asarray(convs[name].bias), convs[name].stride, convs[name].padding, convs[name].dilation,
             convs[name].groups) for name, p in calls]

    def run(algo):
        conv = as_conv(algo)
        for a in args:
            conv(*a)
    return run


def jit_warmup(layers, dtype, registry=None, xp=np):
    """Run every algorithm of ``registry`` once on a small copy of each distinct layer (same channels, kernel,
    stride, padding, groups; at most 16x16 unless the kernel needs more), so compilation is not charged to a
    timed pass."""
    registry = convalgos.ALGORITHMS if registry is None else registry
    rng = np.random.default_rng(1)
    for p in layers:
        h, w = (min(size, max(16, extent)) for size, extent in zip((p.H, p.W), p.kernel_extent))
        x = rng.standard_normal((1, p.C, h, w)).astype(dtype)
        weight = rng.standard_normal((p.K, p.Cg, p.R, p.S)).astype(dtype)
        small = ConvParams.from_arrays(x, weight, stride=p.stride, padding=p.padding, dilation=p.dilation,
                                       groups=p.groups)
        for name, algorithm in registry.items():
            if algorithm.supports(small):
                convalgos.conv2d(xp.asarray(x), xp.asarray(weight), stride=p.stride, padding=p.padding,
                                 dilation=p.dilation, groups=p.groups, algo=name)


def time_passes(workload, passes: dict, rounds: int, *, timer=None, abandon_ratio=3.0, min_seconds=0.0):
    """(name -> median seconds of ``workload(passes[name])``, name -> why a pass was abandoned).

    The first pass (the autotuned one) is run once warm to set the deadline. Every other pass gets one run that
    is abandoned once it is still running at ``abandon_ratio`` times that (the tuner's rule, applied to a whole
    pass; None: never), so a slow forced algorithm cannot stretch the run. A peer (a callable, such as torch's
    conv) is warmed up with one full untimed run first: its first call starts thread pools and allocators,
    which is not its speed. The passes left are then timed in ``rounds`` interleaved rounds (more while they
    have lasted under ``min_seconds``).
    """
    timer = measure.Timer() if timer is None else timer
    names = list(passes)
    auto = timer.time(lambda: workload(passes[names[0]]))
    abandoned = {}
    for name in names[1:]:
        if callable(passes[name]):
            workload(passes[name])
        deadline = None if abandon_ratio is None else timer.now() + abandon_ratio * auto
        done, start = [], timer.now()
        try:
            workload(_with_deadline(as_conv(passes[name]), deadline, done, timer))
        except Abandoned:
            abandoned[name] = (f"abandoned: still running at {abandon_ratio:g}x the {names[0]} pass "
                               f"({(timer.now() - start) * 1e3:.0f} ms, {len(done)} conv calls done)")
    kept = {name: functools.partial(workload, algo) for name, algo in passes.items() if name not in abandoned}
    samples = measure.interleaved(kept, rounds, timer=timer, warmup=0, min_seconds=min_seconds)
    return {name: measure.median(s) for name, s in samples.items()}, abandoned


def _with_deadline(conv, deadline, done: list, timer):
    def call(*args):
        if deadline is not None and timer.now() > deadline:
            raise Abandoned
        y = conv(*args)
        done.append(1)
        return y
    return call


def time_layers(model, x, passes: dict, rounds: int, *, timer=None) -> dict:
    """name -> {layer name: median seconds of its conv calls} with every conv of ``model`` computed by
    ``passes[name]``: whole forward passes in interleaved rounds (one warm-up), each conv timed on its own."""
    samples = {name: [] for name in passes}
    with ConvProfile(model, timer=timer) as prof:
        def run(name):
            with nn.use_algorithm(model, passes[name]):
                model(x)
            samples[name].append(dict(prof.seconds))
        measure.interleaved({name: functools.partial(run, name) for name in passes}, rounds, timer=timer)
    return {name: {layer: measure.median([s[layer] for s in runs[1:]]) for layer in runs[0]}
            for name, runs in samples.items()}


def compare(times: dict, choices: list, singles) -> dict:
    """What the autotuned pass bought: the best single algorithm among ``singles`` that was timed, and either
    its ratio to the autotuned pass or, where the autotuner chose that same algorithm for every layer
    (``choices``), that the two are the same choice (their ratio is then only overhead and noise)."""
    timed = {n: times[n] for n in singles if n in times}
    if not timed:
        return {}
    best = min(timed, key=timed.get)
    out = {"best_single": best, "ratio": timed[best] / times["autotuned"]}
    out["same_choice"] = bool(choices) and set(choices) == {best}
    return out
